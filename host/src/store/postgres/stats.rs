//! [`Stats`] on PostgreSQL: the backlog and finished-task reads, and the `spool_stats` history.
//! The backlog is an index-only scan of the listing index; an interval's finished tasks come
//! from the partial finished index (`docs/databases.md`).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::{Postgres, QueryBuilder};
use std::collections::BTreeMap;

use super::PgStore;
use super::rows::millis;
use crate::store::StoreError;
use crate::store::stats::{
    Backlog, Finished, POINT_COLUMNS, PointRow, Stats, StatsPoint, Tier, backlog_from_rows,
    finished_from_rows, point_from_row, stored,
};

fn tier_code(tier: Tier) -> i16 {
    tier.code() as i16
}

#[async_trait]
impl Stats for PgStore {
    async fn backlog(&self, now: DateTime<Utc>) -> Result<BTreeMap<String, Backlog>, StoreError> {
        let rows: Vec<(i16, String, i64)> = sqlx::query_as(
            "SELECT status, task_type, COUNT(*) FROM async_task \
             WHERE status IN (0, 1, 3) GROUP BY status, task_type",
        )
        .fetch_all(&self.pool)
        .await?;
        let mut backlog = backlog_from_rows(rows.into_iter().map(|(s, t, n)| (i64::from(s), t, n)));
        for (task_type, entry) in backlog.iter_mut().filter(|(_, b)| b.pending > 0) {
            // The listing index in id order, from the type's first pending entry.
            let due: Option<(i64,)> = sqlx::query_as(
                "SELECT next_run_at FROM async_task \
                 WHERE status = 0 AND task_type = $1 AND next_run_at <= $2 \
                 ORDER BY status, task_type, id LIMIT 1",
            )
            .bind(task_type)
            .bind(millis(now))
            .fetch_optional(&self.pool)
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
        let rows: Vec<(String, i16, Option<i64>)> = sqlx::query_as(
            "SELECT task_type, status, finished_at - attempted_at FROM async_task \
             WHERE finished_at > $1 AND finished_at <= $2",
        )
        .bind(millis(after))
        .bind(millis(until))
        .fetch_all(&self.pool)
        .await?;
        Ok(finished_from_rows(
            rows.into_iter().map(|(t, s, ms)| (t, i64::from(s), ms)),
        ))
    }

    async fn write_stats(&self, tier: Tier, points: &[StatsPoint]) -> Result<(), StoreError> {
        if points.is_empty() {
            return Ok(());
        }
        let mut tx = self.pool.begin().await?;
        for chunk in points.chunks(1000) {
            let mut insert = QueryBuilder::<Postgres>::new(format!(
                "INSERT INTO spool_stats (tier, {POINT_COLUMNS}) "
            ));
            insert.push_values(chunk, |mut row, p| {
                row.push_bind(tier_code(tier))
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
            insert.push(
                " ON CONFLICT (tier, at, task_type) DO UPDATE SET span_ms = EXCLUDED.span_ms, \
                 pending = EXCLUDED.pending, running = EXCLUDED.running, failed = EXCLUDED.failed, \
                 oldest_pending_ms = EXCLUDED.oldest_pending_ms, \
                 finished_done = EXCLUDED.finished_done, finished_failed = EXCLUDED.finished_failed, \
                 finished_cancelled = EXCLUDED.finished_cancelled, \
                 attempts_timed = EXCLUDED.attempts_timed, \
                 attempt_p50_ms = EXCLUDED.attempt_p50_ms, attempt_p95_ms = EXCLUDED.attempt_p95_ms",
            );
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
        let mut query = QueryBuilder::<Postgres>::new(format!(
            "SELECT {POINT_COLUMNS} FROM spool_stats WHERE tier = "
        ));
        query
            .push_bind(tier_code(tier))
            .push(" AND at > ")
            .push_bind(millis(after))
            .push(" AND at <= ")
            .push_bind(millis(until));
        if let Some(task_type) = task_type {
            query.push(" AND task_type = ").push_bind(task_type);
        }
        query.push(" ORDER BY at, task_type");
        let rows: Vec<PointRow> = query.build_query_as().fetch_all(&self.pool).await?;
        rows.into_iter().map(point_from_row).collect()
    }

    async fn latest_stats(&self, tier: Tier) -> Result<Option<DateTime<Utc>>, StoreError> {
        let (at,): (Option<i64>,) =
            sqlx::query_as("SELECT MAX(at) FROM spool_stats WHERE tier = $1")
                .bind(tier_code(tier))
                .fetch_one(&self.pool)
                .await?;
        Ok(at.and_then(DateTime::from_timestamp_millis))
    }

    async fn prune_stats(&self, tier: Tier, before: DateTime<Utc>) -> Result<u64, StoreError> {
        let outcome = sqlx::query("DELETE FROM spool_stats WHERE tier = $1 AND at < $2")
            .bind(tier_code(tier))
            .bind(millis(before))
            .execute(&self.pool)
            .await?;
        Ok(outcome.rows_affected())
    }
}
