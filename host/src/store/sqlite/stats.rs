//! [`Stats`] on SQLite: the backlog and finished-task reads, and the `spool_stats` history.
//! Reads pin their index (`INDEXED BY`) as the hot statements do: the listing index for the
//! backlog, the finished index for an interval.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::{QueryBuilder, Sqlite};
use std::collections::BTreeMap;

use super::SqliteStore;
use crate::store::StoreError;
use crate::store::encoding::millis;
use crate::store::stats::{
    Backlog, Finished, POINT_COLUMNS, PointRow, Stats, StatsPoint, Tier, backlog_from_rows,
    finished_from_rows, point_from_row, stored,
};

#[async_trait]
impl Stats for SqliteStore {
    async fn backlog(&self, now: DateTime<Utc>) -> Result<BTreeMap<String, Backlog>, StoreError> {
        let rows: Vec<(i64, String, i64)> = sqlx::query_as(
            "SELECT status, task_type, COUNT(*) FROM async_task INDEXED BY async_task_listing \
             WHERE status IN (0, 1, 3) GROUP BY status, task_type",
        )
        .fetch_all(&self.reader)
        .await?;
        let mut backlog = backlog_from_rows(rows);
        for (task_type, entry) in backlog.iter_mut().filter(|(_, b)| b.pending > 0) {
            let due: Option<(i64,)> = sqlx::query_as(
                "SELECT next_run_at FROM async_task INDEXED BY async_task_listing \
                 WHERE status = 0 AND task_type = ?1 AND next_run_at <= ?2 ORDER BY id LIMIT 1",
            )
            .bind(task_type)
            .bind(millis(now))
            .fetch_optional(&self.reader)
            .await?;
            entry.oldest_due = due.and_then(|(ms,)| DateTime::from_timestamp_millis(ms));
        }
        Ok(backlog)
    }

    async fn finished_between(
        &self,
        after: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Result<BTreeMap<String, Finished>, StoreError> {
        let rows: Vec<(String, i64, Option<i64>)> = sqlx::query_as(
            "SELECT task_type, status, finished_at - attempted_at \
             FROM async_task INDEXED BY async_task_finished \
             WHERE finished_at > ?1 AND finished_at <= ?2",
        )
        .bind(millis(after))
        .bind(millis(until))
        .fetch_all(&self.reader)
        .await?;
        Ok(finished_from_rows(rows))
    }

    async fn write_stats(&self, tier: Tier, points: &[StatsPoint]) -> Result<(), StoreError> {
        if points.is_empty() {
            return Ok(());
        }
        let mut tx = self.writer.begin().await?;
        // 14 values a row: 60 rows stay far below SQLite's variable limit.
        for chunk in points.chunks(60) {
            let mut insert = QueryBuilder::<Sqlite>::new(format!(
                "INSERT OR REPLACE INTO spool_stats (tier, {POINT_COLUMNS}) "
            ));
            insert.push_values(chunk, |mut row, p| {
                row.push_bind(tier.code())
                    .push_bind(&p.task_type)
                    .push_bind(millis(p.at))
                    .push_bind(stored(p.span_ms))
                    .push_bind(stored(p.pending))
                    .push_bind(stored(p.running))
                    .push_bind(stored(p.failed))
                    .push_bind(p.oldest_pending_ms.map(stored))
                    .push_bind(stored(p.finished_done))
                    .push_bind(stored(p.finished_failed))
                    .push_bind(stored(p.finished_cancelled))
                    .push_bind(stored(p.attempts_timed))
                    .push_bind(p.attempt_p50_ms.map(stored))
                    .push_bind(p.attempt_p95_ms.map(stored));
            });
            insert.build().execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn read_stats(
        &self,
        tier: Tier,
        after: DateTime<Utc>,
        until: DateTime<Utc>,
        task_type: Option<&str>,
    ) -> Result<Vec<StatsPoint>, StoreError> {
        let mut query = QueryBuilder::<Sqlite>::new(format!(
            "SELECT {POINT_COLUMNS} FROM spool_stats WHERE tier = "
        ));
        query
            .push_bind(tier.code())
            .push(" AND at > ")
            .push_bind(millis(after))
            .push(" AND at <= ")
            .push_bind(millis(until));
        if let Some(task_type) = task_type {
            query.push(" AND task_type = ").push_bind(task_type);
        }
        query.push(" ORDER BY at, task_type");
        let rows: Vec<PointRow> = query.build_query_as().fetch_all(&self.reader).await?;
        rows.into_iter().map(point_from_row).collect()
    }

    async fn latest_stats(&self, tier: Tier) -> Result<Option<DateTime<Utc>>, StoreError> {
        let (at,): (Option<i64>,) =
            sqlx::query_as("SELECT MAX(at) FROM spool_stats WHERE tier = ?")
                .bind(tier.code())
                .fetch_one(&self.reader)
                .await?;
        Ok(at.and_then(DateTime::from_timestamp_millis))
    }

    async fn prune_stats(&self, tier: Tier, before: DateTime<Utc>) -> Result<u64, StoreError> {
        let outcome = sqlx::query("DELETE FROM spool_stats WHERE tier = ? AND at < ?")
            .bind(tier.code())
            .bind(millis(before))
            .execute(&self.writer)
            .await?;
        Ok(outcome.rows_affected())
    }
}
