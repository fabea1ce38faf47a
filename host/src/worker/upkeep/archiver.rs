//! Retention: moves finished tasks out of the live table into the archive, and purges the
//! archive. Maintenance: the service runs only while this host leads ([`super::leader`]); `spool
//! archive` runs the same [`pass`] by hand against the database.
//!
//! A pass moves, batch by batch, done and cancelled tasks that finished more than
//! [`Retention::after`] ago, then dead letters (failed tasks) that finished more than
//! [`Retention::dead_letters`] ago, then purges archived tasks archived more than
//! [`Retention::archive`] ago. Every batch is one short transaction (see
//! [`crate::store::archive`]), and after each the pass pauses [`PAUSE_FACTOR`] times as long as
//! the batch took (at least [`MIN_PAUSE`]), so the archive takes at most about a quarter of the
//! database's time and claims and completions keep theirs.

use chrono::{DateTime, Utc};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::leader::{LeaderTicks, Leadership};
use crate::shutdown::{Shutdown, Stage};
use crate::store::archive::{ArchiveBatch, ArchiveCounts, DEFAULT_BATCH};
use crate::store::{SharedStore, Store, StoreError};
use crate::task::{Status, chrono_duration};

/// Done and cancelled tasks stay in the live table this long after they finished.
pub const DEFAULT_ARCHIVE_AFTER: Duration = Duration::from_secs(30 * 86_400);
/// Dead letters (failed tasks) stay in the live table, where they can be retried, this long.
pub const DEFAULT_DEAD_LETTER_RETENTION: Duration = Duration::from_secs(90 * 86_400);
/// Archived tasks are purged this long after they were archived.
pub const DEFAULT_ARCHIVE_RETENTION: Duration = Duration::from_secs(365 * 86_400);
/// How often the leader runs a pass.
pub const DEFAULT_ARCHIVE_INTERVAL: Duration = Duration::from_secs(300);
/// The shortest pause between two batches.
pub const MIN_PAUSE: Duration = Duration::from_millis(10);
/// The pause after a batch, as a multiple of the time the batch took.
pub const PAUSE_FACTOR: u32 = 3;

/// How long finished tasks are kept where.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Done and cancelled tasks move to the archive this long after they finished.
    pub after: Duration,
    /// Failed tasks (dead letters) move to the archive this long after they finished.
    pub dead_letters: Duration,
    /// Archived tasks are purged this long after they were archived.
    pub archive: Duration,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            after: DEFAULT_ARCHIVE_AFTER,
            dead_letters: DEFAULT_DEAD_LETTER_RETENTION,
            archive: DEFAULT_ARCHIVE_RETENTION,
        }
    }
}

impl Retention {
    /// The cutoffs at `now`: (finished before, for done and cancelled; finished before, for
    /// failed; archived before).
    pub fn cutoffs(&self, now: DateTime<Utc>) -> (DateTime<Utc>, DateTime<Utc>, DateTime<Utc>) {
        let before = |age: Duration| now - chrono_duration(age);
        (
            before(self.after),
            before(self.dead_letters),
            before(self.archive),
        )
    }
}

/// What a pass moved and purged (or, for a dry run, would).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct PassReport {
    pub archived: ArchiveCounts,
    pub purged: u64,
    /// Transactions the pass committed (0 for a dry run).
    pub batches: u64,
}

/// The state groups a pass moves, each with its own age.
fn groups(retention: &Retention, now: DateTime<Utc>) -> [(Vec<Status>, DateTime<Utc>); 2] {
    let (finished, dead, _) = retention.cutoffs(now);
    [
        (vec![Status::Done, Status::Cancelled], finished),
        (vec![Status::Failed], dead),
    ]
}

/// One pass at `now`: moves what is old enough batch by batch (`batch` rows each), then purges
/// the archive the same way. `keep_going` is asked before every batch; when it says no, the
/// pass ends early with what it did so far.
pub async fn pass(
    store: &dyn Store,
    retention: &Retention,
    now: DateTime<Utc>,
    batch: usize,
    keep_going: impl Fn() -> bool,
) -> Result<PassReport, StoreError> {
    let batch = batch.max(1);
    let mut report = PassReport::default();
    for (statuses, finished_before) in groups(retention, now) {
        loop {
            if !keep_going() {
                return Ok(report);
            }
            let started = Instant::now();
            let moved = store
                .archive_batch(&ArchiveBatch {
                    statuses: statuses.clone(),
                    finished_before,
                    limit: batch,
                    now,
                })
                .await?;
            report.batches += 1;
            report.archived.merge(moved);
            if (moved.total() as usize) < batch {
                break;
            }
            tokio::time::sleep((started.elapsed() * PAUSE_FACTOR).max(MIN_PAUSE)).await;
        }
    }
    let (_, _, archived_before) = retention.cutoffs(now);
    loop {
        if !keep_going() {
            return Ok(report);
        }
        let started = Instant::now();
        let purged = store.purge_archive_batch(archived_before, batch).await?;
        report.batches += 1;
        report.purged += purged;
        if (purged as usize) < batch {
            break;
        }
        tokio::time::sleep((started.elapsed() * PAUSE_FACTOR).max(MIN_PAUSE)).await;
    }
    Ok(report)
}

/// What a pass at `now` would move and purge, changing nothing.
pub async fn dry_run(
    store: &dyn Store,
    retention: &Retention,
    now: DateTime<Utc>,
) -> Result<PassReport, StoreError> {
    let mut report = PassReport::default();
    for (statuses, finished_before) in groups(retention, now) {
        report
            .archived
            .merge(store.count_archivable(&statuses, finished_before).await?);
    }
    let (_, _, archived_before) = retention.cutoffs(now);
    report.purged = store.count_purgeable(archived_before).await?;
    Ok(report)
}

/// The archiver service.
pub struct Archiver {
    pub store: SharedStore,
    pub retention: Retention,
    /// How often a pass runs while this host leads.
    pub interval: Duration,
    pub leadership: Arc<Leadership>,
    pub shutdown: Shutdown,
}

impl Archiver {
    /// One pass now, ending early if this host stops leading or starts shutting down.
    pub async fn run_once(&self) -> Result<PassReport, StoreError> {
        let report = pass(
            self.store.as_ref(),
            &self.retention,
            Utc::now(),
            DEFAULT_BATCH,
            || self.leadership.is_leader() && self.shutdown.stage() == Stage::Running,
        )
        .await?;
        if report.archived.total() > 0 || report.purged > 0 {
            tracing::info!(
                done = report.archived.done,
                cancelled = report.archived.cancelled,
                failed = report.archived.failed,
                purged = report.purged,
                batches = report.batches,
                "archived finished tasks and purged the archive past its retention"
            );
        }
        Ok(report)
    }

    /// Runs a pass every `interval` while this host leads (and as soon as it becomes the
    /// leader), until shutdown begins.
    pub async fn run(self) {
        let mut ticks = LeaderTicks::new(
            self.interval,
            self.leadership.clone(),
            self.shutdown.clone(),
        );
        while ticks.next().await {
            if let Err(error) = self.run_once().await {
                tracing::warn!("archiving finished tasks failed: {error}; will try again");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cutoffs_count_back_from_now() {
        let now = DateTime::from_timestamp(100 * 86_400, 0).unwrap();
        let (finished, dead, archived) = Retention::default().cutoffs(now);
        assert_eq!(finished, DateTime::from_timestamp(70 * 86_400, 0).unwrap());
        assert_eq!(dead, DateTime::from_timestamp(10 * 86_400, 0).unwrap());
        assert_eq!(
            archived,
            DateTime::from_timestamp(-265 * 86_400, 0).unwrap()
        );
    }
}
