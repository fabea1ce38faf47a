//! Reading tasks (one, or a filtered page newest first), the two requests a person makes about
//! a task (retry, cancel), and the counts behind health, listings and estimates.

use chrono::{DateTime, Utc};
use sqlx::mysql::MySqlRow;
use sqlx::{MySql, QueryBuilder};
use std::collections::BTreeMap;

use super::MySqlStore;
use super::rows::{self, TASK_COLUMNS, Text, codes_where, millis};
use crate::store::{StatusCounts, StoreError, TaskFilter};
use crate::task::{Status, Task, TaskId};

impl MySqlStore {
    pub(super) async fn get_task(&self, id: TaskId) -> Result<Option<Task>, StoreError> {
        let row: Option<MySqlRow> = sqlx::query(&format!(
            "SELECT {TASK_COLUMNS} FROM async_task AS t WHERE t.id = ?"
        ))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(rows::task).transpose()
    }

    pub(super) async fn list_tasks(&self, filter: &TaskFilter) -> Result<Vec<Task>, StoreError> {
        let mut query = QueryBuilder::<MySql>::new(format!(
            "SELECT {TASK_COLUMNS} FROM async_task AS t WHERE 1 = 1"
        ));
        super::control::push_selection(&mut query, &filter.selection());
        if let Some(before) = filter.before_id {
            query.push(" AND t.id < ").push_bind(before);
        }
        query
            .push(" ORDER BY t.id DESC LIMIT ")
            .push_bind(filter.limit as u64);
        let found: Vec<MySqlRow> = query.build().fetch_all(&self.pool).await?;
        rows::tasks(&found)
    }

    pub(super) async fn retry_task(
        &self,
        id: TaskId,
        now: DateTime<Utc>,
    ) -> Result<Task, StoreError> {
        let sql = format!(
            "UPDATE async_task SET status = 0, retry_count = 0, next_run_at = ?, finished_at = NULL, result = NULL, \
                 updated_at = ? \
             WHERE id = ? AND status IN {}",
            codes_where(Status::can_retry)
        );
        self.change(id, &sql, now, "retry", "failed or cancelled", false)
            .await
    }

    pub(super) async fn cancel_task(
        &self,
        id: TaskId,
        now: DateTime<Utc>,
    ) -> Result<Task, StoreError> {
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

    pub(super) async fn status_counts(&self) -> Result<StatusCounts, StoreError> {
        let found: Vec<(i8, i64)> =
            sqlx::query_as("SELECT status, COUNT(*) FROM async_task GROUP BY status")
                .fetch_all(&self.pool)
                .await?;
        Ok(super::super::encoding::counts_from_codes(
            found
                .into_iter()
                .map(|(code, count)| (i64::from(code), count)),
        ))
    }

    pub(super) async fn pending_per_type(&self) -> Result<BTreeMap<String, u64>, StoreError> {
        let found: Vec<(Text, i64)> = sqlx::query_as(
            "SELECT task_type, COUNT(*) FROM async_task WHERE status = 0 GROUP BY task_type",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(found.into_iter().map(|(t, n)| (t.0, n as u64)).collect())
    }

    pub(super) async fn due_per_type(
        &self,
        now: DateTime<Utc>,
    ) -> Result<BTreeMap<String, u64>, StoreError> {
        let found: Vec<(Text, i64)> = sqlx::query_as(
            "SELECT task_type, COUNT(*) FROM async_task WHERE status = 0 AND next_run_at <= ? GROUP BY task_type",
        )
        .bind(millis(now))
        .fetch_all(&self.pool)
        .await?;
        Ok(found.into_iter().map(|(t, n)| (t.0, n as u64)).collect())
    }

    pub(super) async fn ahead_of(
        &self,
        task: &Task,
        now: DateTime<Utc>,
    ) -> Result<u64, StoreError> {
        // The claim's order: priority DESC, next_run_at, id.
        let next_run_at = millis(task.next_run_at);
        let (count,): (i64,) = sqlx::query_as(
            "SELECT COUNT(*) FROM async_task \
             WHERE status = 0 AND task_type = ? AND next_run_at <= ? \
               AND (priority > ? OR (priority = ? AND (next_run_at < ? OR (next_run_at = ? AND id < ?))))",
        )
        .bind(&task.task_type)
        .bind(millis(now))
        .bind(task.priority)
        .bind(task.priority)
        .bind(next_run_at)
        .bind(next_run_at)
        .bind(task.id)
        .fetch_one(&self.pool)
        .await?;
        Ok(count as u64)
    }
}
