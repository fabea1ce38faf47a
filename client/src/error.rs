//! Why a task was not enqueued.

use crate::rules::{MAX_IDEMPOTENCY_KEY, MAX_TASK_TYPE, RESERVED_KEY_PREFIX};

/// Why [`enqueue`](crate::enqueue) did not enqueue a task. Every message says what to do.
///
/// [`Error::BadTaskType`] to [`Error::RunAtOutOfRange`] are found before any statement runs:
/// the caller's transaction is untouched and may go on. [`Error::NoTaskTable`] and
/// [`Error::Database`] come from a statement that failed inside the caller's transaction (on
/// PostgreSQL that aborts the transaction: roll it back). After
/// [`Error::DuplicateNotVisible`] nothing was inserted; roll back and retry.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The task type is not a task type name.
    #[error(
        "`{0}` is not a task type name: use 1 to {MAX_TASK_TYPE} ASCII letters, digits, `_` or `-` \
         (the plugin's file name without .wasm: `report.wasm` handles task type `report`)"
    )]
    BadTaskType(String),

    /// The value given to [`Task::new`](crate::Task::new) cannot be written as JSON.
    #[error(
        "the payload cannot be written as JSON ({0}): give Task::new a value serde_json can \
         serialize (map keys must be strings), or pass JSON text to Task::from_json"
    )]
    PayloadNotSerializable(String),

    /// The text given to [`Task::from_json`](crate::Task::from_json) is not one JSON value.
    #[error(
        "the payload is not valid JSON ({0}): pass one JSON value (object, array, string, \
         number, true, false or null) to Task::from_json, or a serializable value to Task::new"
    )]
    PayloadNotJson(String),

    /// The payload is JSON that no database stores alike: nested deeper than
    /// [`MAX_JSON_DEPTH`](crate::rules::MAX_JSON_DEPTH) or with a lone UTF-16 surrogate escape.
    #[error("the payload cannot be stored: {0}")]
    PayloadNotStorable(String),

    /// The payload is larger than the limit.
    #[error(
        "the payload is {size} bytes; at most {limit} are accepted: store large data elsewhere \
         (a table, object storage) and pass a reference, or raise the limit with \
         Task::max_payload if the host's max_payload is larger"
    )]
    PayloadTooLarge { size: usize, limit: usize },

    /// The idempotency key is empty, too long, or holds control characters.
    #[error(
        "the idempotency key is {len} characters; it must be 1 to {MAX_IDEMPOTENCY_KEY} characters \
         without control characters: derive it from the business row (for example \
         `approval-1042`), or hash a longer one"
    )]
    BadIdempotencyKey { len: usize },

    /// The idempotency key starts with the prefix the host keeps for its own tasks (schedule
    /// ticks, follow-ups): taking one first would make the host's task a silent duplicate.
    #[error(
        "the idempotency key `{0}` starts with `{RESERVED_KEY_PREFIX}`, which Spool keeps for the \
         tasks it enqueues itself (schedule ticks): choose a key without that prefix"
    )]
    ReservedIdempotencyKey(String),

    /// The run time cannot be written as Unix milliseconds.
    #[error(
        "the task's run time is out of range: give a delay or a run_at between 1970 and the \
         year 292,000,000 (times are stored as Unix milliseconds)"
    )]
    RunAtOutOfRange,

    /// The task table does not exist in this database.
    #[error(
        "this database has no task table (async_task): point the application at the database \
         a Spool host serves, and start the host on it once (`spool serve --database-url …`) \
         so it creates the table; then retry ({0})"
    )]
    NoTaskTable(sqlx::Error),

    /// The database refused the statement.
    #[error(
        "the database did not insert the task ({0}): nothing was enqueued; handle it like any \
         failed statement of the transaction (roll back, and retry if the error is transient)"
    )]
    Database(sqlx::Error),

    /// A task with the same type and idempotency key exists, but this transaction cannot see
    /// it (it was inserted by a transaction committed after this one's snapshot, or deleted in
    /// the meantime).
    #[error(
        "a task of type `{task_type}` with idempotency key `{key}` already exists but is not \
         visible to this transaction (committed after its snapshot, or deleted meanwhile): roll \
         back and retry the transaction"
    )]
    DuplicateNotVisible { task_type: String, key: String },
}

/// Translates a driver error, recognising a missing task table on every database. (The driver's
/// message is part of this crate's message, so it is not also a `source`: error reports would
/// print it twice.)
impl From<sqlx::Error> for Error {
    fn from(error: sqlx::Error) -> Error {
        let missing_table = match &error {
            sqlx::Error::Database(db) => {
                let code = db.code().unwrap_or_default();
                // PostgreSQL's undefined_table, MySQL's ER_NO_SUCH_TABLE (SQLSTATE 42S02), and
                // SQLite's message (its code is the generic SQLITE_ERROR).
                code == "42P01" || code == "42S02" || db.message().contains("no such table")
            }
            _ => false,
        };
        if missing_table {
            Error::NoTaskTable(error)
        } else {
            Error::Database(error)
        }
    }
}
