//! Task rows: the one decoding of an `async_task` row into a [`Task`], for every backend.
//!
//! A backend reads a row into the neutral [`TaskRow`] (integers of every width as `i64`, texts
//! as `String`): through [`Cells`] for the sqlx drivers (by column name, so `SELECT *` and a
//! named column list read alike), or field by field where a backend uses another driver
//! (SQLite's writer thread). [`Task::try_from`] then checks what application SQL can still get
//! wrong (JSON serde cannot read, counters out of range, unknown status codes, times outside
//! chrono's range) and reports it as [`StoreError::Corrupt`], with one set of messages.

use super::StoreError;
use super::encoding::{status_from_code, time_from_millis};
use super::sql::Cells;
use crate::task::{Task, TaskId};

/// A row of `async_task`, every column as the widest neutral type.
#[derive(Debug, Clone)]
pub struct TaskRow {
    pub id: i64,
    pub task_type: String,
    pub payload: String,
    pub status: i64,
    pub priority: i64,
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
    pub progress: Option<i64>,
    pub progress_note: Option<String>,
    pub plugin_version: Option<String>,
    pub log: Option<String>,
    pub depth: i64,
    pub created_at: i64,
    pub updated_at: i64,
}

impl TaskRow {
    /// Reads a row by column name.
    pub fn read(row: &impl Cells) -> Result<TaskRow, StoreError> {
        Ok(TaskRow {
            id: row.int("id")?,
            task_type: row.text("task_type")?,
            payload: row.text("payload")?,
            status: row.int("status")?,
            priority: row.int("priority")?,
            retry_count: row.int("retry_count")?,
            max_retry: row.int("max_retry")?,
            attempts: row.int("attempts")?,
            next_run_at: row.int("next_run_at")?,
            idempotency_key: row.opt_text("idempotency_key")?,
            lease_owner: row.opt_text("lease_owner")?,
            lease_expires_at: row.opt_int("lease_expires_at")?,
            attempted_at: row.opt_int("attempted_at")?,
            finished_at: row.opt_int("finished_at")?,
            last_error: row.opt_text("last_error")?,
            result: row.opt_text("result")?,
            progress: row.opt_int("progress")?,
            progress_note: row.opt_text("progress_note")?,
            plugin_version: row.opt_text("plugin_version")?,
            log: row.opt_text("log")?,
            depth: row.int("depth")?,
            created_at: row.int("created_at")?,
            updated_at: row.int("updated_at")?,
        })
    }
}

impl<'r, R: sqlx::Row + Cells> sqlx::FromRow<'r, R> for TaskRow {
    fn from_row(row: &'r R) -> Result<Self, sqlx::Error> {
        TaskRow::read(row).map_err(|e| sqlx::Error::Decode(e.to_string().into()))
    }
}

impl TryFrom<TaskRow> for Task {
    type Error = StoreError;

    fn try_from(row: TaskRow) -> Result<Task, StoreError> {
        let id = row.id;
        let corrupt = |reason: String| StoreError::Corrupt { id, reason };
        let number = |name: &str, value: i64| {
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
            priority: i32::try_from(row.priority)
                .map_err(|_| corrupt(format!("priority {} is out of range", row.priority)))?,
            retry_count: number("retry_count", row.retry_count)?,
            max_retry: number("max_retry", row.max_retry)?,
            attempts: number("attempts", row.attempts)?,
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
            depth: number("depth", row.depth)?,
            created_at: time_from_millis(id, row.created_at)?,
            updated_at: time_from_millis(id, row.updated_at)?,
        })
    }
}

/// Rows already read, as tasks; any unreadable one is an error for the whole answer.
pub fn into_tasks(rows: Vec<TaskRow>) -> Result<Vec<Task>, StoreError> {
    rows.into_iter().map(Task::try_from).collect()
}

/// Decodes one row: its id, and the task or why it cannot be read. A row whose columns do not
/// even decode (a type changed by hand) is reported like one whose values are out of range.
pub fn decode(row: &impl Cells) -> Result<(TaskId, Result<Task, StoreError>), StoreError> {
    let id = row.int("id")?;
    let task = TaskRow::read(row)
        .map_err(|e| StoreError::Corrupt {
            id,
            reason: e.to_string(),
        })
        .and_then(Task::try_from);
    Ok((id, task))
}

/// Decodes a row that must be readable (reads, listings).
pub fn task(row: &impl Cells) -> Result<Task, StoreError> {
    decode(row)?.1
}

/// Decodes rows where any unreadable one is an error for the whole answer.
pub fn tasks(rows: &[impl Cells]) -> Result<Vec<Task>, StoreError> {
    rows.iter().map(task).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row() -> TaskRow {
        TaskRow {
            id: 7,
            task_type: "mail".into(),
            payload: "{}".into(),
            status: 0,
            priority: 0,
            retry_count: 0,
            max_retry: 3,
            attempts: 0,
            next_run_at: 0,
            idempotency_key: None,
            lease_owner: None,
            lease_expires_at: None,
            attempted_at: None,
            finished_at: None,
            last_error: None,
            result: None,
            progress: Some(250),
            progress_note: None,
            plugin_version: None,
            log: None,
            depth: 0,
            created_at: 0,
            updated_at: 0,
        }
    }

    #[test]
    fn values_the_model_cannot_hold_are_corrupt() {
        assert_eq!(Task::try_from(row()).unwrap().progress, Some(100));
        let reason = |row: TaskRow| match Task::try_from(row) {
            Err(StoreError::Corrupt { id: 7, reason }) => reason,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            reason(TaskRow { status: 9, ..row() }),
            "unknown status code 9"
        );
        assert_eq!(
            reason(TaskRow {
                attempts: -1,
                ..row()
            }),
            "attempts -1 is out of range"
        );
        assert!(
            reason(TaskRow {
                payload: "{".into(),
                ..row()
            })
            .starts_with("payload is not readable JSON")
        );
    }
}
