//! The queue's lifecycle: enqueue, claim, complete, progress, leases, release, rescue, and an
//! operator's retry and cancel. These are the statements each backend writes itself: they are
//! the hot path, or they differ in substance between databases (`FOR UPDATE SKIP LOCKED`, the
//! SQLite writer thread, MySQL's padded batches).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use super::{StoreError, history};
use crate::task::{Enqueued, NewTask, Task, TaskId, Transition};

/// One attempt of one task: the fencing token that matches a completion to its claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct AttemptId {
    pub task: TaskId,
    /// The task's `attempts` value after the claim that started this attempt.
    pub attempt: u32,
}

impl AttemptId {
    /// The attempt a freshly claimed task is running.
    pub fn of(task: &Task) -> Self {
        AttemptId {
            task: task.id,
            attempt: task.attempts,
        }
    }

    /// The attempts a fenced write answers with, from its `(id, attempts)` rows; a row whose
    /// count does not fit is not an attempt this host can hold.
    pub(crate) fn from_rows(rows: Vec<(TaskId, i64)>) -> Vec<AttemptId> {
        rows.into_iter()
            .filter_map(|(task, attempt)| {
                Some(AttemptId {
                    task,
                    attempt: u32::try_from(attempt).ok()?,
                })
            })
            .collect()
    }
}

/// What a host asks for when it claims work.
#[derive(Debug, Clone)]
pub struct ClaimRequest {
    /// The host's identity; written into the lease.
    pub owner: String,
    /// At most this many rows.
    pub limit: usize,
    /// Only these task types (the ones this host has a handler for).
    pub task_types: Vec<String>,
    /// The claim time, on the claiming host's clock: rows due at or before it qualify.
    pub now: DateTime<Utc>,
    /// How long the lease lasts before the rescuer may take the task back, from the moment of
    /// the claim on the database's clock.
    pub lease: Duration,
}

/// One finished attempt, to be written by [`Queue::complete`].
#[derive(Debug, Clone)]
pub struct Completion {
    pub id: TaskId,
    /// The lease owner that ran it; a row leased by someone else (or no longer running,
    /// e.g. cancelled meanwhile) is left alone.
    pub owner: String,
    /// The claim this attempt came from (the task's `attempts` after that claim): a row
    /// claimed again since (rescued after its lease expired) is left alone.
    pub attempt: u32,
    /// Where the task goes.
    pub transition: Transition,
    /// How the attempt ended, for its record in the attempt history.
    pub outcome: history::Outcome,
    /// The content hash of the plugin build that ran this attempt.
    pub plugin_version: Option<String>,
    /// What the attempt printed (bounded by the sandbox).
    pub log: Option<String>,
    /// What the attempt cost, for its record in the attempt history.
    pub cost: Option<history::AttemptCost>,
    pub finished_at: DateTime<Utc>,
    /// The attempt's record for `spool replay`, when its type keeps one: written with the
    /// batch, before the batch's completions ([`super::records`]).
    pub record: Option<Box<super::records::NewRecord>>,
}

/// A progress report from a running handler (serialized as `{"id", "percent", "note"}` for the
/// backends that pass batches as JSON).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ProgressUpdate {
    pub id: TaskId,
    pub percent: u8,
    pub note: String,
}

/// What one rescue pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RescueReport {
    /// Expired tasks returned to pending.
    pub retried: u64,
    /// Expired tasks that had no retries left and became failed.
    pub failed: u64,
}

/// The claim horizon a backend asks for unless it overrides [`Queue::claim_horizon`]: 20 ms
/// of work held claimed ahead of the free slots (see `worker/run/ready.rs`).
pub const DEFAULT_CLAIM_HORIZON: std::time::Duration = std::time::Duration::from_millis(20);

/// The queue's lifecycle.
#[async_trait]
pub trait Queue: Send + Sync {
    /// Inserts tasks in one transaction, in order. A task whose (type, idempotency key) already
    /// exists is not inserted; its existing row comes back marked as a duplicate.
    async fn enqueue(&self, tasks: Vec<NewTask>) -> Result<Vec<Enqueued>, StoreError>;

    /// Leases up to `limit` due pending tasks of the given types in one statement, ordered by
    /// priority (higher first), then `next_run_at`, then id; returns them in that order.
    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<Task>, StoreError>;

    /// Writes finished attempts in one transaction. Returns how many rows changed: a
    /// completion for a row that is no longer running under that lease changes nothing.
    async fn complete(&self, completions: &[Completion]) -> Result<u64, StoreError>;

    /// Stores the latest progress of running tasks.
    async fn record_progress(&self, updates: &[ProgressUpdate]) -> Result<(), StoreError>;

    /// Extends the leases of these attempts to `lease` from now on the database's clock, each
    /// only while its task is still running under that claim and owner; returns the attempts
    /// that were extended (one missing from the answer was cancelled or rescued meanwhile).
    async fn extend_leases(
        &self,
        owner: &str,
        attempts: &[AttemptId],
        lease: Duration,
    ) -> Result<Vec<AttemptId>, StoreError>;

    /// Returns these attempts' tasks to pending without counting the attempt (shutdown, or a
    /// claim this host cannot run after all); only rows still running under that claim.
    async fn release(&self, owner: &str, attempts: &[AttemptId]) -> Result<u64, StoreError>;

    /// Takes back running tasks whose lease has expired by the database's clock (their host
    /// died): pending again with the attempt counted, or failed when no retries remain. The
    /// database's clock, not the caller's: a rescuing host whose clock runs ahead must not take
    /// back tasks whose hosts are still extending their leases.
    async fn rescue_expired(&self) -> Result<RescueReport, StoreError>;

    /// Sends a failed or cancelled task back to pending, due now, with a fresh retry budget.
    async fn retry(&self, id: TaskId, now: DateTime<Utc>) -> Result<Task, StoreError>;

    /// Cancels a pending or running task. A running attempt's outcome is then discarded.
    async fn cancel(&self, id: TaskId, now: DateTime<Utc>) -> Result<Task, StoreError>;

    /// How much work, in time, a host may hold claimed ahead of its free slots under a backlog
    /// (`worker/run/ready.rs`). Longer means fewer, larger claims; shorter means a task of higher
    /// priority enqueued meanwhile, or another host with free slots, waits less behind the
    /// tasks claimed ahead. A backend whose claim statement has a large fixed cost asks for more.
    fn claim_horizon(&self) -> std::time::Duration {
        DEFAULT_CLAIM_HORIZON
    }

    /// Asks the backend to call `wake` whenever any host (or application SQL) enqueues a task,
    /// for as long as the store is open. Returns false when the database cannot notify; the
    /// dispatcher then relies on its poll interval to see other writers' tasks.
    fn watch_enqueues(&self, wake: Arc<tokio::sync::Notify>) -> bool {
        let _ = wake;
        false
    }
}

/// What a completion writes to its task's row, from the batch row `c` (its transition, the
/// attempt's output, the time): one rule for the backends whose `UPDATE` joins the batch.
macro_rules! completion_assignments {
    () => {
        "status = c.status, \
         retry_count = c.retry_count, \
         next_run_at = COALESCE(c.next_run_at, async_task.next_run_at), \
         result = c.result, \
         last_error = CASE WHEN c.status = 2 THEN NULL ELSE COALESCE(c.error, async_task.last_error) END, \
         plugin_version = COALESCE(c.plugin_version, async_task.plugin_version), \
         log = c.log, \
         finished_at = c.finished_at, \
         snoozes = CASE WHEN c.status = 0 AND c.error IS NULL THEN async_task.snoozes + 1 ELSE 0 END, \
         lease_owner = NULL, lease_expires_at = NULL, \
         updated_at = c.now"
    };
}
pub(crate) use completion_assignments;

/// The fence of a completion: its row still runs under the owner and claim the batch row `c`
/// names, so a late completion of a rescued or cancelled attempt changes nothing.
macro_rules! completion_fence {
    () => {
        "async_task.id = c.id AND async_task.status = 1 \
         AND async_task.lease_owner = c.owner AND async_task.attempts = c.attempt"
    };
}
pub(crate) use completion_fence;

/// A batch that changes running rows, in task id order. Every such batch (completions,
/// progress, lease extensions, releases) takes its row locks in that order, so two of them on
/// the same rows (a host's completion batch and its own lease extension) never wait on each
/// other in a cycle, a deadlock the database would end by failing one of them. The completer
/// hands its batches over in that order already, which costs nothing here; other batches are
/// copied and sorted.
pub fn in_lock_order<T: Clone>(batch: &[T], id: impl Fn(&T) -> i64) -> Cow<'_, [T]> {
    if batch.is_sorted_by_key(&id) {
        Cow::Borrowed(batch)
    } else {
        let mut sorted = batch.to_vec();
        sorted.sort_by_key(id);
        Cow::Owned(sorted)
    }
}

/// A lease length in the milliseconds every lease column counts in, for adding to the
/// database's clock ([`super::sql::Dialect::now_ms`]).
pub fn lease_ms(lease: Duration) -> i64 {
    i64::try_from(lease.as_millis()).unwrap_or(i64::MAX)
}

/// `impl Queue for $store`, by delegation to the backend's inherent methods of the same names
/// (one per file: `enqueue.rs`, `claim.rs`, `completion.rs`, `running.rs`, `tasks.rs`). The
/// answers to empty batches are given here, once, so a backend's methods always have work, and
/// so are those to keys an archived task holds ([`super::keyed::enqueue_around_archived_keys`]);
/// `{ … }` after the type adds the trait's provided methods a backend overrides.
macro_rules! queue_by_delegation {
    ($store:ident $({ $($overrides:tt)* })?) => {
        $crate::store::queue::queue_by_delegation!(@impl $store [retry cancel] { $($($overrides)*)? });
    };
    (@impl $store:ident [$($by_id:ident)*] { $($overrides:tt)* }) => {
        #[async_trait::async_trait]
        impl $crate::store::queue::Queue for $store {
            async fn enqueue(
                &self,
                tasks: Vec<$crate::task::NewTask>,
            ) -> Result<Vec<$crate::task::Enqueued>, $crate::store::StoreError> {
                if tasks.is_empty() {
                    return Ok(Vec::new());
                }
                $crate::store::keyed::enqueue_around_archived_keys(self, tasks, |tasks| {
                    $store::enqueue(self, tasks)
                })
                .await
            }

            async fn claim(
                &self,
                request: &$crate::store::ClaimRequest,
            ) -> Result<Vec<$crate::task::Task>, $crate::store::StoreError> {
                if request.limit == 0 || request.task_types.is_empty() {
                    return Ok(Vec::new());
                }
                $store::claim(self, request).await
            }

            async fn complete(
                &self,
                completions: &[$crate::store::Completion],
            ) -> Result<u64, $crate::store::StoreError> {
                if completions.is_empty() {
                    return Ok(0);
                }
                let completions = $crate::store::queue::in_lock_order(completions, |c| c.id);
                $store::complete(self, &completions).await
            }

            async fn record_progress(
                &self,
                updates: &[$crate::store::ProgressUpdate],
            ) -> Result<(), $crate::store::StoreError> {
                if updates.is_empty() {
                    return Ok(());
                }
                let updates = $crate::store::queue::in_lock_order(updates, |u| u.id);
                $store::record_progress(self, &updates).await
            }

            async fn extend_leases(
                &self,
                owner: &str,
                attempts: &[$crate::store::AttemptId],
                lease: std::time::Duration,
            ) -> Result<Vec<$crate::store::AttemptId>, $crate::store::StoreError> {
                if attempts.is_empty() {
                    return Ok(Vec::new());
                }
                let attempts = $crate::store::queue::in_lock_order(attempts, |a| a.task);
                let lease = $crate::store::queue::lease_ms(lease);
                $store::extend_leases(self, owner, &attempts, lease).await
            }

            async fn release(
                &self,
                owner: &str,
                attempts: &[$crate::store::AttemptId],
            ) -> Result<u64, $crate::store::StoreError> {
                if attempts.is_empty() {
                    return Ok(0);
                }
                let attempts = $crate::store::queue::in_lock_order(attempts, |a| a.task);
                $store::release(self, owner, &attempts).await
            }

            async fn rescue_expired(
                &self,
            ) -> Result<$crate::store::RescueReport, $crate::store::StoreError> {
                $store::rescue_expired(self).await
            }

            $(
                async fn $by_id(
                    &self,
                    id: $crate::task::TaskId,
                    now: chrono::DateTime<chrono::Utc>,
                ) -> Result<$crate::task::Task, $crate::store::StoreError> {
                    $store::$by_id(self, id, now).await
                }
            )*

            $($overrides)*
        }
    };
}
pub(crate) use queue_by_delegation;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_are_put_in_task_id_order_and_sorted_ones_are_not_copied() {
        let sorted = [1, 2, 2, 9];
        assert!(matches!(in_lock_order(&sorted, |n| *n), Cow::Borrowed(_)));
        let mixed = [
            AttemptId {
                task: 9,
                attempt: 1,
            },
            AttemptId {
                task: 3,
                attempt: 2,
            },
        ];
        let ordered = in_lock_order(&mixed, |a| a.task);
        assert!(matches!(ordered, Cow::Owned(_)));
        assert_eq!(ordered.iter().map(|a| a.task).collect::<Vec<_>>(), [3, 9]);
    }
}
