//! Per-task-type start rates: a token bucket per type, refilled at the manifest's `rate`
//! (tasks per second) with a burst of one second's worth (at least one task). This is the
//! essay's politeness to a downstream service, enforced by the host. Pure: time is passed in.
//!
//! Manifests keep `rate` within [`MIN_RATE`] and [`MAX_RATE`]; the arithmetic here holds for
//! any positive rate anyway (a wait never exceeds [`MAX_WAIT`]).

use std::collections::HashMap;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// Token buckets by task type.
#[derive(Debug, Default)]
pub struct RateLimits {
    buckets: HashMap<String, Bucket>,
}

/// The slowest rate a manifest may set: one start a day.
pub const MIN_RATE: f64 = 1.0 / 86_400.0;
/// The fastest rate a manifest may set.
pub const MAX_RATE: f64 = 1_000_000.0;
/// The longest [`RateLimits::next_start_in`] answers: the dispatcher looks again by then.
pub const MAX_WAIT: Duration = Duration::from_secs(86_400);

fn burst(rate: f64) -> f64 {
    rate.max(1.0)
}

impl RateLimits {
    fn refill(&mut self, task_type: &str, rate: f64, now: Instant) -> &mut Bucket {
        let bucket = self.buckets.entry(task_type.to_string()).or_insert(Bucket {
            tokens: burst(rate),
            at: now,
        });
        let elapsed = now.saturating_duration_since(bucket.at).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * rate).min(burst(rate));
        bucket.at = now;
        bucket
    }

    /// How many tasks of the type may start now.
    pub fn available(&mut self, task_type: &str, rate: f64, now: Instant) -> usize {
        self.refill(task_type, rate, now).tokens.floor() as usize
    }

    /// Records that `n` tasks started.
    pub fn take(&mut self, task_type: &str, rate: f64, n: usize, now: Instant) {
        let bucket = self.refill(task_type, rate, now);
        bucket.tokens = (bucket.tokens - n as f64).max(0.0);
    }

    /// How long until the next task of the type may start.
    pub fn next_start_in(&mut self, task_type: &str, rate: f64, now: Instant) -> Duration {
        let tokens = self.refill(task_type, rate, now).tokens;
        if tokens >= 1.0 {
            Duration::ZERO
        } else {
            Duration::try_from_secs_f64((1.0 - tokens) / rate)
                .map_or(MAX_WAIT, |wait| wait.min(MAX_WAIT))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allows_a_burst_then_the_rate() {
        let start = Instant::now();
        let mut limits = RateLimits::default();
        assert_eq!(limits.available("mail", 2.0, start), 2);
        limits.take("mail", 2.0, 2, start);
        assert_eq!(limits.available("mail", 2.0, start), 0);
        assert_eq!(
            limits.next_start_in("mail", 2.0, start),
            Duration::from_millis(500)
        );
        assert_eq!(
            limits.available("mail", 2.0, start + Duration::from_millis(500)),
            1
        );
        assert_eq!(
            limits.available("mail", 2.0, start + Duration::from_secs(60)),
            2,
            "burst is capped"
        );
    }

    #[test]
    fn tiny_rates_wait_at_most_a_day_and_never_panic() {
        let start = Instant::now();
        let mut limits = RateLimits::default();
        for rate in [1e-300, f64::MIN_POSITIVE, MIN_RATE / 10.0] {
            limits.take("slow", rate, 1, start);
            assert_eq!(limits.next_start_in("slow", rate, start), MAX_WAIT);
        }
        assert_eq!(
            limits.next_start_in("slow", MIN_RATE, start),
            Duration::from_secs(86_400)
        );
    }

    #[test]
    fn slow_rates_still_allow_one() {
        let start = Instant::now();
        let mut limits = RateLimits::default();
        assert_eq!(limits.available("report", 0.1, start), 1);
        limits.take("report", 0.1, 1, start);
        assert_eq!(
            limits.next_start_in("report", 0.1, start),
            Duration::from_secs(10)
        );
        assert_eq!(
            limits.available("other", 0.1, start),
            1,
            "types are independent"
        );
    }
}
