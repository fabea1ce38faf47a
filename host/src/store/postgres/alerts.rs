//! [`AlertLog`] on PostgreSQL: the alert rules' reads of the task table and the `spool_alert`
//! log. Dead letters within a window read the partial index of failed rows by `finished_at`
//! (`async_task_failed_at`, migration 0010); the status is written into the statement so the
//! planner matches it to the index's predicate.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use std::collections::BTreeMap;

use super::PgStore;
use crate::store::StoreError;
use crate::store::alerts::{
    ALERT_COLUMNS, AlertLog, AlertRecord, AlertRow, Backlog, DRILL, backlog_from_rows,
    channels_to_json, record_from_row,
};
use crate::store::encoding::millis;

#[async_trait]
impl AlertLog for PgStore {
    async fn dead_letters_since(
        &self,
        since: DateTime<Utc>,
    ) -> Result<BTreeMap<String, u64>, StoreError> {
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT task_type, COUNT(*) FROM async_task \
             WHERE status = 3 AND finished_at >= $1 GROUP BY task_type",
        )
        .bind(millis(since))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(t, n)| (t, u64::try_from(n).unwrap_or(0)))
            .collect())
    }

    async fn backlog_by_type(
        &self,
        now: DateTime<Utc>,
    ) -> Result<BTreeMap<String, Backlog>, StoreError> {
        let rows: Vec<(String, i64, Option<i64>)> = sqlx::query_as(
            "SELECT task_type, COUNT(*), MIN(next_run_at) FROM async_task \
             WHERE status = 0 GROUP BY task_type",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(backlog_from_rows(rows, now))
    }

    async fn record_alert(&self, record: &AlertRecord) -> Result<i64, StoreError> {
        let (id,): (i64,) = sqlx::query_as(
            "INSERT INTO spool_alert (event, alert, task_type, value, message, channels, host_id, since, sent_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING id",
        )
        .bind(&record.event)
        .bind(&record.alert)
        .bind(&record.task_type)
        .bind(i64::try_from(record.value).unwrap_or(i64::MAX))
        .bind(&record.message)
        .bind(channels_to_json(&record.channels))
        .bind(&record.host_id)
        .bind(millis(record.since))
        .bind(millis(record.sent_at))
        .fetch_one(&self.pool)
        .await?;
        Ok(id)
    }

    async fn recent_alerts(&self, limit: usize) -> Result<Vec<AlertRecord>, StoreError> {
        let rows: Vec<AlertRow> = sqlx::query_as(&format!(
            "SELECT {ALERT_COLUMNS} FROM spool_alert ORDER BY id DESC LIMIT $1"
        ))
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(record_from_row).collect())
    }

    async fn open_alerts(&self) -> Result<Vec<AlertRecord>, StoreError> {
        let rows: Vec<AlertRow> = sqlx::query_as(&format!(
            "SELECT {ALERT_COLUMNS} FROM spool_alert \
             WHERE id IN (SELECT MAX(id) FROM spool_alert GROUP BY alert) \
               AND event IN ('firing', 'repeat') ORDER BY id"
        ))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(record_from_row).collect())
    }

    async fn last_drill(&self) -> Result<Option<AlertRecord>, StoreError> {
        let row: Option<AlertRow> = sqlx::query_as(&format!(
            "SELECT {ALERT_COLUMNS} FROM spool_alert WHERE alert = $1 AND event = $1 \
             ORDER BY id DESC LIMIT 1"
        ))
        .bind(DRILL)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(record_from_row))
    }

    async fn prune_alerts(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        let outcome = sqlx::query(
            "DELETE FROM spool_alert WHERE sent_at < $1 AND event <> $2 \
             AND id NOT IN (SELECT MAX(id) FROM spool_alert GROUP BY alert)",
        )
        .bind(millis(before))
        .bind(DRILL)
        .execute(&self.pool)
        .await?;
        Ok(outcome.rows_affected())
    }
}
