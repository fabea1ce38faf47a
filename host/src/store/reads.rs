//! Task reads: one task, a filtered page of tasks newest first, the counts per state, and a
//! task's place in the queue. One implementation in portable SQL ([`super::sql`]) serves every
//! backend; rows decode into tasks in [`super::rows`].

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use std::collections::BTreeMap;

use super::encoding::{counts_from_codes, millis, status_code};
use super::sql::{Arg, Cells, Portable, Via, count};
use super::{StatusCounts, StoreError, TaskFilter, control, rows};
use crate::task::{Status, Task, TaskId};

/// Reading tasks.
#[async_trait]
pub trait TaskReads: Send + Sync {
    /// One task by id.
    async fn get(&self, id: TaskId) -> Result<Option<Task>, StoreError>;

    /// Tasks matching the filter, newest first.
    async fn list(&self, filter: &TaskFilter) -> Result<Vec<Task>, StoreError>;

    /// How many tasks are in each state.
    async fn counts(&self) -> Result<StatusCounts, StoreError>;

    /// Pending tasks per task type.
    async fn pending_by_type(&self) -> Result<BTreeMap<String, u64>, StoreError>;

    /// Due pending tasks of `task`'s type that a claim at `now` takes before it (higher
    /// priority, or the same priority and earlier in the queue).
    async fn count_ahead(&self, task: &Task, now: DateTime<Utc>) -> Result<u64, StoreError>;

    /// Pending tasks per type that are due at `now` (scheduled ones not counted).
    async fn due_by_type(&self, now: DateTime<Utc>) -> Result<BTreeMap<String, u64>, StoreError>;
}

#[async_trait]
impl<S: Portable> TaskReads for S {
    async fn get(&self, id: TaskId) -> Result<Option<Task>, StoreError> {
        let mut statement = self.statement(&format!(
            "SELECT {} FROM async_task WHERE id = ?",
            self.dialect().task_columns()
        ));
        statement.bind(Arg::Int(id));
        let row = self.fetch_optional(Via::Reader, &statement).await?;
        row.as_ref().map(rows::task).transpose()
    }

    async fn list(&self, filter: &TaskFilter) -> Result<Vec<Task>, StoreError> {
        let selection = filter.selection();
        let mut query = self.statement(&format!(
            "SELECT {} FROM async_task WHERE 1 = 1",
            self.dialect().task_columns()
        ));
        control::and_selection(&mut query, &selection);
        if let Some(before) = filter.before_id {
            query.push(" AND id < ?").bind(Arg::Int(before));
        }
        query
            .push(" ORDER BY id DESC LIMIT ?")
            .bind(Arg::Limit(filter.limit));
        rows::tasks(&self.fetch(Via::Reader, &query).await?)
    }

    async fn counts(&self) -> Result<StatusCounts, StoreError> {
        let statement = self.statement("SELECT status, COUNT(*) FROM async_task GROUP BY status");
        let rows = self.fetch(Via::Reader, &statement).await?;
        let rows = rows
            .iter()
            .map(|row| Ok((row.int(0)?, row.int(1)?)))
            .collect::<Result<Vec<_>, StoreError>>()?;
        Ok(counts_from_codes(rows))
    }

    async fn pending_by_type(&self) -> Result<BTreeMap<String, u64>, StoreError> {
        let statement = self.statement(
            "SELECT task_type, COUNT(*) FROM async_task WHERE status = 0 GROUP BY task_type",
        );
        per_type(&self.fetch(Via::Reader, &statement).await?)
    }

    async fn count_ahead(&self, task: &Task, now: DateTime<Utc>) -> Result<u64, StoreError> {
        // The claim's order: priority DESC, next_run_at, id.
        let next_run_at = millis(task.next_run_at);
        let priority = i64::from(task.priority);
        let mut statement = self.statement(
            "SELECT COUNT(*) FROM async_task \
             WHERE status = ? AND task_type = ? AND next_run_at <= ? \
               AND (priority > ? OR (priority = ? AND (next_run_at < ? OR (next_run_at = ? AND id < ?))))",
        );
        statement
            .bind(Arg::Int(status_code(Status::Pending)))
            .bind(Arg::Text(&task.task_type))
            .bind(Arg::Int(millis(now)))
            .bind(Arg::Int(priority))
            .bind(Arg::Int(priority))
            .bind(Arg::Int(next_run_at))
            .bind(Arg::Int(next_run_at))
            .bind(Arg::Int(task.id));
        let row = self.fetch_one(Via::Reader, &statement).await?;
        Ok(count(row.int(0)?))
    }

    async fn due_by_type(&self, now: DateTime<Utc>) -> Result<BTreeMap<String, u64>, StoreError> {
        let mut statement = self.statement(
            "SELECT task_type, COUNT(*) FROM async_task \
             WHERE status = 0 AND next_run_at <= ? GROUP BY task_type",
        );
        statement.bind(Arg::Int(millis(now)));
        per_type(&self.fetch(Via::Reader, &statement).await?)
    }
}

/// Rows of `(task_type, count)`.
fn per_type(rows: &[impl Cells]) -> Result<BTreeMap<String, u64>, StoreError> {
    rows.iter()
        .map(|row| Ok((row.text(0)?, count(row.int(1)?))))
        .collect()
}
