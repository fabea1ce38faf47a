//! The queue's storage: the only place in Spool that speaks SQL.
//!
//! [`Store`] is the contract every backend fulfils; the workers, the API and the CLI see nothing
//! else. SQLite ([`sqlite::SqliteStore`]) is the embedded default. A backend for a server
//! database claims with `FOR UPDATE SKIP LOCKED` inside [`Store::claim`]; nothing outside this
//! module assumes which database is behind the trait.
//!
//! Writes are batched where the hot path produces many: [`Store::enqueue`] takes a batch,
//! [`Store::claim`] returns up to `limit` rows from one statement, and [`Store::complete`]
//! commits many finished attempts in one transaction.

pub mod sqlite;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use std::sync::Arc;
use std::time::Duration;

use crate::task::{Enqueued, NewTask, Status, Task, TaskId, Transition};

/// A shared handle to the configured backend.
pub type SharedStore = Arc<dyn Store>;

/// Errors from the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// No task has this id.
    #[error("task {0} does not exist")]
    NotFound(TaskId),
    /// The task exists but its state does not allow the requested change.
    #[error("task {id} is {status}: {action} needs a task that is {allowed}")]
    Conflict { id: TaskId, status: Status, action: &'static str, allowed: &'static str },
    /// The database URL names a database this build cannot open.
    #[error("unsupported database URL `{0}`: use sqlite://PATH (for example sqlite://spool.db)")]
    UnsupportedUrl(String),
    /// The database could not be reached or refused the statement.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    /// Applying the embedded migrations failed.
    #[error("database migration failed: {0}")]
    Migration(#[from] sqlx::migrate::MigrateError),
    /// The host is shutting down and no longer writes.
    #[error("the host is shutting down")]
    Closed,
    /// A stored value could not be read back (a corrupted or foreign row).
    #[error("stored task {id} is unreadable: {reason}")]
    Corrupt { id: TaskId, reason: String },
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

/// One finished attempt, to be written by [`Store::complete`].
#[derive(Debug, Clone)]
pub struct Completion {
    pub id: TaskId,
    /// The lease owner that ran it; a row leased by someone else (or no longer running,
    /// e.g. cancelled meanwhile) is left alone.
    pub owner: String,
    /// The task's retry count when it was claimed; guards against a stale attempt whose
    /// lease expired and which was rescued and run again.
    pub claimed_retry_count: u32,
    /// Where the task goes.
    pub transition: Transition,
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

/// Which tasks a listing returns.
#[derive(Debug, Clone, Default)]
pub struct TaskFilter {
    pub status: Option<Status>,
    pub task_type: Option<String>,
    /// Only ids smaller than this (the paging cursor; listings are newest first).
    pub before_id: Option<TaskId>,
    pub limit: usize,
}

/// Number of tasks in each state.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct StatusCounts {
    pub pending: u64,
    pub running: u64,
    pub done: u64,
    pub failed: u64,
    pub cancelled: u64,
}

/// The operations Spool needs from a queue database.
#[async_trait]
pub trait Store: Send + Sync + 'static {
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

    /// Extends the leases of every task `owner` is running; returns their ids (a task this
    /// host thinks it runs but which is missing was cancelled or rescued meanwhile).
    async fn extend_leases(&self, owner: &str, until: DateTime<Utc>) -> Result<Vec<TaskId>, StoreError>;

    /// Returns tasks `owner` is running to pending without counting the attempt (shutdown).
    async fn release(&self, owner: &str, ids: &[TaskId]) -> Result<u64, StoreError>;

    /// Takes back running tasks whose lease expired before `now` (their host died): pending
    /// again with the attempt counted, or failed when no retries remain.
    async fn rescue_expired(&self, now: DateTime<Utc>) -> Result<RescueReport, StoreError>;

    /// One task by id.
    async fn get(&self, id: TaskId) -> Result<Option<Task>, StoreError>;

    /// Tasks matching the filter, newest first.
    async fn list(&self, filter: &TaskFilter) -> Result<Vec<Task>, StoreError>;

    /// Sends a failed or cancelled task back to pending, due now, with a fresh retry budget.
    async fn retry(&self, id: TaskId, now: DateTime<Utc>) -> Result<Task, StoreError>;

    /// Cancels a pending or running task. A running attempt's outcome is then discarded.
    async fn cancel(&self, id: TaskId, now: DateTime<Utc>) -> Result<Task, StoreError>;

    /// How many tasks are in each state.
    async fn counts(&self) -> Result<StatusCounts, StoreError>;

    /// Pending tasks per task type.
    async fn pending_by_type(&self) -> Result<std::collections::BTreeMap<String, u64>, StoreError>;
    /// Due pending tasks of `task`'s type that a claim at `now` takes before it (higher
    /// priority, or the same priority and earlier in the queue).
    async fn count_ahead(&self, task: &Task, now: DateTime<Utc>) -> Result<u64, StoreError>;
    /// Pending tasks per type that are due at `now` (scheduled ones not counted).
    async fn due_by_type(&self, now: DateTime<Utc>) -> Result<std::collections::BTreeMap<String, u64>, StoreError>;

    /// Whether the effect `key` of `task_type` was recorded as done.
    async fn effect_done(&self, task_type: &str, key: &str) -> Result<bool, StoreError>;

    /// Records the effect `key` of `task_type` as done (committed before returning).
    async fn record_effect(&self, task_type: &str, key: &str, task_id: TaskId) -> Result<(), StoreError>;

    /// Reads a key of a task type's key-value store.
    async fn kv_get(&self, task_type: &str, key: &str) -> Result<Option<String>, StoreError>;

    /// Writes a key of a task type's key-value store.
    async fn kv_set(&self, task_type: &str, key: &str, value: &str) -> Result<(), StoreError>;

    /// Deletes a key; true when it existed.
    async fn kv_delete(&self, task_type: &str, key: &str) -> Result<bool, StoreError>;

    /// Checks that the database answers.
    async fn ping(&self) -> Result<(), StoreError>;

    /// Closes connections, flushing what the database buffers.
    async fn close(&self);
}

/// Opens the store a database URL names, applying migrations.
pub async fn open(url: &str) -> Result<SharedStore, StoreError> {
    if url.starts_with("sqlite:") {
        Ok(Arc::new(sqlite::SqliteStore::open(url).await?))
    } else {
        Err(StoreError::UnsupportedUrl(url.to_string()))
    }
}
