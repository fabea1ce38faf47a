//! Queue control: what an operator does to many tasks at once, and to a whole task type.
//!
//! - A [`TaskSelection`] picks tasks by ids, type, state, error text and time. The listing
//!   (`GET /tasks`) filters with the same conditions, and bulk retry and discard act on them.
//! - Bulk actions ([`BulkAction`]) run in bounded batches ([`run_bulk`]): each batch is one
//!   short statement pair (pick up to [`BULK_BATCH`] ids after a cursor, then change those still
//!   in a state the action applies to), committed on its own, so a selection of a million rows
//!   never holds one long transaction, and each task is touched at most once per request (the
//!   cursor only moves forward). Running tasks are never touched; the state machine
//!   (`docs/state_machine.md`) says which states each action applies to.
//! - Paused task types ([`Control::pause_type`]) live in a table every host reads: each
//!   host's dispatcher leaves them out of its claims (`worker/run/paused.rs`). Their tasks stay
//!   pending and enqueues still work.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use std::collections::BTreeMap;

use super::encoding::{millis, sql_codes_where, status_code, time_from_millis};
use super::sql::{Arg, Cells, Portable, Statement, Via};
use super::{StatusCounts, Store, StoreError};
use crate::task::{Status, TaskId};

/// Rows one batch of a bulk action picks and changes.
pub const BULK_BATCH: usize = 500;

/// The most ids one selection may name.
pub const MAX_SELECTED_IDS: usize = 1000;

/// The start of the `last_error` a discarded task is left with; the previous error follows.
pub const DISCARD_NOTE: &str = "discarded by an operator";

/// Which tasks an operation applies to. Every condition given must hold; an empty selection
/// selects every task.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TaskSelection {
    /// Only these tasks (empty: any).
    pub ids: Vec<TaskId>,
    pub task_type: Option<String>,
    pub status: Option<Status>,
    /// Only tasks whose `last_error` contains this text (case-sensitive).
    pub error_contains: Option<String>,
    /// Only tasks whose time (when they finished, or when they were created if they have not
    /// finished) is at or after this.
    pub since: Option<DateTime<Utc>>,
    /// ... and before this.
    pub until: Option<DateTime<Utc>>,
}

impl TaskSelection {
    /// Every task in `status`.
    pub fn in_state(status: Status) -> Self {
        TaskSelection {
            status: Some(status),
            ..TaskSelection::default()
        }
    }

    /// Whether no condition is set (the selection matches every task).
    pub fn is_everything(&self) -> bool {
        self.ids.is_empty()
            && self.task_type.is_none()
            && self.status.is_none()
            && self.error_contains.is_none()
            && self.since.is_none()
            && self.until.is_none()
    }
}

/// What a bulk request does to the tasks it selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BulkAction {
    /// Failed or cancelled tasks go back to pending, due now, with a fresh retry budget (the
    /// same change as one task's retry).
    Retry,
    /// Failed or pending tasks become cancelled: kept for the record with a note in
    /// `last_error` ([`DISCARD_NOTE`] and the state they were in, then their last error).
    Discard,
}

impl BulkAction {
    /// Whether the action changes a task in `status`.
    pub fn applies_to(self, status: Status) -> bool {
        match self {
            BulkAction::Retry => status.can_retry(),
            BulkAction::Discard => matches!(status, Status::Failed | Status::Pending),
        }
    }

    /// The states it applies to, in words.
    pub fn allowed(self) -> &'static str {
        match self {
            BulkAction::Retry => "failed or cancelled",
            BulkAction::Discard => "failed or pending",
        }
    }

    /// The `last_error` start for a discarded task that was in `status`.
    pub fn discard_note(status: Status) -> String {
        format!("{DISCARD_NOTE} while {status}")
    }
}

/// One batch of a bulk action.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchStep {
    /// Rows the batch picked (at most the limit): fewer means the selection is exhausted.
    pub picked: usize,
    /// The largest id picked: the next batch starts after it.
    pub last_id: Option<TaskId>,
    /// Rows changed (a picked row that left the action's states meanwhile is not).
    pub changed: u64,
}

/// What a bulk request found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct BulkReport {
    /// Tasks the filter selects, in any state.
    pub matched: u64,
    /// Of those, the tasks in a state the action applies to: what a dry run would change.
    pub eligible: u64,
    /// Tasks changed (0 in a dry run). Below `eligible` when tasks changed state meanwhile.
    pub changed: u64,
    /// The selected tasks per state, as counted before any change.
    pub by_status: StatusCounts,
}

/// A paused task type.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct PausedType {
    pub task_type: String,
    /// When it was paused.
    pub paused_at: DateTime<Utc>,
}

/// What queue control needs from a backend.
#[async_trait]
pub trait Control: Send + Sync {
    /// One batch of `action`: picks up to `limit` tasks with ids above `after` that the
    /// selection selects and that are in a state the action applies to (by id), then changes
    /// those still in such a state, in one short statement committed on its own.
    async fn bulk_step(
        &self,
        action: BulkAction,
        selection: &TaskSelection,
        after: TaskId,
        limit: usize,
        now: DateTime<Utc>,
    ) -> Result<BatchStep, StoreError>;

    /// Pauses a task type on every host sharing this database; returns the pause (the first
    /// one's time when it was paused already).
    async fn pause_type(
        &self,
        task_type: &str,
        now: DateTime<Utc>,
    ) -> Result<PausedType, StoreError>;

    /// Resumes a task type; false when it was not paused.
    async fn resume_type(&self, task_type: &str) -> Result<bool, StoreError>;

    /// Every paused task type, by name.
    async fn paused_types(&self) -> Result<Vec<PausedType>, StoreError>;
}

/// The tasks of `counts` in a state `action` applies to.
pub fn eligible(counts: &StatusCounts, action: BulkAction) -> u64 {
    Status::ALL
        .into_iter()
        .filter(|s| action.applies_to(*s))
        .map(|s| count_of(counts, s))
        .sum()
}

/// The count of one state.
pub fn count_of(counts: &StatusCounts, status: Status) -> u64 {
    match status {
        Status::Pending => counts.pending,
        Status::Running => counts.running,
        Status::Done => counts.done,
        Status::Failed => counts.failed,
        Status::Cancelled => counts.cancelled,
    }
}

/// Counts per type from `(task_type, status code, count)` rows.
pub fn counts_per_type(
    rows: impl IntoIterator<Item = (String, i64, i64)>,
) -> BTreeMap<String, StatusCounts> {
    let mut grouped: BTreeMap<String, Vec<(i64, i64)>> = BTreeMap::new();
    for (task_type, code, count) in rows {
        grouped.entry(task_type).or_default().push((code, count));
    }
    grouped
        .into_iter()
        .map(|(task_type, rows)| (task_type, super::encoding::counts_from_codes(rows)))
        .collect()
}

/// The counts of several groups added up.
pub fn sum_counts<'a>(groups: impl IntoIterator<Item = &'a StatusCounts>) -> StatusCounts {
    let mut sum = StatusCounts::default();
    for counts in groups {
        sum.pending += counts.pending;
        sum.running += counts.running;
        sum.done += counts.done;
        sum.failed += counts.failed;
        sum.cancelled += counts.cancelled;
    }
    sum
}

/// Counts what `selection` selects and, unless `dry_run`, applies `action` to it batch by batch.
///
/// The batches walk one (task type, state) pair at a time, among the pairs the selection has
/// tasks in, so every batch is a range of the listing index `(status, task_type, id)` read in
/// id order: each costs about its own rows however many tasks the selection holds.
pub async fn run_bulk(
    store: &dyn Store,
    action: BulkAction,
    selection: &TaskSelection,
    dry_run: bool,
    now: DateTime<Utc>,
) -> Result<BulkReport, StoreError> {
    let per_type = store.counts_by_type(selection).await?;
    let by_status = sum_counts(per_type.values());
    let mut report = BulkReport {
        matched: Status::ALL
            .into_iter()
            .map(|s| count_of(&by_status, s))
            .sum(),
        eligible: eligible(&by_status, action),
        changed: 0,
        by_status,
    };
    if dry_run || report.eligible == 0 {
        return Ok(report);
    }
    for (task_type, counts) in &per_type {
        for status in Status::ALL.into_iter().filter(|s| action.applies_to(*s)) {
            if count_of(counts, status) == 0 {
                continue;
            }
            let narrowed = TaskSelection {
                task_type: Some(task_type.clone()),
                status: Some(status),
                ..selection.clone()
            };
            let mut after = TaskId::MIN;
            loop {
                let step = store
                    .bulk_step(action, &narrowed, after, BULK_BATCH, now)
                    .await?;
                report.changed += step.changed;
                match step.last_id {
                    Some(last) if step.picked >= BULK_BATCH => after = last,
                    _ => break,
                }
            }
        }
    }
    Ok(report)
}

/// Appends the selection's conditions, each as ` AND …`, to a statement on `async_task`.
pub(super) fn and_selection<'a>(statement: &mut Statement<'a>, selection: &'a TaskSelection) {
    let dialect = statement.dialect();
    if !selection.ids.is_empty() {
        statement.and_any_id("id", &selection.ids);
    }
    if let Some(task_type) = &selection.task_type {
        statement
            .push(" AND task_type = ?")
            .bind(Arg::Text(task_type));
    }
    if let Some(status) = selection.status {
        statement
            .push(" AND status = ?")
            .bind(Arg::Int(status_code(status)));
    }
    if let Some(text) = &selection.error_contains {
        let needle = statement.next_placeholder();
        statement
            .push_raw(&format!(" AND {}", dialect.contains("last_error", &needle)))
            .bind(Arg::Search(text));
    }
    if let Some(since) = selection.since {
        statement
            .push(" AND COALESCE(finished_at, created_at) >= ?")
            .bind(Arg::Int(millis(since)));
    }
    if let Some(until) = selection.until {
        statement
            .push(" AND COALESCE(finished_at, created_at) < ?")
            .bind(Arg::Int(millis(until)));
    }
}

/// The codes of the states `action` applies to, as an SQL list.
fn action_codes(action: BulkAction) -> String {
    match action {
        BulkAction::Retry => sql_codes_where(|s| BulkAction::Retry.applies_to(s)),
        BulkAction::Discard => sql_codes_where(|s| BulkAction::Discard.applies_to(s)),
    }
}

/// Queue control in portable SQL, for every backend.
///
/// A batch is two autocommitted statements: pick ids (a plain read, no locks; on SQLite through
/// the read pool), then change those still in a state the action applies to, in one statement
/// (on SQLite through the single writer, so other writers get the lock between batches). On the
/// server databases, at READ COMMITTED, the UPDATE waits for a row a claim holds and re-checks
/// its state on the committed version, so a task a host claimed meanwhile is left alone.
#[async_trait]
impl<S: Portable> Control for S {
    async fn bulk_step(
        &self,
        action: BulkAction,
        selection: &TaskSelection,
        after: TaskId,
        limit: usize,
        now: DateTime<Utc>,
    ) -> Result<BatchStep, StoreError> {
        let dialect = self.dialect();
        let codes = action_codes(action);
        // One type in one state: a range of the listing index, in id order (pinned where the
        // planner may prefer walking every row by id).
        let index = if selection.task_type.is_some() && selection.status.is_some() {
            dialect.use_index("async_task_listing")
        } else {
            String::new()
        };
        let mut pick = self.statement(&format!(
            "SELECT id FROM async_task {index} WHERE id > ? AND status IN {codes}"
        ));
        pick.bind(Arg::Int(after));
        and_selection(&mut pick, selection);
        pick.push(" ORDER BY id LIMIT ?").bind(Arg::Limit(limit));
        let ids = self
            .fetch(Via::Reader, &pick)
            .await?
            .iter()
            .map(|row| row.int(0))
            .collect::<Result<Vec<TaskId>, _>>()?;
        let Some(&last_id) = ids.last() else {
            return Ok(BatchStep::default());
        };
        let now = millis(now);
        let (failed_note, pending_note) = (
            BulkAction::discard_note(Status::Failed),
            BulkAction::discard_note(Status::Pending),
        );
        let mut update = self.statement("UPDATE async_task SET ");
        match action {
            BulkAction::Retry => {
                update
                    .push(
                        "status = 0, retry_count = 0, next_run_at = ?, finished_at = NULL, \
                         result = NULL, updated_at = ?",
                    )
                    .bind(Arg::Int(now))
                    .bind(Arg::Int(now));
            }
            // last_error first: it reads the state the task was in (MySQL assigns left to
            // right, and later assignments see earlier ones).
            BulkAction::Discard => {
                let note = format!(
                    "(CASE WHEN status = 3 THEN {} ELSE {} END)",
                    update.next_placeholder(),
                    update.next_placeholder()
                );
                let error = dialect.concat(&[
                    &note,
                    &format!("COALESCE({}, '')", dialect.concat(&["': '", "last_error"])),
                ]);
                update
                    .bind(Arg::Text(&failed_note))
                    .bind(Arg::Text(&pending_note))
                    .push_raw(&format!("last_error = {error}, "))
                    .push(
                        "status = 4, finished_at = ?, updated_at = ?, lease_owner = NULL, \
                         lease_expires_at = NULL",
                    )
                    .bind(Arg::Int(now))
                    .bind(Arg::Int(now));
            }
        }
        update.push(" WHERE 1 = 1").and_any_id("id", &ids);
        update.push_raw(&format!(" AND status IN {codes}"));
        let changed = self.execute(&update).await?;
        Ok(BatchStep {
            picked: ids.len(),
            last_id: Some(last_id),
            changed,
        })
    }

    async fn pause_type(
        &self,
        task_type: &str,
        now: DateTime<Utc>,
    ) -> Result<PausedType, StoreError> {
        let mut pause = self.statement(&self.dialect().insert_or_keep(
            "INSERT INTO task_type_pause (task_type, paused_at) VALUES (?, ?)",
            "paused_at",
        ));
        pause.bind(Arg::Text(task_type)).bind(Arg::Int(millis(now)));
        self.execute(&pause).await?;
        let mut read = self.statement("SELECT paused_at FROM task_type_pause WHERE task_type = ?");
        read.bind(Arg::Text(task_type));
        let row = self.fetch_one(Via::Writer, &read).await?;
        Ok(PausedType {
            task_type: task_type.to_string(),
            paused_at: time_from_millis(0, row.int(0)?)?,
        })
    }

    async fn resume_type(&self, task_type: &str) -> Result<bool, StoreError> {
        let mut statement = self.statement("DELETE FROM task_type_pause WHERE task_type = ?");
        statement.bind(Arg::Text(task_type));
        Ok(self.execute(&statement).await? > 0)
    }

    async fn paused_types(&self) -> Result<Vec<PausedType>, StoreError> {
        // Through the writer: a pause committed a moment ago must be seen.
        let statement =
            self.statement("SELECT task_type, paused_at FROM task_type_pause ORDER BY task_type");
        let rows = self.fetch(Via::Writer, &statement).await?;
        rows.iter()
            .map(|row| {
                Ok(PausedType {
                    task_type: row.text(0)?,
                    paused_at: time_from_millis(0, row.int(1)?)?,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_follow_the_state_machine() {
        let retry: Vec<Status> = Status::ALL
            .into_iter()
            .filter(|s| BulkAction::Retry.applies_to(*s))
            .collect();
        assert_eq!(retry, [Status::Failed, Status::Cancelled]);
        let discard: Vec<Status> = Status::ALL
            .into_iter()
            .filter(|s| BulkAction::Discard.applies_to(*s))
            .collect();
        assert_eq!(discard, [Status::Pending, Status::Failed]);
        assert!(!BulkAction::Retry.applies_to(Status::Running));
        assert!(!BulkAction::Discard.applies_to(Status::Running));
        assert_eq!(
            BulkAction::discard_note(Status::Failed),
            "discarded by an operator while failed"
        );
    }

    #[test]
    fn an_empty_selection_is_everything() {
        assert!(TaskSelection::default().is_everything());
        assert!(
            !TaskSelection {
                status: Some(Status::Failed),
                ..Default::default()
            }
            .is_everything()
        );
        let counts = StatusCounts {
            pending: 1,
            running: 2,
            done: 3,
            failed: 4,
            cancelled: 5,
        };
        assert_eq!(eligible(&counts, BulkAction::Retry), 9);
        assert_eq!(eligible(&counts, BulkAction::Discard), 5);
    }
}
