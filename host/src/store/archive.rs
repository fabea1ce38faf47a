//! The archive: finished tasks leave the live table (`async_task`) for `async_task_archive`, so
//! the table that claims, completions and listings work on holds the queue, not its history.
//!
//! `async_task_archive` has every column of `async_task` plus `archived_at` (Unix milliseconds,
//! UTC); a row keeps its id. Moving is done in small batches, each one short transaction: pick up
//! to `limit` ids of old finished rows through the `async_task_finished` index (on PostgreSQL and
//! MySQL/MariaDB with `FOR UPDATE SKIP LOCKED`, so a batch never waits for a row someone else is
//! changing, and nobody waits long for a batch), copy them into the archive, delete them from the
//! live table. A claim reads pending rows only, so it never waits for a batch either (on SQLite
//! it waits at most for one batch's commit, the single writer's turn).
//!
//! Purging deletes archived tasks archived before a cutoff, in batches too, together with what
//! still refers to them: their effect-ledger rows and their attempt history
//! (`async_task_attempt`, which an archived task keeps).
//!
//! A migration that adds a column to `async_task` must add it to `async_task_archive` and to
//! the backends' column lists here, or archiving drops that column's value.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::StoreError;
use super::encoding::{millis, status_code, time_from_millis};
use super::sql::{Arg, Cells, Portable, Via, count};
use crate::task::{Status, Task, TaskId};

/// Rows moved (or that would move) per batch unless the caller says otherwise: small enough
/// that a batch commits in milliseconds.
pub const DEFAULT_BATCH: usize = 500;

/// A task read from the archive.
#[derive(Debug, Clone, PartialEq)]
pub struct ArchivedTask {
    pub task: Task,
    /// When it moved to the archive.
    pub archived_at: DateTime<Utc>,
}

/// Which finished tasks one batch moves: tasks in one of `statuses` (each final) that finished
/// before `finished_before`.
#[derive(Debug, Clone)]
pub struct ArchiveBatch {
    pub statuses: Vec<Status>,
    pub finished_before: DateTime<Utc>,
    /// At most this many rows.
    pub limit: usize,
    /// Written as the rows' `archived_at`.
    pub now: DateTime<Utc>,
}

/// Tasks per final state, moved by a batch or counted for a dry run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ArchiveCounts {
    pub done: u64,
    pub failed: u64,
    pub cancelled: u64,
}

impl ArchiveCounts {
    pub fn total(&self) -> u64 {
        self.done + self.failed + self.cancelled
    }

    /// Adds `n` tasks of `status` (non-final states are not counted).
    pub fn add(&mut self, status: Status, n: u64) {
        match status {
            Status::Done => self.done += n,
            Status::Failed => self.failed += n,
            Status::Cancelled => self.cancelled += n,
            Status::Pending | Status::Running => {}
        }
    }

    /// Adds another count.
    pub fn merge(&mut self, other: ArchiveCounts) {
        self.done += other.done;
        self.failed += other.failed;
        self.cancelled += other.cancelled;
    }

    /// Counts from `(status code, count)` rows.
    pub fn from_codes(rows: impl IntoIterator<Item = (i64, i64)>) -> ArchiveCounts {
        let mut counts = ArchiveCounts::default();
        for (code, n) in rows {
            if let Some(status) = super::encoding::status_from_code(code) {
                counts.add(status, u64::try_from(n).unwrap_or(0));
            }
        }
        counts
    }
}

/// Checks that a batch only names final states (a running or pending task is never archived).
/// The tables whose rows (by `task_id`) a purged task takes with it: its effects, its attempt
/// history and attempt records, and its idempotency key, which holds until this purge.
pub const PURGED_WITH_TASK: [&str; 4] = [
    "effect_ledger",
    "async_task_attempt",
    "spool_attempt_record",
    "async_task_key",
];

fn check_batch(batch: &ArchiveBatch) -> Result<(), StoreError> {
    if let Some(status) = batch.statuses.iter().find(|s| !s.is_final()) {
        return Err(StoreError::Database(format!(
            "only finished tasks are archived, not {status} ones"
        )));
    }
    Ok(())
}

/// Moving finished tasks to the archive and purging it. Callers use the two provided methods,
/// which check the request and answer empty ones; each backend writes the two statements
/// below them.
#[async_trait]
pub trait Archive {
    /// Moves one batch of finished tasks to the archive in one short transaction; returns how
    /// many of each state moved (fewer than `limit` in all: nothing more to move now).
    async fn archive_batch(&self, batch: &ArchiveBatch) -> Result<ArchiveCounts, StoreError> {
        check_batch(batch)?;
        if batch.limit == 0 || batch.statuses.is_empty() {
            return Ok(ArchiveCounts::default());
        }
        self.move_batch(batch).await
    }

    /// Deletes up to `limit` archived tasks archived before `archived_before`, with their
    /// effect-ledger rows, attempt history and idempotency keys ([`PURGED_WITH_TASK`]), in one
    /// transaction; returns how many tasks.
    async fn purge_archive_batch(
        &self,
        archived_before: DateTime<Utc>,
        limit: usize,
    ) -> Result<u64, StoreError> {
        if limit == 0 {
            return Ok(0);
        }
        self.purge_batch(archived_before, limit).await
    }

    /// The backend's [`Archive::archive_batch`], for a checked batch of at least one row of at
    /// least one state.
    async fn move_batch(&self, batch: &ArchiveBatch) -> Result<ArchiveCounts, StoreError>;

    /// The backend's [`Archive::purge_archive_batch`], for a limit of at least one.
    async fn purge_batch(&self, before: DateTime<Utc>, limit: usize) -> Result<u64, StoreError>;
}

/// Reading the archive and what a batch would move: written once, in portable SQL.
#[async_trait]
pub trait ArchiveReads {
    /// How many tasks in `statuses` finished before `finished_before` (what batches would move).
    async fn count_archivable(
        &self,
        statuses: &[Status],
        finished_before: DateTime<Utc>,
    ) -> Result<ArchiveCounts, StoreError>;

    /// How many archived tasks were archived before `archived_before`.
    async fn count_purgeable(&self, archived_before: DateTime<Utc>) -> Result<u64, StoreError>;

    /// An archived task by id.
    async fn get_archived(&self, id: TaskId) -> Result<Option<ArchivedTask>, StoreError>;
}

#[async_trait]
impl<S: Portable> ArchiveReads for S {
    async fn count_archivable(
        &self,
        statuses: &[Status],
        finished_before: DateTime<Utc>,
    ) -> Result<ArchiveCounts, StoreError> {
        if statuses.is_empty() {
            return Ok(ArchiveCounts::default());
        }
        let codes: Vec<i64> = statuses.iter().map(|s| status_code(*s)).collect();
        let mut statement = self.statement(&format!(
            "SELECT status, COUNT(*) FROM async_task {} WHERE finished_at < ?",
            self.dialect().use_index("async_task_finished")
        ));
        statement
            .bind(Arg::Int(millis(finished_before)))
            .and_any_id("status", &codes)
            .push(" GROUP BY status");
        let rows = self.fetch(Via::Reader, &statement).await?;
        let counted = rows
            .iter()
            .map(|row| Ok((row.int(0)?, row.int(1)?)))
            .collect::<Result<Vec<_>, StoreError>>()?;
        Ok(ArchiveCounts::from_codes(counted))
    }

    async fn count_purgeable(&self, archived_before: DateTime<Utc>) -> Result<u64, StoreError> {
        let mut statement =
            self.statement("SELECT COUNT(*) FROM async_task_archive WHERE archived_at < ?");
        statement.bind(Arg::Int(millis(archived_before)));
        Ok(count(
            self.fetch_one(Via::Reader, &statement).await?.int(0)?,
        ))
    }

    async fn get_archived(&self, id: TaskId) -> Result<Option<ArchivedTask>, StoreError> {
        let mut statement = self.statement(&format!(
            "SELECT {}, archived_at FROM async_task_archive WHERE id = ?",
            self.dialect().task_columns()
        ));
        statement.bind(Arg::Int(id));
        let Some(row) = self.fetch_optional(Via::Reader, &statement).await? else {
            return Ok(None);
        };
        Ok(Some(ArchivedTask {
            task: super::rows::task(&row)?,
            archived_at: time_from_millis(id, row.int("archived_at")?)?,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_add_per_final_state() {
        let mut counts = ArchiveCounts::from_codes([(2, 5), (3, 1), (4, 2), (0, 9), (9, 9)]);
        assert_eq!(counts.total(), 8);
        counts.merge(ArchiveCounts {
            done: 1,
            ..Default::default()
        });
        assert_eq!(counts.done, 6);
    }

    #[test]
    fn only_final_states_are_archived() {
        let batch = |statuses: Vec<Status>| ArchiveBatch {
            statuses,
            finished_before: Utc::now(),
            limit: 1,
            now: Utc::now(),
        };
        assert!(check_batch(&batch(vec![Status::Done, Status::Cancelled])).is_ok());
        assert!(check_batch(&batch(vec![Status::Running])).is_err());
    }
}
