//! A task type's policy, read from the optional `NAME.toml` beside `NAME.wasm`.
//!
//! ```toml
//! max_retry = 5          # retries after the first attempt
//! backoff_base = "30s"   # delay before the first retry; doubles with each retry
//! backoff_max = "1h"     # no retry waits longer
//! backoff_jitter = 0.1   # spread each delay by ±10 %
//! priority = 10          # default priority of tasks enqueued without one (higher runs first)
//! fuel = 2_000_000_000   # fuel budget per attempt: the per-task time limit
//! memory = "64MiB"       # linear-memory cap per attempt
//! ```
//! Every field is optional; an absent one falls back to the host's configured default. Unknown
//! fields are errors, so a typo cannot silently leave a policy unset.

use serde::Deserialize;
use std::time::Duration;

use crate::backoff::Backoff;
use crate::config::Defaults;

/// The manifest file as written.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub max_retry: Option<u32>,
    #[serde(default, with = "humantime_serde")]
    pub backoff_base: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    pub backoff_max: Option<Duration>,
    pub backoff_jitter: Option<f64>,
    pub priority: Option<i32>,
    pub fuel: Option<u64>,
    pub memory: Option<ByteSize>,
}

/// A size in bytes, written as a number or as text with a unit (`"64MiB"`, `"512KiB"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "toml::Value")]
pub struct ByteSize(pub usize);

impl TryFrom<toml::Value> for ByteSize {
    type Error = String;
    fn try_from(value: toml::Value) -> Result<Self, String> {
        match value {
            toml::Value::Integer(n) if n > 0 => Ok(ByteSize(n as usize)),
            toml::Value::String(text) => parse_byte_size(&text).map(ByteSize),
            other => Err(format!("expected a size such as \"64MiB\" or a byte count, found {other}")),
        }
    }
}

/// Parses `"64MiB"`, `"512 KiB"`, `"1GiB"`, `"1048576"`.
pub fn parse_byte_size(text: &str) -> Result<usize, String> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let number: usize = digits
        .parse()
        .map_err(|_| format!("`{text}` is not a size: write a number with KiB, MiB or GiB"))?;
    let factor = match unit.trim() {
        "" | "B" => 1,
        "KiB" | "KB" | "K" => 1 << 10,
        "MiB" | "MB" | "M" => 1 << 20,
        "GiB" | "GB" | "G" => 1 << 30,
        other => return Err(format!("unknown size unit `{other}` in `{text}`: use KiB, MiB or GiB")),
    };
    number
        .checked_mul(factor)
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("`{text}` is not a usable size"))
}

/// A task type's effective policy: the manifest over the host's defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    pub max_retry: u32,
    pub backoff: Backoff,
    pub priority: i32,
    pub fuel: u64,
    pub memory_bytes: usize,
}

impl Manifest {
    /// Parses manifest text; the error names the offending field.
    pub fn parse(text: &str) -> Result<Manifest, String> {
        let manifest: Manifest = toml::from_str(text).map_err(|e| e.to_string())?;
        if let Some(jitter) = manifest.backoff_jitter {
            if !(0.0..=1.0).contains(&jitter) {
                return Err(format!("backoff_jitter = {jitter}: use a fraction between 0 and 1"));
            }
        }
        if manifest.fuel == Some(0) {
            return Err("fuel = 0: a handler needs some fuel to run; omit the field for the default".into());
        }
        Ok(manifest)
    }

    /// Applies the host's defaults to every field the manifest leaves out.
    pub fn resolve(&self, defaults: &Defaults) -> Policy {
        Policy {
            max_retry: self.max_retry.unwrap_or(defaults.max_retry),
            backoff: Backoff::new(
                self.backoff_base.unwrap_or(defaults.backoff.base),
                self.backoff_max.unwrap_or(defaults.backoff.max_delay),
                self.backoff_jitter.unwrap_or(defaults.backoff.jitter),
            ),
            priority: self.priority.unwrap_or(0),
            fuel: self.fuel.unwrap_or(defaults.fuel),
            memory_bytes: self.memory.map(|m| m.0).unwrap_or(defaults.memory_bytes),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_manifest_takes_every_default() {
        let defaults = Defaults::default();
        let policy = Manifest::parse("").unwrap().resolve(&defaults);
        assert_eq!(policy.max_retry, defaults.max_retry);
        assert_eq!(policy.backoff, defaults.backoff);
        assert_eq!(policy.fuel, defaults.fuel);
        assert_eq!(policy.priority, 0);
    }

    #[test]
    fn fields_override_defaults() {
        let manifest = Manifest::parse(
            "max_retry = 5\nbackoff_base = \"2s\"\nbackoff_jitter = 0.25\npriority = 10\nfuel = 1000\nmemory = \"8MiB\"\n",
        )
        .unwrap();
        let policy = manifest.resolve(&Defaults::default());
        assert_eq!(policy.max_retry, 5);
        assert_eq!(policy.backoff.base, Duration::from_secs(2));
        assert_eq!(policy.backoff.jitter, 0.25);
        assert_eq!(policy.priority, 10);
        assert_eq!(policy.fuel, 1000);
        assert_eq!(policy.memory_bytes, 8 << 20);
    }

    #[test]
    fn errors_name_the_field() {
        let unknown = Manifest::parse("max_retries = 5").unwrap_err();
        assert!(unknown.contains("max_retries"), "{unknown}");
        let wrong_type = Manifest::parse("max_retry = \"five\"").unwrap_err();
        assert!(wrong_type.contains("max_retry"), "{wrong_type}");
        let jitter = Manifest::parse("backoff_jitter = 3.0").unwrap_err();
        assert!(jitter.contains("backoff_jitter"), "{jitter}");
        let duration = Manifest::parse("backoff_base = \"soon\"").unwrap_err();
        assert!(duration.contains("backoff_base"), "{duration}");
    }

    #[test]
    fn byte_sizes_parse() {
        assert_eq!(parse_byte_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_byte_size("512 KiB"), Ok(512 << 10));
        assert_eq!(parse_byte_size("1048576"), Ok(1 << 20));
        assert!(parse_byte_size("lots").is_err());
        assert!(parse_byte_size("3 parsecs").is_err());
        assert!(parse_byte_size("0").is_err());
    }
}
