//! The attempts running on this host: for per-type concurrency, for cancelling a running task,
//! for keeping exactly their leases alive, and for handing unfinished tasks back at shutdown.
//!
//! Attempts are keyed by [`AttemptId`] (task id and claim number), not by task id: if this host
//! lost the database long enough for a task to be rescued and claimed again, here or elsewhere,
//! the old attempt and the new one are two entries, and finishing one never forgets the other.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;

use crate::store::AttemptId;
use crate::task::TaskId;

struct Running {
    task_type: String,
    cancel: Arc<Notify>,
}

/// Attempts in flight on this host.
#[derive(Default)]
pub struct InFlight {
    attempts: Mutex<HashMap<AttemptId, Running>>,
    /// Attempts stopped before they finished (aborted at shutdown): their tasks are still
    /// leased here and must be handed back.
    abandoned: Mutex<Vec<AttemptId>>,
}

impl InFlight {
    /// Registers a starting attempt; the returned signal fires when it is cancelled.
    pub fn start(&self, attempt: AttemptId, task_type: &str) -> Arc<Notify> {
        let cancel = Arc::new(Notify::new());
        let running = Running {
            task_type: task_type.to_string(),
            cancel: cancel.clone(),
        };
        self.lock().insert(attempt, running);
        cancel
    }

    /// Forgets a finished attempt; false when it was not (or no longer) registered.
    pub fn finish(&self, attempt: AttemptId) -> bool {
        self.lock().remove(&attempt).is_some()
    }

    /// Interrupts every running attempt of a task; false when this host runs none.
    pub fn cancel_task(&self, task: TaskId) -> bool {
        let attempts = self.lock();
        let mut found = false;
        for running in attempts
            .iter()
            .filter(|(id, _)| id.task == task)
            .map(|(_, r)| r)
        {
            running.cancel.notify_one();
            found = true;
        }
        found
    }

    /// Interrupts one attempt; false when it is not running here.
    pub fn cancel(&self, attempt: AttemptId) -> bool {
        match self.lock().get(&attempt) {
            Some(running) => {
                running.cancel.notify_one();
                true
            }
            None => false,
        }
    }

    /// The attempts in flight.
    pub fn attempts(&self) -> Vec<AttemptId> {
        self.lock().keys().copied().collect()
    }

    /// Attempts of one task type in flight.
    pub fn running_of(&self, task_type: &str) -> usize {
        self.lock()
            .values()
            .filter(|r| r.task_type == task_type)
            .count()
    }

    /// How many attempts are in flight.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no attempt is in flight.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// Marks an attempt as stopped before it finished: it leaves the running set, and
    /// [`InFlight::drain`] returns it so its task is handed back.
    pub fn abandon(&self, attempt: AttemptId) {
        if self.lock().remove(&attempt).is_some() {
            self.abandoned
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(attempt);
        }
    }

    /// Removes and returns every attempt whose task is still leased here: those registered and
    /// those abandoned (shutdown).
    pub fn drain(&self) -> Vec<AttemptId> {
        let mut attempts: Vec<AttemptId> = self.lock().drain().map(|(id, _)| id).collect();
        attempts.append(&mut self.abandoned.lock().unwrap_or_else(|p| p.into_inner()));
        attempts
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<AttemptId, Running>> {
        // A panic while holding the lock leaves the map consistent (every operation is one
        // map call), so a poisoned lock is still safe to use.
        self.attempts
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Takes an attempt out of [`InFlight`] however the attempt ends, so none stays registered:
/// - [`InFlightGuard::finish`]: it finished (its outcome goes to the completer) or was
///   cancelled (its row already says so);
/// - dropped while a panic unwinds: unregistered, so its lease is no longer extended; the lease
///   expires and the rescuer takes the task back, counting the attempt (a host bug must not
///   make a task run forever uncounted);
/// - dropped otherwise (the attempt was aborted at shutdown): abandoned, so the shutdown hands
///   its task back to the queue without counting the attempt.
pub struct InFlightGuard {
    in_flight: Arc<InFlight>,
    attempt: AttemptId,
    finished: bool,
}

impl InFlightGuard {
    pub fn new(in_flight: Arc<InFlight>, attempt: AttemptId) -> Self {
        InFlightGuard {
            in_flight,
            attempt,
            finished: false,
        }
    }

    /// The attempt ended and nothing about its task needs handing back.
    pub fn finish(mut self) {
        self.in_flight.finish(self.attempt);
        self.finished = true;
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        if std::thread::panicking() {
            self.in_flight.finish(self.attempt);
        } else {
            self.in_flight.abandon(self.attempt);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(task: TaskId, attempt: u32) -> AttemptId {
        AttemptId { task, attempt }
    }

    #[tokio::test]
    async fn cancel_reaches_the_attempt() {
        let in_flight = InFlight::default();
        let signal = in_flight.start(attempt(1, 1), "a");
        in_flight.start(attempt(2, 1), "a");
        in_flight.start(attempt(3, 1), "b");
        assert_eq!(in_flight.running_of("a"), 2);
        assert!(in_flight.cancel_task(1));
        signal.notified().await; // resolves: the permit was stored
        assert!(in_flight.finish(attempt(1, 1)));
        assert!(!in_flight.cancel_task(1));
        let mut rest = in_flight.drain();
        rest.sort();
        assert_eq!(rest, [attempt(2, 1), attempt(3, 1)]);
    }

    #[test]
    fn an_old_attempt_finishing_leaves_the_new_claim_registered() {
        let in_flight = InFlight::default();
        in_flight.start(attempt(7, 1), "a");
        in_flight.start(attempt(7, 2), "a");
        assert!(in_flight.finish(attempt(7, 1)));
        assert_eq!(in_flight.attempts(), [attempt(7, 2)]);
    }

    #[test]
    fn the_guard_unregisters_even_when_the_attempt_panics() {
        let in_flight = Arc::new(InFlight::default());
        in_flight.start(attempt(9, 1), "a");
        let shared = in_flight.clone();
        let outcome = std::panic::catch_unwind(move || {
            let _guard = InFlightGuard::new(shared, attempt(9, 1));
            panic!("the attempt panicked");
        });
        assert!(outcome.is_err());
        assert!(in_flight.is_empty());
        assert!(
            in_flight.drain().is_empty(),
            "a panicked attempt is left to the rescuer"
        );
    }

    #[test]
    fn an_aborted_attempt_is_handed_back_at_shutdown_and_a_finished_one_is_not() {
        let in_flight = Arc::new(InFlight::default());
        in_flight.start(attempt(1, 1), "a");
        in_flight.start(attempt(2, 1), "a");
        InFlightGuard::new(in_flight.clone(), attempt(1, 1)).finish();
        drop(InFlightGuard::new(in_flight.clone(), attempt(2, 1))); // aborted
        assert!(in_flight.is_empty(), "neither is running any more");
        assert_eq!(in_flight.drain(), [attempt(2, 1)]);
    }
}
