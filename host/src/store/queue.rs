//! The queue's lifecycle: enqueue, claim, complete, progress, leases, release, rescue, and an
//! operator's retry and cancel. These are the statements each backend writes itself: they are
//! the hot path, or they differ in substance between databases (`FOR UPDATE SKIP LOCKED`, the
//! SQLite writer thread, MySQL's padded batches).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use std::sync::Arc;
use std::time::Duration;

use super::{StoreError, history};
use crate::task::{Enqueued, NewTask, Task, TaskId, Transition};

/// One attempt of one task: the fencing token that matches a completion to its claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct AttemptId {
    pub task: TaskId,
    /// The task's `attempts` value after the claim that started this attempt.
    pub attempt: u32,
}

impl AttemptId {
    /// The attempt a freshly claimed task is running.
    pub fn of(task: &Task) -> Self {
        AttemptId {
            task: task.id,
            attempt: task.attempts,
        }
    }
}

/// What a host asks for when it claims work.
#[derive(Debug, Clone)]
pub struct ClaimRequest {
    /// The host's identity; written into the lease.
    pub owner: String,
    /// At most this many rows.
    pub limit: usize,
    /// Only these task types (the ones this host has a handler for).
    pub task_types: Vec<String>,
    /// The claim time: rows due at or before it qualify.
    pub now: DateTime<Utc>,
    /// How long the lease lasts before the rescuer may take the task back.
    pub lease: Duration,
}

/// One finished attempt, to be written by [`Queue::complete`].
#[derive(Debug, Clone)]
pub struct Completion {
    pub id: TaskId,
    /// The lease owner that ran it; a row leased by someone else (or no longer running,
    /// e.g. cancelled meanwhile) is left alone.
    pub owner: String,
    /// The claim this attempt came from (the task's `attempts` after that claim): a row
    /// claimed again since (rescued after its lease expired) is left alone.
    pub attempt: u32,
    /// Where the task goes.
    pub transition: Transition,
    /// How the attempt ended, for its record in the attempt history.
    pub outcome: history::Outcome,
    /// The content hash of the plugin build that ran this attempt.
    pub plugin_version: Option<String>,
    /// What the attempt printed (bounded by the sandbox).
    pub log: Option<String>,
    pub finished_at: DateTime<Utc>,
}

/// A progress report from a running handler.
#[derive(Debug, Clone, PartialEq)]
pub struct ProgressUpdate {
    pub id: TaskId,
    pub percent: u8,
    pub note: String,
}

/// What one rescue pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RescueReport {
    /// Expired tasks returned to pending.
    pub retried: u64,
    /// Expired tasks that had no retries left and became failed.
    pub failed: u64,
}

/// The claim horizon a backend asks for unless it overrides [`Queue::claim_horizon`]: 20 ms
/// of work held claimed ahead of the free slots (see `worker/run/ready.rs`).
pub const DEFAULT_CLAIM_HORIZON: std::time::Duration = std::time::Duration::from_millis(20);

/// The queue's lifecycle.
#[async_trait]
pub trait Queue: Send + Sync {
    /// Inserts tasks in one transaction, in order. A task whose (type, idempotency key) already
    /// exists is not inserted; its existing row comes back marked as a duplicate.
    async fn enqueue(&self, tasks: Vec<NewTask>) -> Result<Vec<Enqueued>, StoreError>;

    /// Leases up to `limit` due pending tasks of the given types in one statement, ordered by
    /// priority (higher first), then `next_run_at`, then id; returns them in that order.
    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<Task>, StoreError>;

    /// Writes finished attempts in one transaction. Returns how many rows changed: a
    /// completion for a row that is no longer running under that lease changes nothing.
    async fn complete(&self, completions: &[Completion]) -> Result<u64, StoreError>;

    /// Stores the latest progress of running tasks.
    async fn record_progress(&self, updates: &[ProgressUpdate]) -> Result<(), StoreError>;

    /// Extends the leases of these attempts, each only while its task is still running under
    /// that claim and owner; returns the attempts that were extended (one missing from the
    /// answer was cancelled or rescued meanwhile).
    async fn extend_leases(
        &self,
        owner: &str,
        attempts: &[AttemptId],
        until: DateTime<Utc>,
    ) -> Result<Vec<AttemptId>, StoreError>;

    /// Returns these attempts' tasks to pending without counting the attempt (shutdown, or a
    /// claim this host cannot run after all); only rows still running under that claim.
    async fn release(&self, owner: &str, attempts: &[AttemptId]) -> Result<u64, StoreError>;

    /// Takes back running tasks whose lease expired before `now` (their host died): pending
    /// again with the attempt counted, or failed when no retries remain.
    async fn rescue_expired(&self, now: DateTime<Utc>) -> Result<RescueReport, StoreError>;

    /// Sends a failed or cancelled task back to pending, due now, with a fresh retry budget.
    async fn retry(&self, id: TaskId, now: DateTime<Utc>) -> Result<Task, StoreError>;

    /// Cancels a pending or running task. A running attempt's outcome is then discarded.
    async fn cancel(&self, id: TaskId, now: DateTime<Utc>) -> Result<Task, StoreError>;

    /// How much work, in time, a host may hold claimed ahead of its free slots under a backlog
    /// (`worker/run/ready.rs`). Longer means fewer, larger claims; shorter means a task of higher
    /// priority enqueued meanwhile, or another host with free slots, waits less behind the
    /// tasks claimed ahead. A backend whose claim statement has a large fixed cost asks for more.
    fn claim_horizon(&self) -> std::time::Duration {
        DEFAULT_CLAIM_HORIZON
    }

    /// Asks the backend to call `wake` whenever any host (or application SQL) enqueues a task,
    /// for as long as the store is open. Returns false when the database cannot notify; the
    /// dispatcher then relies on its poll interval to see other writers' tasks.
    fn watch_enqueues(&self, wake: Arc<tokio::sync::Notify>) -> bool {
        let _ = wake;
        false
    }
}
