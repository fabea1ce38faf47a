//! Rows of `async_task` as PostgreSQL returns them, and the translation between the database's
//! representation (status codes, Unix milliseconds, BIGINT counters) and the task model.

use std::borrow::Cow;

use crate::store::StoreError;
use crate::task::{Status, Task};

/// The columns every statement returning tasks selects, in [`TaskRow`]'s shape. `payload` is a
/// `json` column and comes back as its text.
macro_rules! task_columns {
    () => {
        "id, task_type, payload::text AS payload, status, priority, retry_count, max_retry, \
         attempts, next_run_at, idempotency_key, lease_owner, lease_expires_at, attempted_at, \
         finished_at, last_error, result, progress, progress_note, plugin_version, log, \
         created_at, updated_at"
    };
}
pub(super) use task_columns;

pub(super) use super::super::encoding::{millis, time_from_millis};

/// The code stored in the `status` column (SMALLINT; the same codes on every backend).
pub(super) fn status_code(status: Status) -> i16 {
    super::super::encoding::status_code(status) as i16
}

pub(super) fn status_from_code(code: i16) -> Option<Status> {
    super::super::encoding::status_from_code(code.into())
}

/// The codes of the states satisfying a state-machine rule (e.g. [`Status::can_retry`]), bound
/// as a `smallint[]`.
pub(super) fn codes_where(rule: fn(Status) -> bool) -> Vec<i16> {
    super::super::encoding::codes_where(rule)
        .into_iter()
        .map(|c| c as i16)
        .collect()
}

/// A text a handler produced (result, error, log, progress note), as PostgreSQL can store it.
/// A PostgreSQL string cannot hold the NUL character, and one NUL in a handler's output must
/// not make a whole completion batch fail on every retry: it is stored as U+FFFD (the
/// replacement character) instead.
pub(super) fn storable(text: &str) -> Cow<'_, str> {
    if text.contains('\0') {
        Cow::Owned(text.replace('\0', "\u{FFFD}"))
    } else {
        Cow::Borrowed(text)
    }
}

/// A row of `async_task`, selected with [`task_columns!`].
#[derive(Debug, sqlx::FromRow)]
pub(super) struct TaskRow {
    pub id: i64,
    pub task_type: String,
    pub payload: String,
    pub status: i16,
    pub priority: i32,
    pub retry_count: i64,
    pub max_retry: i64,
    pub attempts: i64,
    pub next_run_at: i64,
    pub idempotency_key: Option<String>,
    pub lease_owner: Option<String>,
    pub lease_expires_at: Option<i64>,
    pub attempted_at: Option<i64>,
    pub finished_at: Option<i64>,
    pub last_error: Option<String>,
    pub result: Option<String>,
    pub progress: Option<i16>,
    pub progress_note: Option<String>,
    pub plugin_version: Option<String>,
    pub log: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
}

impl TryFrom<TaskRow> for Task {
    type Error = StoreError;

    /// Fails with [`StoreError::Corrupt`] for values the task model cannot hold: JSON that
    /// serde cannot read (PostgreSQL accepts numbers like `1e400`), counters outside `u32`,
    /// times outside chrono's range, unknown status codes.
    fn try_from(row: TaskRow) -> Result<Task, StoreError> {
        let id = row.id;
        let corrupt = |reason: String| StoreError::Corrupt { id, reason };
        let counter = |name: &str, value: i64| {
            u32::try_from(value).map_err(|_| corrupt(format!("{name} {value} is out of range")))
        };
        let optional_time = |ms: Option<i64>| ms.map(|ms| time_from_millis(id, ms)).transpose();
        Ok(Task {
            id,
            payload: serde_json::from_str(&row.payload)
                .map_err(|e| corrupt(format!("payload is not readable JSON: {e}")))?,
            task_type: row.task_type,
            status: status_from_code(row.status)
                .ok_or_else(|| corrupt(format!("unknown status code {}", row.status)))?,
            priority: row.priority,
            retry_count: counter("retry_count", row.retry_count)?,
            max_retry: counter("max_retry", row.max_retry)?,
            attempts: counter("attempts", row.attempts)?,
            next_run_at: time_from_millis(id, row.next_run_at)?,
            idempotency_key: row.idempotency_key,
            lease_owner: row.lease_owner,
            lease_expires_at: optional_time(row.lease_expires_at)?,
            attempted_at: optional_time(row.attempted_at)?,
            finished_at: optional_time(row.finished_at)?,
            last_error: row.last_error,
            result: row.result,
            progress: row.progress.map(|p| p.clamp(0, 100) as u8),
            progress_note: row.progress_note,
            plugin_version: row.plugin_version,
            log: row.log,
            created_at: time_from_millis(id, row.created_at)?,
            updated_at: time_from_millis(id, row.updated_at)?,
        })
    }
}

pub(super) fn into_tasks(rows: Vec<TaskRow>) -> Result<Vec<Task>, StoreError> {
    rows.into_iter().map(Task::try_from).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_codes_round_trip() {
        for status in Status::ALL {
            assert_eq!(status_from_code(status_code(status)), Some(status));
        }
        assert_eq!(status_from_code(9), None);
        assert_eq!(codes_where(Status::can_retry), [3, 4]);
        assert_eq!(codes_where(Status::can_cancel), [0, 1]);
    }

    #[test]
    fn handler_texts_lose_only_their_nul_characters() {
        assert!(matches!(storable("line ✓\n"), Cow::Borrowed("line ✓\n")));
        assert_eq!(storable("a\0b\0"), "a\u{FFFD}b\u{FFFD}");
    }
}
