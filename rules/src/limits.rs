//! The ranges a task's policy takes. spool.toml and flags (the host's defaults), a plugin's
//! manifest (the type's policy) and the API (one task's `max_retry`) check the same values
//! against the same range, so a default can never be one that a manifest or a request could
//! not also say.
//!
//! Each range also says itself in words, as the error messages of all three write it.

use std::time::Duration;

const DAY: u64 = 86_400;

/// An inclusive range of values and how messages write it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bounds<T> {
    pub min: T,
    pub max: T,
    /// The range in words, as it follows "use" in a message: `a duration from 1ms to 365d`.
    pub shown: &'static str,
}

impl<T: PartialOrd> Bounds<T> {
    /// Whether `value` lies in the range.
    pub fn contains(&self, value: &T) -> bool {
        self.min <= *value && *value <= self.max
    }
}

/// Retries after the first attempt: enough for any backoff schedule, and far from where
/// counting attempts (`max_retry + 1`) or a database's 32-bit column could overflow.
pub const MAX_RETRY: Bounds<u32> = Bounds {
    min: 0,
    max: 1000,
    shown: "at most 1000",
};

/// The largest payload a host accepts unless its `max_payload` says otherwise (1 MiB), and the
/// limit `spool-client` checks unless told the host's: a task table is no place for files.
pub const DEFAULT_MAX_PAYLOAD: usize = 1 << 20;

/// `backoff_base` and `backoff_max`: a millisecond to a year.
pub const BACKOFF: Bounds<Duration> = Bounds {
    min: Duration::from_millis(1),
    max: Duration::from_secs(365 * DAY),
    shown: "a duration from 1ms to 365d",
};

/// An attempt's wall-clock `timeout`: longer than zero, at most a week.
pub const TIMEOUT: Bounds<Duration> = Bounds {
    min: Duration::from_nanos(1),
    max: Duration::from_secs(7 * DAY),
    shown: "a positive duration of at most 7d",
};

/// An attempt's `memory`: one WebAssembly page to 16 GiB, all its memories and tables together.
pub const MEMORY: Bounds<usize> = Bounds {
    min: 64 << 10,
    max: 16 << 30,
    shown: "a size from 64KiB to 16GiB",
};

/// How long the effect ledger remembers an effect (`effect_retention`): an hour to ten years.
pub const EFFECT_RETENTION: Bounds<Duration> = Bounds {
    min: Duration::from_secs(3600),
    max: Duration::from_secs(10 * 365 * DAY),
    shown: "a duration from 1h to 10 years",
};

/// Task starts per second of one type on one host (`rate`): one a day to a million a second.
pub const RATE: Bounds<f64> = Bounds {
    min: 1.0 / DAY as f64,
    max: 1_000_000.0,
    shown: "a number of tasks per second from 0.00001157 (one a day) to 1000000",
};

/// Keys one task type may keep in its key-value store (`kv_max_keys`).
pub const KV_KEYS: Bounds<u64> = Bounds {
    min: 1,
    max: u64::MAX,
    shown: "1 or more",
};

/// Candidate attempts before a canary is judged (`canary_min_attempts`).
pub const CANARY_MIN_ATTEMPTS: Bounds<u64> = Bounds {
    min: 1,
    max: 1_000_000,
    shown: "a number of attempts from 1 to 1000000",
};

/// Percentage points of failed attempts a candidate may add (`canary_max_failure_increase`).
pub const CANARY_MAX_FAILURE_INCREASE: Bounds<u64> = Bounds {
    min: 0,
    max: 100,
    shown: "percentage points from 0 to 100",
};

/// How many times the stable build's p50 time or peak memory a candidate may take before it is
/// rolled back (`canary_max_slowdown`, `canary_max_memory_increase`); 0 turns the rule off.
pub const CANARY_RATIO: Bounds<f64> = Bounds {
    min: 0.0,
    max: 1000.0,
    shown: "a ratio from 1 to 1000, or 0 for no limit",
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_hold_their_ends() {
        assert!(MAX_RETRY.contains(&0) && MAX_RETRY.contains(&1000));
        assert!(!MAX_RETRY.contains(&1001));
        assert!(BACKOFF.contains(&Duration::from_millis(1)));
        assert!(!BACKOFF.contains(&Duration::ZERO));
        assert!(!TIMEOUT.contains(&Duration::ZERO));
        assert!(TIMEOUT.contains(&Duration::from_secs(7 * DAY)));
        assert!(!TIMEOUT.contains(&Duration::from_secs(7 * DAY + 1)));
        assert!(MEMORY.contains(&(64 << 10)) && !MEMORY.contains(&((16 << 30) + 1)));
        assert!(RATE.contains(&RATE.min) && !RATE.contains(&(RATE.min / 2.0)));
        assert!(!KV_KEYS.contains(&0));
    }

    #[test]
    fn the_rate_range_says_its_lower_end() {
        assert!(RATE.shown.contains(&format!("{:.8}", RATE.min)));
    }
}
