//! The background services that work the queue on this host.
//!
//! - [`dispatcher`]: claims due tasks in batches and runs each in the sandbox;
//! - [`completer`]: commits finished attempts (and progress) in batches;
//! - [`lease_keeper`]: extends the leases of tasks this host is running;
//! - [`rescuer`]: returns tasks whose host died (lease expired) to the queue (on the leader);
//! - [`archiver`]: moves finished tasks to the archive and purges it (on the leader);
//! - [`sampler`]: keeps the backlog history behind `GET /stats` (on the leader);
//! - [`leader`]: elects the one host that runs maintenance;
//! - [`scheduler`]: enqueues the ticks of periodic tasks (on the leader);
//! - [`supervisor`]: stops the host loudly when the dispatcher or completer dies;
//! - [`paused`]: the task types paused on this database, left out of claims;
//! - [`in_flight`]: the attempts running here; [`rate`]: per-type start rates;
//! - [`ready`]: how many tasks the dispatcher claims ahead of its free slots;
//! - [`estimates`]: attempt times and the backlog, for estimated completion times;
//! - [`finished`]: tasks just committed, for API requests waiting on them;
//! - [`services`]: the durable host services handlers call.
//!
//! Each service is a struct with an async `run` that ends when the shared [`Shutdown`]
//! signal asks it to; [`crate::host`] starts and stops them in one place.
//!
//! [`Shutdown`]: crate::shutdown::Shutdown

pub mod archiver;
pub mod completer;
pub mod dispatcher;
pub mod estimates;
pub mod finished;
pub mod in_flight;
pub mod leader;
pub mod lease_keeper;
pub mod paused;
pub mod rate;
pub mod ready;
pub mod rescuer;
pub mod sampler;
pub mod scheduler;
pub mod services;
pub mod supervisor;

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
