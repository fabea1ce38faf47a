//! The two requests a person makes about a task on PostgreSQL: retry a finished one, cancel a
//! pending or running one (recording the attempt a cancel ends).

use chrono::{DateTime, Utc};

use super::rows::{TaskRow, codes_where, millis, task_columns};
use super::{PgStore, history};
use crate::store::StoreError;
use crate::task::{Status, Task, TaskId};

impl PgStore {
    pub(super) async fn retry(&self, id: TaskId, now: DateTime<Utc>) -> Result<Task, StoreError> {
        let row: Option<TaskRow> = sqlx::query_as(concat!(
            "UPDATE async_task SET status = 0, retry_count = 0, next_run_at = $2, \
                 finished_at = NULL, result = NULL, updated_at = $2 \
             WHERE id = $1 AND status = ANY($3) RETURNING ",
            task_columns!()
        ))
        .bind(id)
        .bind(millis(now))
        .bind(codes_where(Status::can_retry))
        .fetch_optional(&self.pool)
        .await?;
        crate::store::reads::changed_or_conflict(self, id, row, "retry", "failed or cancelled")
            .await
    }

    pub(super) async fn cancel(&self, id: TaskId, now: DateTime<Utc>) -> Result<Task, StoreError> {
        // The row locked first: a cancel of a running task records the attempt it ends.
        let mut tx = self.pool.begin().await?;
        let running = history::lock_running(&mut tx, id).await?;
        let row: Option<TaskRow> = sqlx::query_as(concat!(
            "UPDATE async_task SET status = 4, finished_at = $2, lease_owner = NULL, \
                 lease_expires_at = NULL, updated_at = $2 \
             WHERE id = $1 AND status = ANY($3) RETURNING ",
            task_columns!()
        ))
        .bind(id)
        .bind(millis(now))
        .bind(codes_where(Status::can_cancel))
        .fetch_optional(&mut *tx)
        .await?;
        if let (Some(running), Some(_)) = (running, &row) {
            history::record_cancel(&mut tx, id, running, now).await?;
        }
        tx.commit().await?;
        crate::store::reads::changed_or_conflict(self, id, row, "cancel", "pending or running")
            .await
    }
}
