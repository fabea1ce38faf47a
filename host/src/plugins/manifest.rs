//! A task type's policy, read from the optional `NAME.toml` beside `NAME.wasm`.
//!
//! ```toml
//! max_retry = 5          # retries after the first attempt
//! backoff_base = "30s"   # delay before the first retry; doubles with each retry
//! backoff_max = "1h"     # no retry waits longer
//! backoff_jitter = 0.1   # spread each delay by ±10 %
//! priority = 10          # default priority of tasks enqueued without one (higher runs first)
//! fuel = 2_000_000_000   # fuel budget per attempt: the limit on computation
//! timeout = "30s"        # wall-clock limit per attempt, waiting in host calls included
//! memory = "64MiB"       # linear-memory cap per attempt
//! concurrency = 2        # at most this many tasks of the type at once on this host
//! rate = 5.0             # start at most this many tasks of the type per second on this host
//!
//! # Capabilities: a handler gets none unless granted here.
//! [[dirs]]               # a folder beneath the grants root (--grants-root) mapped into the guest
//! host = "reports"
//! guest = "/reports"
//! writable = true        # default false: read-only
//!
//! [env]                  # environment variables the guest sees
//! MAIL_FROM = "noreply@example.com"
//!
//! [http]                 # outbound HTTP (wasi:http) to these hosts only: "host" or "host:port"
//! allow = ["api.mail.example", "127.0.0.1:8025"]
//!
//! [enqueue]              # follow-up tasks the handler may enqueue (none unless listed)
//! allow = ["notify"]
//! max_tasks = 100        # per attempt
//! max_bytes = "1MiB"     # payload bytes per attempt, all follow-ups together
//! max_depth = 20         # generations of follow-ups below a task enqueued from outside
//! min_priority = -10     # a follow-up's priority is clamped into this range
//! max_priority = 0       # (default: up to the type's own priority)
//!
//! [kv]                   # what the type may keep in its key-value store (host defaults)
//! max_keys = 10000
//! max_bytes = "64MiB"    # keys and values together
//!
//! [effects]
//! retention = "30d"      # how long the effect ledger remembers a recorded effect
//!
//! [[schedule]]           # a periodic task of this type (see crate::schedule); repeatable
//! name = "nightly"
//! cron = "0 3 * * *"     # or every = "15m"
//! timezone = "Europe/Berlin"
//! payload = { full = true }
//! ```
//! `max_snoozes` (default 100) caps how many times in a row a task may snooze; the next snooze
//! counts as a failed attempt. `record` ("failed", the default; "all"; "none") says which
//! attempts keep a record of their inputs for `spool replay`, `record_max` (default 1 MiB, 1 KiB
//! to 64 MiB) how many bytes of host calls one record keeps. `secrets` names `[env]` variables
//! whose values are secret: a record keeps `[redacted]` in their place (in the environment, and
//! wherever the value appears in an outbound request's URL or headers).
//! Every field is optional; an absent one falls back to the host's configured default. Unknown
//! fields are errors, so a typo cannot silently leave a policy unset. Numbers must lie in the
//! ranges [`Manifest::parse`] states (for instance `rate` from one start a day to a million a
//! second, `max_retry` at most 1000, delays up to a year), so no value can overflow the
//! arithmetic that schedules tasks.
//!
//! A folder grant's `host` is a path relative to the grants root, made of plain folder names:
//! an absolute path, `..`, `.` or an empty component is an error here, and the folder must
//! exist beneath the root, reached without following a symbolic link, when the manifest is
//! loaded (it is not created). How grants are opened on each attempt, and why a grant never

use serde::Deserialize;
use spool_rules::authority::Authority;
use spool_rules::limits::{BACKOFF, EFFECT_RETENTION, KV_KEYS, MAX_RETRY, MEMORY, RATE, TIMEOUT};
use spool_rules::names::is_valid_task_type;
use spool_rules::size::parse_byte_size;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::policy::{
    DEFAULT_MAX_SNOOZES, DEFAULT_RECORD_MAX, Defaults, MAX_RECORD_MAX, MAX_SNOOZES, Policy,
    RecordMode,
};
use crate::backoff::Backoff;
use crate::sandbox::capabilities::{
    Capabilities, DEFAULT_ENQUEUE_BYTES, DEFAULT_ENQUEUE_DEPTH, DEFAULT_ENQUEUE_TASKS,
    EnqueueGrant, GrantedDir, MAX_ENQUEUE_DEPTH, MAX_ENQUEUE_TASKS,
};
use crate::sandbox::grants::{self, GrantsRoot};

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
    #[serde(default, with = "humantime_serde")]
    pub timeout: Option<Duration>,
    pub memory: Option<ByteSize>,
    pub concurrency: Option<usize>,
    pub rate: Option<f64>,
    #[serde(default)]
    pub dirs: Vec<DirGrant>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    pub http: Option<HttpGrant>,
    pub enqueue: Option<EnqueueSection>,
    pub max_snoozes: Option<u32>,
    /// Which attempts keep a record for `spool replay`: "failed" (default), "all" or "none".
    pub record: Option<String>,
    /// The most bytes of host calls one record keeps (default 1 MiB).
    pub record_max: Option<ByteSize>,
    /// `[env]` variables whose values a record redacts.
    #[serde(default)]
    pub secrets: Vec<String>,
    pub kv: Option<KvSection>,
    pub effects: Option<EffectsSection>,
    /// Periodic tasks of this type ([`crate::schedule`]).
    #[serde(default)]
    pub schedule: Vec<crate::schedule::ScheduleEntry>,
}

/// The `[kv]` table: what the type may keep in its key-value store.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KvSection {
    pub max_keys: Option<u64>,
    pub max_bytes: Option<ByteSize>,
}

/// The `[effects]` table: how long the effect ledger remembers the type's effects.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EffectsSection {
    #[serde(default, with = "humantime_serde")]
    pub retention: Option<Duration>,
}

/// The `[enqueue]` table as written: which follow-up tasks the guest may enqueue, and how many.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnqueueSection {
    /// Task types the guest may enqueue.
    #[serde(default)]
    pub allow: Vec<String>,
    pub max_tasks: Option<u32>,
    pub max_bytes: Option<ByteSize>,
    pub max_depth: Option<u32>,
    pub min_priority: Option<i32>,
    pub max_priority: Option<i32>,
}

/// A host folder granted to the guest.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DirGrant {
    /// The folder on the host, relative to the grants root (plain folder names only).
    pub host: PathBuf,
    /// Where the guest sees it, e.g. `/reports`.
    pub guest: String,
    /// Whether the guest may create and change files there (default: read-only).
    #[serde(default)]
    pub writable: bool,
}

/// Outbound HTTP granted to the guest.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpGrant {
    /// Destinations: `host` (any port) or `host:port`.
    pub allow: Vec<String>,
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
            other => Err(format!(
                "expected a size such as \"64MiB\" or a byte count, found {other}"
            )),
        }
    }
}

impl Manifest {
    /// Parses manifest text; the error names the offending field.
    pub fn parse(text: &str) -> Result<Manifest, String> {
        let manifest: Manifest = toml::from_str(text).map_err(|e| e.to_string())?;
        if let Some(max_retry) = manifest.max_retry.filter(|m| !MAX_RETRY.contains(m)) {
            return Err(format!("max_retry = {max_retry}: use {}", MAX_RETRY.shown));
        }
        for (field, value) in [
            ("backoff_base", manifest.backoff_base),
            ("backoff_max", manifest.backoff_max),
        ] {
            if let Some(delay) = value
                && !BACKOFF.contains(&delay)
            {
                return Err(format!(
                    "{field} = {}: use {}",
                    humantime::format_duration(delay),
                    BACKOFF.shown
                ));
            }
        }
        if let Some(timeout) = manifest.timeout.filter(|t| !TIMEOUT.contains(t)) {
            return Err(format!(
                "timeout = {}: use {} such as \"30s\"",
                humantime::format_duration(timeout),
                TIMEOUT.shown
            ));
        }
        if let Some(ByteSize(memory)) = manifest.memory
            && !MEMORY.contains(&memory)
        {
            return Err(format!("memory = {memory} bytes: use {}", MEMORY.shown));
        }
        if let Some(jitter) = manifest.backoff_jitter
            && !(0.0..=1.0).contains(&jitter)
        {
            return Err(format!(
                "backoff_jitter = {jitter}: use a fraction between 0 and 1"
            ));
        }
        if manifest.fuel == Some(0) {
            return Err(
                "fuel = 0: a handler needs some fuel to run; omit the field for the default".into(),
            );
        }
        if manifest.concurrency == Some(0) {
            return Err(
                "concurrency = 0: use 1 or more; remove the plugin to stop the type".into(),
            );
        }
        if let Some(rate) = manifest.rate
            && !RATE.contains(&rate)
        {
            return Err(format!("rate = {rate}: use {}", RATE.shown));
        }
        if let Some(max) = manifest
            .max_snoozes
            .filter(|m| !(1..=MAX_SNOOZES).contains(m))
        {
            return Err(format!("max_snoozes = {max}: use 1 to {MAX_SNOOZES}"));
        }
        if let Some(name) = manifest
            .secrets
            .iter()
            .find(|name| !manifest.env.contains_key(*name))
        {
            return Err(format!(
                "secrets = [{name:?}]: {name} is not in [env]; list the [env] variables whose values records must not keep"
            ));
        }
        if let Some(record) = manifest
            .record
            .as_deref()
            .filter(|r| RecordMode::parse(r).is_none())
        {
            return Err(format!(
                "record = {record:?}: use \"failed\" (keep a record of attempts that did not succeed), \"all\" or \"none\""
            ));
        }
        if let Some(ByteSize(max)) = manifest
            .record_max
            .filter(|m| !(1024..=MAX_RECORD_MAX).contains(&m.0))
        {
            return Err(format!(
                "record_max = {max} bytes: use 1KiB to {}",
                spool_rules::size::show_size(MAX_RECORD_MAX)
            ));
        }
        if let Some(kv) = &manifest.kv
            && let Some(keys) = kv.max_keys.filter(|k| !KV_KEYS.contains(k))
        {
            return Err(format!("kv.max_keys = {keys}: use {}", KV_KEYS.shown));
        }
        if let Some(retention) = manifest.effects.as_ref().and_then(|e| e.retention)
            && !EFFECT_RETENTION.contains(&retention)
        {
            return Err(format!(
                "effects.retention = {}: use {}",
                humantime::format_duration(retention),
                EFFECT_RETENTION.shown
            ));
        }
        if let Some(enqueue) = &manifest.enqueue {
            for task_type in &enqueue.allow {
                if !is_valid_task_type(task_type) {
                    return Err(format!(
                        "enqueue.allow entry {task_type:?}: write a task type name (letters, digits, `_` or `-`)"
                    ));
                }
            }
            if let Some(max) = enqueue
                .max_tasks
                .filter(|m| !(1..=MAX_ENQUEUE_TASKS).contains(m))
            {
                return Err(format!(
                    "enqueue.max_tasks = {max}: use 1 to {MAX_ENQUEUE_TASKS}; an empty allow list enqueues nothing"
                ));
            }
            if let Some(max) = enqueue
                .max_depth
                .filter(|m| !(1..=MAX_ENQUEUE_DEPTH).contains(m))
            {
                return Err(format!(
                    "enqueue.max_depth = {max}: use 1 to {MAX_ENQUEUE_DEPTH} (generations of follow-ups below a task enqueued from outside)"
                ));
            }
            if let (Some(min), Some(max)) = (enqueue.min_priority, enqueue.max_priority)
                && min > max
            {
                return Err(format!(
                    "enqueue.min_priority = {min} is above enqueue.max_priority = {max}"
                ));
            }
        }
        crate::schedule::check_entries(
            &manifest.schedule,
            crate::schedule::Source::Manifest,
            chrono::Utc::now(),
        )?;
        for (i, dir) in manifest.dirs.iter().enumerate() {
            if let Err(problem) = grants::check_host_path(&dir.host) {
                return Err(format!("dirs[{i}].host = {:?}: {problem}", dir.host));
            }
            if !dir.guest.starts_with('/') {
                return Err(format!(
                    "dirs[{i}].guest = {:?}: use an absolute guest path such as \"/data\"",
                    dir.guest
                ));
            }
        }
        for entry in manifest.http.iter().flat_map(|h| &h.allow) {
            if Authority::parse(entry).is_none() {
                return Err(format!(
                    "http.allow entry {entry:?}: write a host or host:port, without scheme or path"
                ));
            }
        }
        Ok(manifest)
    }

    /// Applies the host's defaults to every field the manifest leaves out; folder grants must
    /// exist beneath `root`, reached without following a symbolic link.
    pub fn resolve(&self, defaults: &Defaults, root: &Arc<GrantsRoot>) -> Result<Policy, String> {
        let mut dirs = Vec::new();
        for (i, grant) in self.dirs.iter().enumerate() {
            let dir = GrantedDir {
                host: grant.host.clone(),
                guest: grant.guest.clone(),
                writable: grant.writable,
                root: root.clone(),
            };
            dir.open()
                .map_err(|error| format!("dirs[{i}].host = {:?}: {error}", grant.host))?;
            dirs.push(dir);
        }
        Ok(Policy {
            max_retry: self.max_retry.unwrap_or(defaults.max_retry),
            backoff: Backoff::new(
                self.backoff_base.unwrap_or(defaults.backoff.base),
                self.backoff_max.unwrap_or(defaults.backoff.max_delay),
                self.backoff_jitter.unwrap_or(defaults.backoff.jitter),
            ),
            priority: self.priority.unwrap_or(0),
            fuel: self.fuel.unwrap_or(defaults.fuel),
            timeout: self.timeout.unwrap_or(defaults.timeout),
            memory_bytes: self.memory.map(|m| m.0).unwrap_or(defaults.memory_bytes),
            concurrency: self.concurrency,
            rate: self.rate,
            max_snoozes: self.max_snoozes.unwrap_or(DEFAULT_MAX_SNOOZES),
            record: self
                .record
                .as_deref()
                .and_then(RecordMode::parse)
                .unwrap_or_default(),
            record_max: self.record_max.map_or(DEFAULT_RECORD_MAX, |m| m.0),
            record_secrets: self.secrets.clone(),
            kv_max_keys: self
                .kv
                .as_ref()
                .and_then(|kv| kv.max_keys)
                .unwrap_or(defaults.kv_max_keys),
            kv_max_bytes: self
                .kv
                .as_ref()
                .and_then(|kv| kv.max_bytes)
                .map_or(defaults.kv_max_bytes, |b| b.0 as u64),
            effect_retention: self
                .effects
                .as_ref()
                .and_then(|e| e.retention)
                .unwrap_or(defaults.effect_retention),
            capabilities: Capabilities {
                dirs,
                env: self
                    .env
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
                http_allow: self
                    .http
                    .as_ref()
                    .map(|h| h.allow.clone())
                    .unwrap_or_default(),
                enqueue: self.enqueue_grant()?,
            },
            schedules: crate::schedule::check_entries(
                &self.schedule,
                crate::schedule::Source::Manifest,
                chrono::Utc::now(),
            )?
            .into_iter()
            .map(|(_, spec)| spec)
            .collect(),
        })
    }

    /// The `[enqueue]` table over its defaults: nothing allowed; at most
    /// [`DEFAULT_ENQUEUE_TASKS`] follow-ups and [`DEFAULT_ENQUEUE_BYTES`] of payload per attempt
    /// (one payload is never more than the host's `max_payload` either), [`DEFAULT_ENQUEUE_DEPTH`]
    /// generations deep; priorities up to the type's own.
    fn enqueue_grant(&self) -> Result<EnqueueGrant, String> {
        let section = self.enqueue.clone().unwrap_or_default();
        let own = self.priority.unwrap_or(0);
        let min_priority = section.min_priority.unwrap_or(i32::MIN);
        let max_priority = section.max_priority.unwrap_or(own.max(min_priority));
        if min_priority > max_priority {
            return Err(format!(
                "enqueue.min_priority = {min_priority} is above the follow-ups' highest priority {max_priority} (the type's priority unless enqueue.max_priority says otherwise)"
            ));
        }
        Ok(EnqueueGrant {
            allow: section.allow,
            max_tasks: section.max_tasks.unwrap_or(DEFAULT_ENQUEUE_TASKS),
            max_bytes: section.max_bytes.map_or(DEFAULT_ENQUEUE_BYTES, |b| b.0),
            max_depth: section.max_depth.unwrap_or(DEFAULT_ENQUEUE_DEPTH),
            min_priority,
            max_priority,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// A grants root in a fresh temporary folder, with `folders` created beneath it.
    fn root_with(folders: &[&str]) -> (tempfile::TempDir, Arc<GrantsRoot>) {
        let dir = tempfile::tempdir().unwrap();
        for folder in folders {
            std::fs::create_dir_all(dir.path().join(folder)).unwrap();
        }
        let root = Arc::new(GrantsRoot::open(dir.path()).unwrap());
        (dir, root)
    }

    #[test]
    fn empty_manifest_takes_every_default() {
        let defaults = Defaults::default();
        let (_dir, root) = root_with(&[]);
        let policy = Manifest::parse("")
            .unwrap()
            .resolve(&defaults, &root)
            .unwrap();
        assert_eq!(policy.max_retry, defaults.max_retry);
        assert_eq!(policy.backoff, defaults.backoff);
        assert_eq!(policy.fuel, defaults.fuel);
        assert_eq!(policy.priority, 0);
        assert_eq!(policy.timeout, defaults.timeout);
        assert_eq!(
            policy.capabilities,
            Capabilities::default(),
            "nothing is granted by default"
        );
    }

    #[test]
    fn fields_override_defaults() {
        let manifest = Manifest::parse(
            "max_retry = 5\nbackoff_base = \"2s\"\nbackoff_jitter = 0.25\npriority = 10\nfuel = 1000\nmemory = \"8MiB\"\n",
        )
        .unwrap();
        let (_dir, root) = root_with(&[]);
        let policy = manifest.resolve(&Defaults::default(), &root).unwrap();
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
    fn values_have_sane_ranges() {
        for (text, field) in [
            ("rate = 1e-300", "rate"),
            ("rate = 0.000001", "rate"),
            ("rate = 1e12", "rate"),
            ("rate = nan", "rate"),
            ("max_retry = 4294967295", "max_retry"),
            ("max_retry = 1001", "max_retry"),
            ("backoff_base = \"0s\"", "backoff_base"),
            ("backoff_base = \"400years\"", "backoff_base"),
            ("backoff_max = \"1000000years\"", "backoff_max"),
            ("timeout = \"30d\"", "timeout"),
            ("memory = 1", "memory"),
            ("memory = \"64GiB\"", "memory"),
            ("[enqueue]\nmax_tasks = 0", "enqueue.max_tasks"),
            ("[enqueue]\nmax_tasks = 100000", "enqueue.max_tasks"),
            ("[enqueue]\nmax_depth = 0", "enqueue.max_depth"),
            ("[enqueue]\nmax_depth = 100001", "enqueue.max_depth"),
            ("[enqueue]\nallow = [\"../x\"]", "enqueue.allow"),
            (
                "[enqueue]\nmin_priority = 5\nmax_priority = 1",
                "enqueue.min_priority",
            ),
            ("max_snoozes = 0", "max_snoozes"),
            ("secrets = [\"TOKEN\"]\n[env]\nA = \"1\"", "secrets"),
            ("[kv]\nmax_keys = 0", "kv.max_keys"),
            ("[effects]\nretention = \"1s\"", "effects.retention"),
        ] {
            let error = Manifest::parse(text).unwrap_err();
            assert!(error.starts_with(field), "{text}: {error}");
        }
        let (_dir, root) = root_with(&[]);
        let edges = Manifest::parse(
            "rate = 0.000011575\nmax_retry = 1000\nbackoff_base = \"1ms\"\nbackoff_max = \"365d\"\ntimeout = \"7d\"\nmemory = \"16GiB\"\n",
        )
        .unwrap()
        .resolve(&Defaults::default(), &root)
        .unwrap();
        assert_eq!(edges.max_retry, 1000);
        assert_eq!(edges.max_snoozes, DEFAULT_MAX_SNOOZES);
        let storage = Manifest::parse(
            "max_snoozes = 3\n[kv]\nmax_keys = 5\nmax_bytes = \"1KiB\"\n[effects]\nretention = \"2d\"\n",
        )
        .unwrap()
        .resolve(&Defaults::default(), &root)
        .unwrap();
        assert_eq!(storage.max_snoozes, 3);
        assert_eq!((storage.kv_max_keys, storage.kv_max_bytes), (5, 1024));
        assert_eq!(storage.effect_retention, Duration::from_secs(2 * 86_400));
        let secret = Manifest::parse("secrets = [\"TOKEN\"]\n[env]\nTOKEN = \"t\"\n")
            .unwrap()
            .resolve(&Defaults::default(), &root)
            .unwrap();
        assert_eq!(secret.record_secrets, ["TOKEN"]);
        assert_eq!(edges.backoff.max_delay, BACKOFF.max);
    }

    #[test]
    fn follow_ups_are_denied_unless_allowed() {
        let (_dir, root) = root_with(&[]);
        let resolve = |text: &str| {
            Manifest::parse(text)
                .unwrap()
                .resolve(&Defaults::default(), &root)
                .unwrap()
                .capabilities
                .enqueue
        };
        let none = resolve("");
        assert_eq!(none, EnqueueGrant::default());
        assert!(!none.permits("notify"));
        let some = resolve(
            "priority = 7\n[enqueue]\nallow = [\"notify\"]\nmax_tasks = 5\nmax_bytes = \"4KiB\"\nmax_depth = 3\n",
        );
        assert!(some.permits("notify") && !some.permits("report"));
        assert_eq!(
            (some.max_tasks, some.max_bytes, some.max_depth),
            (5, 4096, 3)
        );
        assert_eq!((some.min_priority, some.max_priority), (i32::MIN, 7));
        let ranged = resolve("[enqueue]\nallow = [\"a\"]\nmin_priority = -3\nmax_priority = 3\n");
        assert_eq!((ranged.min_priority, ranged.max_priority), (-3, 3));
        let error = Manifest::parse("priority = -5\n[enqueue]\nmin_priority = 0\n")
            .unwrap()
            .resolve(&Defaults::default(), &root);
        assert_eq!(
            error.unwrap().capabilities.enqueue.max_priority,
            0,
            "the range never ends below its start"
        );
    }

    #[test]
    fn capabilities_resolve_and_validate() {
        let (_dir, root) = root_with(&["reports"]);
        let manifest = Manifest::parse(
            "timeout = \"5s\"\nconcurrency = 2\nrate = 0.5\n[[dirs]]\nhost = \"reports\"\nguest = \"/reports\"\nwritable = true\n[env]\nA = \"1\"\n[http]\nallow = [\"api.example.com\", \"127.0.0.1:8025\"]\n",
        )
        .unwrap();
        let policy = manifest.resolve(&Defaults::default(), &root).unwrap();
        assert_eq!(policy.timeout, Duration::from_secs(5));
        assert_eq!((policy.concurrency, policy.rate), (Some(2), Some(0.5)));
        assert_eq!(policy.capabilities.dirs[0].host, Path::new("reports"));
        assert!(policy.capabilities.dirs[0].open().is_ok());
        assert!(policy.capabilities.dirs[0].writable);
        assert_eq!(
            policy.capabilities.env,
            [("A".to_string(), "1".to_string())]
        );
        let missing = Manifest::parse("[[dirs]]\nhost = \"nope\"\nguest = \"/x\"\n").unwrap();
        let error = missing.resolve(&Defaults::default(), &root).unwrap_err();
        assert!(
            error.contains("dirs[0].host = \"nope\"") && error.contains("does not exist"),
            "{error}"
        );
        assert!(
            Manifest::parse("[[dirs]]\nhost = \"r\"\nguest = \"rel\"\n")
                .unwrap_err()
                .contains("dirs[0].guest")
        );
        assert!(
            Manifest::parse("[http]\nallow = [\"https://x.com/\"]\n")
                .unwrap_err()
                .contains("http.allow")
        );
        assert!(Manifest::parse("rate = -1.0").unwrap_err().contains("rate"));
        assert!(
            Manifest::parse("concurrency = 0")
                .unwrap_err()
                .contains("concurrency")
        );
    }

    #[test]
    fn folder_grants_stay_beneath_the_grants_root() {
        for (host, says) in [
            ("/etc", "absolute"),
            ("../x", "\"..\""),
            ("reports/../../x", "\"..\""),
            (".", "\".\""),
            ("./reports", "\".\""),
            ("", "empty"),
            ("a//b", "empty component"),
        ] {
            let text = format!(
                "[[dirs]]\nhost = \"reports\"\nguest = \"/r\"\n[[dirs]]\nhost = {host:?}\nguest = \"/x\"\n"
            );
            let error = Manifest::parse(&text).unwrap_err();
            assert!(
                error.starts_with(&format!("dirs[1].host = {host:?}: ")),
                "{host:?}: {error}"
            );
            assert!(error.contains(says), "{host:?}: {error}");
        }
        assert!(Manifest::parse("[[dirs]]\nhost = \"reports/2024\"\nguest = \"/r\"\n").is_ok());
    }

    #[test]
    fn a_grant_reached_through_a_symbolic_link_is_rejected() {
        let (dir, root) = root_with(&["real/inner"]);
        std::os::unix::fs::symlink("real", dir.path().join("alias")).unwrap();
        std::fs::write(dir.path().join("file"), "x").unwrap();
        for (host, says) in [
            ("alias", "symbolic link"),
            ("alias/inner", "symbolic link"),
            ("file", "not a folder"),
        ] {
            let manifest =
                Manifest::parse(&format!("[[dirs]]\nhost = {host:?}\nguest = \"/x\"\n")).unwrap();
            let error = manifest.resolve(&Defaults::default(), &root).unwrap_err();
            assert!(
                error.starts_with(&format!("dirs[0].host = {host:?}: ")) && error.contains(says),
                "{error}"
            );
        }
    }

    #[test]
    fn schedules_are_read_and_checked() {
        let (_dir, root) = root_with(&[]);
        let policy = Manifest::parse(
            "[[schedule]]\nname = \"nightly\"\ncron = \"0 3 * * *\"\ntimezone = \"Europe/Berlin\"\npayload = { full = true }\n[[schedule]]\nname = \"sweep\"\nevery = \"15m\"\n",
        )
        .unwrap()
        .resolve(&Defaults::default(), &root)
        .unwrap();
        let names: Vec<&str> = policy.schedules.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["nightly", "sweep"]);
        assert_eq!(policy.schedules[0].payload, r#"{"full":true}"#);
        let error =
            Manifest::parse("[[schedule]]\ncron = \"0 3 * * *\"\ntimezone = \"Mars/Olympus\"\n")
                .unwrap_err();
        assert!(error.starts_with("schedule[0].timezone"), "{error}");
        let error = Manifest::parse("[[schedule]]\nevery = \"1h\"\nevry = 1\n").unwrap_err();
        assert!(error.contains("evry"), "{error}");
    }
}
