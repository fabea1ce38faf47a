//! [`AlertLog`] on SQLite: the alert rules' reads of the task table and the `spool_alert` log.
//! Dead letters within a window read the partial index of failed rows by `finished_at`
//! (`async_task_failed_at`, migration 0011); the backlog reads the listing index.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use std::collections::BTreeMap;

use super::SqliteStore;
use crate::store::StoreError;
use crate::store::alerts::{
    ALERT_COLUMNS, AlertLog, AlertRecord, AlertRow, Backlog, DRILL, backlog_from_rows,
    channels_to_json, record_from_row,
};
use crate::store::encoding::millis;

#[async_trait]
impl AlertLog for SqliteStore {
    async fn dead_letters_since(
        &self,
        since: DateTime<Utc>,
    ) -> Result<BTreeMap<String, u64>, StoreError> {
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT task_type, COUNT(*) FROM async_task INDEXED BY async_task_failed_at \
             WHERE status = 3 AND finished_at >= ? GROUP BY task_type",
        )
        .bind(millis(since))
        .fetch_all(&self.reader)
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
        .fetch_all(&self.reader)
        .await?;
        Ok(backlog_from_rows(rows, now))
    }

    async fn record_alert(&self, record: &AlertRecord) -> Result<i64, StoreError> {
        let (id,): (i64,) = sqlx::query_as(
            "INSERT INTO spool_alert (event, alert, task_type, value, message, channels, host_id, since, sent_at) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
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
        .fetch_one(&self.writer)
        .await?;
        Ok(id)
    }

    async fn recent_alerts(&self, limit: usize) -> Result<Vec<AlertRecord>, StoreError> {
        let rows: Vec<AlertRow> = sqlx::query_as(&format!(
            "SELECT {ALERT_COLUMNS} FROM spool_alert ORDER BY id DESC LIMIT ?"
        ))
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(&self.reader)
        .await?;
        Ok(rows.into_iter().map(record_from_row).collect())
    }

    async fn open_alerts(&self) -> Result<Vec<AlertRecord>, StoreError> {
        let rows: Vec<AlertRow> = sqlx::query_as(&format!(
            "SELECT {ALERT_COLUMNS} FROM spool_alert \
             WHERE id IN (SELECT MAX(id) FROM spool_alert GROUP BY alert) \
               AND event IN ('firing', 'repeat') ORDER BY id"
        ))
        .fetch_all(&self.reader)
        .await?;
        Ok(rows.into_iter().map(record_from_row).collect())
    }

    async fn last_drill(&self) -> Result<Option<AlertRecord>, StoreError> {
        let row: Option<AlertRow> = sqlx::query_as(&format!(
            "SELECT {ALERT_COLUMNS} FROM spool_alert WHERE alert = ? AND event = ? \
             ORDER BY id DESC LIMIT 1"
        ))
        .bind(DRILL)
        .bind(DRILL)
        .fetch_optional(&self.reader)
        .await?;
        Ok(row.map(record_from_row))
    }

    async fn prune_alerts(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        let outcome = sqlx::query(
            "DELETE FROM spool_alert WHERE sent_at < ? AND event <> ? \
             AND id NOT IN (SELECT MAX(id) FROM spool_alert GROUP BY alert)",
        )
        .bind(millis(before))
        .bind(DRILL)
        .execute(&self.writer)
        .await?;
        Ok(outcome.rows_affected())
    }
}
