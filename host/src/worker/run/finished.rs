//! Tasks this host has just moved on, for API requests waiting on them (`GET /tasks/{id}?wait=`).
//!
//! The completer publishes the ids of every batch it committed (and the API publishes a task it
//! cancelled); a waiting request subscribes *before* it reads the task, so a completion
//! committed between its read and its wait is still seen. A request only learns that its task
//! may have changed and reads it again: a retry goes back to pending and the wait goes on.
//! Tasks finished by another host sharing the database are never published here; waiting
//! requests read their task again at [`RECHECK`] for those.

use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast;

use crate::task::TaskId;

/// How often a waiting request reads its task again without being woken: covers tasks that
/// other hosts finish, and rescues.
pub const RECHECK: Duration = Duration::from_secs(1);
/// Batches kept for a slow subscriber; one that falls further behind reads its task again.
const CAPACITY: usize = 256;

/// The ids of tasks just committed, per batch.
pub struct Finished {
    sender: broadcast::Sender<Arc<[TaskId]>>,
}

impl Default for Finished {
    fn default() -> Self {
        Finished {
            sender: broadcast::Sender::new(CAPACITY),
        }
    }
}

impl Finished {
    /// Tells waiting requests that these tasks changed (nobody waiting is fine).
    pub fn publish(&self, ids: impl IntoIterator<Item = TaskId>) {
        if self.sender.receiver_count() == 0 {
            return;
        }
        let ids: Arc<[TaskId]> = ids.into_iter().collect();
        if !ids.is_empty() {
            let _ = self.sender.send(ids);
        }
    }

    /// Batches published from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<[TaskId]>> {
        self.sender.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_subscriber_sees_batches_published_after_it_subscribed() {
        let finished = Finished::default();
        finished.publish([1]);
        let mut receiver = finished.subscribe();
        finished.publish([2, 3]);
        finished.publish(std::iter::empty());
        assert_eq!(&*receiver.recv().await.unwrap(), &[2, 3]);
        assert!(receiver.try_recv().is_err());
    }
}
