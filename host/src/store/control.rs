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
    /// The tasks `selection` selects, per task type and state (types without any are absent).
    async fn selection_counts(
        &self,
        selection: &TaskSelection,
    ) -> Result<BTreeMap<String, StatusCounts>, StoreError>;

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

    /// Tasks per type and state (types without tasks are absent).
    async fn counts_by_type(&self) -> Result<BTreeMap<String, StatusCounts>, StoreError>;
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
    let per_type = store.selection_counts(selection).await?;
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
