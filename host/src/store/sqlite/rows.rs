//! Task rows as the writer thread reads them (through rusqlite, not sqlx) into the neutral
//! [`TaskRow`] that [`crate::store::rows`] decodes.

use rusqlite::Row;

use crate::store::rows::TaskRow;

/// A returned `async_task` row, read by column name.
pub(super) fn task_row(row: &Row<'_>) -> rusqlite::Result<TaskRow> {
    Ok(TaskRow {
        id: row.get("id")?,
        task_type: row.get("task_type")?,
        payload: row.get("payload")?,
        status: row.get("status")?,
        priority: row.get("priority")?,
        retry_count: row.get("retry_count")?,
        max_retry: row.get("max_retry")?,
        attempts: row.get("attempts")?,
        next_run_at: row.get("next_run_at")?,
        idempotency_key: row.get("idempotency_key")?,
        lease_owner: row.get("lease_owner")?,
        lease_expires_at: row.get("lease_expires_at")?,
        attempted_at: row.get("attempted_at")?,
        finished_at: row.get("finished_at")?,
        last_error: row.get("last_error")?,
        result: row.get("result")?,
        progress: row.get("progress")?,
        progress_note: row.get("progress_note")?,
        plugin_version: row.get("plugin_version")?,
        log: row.get("log")?,
        created_at: row.get("created_at")?,
        updated_at: row.get("updated_at")?,
    })
}
