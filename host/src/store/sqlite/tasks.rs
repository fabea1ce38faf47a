//! The two requests a person makes about a task on SQLite: retry a finished one, cancel a pending
//! or running one (recording the attempt a cancel ends).

use chrono::{DateTime, Utc};

use super::SqliteStore;
use super::history;
use crate::store::StoreError;
use crate::store::encoding::{millis, sql_codes_where as codes_where};
use crate::store::rows::TaskRow;
use crate::task::{Status, Task, TaskId};

impl SqliteStore {
    pub(super) async fn retry(&self, id: TaskId, now: DateTime<Utc>) -> Result<Task, StoreError> {
        let sql = format!(
            "UPDATE async_task SET status = 0, retry_count = 0, next_run_at = ?2, \
                 finished_at = NULL, result = NULL, updated_at = ?2 \
             WHERE id = ?1 AND status IN {} RETURNING *",
            codes_where(Status::can_retry)
        );
        let row: Option<TaskRow> = sqlx::query_as(&sql)
            .bind(id)
            .bind(millis(now))
            .fetch_optional(&self.writer)
            .await?;
        crate::store::reads::changed_or_conflict(self, id, row, "retry", "failed or cancelled")
            .await
    }

    pub(super) async fn cancel(&self, id: TaskId, now: DateTime<Utc>) -> Result<Task, StoreError> {
        let sql = format!(
            "UPDATE async_task SET status = 4, finished_at = ?2, lease_owner = NULL, \
                 lease_expires_at = NULL, updated_at = ?2 \
             WHERE id = ?1 AND status IN {} RETURNING *",
            codes_where(Status::can_cancel)
        );
        let mut tx = self.writer.begin().await?;
        history::record_cancel(&mut tx, id, now).await?;
        let row: Option<TaskRow> = sqlx::query_as(&sql)
            .bind(id)
            .bind(millis(now))
            .fetch_optional(&mut *tx)
            .await?;
        tx.commit().await?;
        crate::store::reads::changed_or_conflict(self, id, row, "cancel", "pending or running")
            .await
    }
}
