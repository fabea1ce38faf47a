//! Queue statistics: what the sampler reads from the task table (the backlog per type, the
//! tasks that finished in an interval) and the history it keeps in `spool_stats`, so the
//! backlog curve survives restarts and covers every host sharing the database.
//!
//! Reads of the task table stay cheap on a big table: the backlog is one `GROUP BY` over the
//! listing index `(status, task_type, id)` for the pending, running and failed rows (an
//! index-only range scan), plus one index seek per type with pending tasks for the oldest due
//! one; the finished tasks of an interval come from the finished index on `finished_at`
//! (`async_task_finished`, partial where the database allows it), so an interval costs the rows
//! that finished in it, not the table.
//!
//! `spool_stats` holds one row per (tier, time, task type): [`Tier::Samples`] every sampling
//! interval, [`Tier::Minutes`] rolled up from them; its primary key serves every read and prune.
//!
//! One implementation in portable SQL ([`super::sql`]) serves every backend; where the planner
//! needs telling (SQLite without statistics, MySQL) the reads name their index.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use std::collections::BTreeMap;

use super::StoreError;
use super::encoding::millis;
use super::sql::{Arg, Cells, Portable, Via, count, stored};

/// The resolution of stored points.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tier {
    /// One point per sampling interval (`stats_interval`, 10 s by default).
    Samples,
    /// One point per minute, rolled up from the samples.
    Minutes,
}

impl Tier {
    /// The code in the `tier` column.
    pub fn code(self) -> i64 {
        match self {
            Tier::Samples => 0,
            Tier::Minutes => 1,
        }
    }
}

/// What finished in an interval, for one task type.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Finished {
    pub done: u64,
    pub failed: u64,
    pub cancelled: u64,
    /// The last attempt's time (`finished_at - attempted_at`, milliseconds) of each task that
    /// ended done or failed after running, in no particular order.
    pub attempt_ms: Vec<u64>,
}

impl Finished {
    /// Adds one finished row: its final status code and, when it ran, its attempt time.
    pub fn add(&mut self, status: i64, attempt_ms: Option<i64>) {
        use super::encoding::status_from_code;
        use crate::task::Status;
        match status_from_code(status) {
            Some(Status::Done) => self.done += 1,
            Some(Status::Failed) => self.failed += 1,
            Some(Status::Cancelled) => {
                self.cancelled += 1;
                return;
            }
            _ => return,
        }
        if let Some(ms) = attempt_ms {
            self.attempt_ms.push(u64::try_from(ms).unwrap_or(0));
        }
    }
}

/// Finished rows `(task_type, status, attempt time in ms)` grouped by type.
pub fn finished_from_rows(
    rows: impl IntoIterator<Item = (String, i64, Option<i64>)>,
) -> BTreeMap<String, Finished> {
    let mut by_type: BTreeMap<String, Finished> = BTreeMap::new();
    for (task_type, status, attempt_ms) in rows {
        by_type
            .entry(task_type)
            .or_default()
            .add(status, attempt_ms);
    }
    by_type
}

/// One stored point of one task type: the backlog at `at` and what finished in the `span_ms`
/// before it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatsPoint {
    pub task_type: String,
    /// The end of the interval the point covers (Unix milliseconds precision).
    pub at: DateTime<Utc>,
    /// How long the interval is.
    pub span_ms: u64,
    pub pending: u64,
    pub running: u64,
    /// Dead letters.
    pub failed: u64,
    /// How long the oldest due pending task had waited at `at` (see
    /// [`super::reads::Backlog::oldest_due`]).
    pub oldest_pending_ms: Option<u64>,
    /// Tasks that finished in the interval, by outcome.
    pub finished_done: u64,
    pub finished_failed: u64,
    pub finished_cancelled: u64,
    /// How many attempt times the percentiles summarise.
    pub attempts_timed: u64,
    pub attempt_p50_ms: Option<u64>,
    pub attempt_p95_ms: Option<u64>,
}

/// The statistics operations of a queue database.
#[async_trait]
pub trait Stats {
    /// Tasks whose `finished_at` lies in `(after, until]`, per type.
    async fn finished_between(
        &self,
        after: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Result<BTreeMap<String, Finished>, StoreError>;

    /// Stores points, replacing any of the same tier, time and type (a rollup done again, a
    /// new leader sampling the same interval).
    async fn write_stats(&self, tier: Tier, points: &[StatsPoint]) -> Result<(), StoreError>;

    /// Points of `tier` with `at` in `(after, until]`, of one type or all, ordered by time
    /// then type.
    async fn read_stats(
        &self,
        tier: Tier,
        after: DateTime<Utc>,
        until: DateTime<Utc>,
        task_type: Option<&str>,
    ) -> Result<Vec<StatsPoint>, StoreError>;

    /// The time of the newest point of `tier`, if any.
    async fn latest_stats(&self, tier: Tier) -> Result<Option<DateTime<Utc>>, StoreError>;

    /// Deletes the points of `tier` older than `before`; returns how many.
    async fn prune_stats(&self, tier: Tier, before: DateTime<Utc>) -> Result<u64, StoreError>;
}

/// A stored point from its row ([`POINT_COLUMNS`]). Counts below zero read as zero.
fn point_from_row(row: &impl Cells) -> Result<StatsPoint, StoreError> {
    let at = row.int(1)?;
    let optional = |n: Option<i64>| n.map(count);
    Ok(StatsPoint {
        at: DateTime::from_timestamp_millis(at).ok_or_else(|| {
            StoreError::Database(format!("spool_stats holds an out-of-range time {at}"))
        })?,
        task_type: row.text(0)?,
        span_ms: count(row.int(2)?),
        pending: count(row.int(3)?),
        running: count(row.int(4)?),
        failed: count(row.int(5)?),
        oldest_pending_ms: optional(row.opt_int(6)?),
        finished_done: count(row.int(7)?),
        finished_failed: count(row.int(8)?),
        finished_cancelled: count(row.int(9)?),
        attempts_timed: count(row.int(10)?),
        attempt_p50_ms: optional(row.opt_int(11)?),
        attempt_p95_ms: optional(row.opt_int(12)?),
    })
}

/// The columns of `spool_stats` every read selects, in the order [`point_from_row`] reads them.
const POINT_COLUMNS: [&str; 13] = [
    "task_type",
    "at",
    "span_ms",
    "pending",
    "running",
    "failed",
    "oldest_pending_ms",
    "finished_done",
    "finished_failed",
    "finished_cancelled",
    "attempts_timed",
    "attempt_p50_ms",
    "attempt_p95_ms",
];

/// The statistics in portable SQL, for every backend.
#[async_trait]
impl<S: Portable> Stats for S {
    async fn finished_between(
        &self,
        after: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Result<BTreeMap<String, Finished>, StoreError> {
        let finished = self.dialect().use_index("async_task_finished");
        let mut statement = self.statement(&format!(
            "SELECT task_type, status, finished_at - attempted_at FROM async_task {finished} \
             WHERE finished_at > ? AND finished_at <= ?"
        ));
        statement
            .bind(Arg::Int(millis(after)))
            .bind(Arg::Int(millis(until)));
        let rows = self.fetch(Via::Reader, &statement).await?;
        let rows: Vec<(String, i64, Option<i64>)> = rows
            .iter()
            .map(|row| Ok((row.text(0)?, row.int(1)?, row.opt_int(2)?)))
            .collect::<Result<_, StoreError>>()?;
        Ok(finished_from_rows(rows))
    }

    async fn write_stats(&self, tier: Tier, points: &[StatsPoint]) -> Result<(), StoreError> {
        if points.is_empty() {
            return Ok(());
        }
        let dialect = self.dialect();
        let mut columns = vec!["tier"];
        columns.extend(POINT_COLUMNS);
        let per_statement = (dialect.max_binds() / columns.len()).clamp(1, 1000);
        let mut statements = Vec::new();
        for chunk in points.chunks(per_statement) {
            let row = format!("({})", vec!["?"; columns.len()].join(", "));
            let rows = vec![row.as_str(); chunk.len()].join(", ");
            let mut insert = self.statement(&dialect.insert_or_replace(
                "spool_stats",
                &columns,
                &["tier", "at", "task_type"],
                &rows,
            ));
            for p in chunk {
                insert
                    .bind(Arg::Int(tier.code()))
                    .bind(Arg::Text(&p.task_type))
                    .bind(Arg::Int(millis(p.at)))
                    .bind(Arg::Int(stored(p.span_ms)))
                    .bind(Arg::Int(stored(p.pending)))
                    .bind(Arg::Int(stored(p.running)))
                    .bind(Arg::Int(stored(p.failed)))
                    .bind(Arg::OptInt(p.oldest_pending_ms.map(stored)))
                    .bind(Arg::Int(stored(p.finished_done)))
                    .bind(Arg::Int(stored(p.finished_failed)))
                    .bind(Arg::Int(stored(p.finished_cancelled)))
                    .bind(Arg::Int(stored(p.attempts_timed)))
                    .bind(Arg::OptInt(p.attempt_p50_ms.map(stored)))
                    .bind(Arg::OptInt(p.attempt_p95_ms.map(stored)));
            }
            statements.push(insert);
        }
        self.execute_all(&statements).await?;
        Ok(())
    }

    async fn read_stats(
        &self,
        tier: Tier,
        after: DateTime<Utc>,
        until: DateTime<Utc>,
        task_type: Option<&str>,
    ) -> Result<Vec<StatsPoint>, StoreError> {
        let mut query = self.statement(&format!(
            "SELECT {} FROM spool_stats WHERE tier = ? AND at > ? AND at <= ?",
            POINT_COLUMNS.join(", ")
        ));
        query
            .bind(Arg::Int(tier.code()))
            .bind(Arg::Int(millis(after)))
            .bind(Arg::Int(millis(until)));
        if let Some(task_type) = task_type {
            query.push(" AND task_type = ?").bind(Arg::Text(task_type));
        }
        query.push(" ORDER BY at, task_type");
        let rows = self.fetch(Via::Reader, &query).await?;
        rows.iter().map(point_from_row).collect()
    }

    async fn latest_stats(&self, tier: Tier) -> Result<Option<DateTime<Utc>>, StoreError> {
        let mut statement = self.statement("SELECT MAX(at) FROM spool_stats WHERE tier = ?");
        statement.bind(Arg::Int(tier.code()));
        let row = self.fetch_one(Via::Reader, &statement).await?;
        Ok(row.opt_int(0)?.and_then(DateTime::from_timestamp_millis))
    }

    async fn prune_stats(&self, tier: Tier, before: DateTime<Utc>) -> Result<u64, StoreError> {
        let mut statement = self.statement("DELETE FROM spool_stats WHERE tier = ? AND at < ?");
        statement
            .bind(Arg::Int(tier.code()))
            .bind(Arg::Int(millis(before)));
        self.execute(&statement).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finished_rows_count_outcomes_and_time_only_run_attempts() {
        let rows = vec![
            ("a".to_string(), 2, Some(10)),
            ("a".to_string(), 2, Some(30)),
            ("a".to_string(), 3, Some(50)),
            ("a".to_string(), 4, None),
            ("a".to_string(), 4, Some(5)),
            ("b".to_string(), 3, None),
            ("b".to_string(), 0, Some(1)),
        ];
        let by_type = finished_from_rows(rows);
        let a = &by_type["a"];
        assert_eq!((a.done, a.failed, a.cancelled), (2, 1, 2));
        assert_eq!(a.attempt_ms, [10, 30, 50]);
        let b = &by_type["b"];
        assert_eq!((b.done, b.failed, b.cancelled), (0, 1, 0));
        assert!(b.attempt_ms.is_empty());
    }
}
