//! Reading tasks (one, or a filtered page newest first), the two requests a person makes about
//! a task (retry, cancel), and the counts behind health, listings and estimates.

use chrono::{DateTime, Utc};
use sqlx::mysql::MySqlRow;

use super::MySqlStore;
use super::rows::{self, TASK_COLUMNS, codes_where, millis};
use crate::store::StoreError;
use crate::task::{Status, Task, TaskId};

impl MySqlStore {
    pub(super) async fn retry(&self, id: TaskId, now: DateTime<Utc>) -> Result<Task, StoreError> {
        let sql = format!(
            "UPDATE async_task SET status = 0, retry_count = 0, next_run_at = ?, finished_at = NULL, result = NULL, \
                 updated_at = ? \
             WHERE id = ? AND status IN {}",
            codes_where(Status::can_retry)
        );
        self.change(id, &sql, now, "retry", "failed or cancelled", false)
            .await
    }

    pub(super) async fn cancel(&self, id: TaskId, now: DateTime<Utc>) -> Result<Task, StoreError> {
        let sql = format!(
            "UPDATE async_task SET status = 4, finished_at = ?, lease_owner = NULL, lease_expires_at = NULL, \
                 updated_at = ? \
             WHERE id = ? AND status IN {}",
            codes_where(Status::can_cancel)
        );
        self.change(id, &sql, now, "cancel", "pending or running", true)
            .await
    }

    /// Runs a one-row UPDATE (placeholders: now, now, id) and answers with the changed task,
    /// `NotFound`, or `Conflict` naming the state the task is in. The row is read back in the
    /// same transaction, so the answer is the row as this change left it. With `ends_attempt`
    /// (a cancel), the row is locked first and a running attempt the change ends is recorded
    /// in the attempt history as cancelled.
    async fn change(
        &self,
        id: TaskId,
        sql: &str,
        now: DateTime<Utc>,
        action: &'static str,
        allowed: &'static str,
        ends_attempt: bool,
    ) -> Result<Task, StoreError> {
        let mut tx = self.pool.begin().await?;
        let running = if ends_attempt {
            super::history::lock_running(&mut tx, id).await?
        } else {
            None
        };
        let changed = sqlx::query(sql)
            .bind(millis(now))
            .bind(millis(now))
            .bind(id)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        if let (Some(running), 1..) = (&running, changed) {
            let ended = super::history::Ended::without_result(
                running,
                millis(now),
                crate::store::history::Outcome::Cancelled,
                None,
            );
            super::history::record(&mut tx, &[ended], self.statement_bytes).await?;
        }
        let row: Option<MySqlRow> = sqlx::query(&format!(
            "SELECT {TASK_COLUMNS} FROM async_task AS t WHERE t.id = ?"
        ))
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?;
        tx.commit().await?;
        let task = match row {
            None => return Err(StoreError::NotFound(id)),
            Some(row) => rows::task(&row)?,
        };
        if changed == 0 {
            return Err(StoreError::Conflict {
                id,
                status: task.status,
                action,
                allowed,
            });
        }
        Ok(task)
    }
}
