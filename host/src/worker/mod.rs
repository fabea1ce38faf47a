//! The background services that work the queue on this host, in two groups:
//!
//! - [`run`]: the task path every host runs: claims, attempts in the sandbox, batched
//!   completions, leases, and what handlers call back into;
//! - [`upkeep`]: what only the leading host does for everyone: rescuing tasks of dead hosts,
//!   archiving, sampling statistics, enqueueing schedule ticks;
//! - [`supervisor`]: stops the host loudly when the dispatcher or completer dies;
//! - [`database_watch`]: pings the database, so requests learn of an outage at once.
//!
//! Each service is a struct with an async `run` that ends when the shared [`Shutdown`]
//! signal asks it to; [`crate::host`] starts and stops them in one place.
//!
//! [`Shutdown`]: crate::shutdown::Shutdown

pub mod database_watch;
pub mod run;
pub mod supervisor;
pub mod upkeep;

use std::time::Duration;

/// Waits `delay` doubled after each consecutive database failure, capped; resets on success.
/// Keeps services polite while the database is away, and quick once it is back.
#[derive(Debug)]
pub(crate) struct RetryPause {
    next: Duration,
}

impl RetryPause {
    const FIRST: Duration = Duration::from_millis(100);
    const MAX: Duration = Duration::from_secs(5);

    pub(crate) fn new() -> Self {
        RetryPause { next: Self::FIRST }
    }

    /// The pause before the next try; doubles the one after.
    pub(crate) fn next(&mut self) -> Duration {
        let pause = self.next;
        self.next = (self.next * 2).min(Self::MAX);
        pause
    }

    /// Called after a success.
    pub(crate) fn reset(&mut self) {
        self.next = Self::FIRST;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pause_doubles_then_caps_then_resets() {
        let mut pause = RetryPause::new();
        let first: Vec<u128> = (0..8).map(|_| pause.next().as_millis()).collect();
        assert_eq!(first, [100, 200, 400, 800, 1600, 3200, 5000, 5000]);
        pause.reset();
        assert_eq!(pause.next(), Duration::from_millis(100));
    }
}
