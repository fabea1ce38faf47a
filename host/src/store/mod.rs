//! The queue's storage: the only place in Spool that speaks SQL.
//!
//! [`Store`] is the contract every backend fulfils; the workers, the API and the CLI see nothing
//! else. SQLite ([`sqlite::SqliteStore`]) is the embedded default. A backend for a server
//! database claims with `FOR UPDATE SKIP LOCKED` inside [`queue::Queue::claim`]; nothing outside this
//! module assumes which database is behind the trait.
//!
//! Writes are batched where the hot path produces many: [`queue::Queue::enqueue`] takes a batch,
//! [`queue::Queue::claim`] returns up to `limit` rows from one statement, and [`queue::Queue::complete`]
//! commits many finished attempts in one transaction.

pub mod alerts;
pub mod archive;
#[cfg(test)]
mod backend_tests;
pub mod control;
pub mod coordination;
pub mod deployments;
pub mod encoding;
pub mod history;
pub mod keyed;
pub mod mysql;
pub mod postgres;
pub mod queue;
pub mod reads;
pub mod records;
pub mod rows;
pub mod services;
pub mod sql;
pub mod sqlite;
pub mod stats;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use std::sync::Arc;

pub use queue::{
    AttemptId, ClaimRequest, Completion, DEFAULT_CLAIM_HORIZON, ProgressUpdate, RescueReport,
};
pub use services::KvUsage;

use crate::task::{Status, Task, TaskId};

/// A shared handle to the configured backend.
pub type SharedStore = Arc<dyn Store>;

/// Errors from the store. Driver errors are translated here: nothing outside this module sees
/// a driver type, and [`StoreError::is_transient`] tells callers whether waiting may help.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// No task has this id.
    #[error("task {0} does not exist")]
    NotFound(TaskId),
    /// The task exists but its state does not allow the requested change.
    #[error("task {id} is {status}: {action} needs a task that is {allowed}")]
    Conflict {
        id: TaskId,
        status: Status,
        action: &'static str,
        allowed: &'static str,
    },
    /// The database URL names a database this build cannot open.
    #[error(
        "unsupported database URL `{0}`: use sqlite://PATH (for example sqlite://spool.db), \
         postgres://USER:PASSWORD@HOST:PORT/DATABASE or mysql://USER:PASSWORD@HOST:PORT/DATABASE"
    )]
    UnsupportedUrl(String),
    /// The database cannot be reached right now (connection lost or refused, server shutting
    /// down, lock or pool timeout, deadlock victim): the same statement may succeed later.
    #[error("the database is unavailable: {0}")]
    Unavailable(String),
    /// The database refused the statement for a reason waiting does not fix.
    #[error("database error: {0}")]
    Database(String),
    /// Applying the embedded migrations failed.
    #[error("database migration failed: {0}")]
    Migration(String),
    /// The host is shutting down and no longer writes.
    #[error("the host is shutting down")]
    Closed,
    /// A stored value could not be read back (a corrupted or foreign row).
    #[error("stored task {id} is unreadable: {reason}")]
    Corrupt { id: TaskId, reason: String },
}

impl StoreError {
    /// Whether the operation may succeed if tried again later (the database is away or busy).
    pub fn is_transient(&self) -> bool {
        matches!(self, StoreError::Unavailable(_))
    }
}

/// Whether a driver's message is the key table refusing a key (`async_task_key`): a task
/// enqueued with the key of a task archived after the enqueue looked keys up
/// ([`keyed::enqueue_around_archived_keys`]). Retrying finds the archived task.
pub(crate) fn key_archived_meanwhile(message: &str) -> bool {
    message.contains("async_task_key")
}

/// The error for [`key_archived_meanwhile`]: unavailable, so the caller retries.
pub(crate) fn key_archived_error(message: &str) -> StoreError {
    StoreError::Unavailable(format!(
        "a task of this batch has the idempotency key of a task archived while it was \
         enqueued; retry the enqueue and it is answered with the archived task ({message})"
    ))
}

impl From<sqlx::Error> for StoreError {
    fn from(error: sqlx::Error) -> Self {
        let message = error.to_string();
        if key_archived_meanwhile(&message) {
            return key_archived_error(&message);
        }
        if error_is_transient(&error) {
            StoreError::Unavailable(message)
        } else {
            StoreError::Database(message)
        }
    }
}

impl From<sqlx::migrate::MigrateError> for StoreError {
    fn from(error: sqlx::migrate::MigrateError) -> Self {
        match error {
            sqlx::migrate::MigrateError::Execute(inner) if error_is_transient(&inner) => {
                StoreError::Unavailable(inner.to_string())
            }
            other => StoreError::Migration(other.to_string()),
        }
    }
}

/// Driver errors that waiting can fix: lost or refused connections, pool timeouts, and the
/// database codes for busy, locked, shutting down, deadlock and serialization failures.
fn error_is_transient(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Protocol(_) => true,
        sqlx::Error::Database(db) => {
            if let Some(sqlite) = db.try_downcast_ref::<sqlx::sqlite::SqliteError>() {
                // BUSY (5) and LOCKED (6), with their extended codes in the high bits.
                let code = sqlx::error::DatabaseError::code(sqlite)
                    .and_then(|c| c.parse::<i64>().ok())
                    .unwrap_or_default();
                return matches!(code & 0xff, 5 | 6);
            }
            if let Some(mysql) = db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>() {
                // 1205 lock wait timeout, 1213 deadlock, 1040 too many connections, 1053
                // server shutdown, 1317 statement interrupted (killed, or the server stopping),
                // 1927 connection killed (MariaDB), 4031 idle connection closed by the server
                // (MySQL 8.0.24+), 2006/2013 server gone away. A connection the server simply
                // closes or refuses is an `Io` error, transient above.
                return matches!(
                    mysql.number(),
                    1205 | 1213 | 1040 | 1053 | 1317 | 1927 | 4031 | 2006 | 2013
                );
            }
            // PostgreSQL SQLSTATE: class 08 connection exceptions, 57P0x shutting down or
            // cannot connect now, 40001 serialization failure, 40P01 deadlock, 53300 too many
            // connections.
            let code = db.code().unwrap_or_default();
            code.starts_with("08")
                || code.starts_with("57P0")
                || matches!(code.as_ref(), "40001" | "40P01" | "53300")
        }
        _ => false,
    }
}

/// A claimed row that did not read back: its id and why.
pub type Unreadable = (TaskId, String);

/// Splits claimed rows into the tasks that read back and the ids of rows that did not, with
/// the reason. A backend fails the unreadable ones (see [`unreadable_reason`]) instead of
/// returning an error: one bad row written by application SQL must not block every later claim.
pub fn split_unreadable(
    rows: impl IntoIterator<Item = Result<Task, StoreError>>,
) -> Result<(Vec<Task>, Vec<Unreadable>), StoreError> {
    let mut tasks = Vec::new();
    let mut unreadable = Vec::new();
    for row in rows {
        match row {
            Ok(task) => tasks.push(task),
            Err(StoreError::Corrupt { id, reason }) => unreadable.push((id, reason)),
            Err(other) => return Err(other),
        }
    }
    Ok((tasks, unreadable))
}

/// The `last_error` of a task failed because its row could not be read (`error` says which
/// and why; one wording on every backend).
pub fn unreadable_reason(error: &StoreError) -> String {
    format!("{error}; failed without running: fix the row and retry the task, or discard it")
}

/// Which tasks a listing returns.
#[derive(Debug, Clone, Default)]
pub struct TaskFilter {
    pub status: Option<Status>,
    pub task_type: Option<String>,
    /// Only ids smaller than this (the paging cursor; listings are newest first).
    pub before_id: Option<TaskId>,
    pub limit: usize,
    /// Only tasks whose last error contains this text; and whose time (finished, else
    /// created) is within `since`..`until` (see [`control::TaskSelection`]).
    pub error_contains: Option<String>,
    pub since: Option<DateTime<Utc>>,
    pub until: Option<DateTime<Utc>>,
}

impl TaskFilter {
    /// The filter's conditions, without paging.
    pub fn selection(&self) -> control::TaskSelection {
        control::TaskSelection {
            ids: Vec::new(),
            task_type: self.task_type.clone(),
            status: self.status,
            error_contains: self.error_contains.clone(),
            since: self.since,
            until: self.until,
        }
    }
}

/// Number of tasks in each state.
#[derive(
    Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema,
)]
pub struct StatusCounts {
    pub pending: u64,
    pub running: u64,
    pub done: u64,
    pub failed: u64,
    pub cancelled: u64,
}

/// The operations Spool needs from a queue database, grouped by resource: the queue's
/// lifecycle ([`queue::Queue`]), task reads ([`reads::TaskReads`]), the host services'
/// tables ([`services::HostServices`]), host-wide values and leadership
/// ([`coordination::Coordination`]), key lookups ([`keyed::KeyLookup`]), the attempt history
/// ([`history::AttemptHistory`]), the alert log ([`alerts::AlertLog`]), the archive
/// ([`archive::Archive`]), queue control ([`control::Control`]) and statistics
/// ([`stats::Stats`]); and the connection itself, here. A [`SharedStore`] answers all of their
/// methods.
///
/// A backend implements [`queue::Queue`], [`archive::Archive`] and
/// [`history::AttemptHistory`] itself (the statements that differ in substance) and
/// [`sql::Portable`] with a [`sql::Dialect`], which gives it every other trait written once.
#[async_trait]
pub trait Store:
    queue::Queue
    + reads::TaskReads
    + services::HostServices
    + coordination::Coordination
    + keyed::KeyLookup
    + history::AttemptHistory
    + records::AttemptRecords
    + alerts::AlertLog
    + deployments::Deployments
    + archive::Archive
    + archive::ArchiveReads
    + control::Control
    + stats::Stats
    + Send
    + Sync
    + 'static
{
    /// Closes connections, flushing what the database buffers.
    /// Asks the backend to call `wake` whenever a deployment changes (by any host), for as
    /// long as the store is open. Returns false when the database cannot notify; hosts then
    /// see changes at their poll interval.
    fn watch_deployments(&self, wake: Arc<tokio::sync::Notify>) -> bool {
        let _ = wake;
        false
    }

    async fn close(&self);

    /// A part of the store inside this process that stopped for good (its name and why), such
    /// as SQLite's writer thread; `GET /health` reports it and answers 503.
    fn failed_part(&self) -> Option<(String, String)> {
        None
    }
}

/// Which database a URL names, by its scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
    MySql,
}

impl Backend {
    /// The backend of `url`: `sqlite:`, `postgres://` or `postgresql://`, `mysql://` (MySQL 8.0+
    /// and MariaDB 10.6+).
    pub fn of(url: &str) -> Result<Backend, StoreError> {
        let scheme = url
            .split_once(':')
            .map(|(scheme, _)| scheme.to_ascii_lowercase())
            .unwrap_or_default();
        match scheme.as_str() {
            "sqlite" => Ok(Backend::Sqlite),
            "postgres" | "postgresql" => Ok(Backend::Postgres),
            "mysql" => Ok(Backend::MySql),
            _ => Err(StoreError::UnsupportedUrl(url.to_string())),
        }
    }
}

/// A database URL as it may be shown to anyone: scheme, host, port and database (or the file),
/// never the user name, password or parameters.
pub fn describe_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://").or_else(|| url.split_once(':')) else {
        return "(unparsable URL)".into();
    };
    let rest = rest.split(['?', '#']).next().unwrap_or_default();
    let location = rest.rsplit_once('@').map_or(rest, |(_, after)| after);
    format!("{scheme}://{location}")
}

/// Opens the store a database URL names, applying migrations (under a lock on the server
/// databases, so hosts starting together never race).
pub async fn open(url: &str) -> Result<SharedStore, StoreError> {
    match Backend::of(url)? {
        Backend::Sqlite => Ok(Arc::new(sqlite::SqliteStore::open(url).await?)),
        Backend::Postgres => postgres::open(url).await,
        Backend::MySql => mysql::open(url).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_described_without_credentials() {
        assert_eq!(
            describe_url("postgres://spool:secret@db.internal:5432/app?sslmode=require"),
            "postgres://db.internal:5432/app"
        );
        assert_eq!(
            describe_url("mysql://root@127.0.0.1/queue"),
            "mysql://127.0.0.1/queue"
        );
        assert_eq!(describe_url("sqlite://spool.db"), "sqlite://spool.db");
        assert_eq!(
            describe_url("sqlite:tasks.db?mode=rwc"),
            "sqlite://tasks.db"
        );
        assert_eq!(describe_url("postgres://u:p@h/db"), "postgres://h/db");
    }

    #[test]
    fn backends_are_chosen_by_scheme() {
        assert_eq!(Backend::of("sqlite://x.db").unwrap(), Backend::Sqlite);
        assert_eq!(Backend::of("postgresql://h/db").unwrap(), Backend::Postgres);
        assert_eq!(Backend::of("POSTGRES://h/db").unwrap(), Backend::Postgres);
        assert_eq!(Backend::of("mysql://h/db").unwrap(), Backend::MySql);
        assert!(matches!(
            Backend::of("redis://h"),
            Err(StoreError::UnsupportedUrl(_))
        ));
        assert!(matches!(
            Backend::of("spool.db"),
            Err(StoreError::UnsupportedUrl(_))
        ));
    }
}
