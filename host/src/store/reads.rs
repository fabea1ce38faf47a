//! Task reads: one task, a filtered page of tasks newest first, the counts per state (in all,
//! and per type for any selection), the backlog per type, a task's place in the queue and its
//! snoozes in a row. One implementation in portable SQL ([`super::sql`]) serves every backend;
//! rows decode into tasks in [`super::rows`].
//!
//! Every question of the kind "how many tasks of each type are in which state" is
//! [`TaskReads::counts_by_type`] over a [`TaskSelection`] (the health check's pending tasks,
//! the plugin listing, bulk actions, the control page); every question about the queue's
//! backlog (the sampler, `/metrics`, the alert rules, completion estimates) is
//! [`TaskReads::backlog`], whose [`Backlog`] holds what all of those read.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use std::collections::BTreeMap;

use super::control::{self, TaskSelection};
use super::encoding::{counts_from_codes, millis, status_code, status_from_code};
use super::sql::{Arg, Cells, Portable, Via, count};
use super::{StatusCounts, StoreError, TaskFilter, rows};
use crate::task::{Status, Task, TaskId};

/// The backlog of one task type at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Backlog {
    /// Pending tasks, scheduled ones included.
    pub pending: u64,
    /// Of those, the ones due (a claim would take them now).
    pub due: u64,
    pub running: u64,
    /// Dead letters.
    pub failed: u64,
    /// The earliest `next_run_at` among the due pending tasks, so `now - oldest_due` is how
    /// long the longest-waiting task has waited. Absent when none is due.
    pub oldest_due: Option<DateTime<Utc>>,
}

/// The pending tasks per type of a [`TaskReads::counts_by_type`] answer (types with none left
/// out).
pub fn pending_by_type(counts: &BTreeMap<String, StatusCounts>) -> BTreeMap<String, u64> {
    counts
        .iter()
        .filter(|(_, c)| c.pending > 0)
        .map(|(task_type, c)| (task_type.clone(), c.pending))
        .collect()
}

/// Backlog rows `(status, task_type, count)` grouped by type (the due part still unknown).
pub fn backlog_from_rows(
    rows: impl IntoIterator<Item = (i64, String, i64)>,
) -> BTreeMap<String, Backlog> {
    let mut by_type: BTreeMap<String, Backlog> = BTreeMap::new();
    for (status, task_type, n) in rows {
        let entry = by_type.entry(task_type).or_default();
        match status_from_code(status) {
            Some(Status::Pending) => entry.pending = count(n),
            Some(Status::Running) => entry.running = count(n),
            Some(Status::Failed) => entry.failed = count(n),
            _ => {}
        }
    }
    by_type
}

/// Turns the row an `UPDATE … RETURNING` of one task gave (or did not give) into the
/// caller's answer: the changed task, `NotFound`, or `Conflict` naming the state the task is in
/// (`action` is what was asked, `allowed` the states it applies to).
pub async fn changed_or_conflict(
    reads: &(impl TaskReads + ?Sized),
    id: TaskId,
    row: Option<rows::TaskRow>,
    action: &'static str,
    allowed: &'static str,
) -> Result<Task, StoreError> {
    if let Some(row) = row {
        return row.try_into();
    }
    match reads.get(id).await? {
        None => Err(StoreError::NotFound(id)),
        Some(task) => Err(StoreError::Conflict {
            id,
            status: task.status,
            action,
            allowed,
        }),
    }
}

/// Reading tasks.
#[async_trait]
pub trait TaskReads: Send + Sync {
    /// One task by id.
    async fn get(&self, id: TaskId) -> Result<Option<Task>, StoreError>;

    /// Tasks matching the filter, newest first.
    async fn list(&self, filter: &TaskFilter) -> Result<Vec<Task>, StoreError>;

    /// How many tasks are in each state.
    async fn counts(&self) -> Result<StatusCounts, StoreError>;

    /// The tasks `selection` selects, per task type and state (types without any are absent).
    /// `TaskSelection::default()` counts every task, [`TaskSelection::in_state`] one state.
    async fn counts_by_type(
        &self,
        selection: &TaskSelection,
    ) -> Result<BTreeMap<String, StatusCounts>, StoreError>;

    /// The backlog per task type at `now`: every type with pending, running or failed tasks.
    async fn backlog(&self, now: DateTime<Utc>) -> Result<BTreeMap<String, Backlog>, StoreError>;

    /// Due pending tasks of `task`'s type that a claim at `now` takes before it (higher
    /// priority, or the same priority and earlier in the queue).
    async fn count_ahead(&self, task: &Task, now: DateTime<Utc>) -> Result<u64, StoreError>;

    /// How many attempts of a task in a row ended in a snooze (a completion that leaves it
    /// pending without an error); 0 after any other outcome, and for an unknown task.
    async fn snoozes(&self, id: TaskId) -> Result<u32, StoreError>;
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

    async fn counts_by_type(
        &self,
        selection: &TaskSelection,
    ) -> Result<BTreeMap<String, StatusCounts>, StoreError> {
        let mut query =
            self.statement("SELECT task_type, status, COUNT(*) FROM async_task WHERE 1 = 1");
        control::and_selection(&mut query, selection);
        query.push(" GROUP BY task_type, status");
        let rows = self.fetch(Via::Reader, &query).await?;
        let rows = rows
            .iter()
            .map(|row| Ok((row.text(0)?, row.int(1)?, row.int(2)?)))
            .collect::<Result<Vec<_>, StoreError>>()?;
        Ok(control::counts_per_type(rows))
    }

    async fn backlog(&self, now: DateTime<Utc>) -> Result<BTreeMap<String, Backlog>, StoreError> {
        // The states through the listing index, which holds (status, task_type): no row read.
        let listing = self.dialect().use_index("async_task_listing");
        let statement = self.statement(&format!(
            "SELECT status, task_type, COUNT(*) FROM async_task {listing} \
             WHERE status IN (0, 1, 3) GROUP BY status, task_type"
        ));
        let rows = self.fetch(Via::Reader, &statement).await?;
        let rows = rows
            .iter()
            .map(|row| Ok((row.int(0)?, row.text(1)?, row.int(2)?)))
            .collect::<Result<Vec<_>, StoreError>>()?;
        let mut backlog = backlog_from_rows(rows);
        if backlog.values().all(|b| b.pending == 0) {
            return Ok(backlog);
        }
        // The due part of the pending tasks, and how long the longest-waiting one has waited.
        let mut due = self.statement(
            "SELECT task_type, COUNT(*), MIN(next_run_at) FROM async_task \
             WHERE status = 0 AND next_run_at <= ? GROUP BY task_type",
        );
        due.bind(Arg::Int(millis(now)));
        for row in self.fetch(Via::Reader, &due).await? {
            let entry = backlog.entry(row.text(0)?).or_default();
            entry.due = count(row.int(1)?);
            entry.oldest_due = row.opt_int(2)?.and_then(DateTime::from_timestamp_millis);
        }
        Ok(backlog)
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

    async fn snoozes(&self, id: TaskId) -> Result<u32, StoreError> {
        // Through the writer: the completion that snoozed it was committed a moment ago.
        let mut statement = self.statement("SELECT snoozes FROM async_task WHERE id = ?");
        statement.bind(Arg::Int(id));
        Ok(match self.fetch_optional(Via::Writer, &statement).await? {
            Some(row) => u32::try_from(row.int(0)?).unwrap_or(u32::MAX),
            None => 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backlog_rows_fill_each_state() {
        let by_type = backlog_from_rows([
            (0, "a".to_string(), 5),
            (1, "a".to_string(), 2),
            (3, "b".to_string(), 7),
            (2, "b".to_string(), 9),
        ]);
        assert_eq!(
            by_type["a"],
            Backlog {
                pending: 5,
                running: 2,
                ..Backlog::default()
            }
        );
        assert_eq!((by_type["b"].failed, by_type["b"].pending), (7, 0));
    }

    #[test]
    fn pending_per_type_leaves_out_types_without_pending_tasks() {
        let counts = BTreeMap::from([
            (
                "a".to_string(),
                StatusCounts {
                    pending: 2,
                    done: 1,
                    ..StatusCounts::default()
                },
            ),
            (
                "b".to_string(),
                StatusCounts {
                    failed: 4,
                    ..StatusCounts::default()
                },
            ),
        ]);
        assert_eq!(
            pending_by_type(&counts),
            BTreeMap::from([("a".to_string(), 2)])
        );
    }
}
