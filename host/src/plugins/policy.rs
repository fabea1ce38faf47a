//! A task type's effective policy (its manifest over the host's defaults) and the host's
//! per-type defaults, which spool.toml and flags set (`crate::config`) and a manifest overrides.

use std::time::Duration;

use crate::backoff::Backoff;
use crate::sandbox::capabilities::Capabilities;

/// Retries after the first attempt: three.
pub const DEFAULT_MAX_RETRY: u32 = 3;
/// Fuel per attempt: a few seconds of pure computation on current hardware.
pub const DEFAULT_FUEL: u64 = 10_000_000_000;
/// Wall-clock time per attempt, waiting in host calls included.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);
/// Linear memory per attempt.
pub const DEFAULT_MEMORY: usize = 256 << 20;
/// Keys one task type may keep in its key-value store.
pub const DEFAULT_KV_MAX_KEYS: u64 = 10_000;
/// Bytes (keys and values together) one task type may keep in its key-value store.
pub const DEFAULT_KV_MAX_BYTES: u64 = 64 << 20;
/// How long the effect ledger remembers a recorded effect.
pub const DEFAULT_EFFECT_RETENTION: Duration = Duration::from_secs(30 * 86_400);
/// Default of `max_snoozes`: snoozes in a row before a snooze counts as a failed attempt.
pub const DEFAULT_MAX_SNOOZES: u32 = 100;
/// The largest `max_snoozes`.
pub const MAX_SNOOZES: u32 = 10_000;

/// Default of `record_max`: the most bytes of host calls one attempt's record keeps.
pub const DEFAULT_RECORD_MAX: usize = 1 << 20;
/// The largest `record_max`.
pub const MAX_RECORD_MAX: usize = 64 << 20;

/// Which attempts of a type keep a record of their inputs, for `spool replay`
/// ([`crate::sandbox::tape`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RecordMode {
    /// Only attempts that did not succeed (the default).
    #[default]
    Failed,
    /// Every attempt.
    All,
    /// None: the attempt runs without a tape.
    None,
}

impl RecordMode {
    /// The manifest's spelling.
    pub fn parse(text: &str) -> Option<RecordMode> {
        match text {
            "failed" => Some(RecordMode::Failed),
            "all" => Some(RecordMode::All),
            "none" => Some(RecordMode::None),
            _ => None,
        }
    }
}

/// A task type's effective policy: the manifest over the host's defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    pub max_retry: u32,
    /// Which attempts keep a record for `spool replay`, and how large one may grow.
    pub record: RecordMode,
    pub record_max: usize,
    /// The `[env]` variables whose values a record redacts.
    pub record_secrets: Vec<String>,
    pub backoff: Backoff,
    pub priority: i32,
    pub fuel: u64,
    /// Wall-clock limit per attempt.
    pub timeout: Duration,
    pub memory_bytes: usize,
    /// Most tasks of the type at once on this host (`None`: only the host's concurrency).
    pub concurrency: Option<usize>,
    /// Most task starts per second on this host (`None`: unlimited).
    pub rate: Option<f64>,
    /// Snoozes in a row before the next one counts as a failed attempt.
    pub max_snoozes: u32,
    /// What the type may keep in its key-value store: keys, and bytes of keys and values.
    pub kv_max_keys: u64,
    pub kv_max_bytes: u64,
    /// How long the effect ledger remembers the type's effects.
    pub effect_retention: Duration,
    pub capabilities: Capabilities,
    /// The type's periodic tasks, from its `[[schedule]]` entries.
    pub schedules: Vec<crate::schedule::ScheduleSpec>,
}

/// Per-task-type defaults; a plugin's manifest overrides them.
#[derive(Debug, Clone, PartialEq)]
pub struct Defaults {
    pub max_retry: u32,
    pub backoff: Backoff,
    pub fuel: u64,
    pub timeout: Duration,
    pub memory_bytes: usize,
    /// What a type may keep in its key-value store.
    pub kv_max_keys: u64,
    pub kv_max_bytes: u64,
    /// How long the effect ledger remembers a type's effects.
    pub effect_retention: Duration,
}

impl Default for Defaults {
    fn default() -> Self {
        Defaults {
            max_retry: DEFAULT_MAX_RETRY,
            backoff: Backoff::default(),
            fuel: DEFAULT_FUEL,
            timeout: DEFAULT_TIMEOUT,
            memory_bytes: DEFAULT_MEMORY,
            kv_max_keys: DEFAULT_KV_MAX_KEYS,
            kv_max_bytes: DEFAULT_KV_MAX_BYTES,
            effect_retention: DEFAULT_EFFECT_RETENTION,
        }
    }
}
