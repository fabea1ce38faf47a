//! [`AlertLog`] on MySQL/MariaDB: the alert rules' reads of the task table and the
//! `spool_alert` log. Text columns have a binary collation, so they decode through [`Text`].
//! Dead letters within a window are read through the listing index's failed rows (MySQL has no
//! partial index to keep only them by time; see migration 0008).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use std::collections::BTreeMap;

use super::MySqlStore;
use super::rows::Text;
use crate::store::StoreError;
use crate::store::alerts::{
    ALERT_COLUMNS, AlertLog, AlertRecord, AlertRow, Backlog, DRILL, backlog_from_rows,
    channels_to_json, record_from_row,
};
use crate::store::encoding::millis;

/// An alert row as MySQL returns it.
type MyAlertRow = (
    i64,
    Text,
    Text,
    Option<Text>,
    i64,
    Text,
    Text,
    Text,
    i64,
    i64,
);

fn record(row: MyAlertRow) -> AlertRecord {
    let (id, event, alert, task_type, value, message, channels, host_id, since, sent_at) = row;
    let row: AlertRow = (
        id,
        event.0,
        alert.0,
        task_type.map(|t| t.0),
        value,
        message.0,
        channels.0,
        host_id.0,
        since,
        sent_at,
    );
    record_from_row(row)
}

#[async_trait]
impl AlertLog for MySqlStore {
    async fn dead_letters_since(
        &self,
        since: DateTime<Utc>,
    ) -> Result<BTreeMap<String, u64>, StoreError> {
        let rows: Vec<(Text, i64)> = sqlx::query_as(
            "SELECT task_type, COUNT(*) FROM async_task \
             WHERE status = 3 AND finished_at >= ? GROUP BY task_type",
        )
        .bind(millis(since))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(t, n)| (t.0, u64::try_from(n).unwrap_or(0)))
            .collect())
    }

    async fn backlog_by_type(
        &self,
        now: DateTime<Utc>,
    ) -> Result<BTreeMap<String, Backlog>, StoreError> {
        let rows: Vec<(Text, i64, Option<i64>)> = sqlx::query_as(
            "SELECT task_type, COUNT(*), MIN(next_run_at) FROM async_task \
             WHERE status = 0 GROUP BY task_type",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(backlog_from_rows(
            rows.into_iter().map(|(t, n, oldest)| (t.0, n, oldest)),
            now,
        ))
    }

    async fn record_alert(&self, record: &AlertRecord) -> Result<i64, StoreError> {
        let outcome = sqlx::query(
            "INSERT INTO spool_alert (event, alert, task_type, value, message, channels, host_id, since, sent_at) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
        .execute(&self.pool)
        .await?;
        Ok(i64::try_from(outcome.last_insert_id()).unwrap_or(i64::MAX))
    }

    async fn recent_alerts(&self, limit: usize) -> Result<Vec<AlertRecord>, StoreError> {
        let rows: Vec<MyAlertRow> = sqlx::query_as(&format!(
            "SELECT {ALERT_COLUMNS} FROM spool_alert ORDER BY id DESC LIMIT ?"
        ))
        .bind(u64::try_from(limit).unwrap_or(u64::MAX))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(record).collect())
    }

    async fn open_alerts(&self) -> Result<Vec<AlertRecord>, StoreError> {
        let rows: Vec<MyAlertRow> = sqlx::query_as(&format!(
            "SELECT {ALERT_COLUMNS} FROM spool_alert \
             WHERE id IN (SELECT MAX(id) FROM spool_alert GROUP BY alert) \
               AND event IN ('firing', 'repeat') ORDER BY id"
        ))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(record).collect())
    }

    async fn last_drill(&self) -> Result<Option<AlertRecord>, StoreError> {
        let row: Option<MyAlertRow> = sqlx::query_as(&format!(
            "SELECT {ALERT_COLUMNS} FROM spool_alert WHERE alert = ? AND event = ? \
             ORDER BY id DESC LIMIT 1"
        ))
        .bind(DRILL)
        .bind(DRILL)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(record))
    }

    async fn prune_alerts(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        // MySQL refuses a subquery on the table a DELETE changes (error 1093) unless it is a
        // derived table, which is materialized first.
        let outcome = sqlx::query(
            "DELETE FROM spool_alert WHERE sent_at < ? AND event <> ? \
             AND id NOT IN (SELECT id FROM (SELECT MAX(id) AS id FROM spool_alert GROUP BY alert) AS latest)",
        )
        .bind(millis(before))
        .bind(DRILL)
        .execute(&self.pool)
        .await?;
        Ok(outcome.rows_affected())
    }
}
