//! The retry delay policy: `base × 2^retry_count`, capped, with optional jitter. Pure.
//!
//! The essay behind Spool tuned the base to 30 s: a 5 s base hammered a flaky mail service,
//! 30 s let both sides recover. Jitter spreads the retries of many tasks that failed together
//! (a downstream outage) so they do not all come back in the same second.

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The default base delay, the essay's tuned value.
pub const DEFAULT_BASE: Duration = Duration::from_secs(30);
/// The default cap: no retry waits longer than a day, however many retries a task has.
pub const DEFAULT_MAX_DELAY: Duration = Duration::from_secs(24 * 60 * 60);

/// Exponential backoff with a cap and symmetric jitter.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Backoff {
    /// Delay before the first retry.
    #[serde(with = "humantime_serde")]
    pub base: Duration,
    /// Upper bound on any delay.
    #[serde(with = "humantime_serde")]
    pub max_delay: Duration,
    /// Fraction in `[0, 1]`: the delay is drawn from `d × (1 ± jitter)`. 0 disables jitter.
    pub jitter: f64,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::new(DEFAULT_BASE, DEFAULT_MAX_DELAY, 0.0)
    }
}

impl Backoff {
    /// A policy; `jitter` is clamped into `[0, 1]`.
    pub fn new(base: Duration, max_delay: Duration, jitter: f64) -> Self {
        Backoff {
            base,
            max_delay,
            jitter: jitter.clamp(0.0, 1.0),
        }
    }

    /// The delay before the retry that follows failed attempt number `retry_count + 1`.
    ///
    /// `sample` is a number in `[0, 1)`; 0.5 gives the delay without jitter.
    pub fn delay(&self, retry_count: u32, sample: f64) -> Duration {
        // 2^retry_count overflows nothing: the exponent is bounded and the result capped.
        let factor = 2f64.powi(retry_count.min(62) as i32);
        let plain = (self.base.as_secs_f64() * factor).min(self.max_delay.as_secs_f64());
        let spread = 1.0 + self.jitter * (2.0 * sample.clamp(0.0, 1.0) - 1.0);
        let jittered = (plain * spread).min(self.max_delay.as_secs_f64()).max(0.0);
        // A base or cap too large for a `Duration` (or NaN) is taken as the cap itself.
        Duration::try_from_secs_f64(jittered).unwrap_or(self.max_delay)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_from_the_base() {
        let b = Backoff::new(Duration::from_secs(30), DEFAULT_MAX_DELAY, 0.0);
        let delays: Vec<u64> = (0..5).map(|n| b.delay(n, 0.5).as_secs()).collect();
        assert_eq!(delays, [30, 60, 120, 240, 480]);
    }

    #[test]
    fn is_capped_even_for_huge_retry_counts() {
        let b = Backoff::new(Duration::from_secs(30), Duration::from_secs(3600), 0.0);
        assert_eq!(b.delay(20, 0.5), Duration::from_secs(3600));
        assert_eq!(b.delay(u32::MAX, 0.5), Duration::from_secs(3600));
    }

    #[test]
    fn jitter_stays_within_its_band() {
        let b = Backoff::new(Duration::from_secs(100), DEFAULT_MAX_DELAY, 0.2);
        assert_eq!(b.delay(0, 0.0), Duration::from_secs(80));
        assert_eq!(b.delay(0, 0.5), Duration::from_secs(100));
        assert!(b.delay(0, 0.999_999) <= Duration::from_secs(120));
        assert!(b.delay(0, 0.999_999) > Duration::from_secs(119));
    }

    #[test]
    fn jitter_is_clamped() {
        let b = Backoff::new(Duration::from_secs(10), DEFAULT_MAX_DELAY, 7.0);
        assert_eq!(b.jitter, 1.0);
        assert_eq!(b.delay(0, 0.0), Duration::ZERO);
    }

    #[test]
    fn enormous_policies_do_not_panic() {
        let b = Backoff::new(Duration::MAX, Duration::MAX, 1.0);
        assert_eq!(b.delay(u32::MAX, 0.999), Duration::MAX);
        let b = Backoff::new(Duration::from_secs(u64::MAX / 2), Duration::MAX, 0.0);
        assert_eq!(b.delay(40, 0.5), Duration::MAX);
    }

    #[test]
    fn sub_second_bases_work_for_tests() {
        let b = Backoff::new(Duration::from_millis(50), DEFAULT_MAX_DELAY, 0.0);
        assert_eq!(b.delay(2, 0.5), Duration::from_millis(200));
    }
}
