//! The attempts running on this host: for per-type concurrency, for cancelling a running task,
//! and for handing unfinished tasks back at shutdown.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;

use crate::task::TaskId;

struct Running {
    task_type: String,
    cancel: Arc<Notify>,
}

/// Attempts in flight on this host.
#[derive(Default)]
pub struct InFlight {
    tasks: Mutex<HashMap<TaskId, Running>>,
}

impl InFlight {
    /// Registers a starting attempt; the returned signal fires when it is cancelled.
    pub fn start(&self, id: TaskId, task_type: &str) -> Arc<Notify> {
        let cancel = Arc::new(Notify::new());
        let running = Running { task_type: task_type.to_string(), cancel: cancel.clone() };
        self.tasks.lock().expect("in-flight lock").insert(id, running);
        cancel
    }

    /// Forgets a finished attempt; false when it was not (or no longer) registered.
    pub fn finish(&self, id: TaskId) -> bool {
        self.tasks.lock().expect("in-flight lock").remove(&id).is_some()
    }

    /// Interrupts a running attempt; false when this host is not running the task.
    pub fn cancel(&self, id: TaskId) -> bool {
        match self.tasks.lock().expect("in-flight lock").get(&id) {
            Some(running) => {
                running.cancel.notify_one();
                true
            }
            None => false,
        }
    }

    /// Ids of the attempts in flight.
    pub fn ids(&self) -> Vec<TaskId> {
        self.tasks.lock().expect("in-flight lock").keys().copied().collect()
    }

    /// Attempts of one task type in flight.
    pub fn running_of(&self, task_type: &str) -> usize {
        self.tasks.lock().expect("in-flight lock").values().filter(|r| r.task_type == task_type).count()
    }

    /// Removes and returns every registered attempt (shutdown).
    pub fn drain(&self) -> Vec<TaskId> {
        self.tasks.lock().expect("in-flight lock").drain().map(|(id, _)| id).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn cancel_reaches_the_attempt() {
        let in_flight = InFlight::default();
        let signal = in_flight.start(1, "a");
        in_flight.start(2, "a");
        in_flight.start(3, "b");
        assert_eq!(in_flight.running_of("a"), 2);
        assert!(in_flight.cancel(1));
        signal.notified().await; // resolves: the permit was stored
        assert!(in_flight.finish(1));
        assert!(!in_flight.cancel(1));
        let mut rest = in_flight.drain();
        rest.sort();
        assert_eq!(rest, [2, 3]);
    }
}
