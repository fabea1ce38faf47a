//! Rows as MySQL returns them and their translation to [`Task`]: the column list every task
//! query selects, status codes, millisecond times, and the per-row decoding that lets a claim
//! set one unreadable row aside instead of failing the whole batch.

use sqlx::error::BoxDynError;
use sqlx::mysql::{MySqlRow, MySqlTypeInfo, MySqlValueRef};
use sqlx::{Decode, FromRow, MySql, Row, Type};

use crate::store::StoreError;
use crate::task::{Status, Task, TaskId};

/// The columns of a task, for `SELECT {TASK_COLUMNS} FROM async_task AS t`.
///
/// The payload is cast to text: MySQL sends a JSON column with its own wire type, which the
/// driver does not decode as a string (MariaDB's JSON is LONGTEXT already; the cast is a no-op).
pub const TASK_COLUMNS: &str = "t.id, t.task_type, CAST(t.payload AS CHAR) AS payload, t.status, t.priority, \
     t.retry_count, t.max_retry, t.attempts, t.next_run_at, t.idempotency_key, t.lease_owner, \
     t.lease_expires_at, t.attempted_at, t.finished_at, t.last_error, t.result, t.progress, \
     t.progress_note, t.plugin_version, t.log, t.created_at, t.updated_at";

pub use super::super::encoding::{millis, sql_codes_where as codes_where, time_from_millis};

/// The code stored in the `status` column (TINYINT), as on every backend.
pub fn status_code(status: Status) -> i8 {
    super::super::encoding::status_code(status) as i8
}

pub fn status_from_code(code: i8) -> Option<Status> {
    super::super::encoding::status_from_code(code.into())
}

/// Text from a column with a binary collation (`utf8mb4_bin`, every text column here).
///
/// The server flags such columns as binary, and the driver then refuses to decode them as
/// `String`; this decodes their bytes and checks they are UTF-8.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Text(pub String);

impl Type<MySql> for Text {
    fn type_info() -> MySqlTypeInfo {
        <[u8] as Type<MySql>>::type_info()
    }

    fn compatible(ty: &MySqlTypeInfo) -> bool {
        <[u8] as Type<MySql>>::compatible(ty)
    }
}

impl<'r> Decode<'r, MySql> for Text {
    fn decode(value: MySqlValueRef<'r>) -> Result<Self, BoxDynError> {
        let bytes = <&[u8] as Decode<MySql>>::decode(value)?;
        Ok(Text(std::str::from_utf8(bytes)?.to_owned()))
    }
}

impl From<Text> for String {
    fn from(text: Text) -> String {
        text.0
    }
}

/// A row of `async_task` as [`TASK_COLUMNS`] selects it. The column types decode without loss
/// (INT UNSIGNED counters into u32, INT priority into i32); what can still be wrong with a row
/// written by other SQL is checked in [`Task::try_from`].
#[derive(sqlx::FromRow)]
pub struct TaskRow {
    id: i64,
    task_type: Text,
    payload: Text,
    status: i8,
    priority: i32,
    retry_count: u32,
    max_retry: u32,
    attempts: u32,
    next_run_at: i64,
    idempotency_key: Option<Text>,
    lease_owner: Option<Text>,
    lease_expires_at: Option<i64>,
    attempted_at: Option<i64>,
    finished_at: Option<i64>,
    last_error: Option<Text>,
    result: Option<Text>,
    progress: Option<i8>,
    progress_note: Option<Text>,
    plugin_version: Option<Text>,
    log: Option<Text>,
    created_at: i64,
    updated_at: i64,
}

impl TryFrom<TaskRow> for Task {
    type Error = StoreError;

    fn try_from(row: TaskRow) -> Result<Task, StoreError> {
        let id = row.id;
        let corrupt = |reason: String| StoreError::Corrupt { id, reason };
        let optional_time = |ms: Option<i64>| ms.map(|ms| time_from_millis(id, ms)).transpose();
        let text = |text: Option<Text>| text.map(|Text(text)| text);
        Ok(Task {
            id,
            payload: serde_json::from_str(&row.payload.0)
                .map_err(|e| corrupt(format!("payload is not JSON: {e}")))?,
            task_type: row.task_type.0,
            status: status_from_code(row.status)
                .ok_or_else(|| corrupt(format!("unknown status code {}", row.status)))?,
            priority: row.priority,
            retry_count: row.retry_count,
            max_retry: row.max_retry,
            attempts: row.attempts,
            next_run_at: time_from_millis(id, row.next_run_at)?,
            idempotency_key: text(row.idempotency_key),
            lease_owner: text(row.lease_owner),
            lease_expires_at: optional_time(row.lease_expires_at)?,
            attempted_at: optional_time(row.attempted_at)?,
            finished_at: optional_time(row.finished_at)?,
            last_error: text(row.last_error),
            result: text(row.result),
            progress: row.progress.map(|p| p.clamp(0, 100) as u8),
            progress_note: text(row.progress_note),
            plugin_version: text(row.plugin_version),
            log: text(row.log),
            created_at: time_from_millis(id, row.created_at)?,
            updated_at: time_from_millis(id, row.updated_at)?,
        })
    }
}

/// Decodes one row: its id, and the task or why it cannot be read. A row whose columns do not
/// even decode (a type changed by hand) is reported like one whose values are out of range.
pub fn decode(row: &MySqlRow) -> Result<(TaskId, Result<Task, StoreError>), StoreError> {
    let id: TaskId = row.try_get("id")?;
    let task = TaskRow::from_row(row)
        .map_err(|e| StoreError::Corrupt {
            id,
            reason: e.to_string(),
        })
        .and_then(Task::try_from);
    Ok((id, task))
}

/// Decodes a row that must be readable (reads, listings).
pub fn task(row: &MySqlRow) -> Result<Task, StoreError> {
    decode(row)?.1
}

/// Decodes rows where any unreadable one is an error for the whole answer.
pub fn tasks(rows: &[MySqlRow]) -> Result<Vec<Task>, StoreError> {
    rows.iter().map(task).collect()
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
        assert_eq!(codes_where(Status::can_retry), "(3, 4)");
        assert_eq!(codes_where(Status::can_cancel), "(0, 1)");
    }
}
