//! What alerting needs from the database: the figures its rules read (dead letters of each type
//! within a window; the backlog is [`super::reads::TaskReads::backlog`]) and the alert log
//! (`spool_alert`): every alert and drill sent, by which host, through which channels with
//! what outcome. The log lets every host show recent alerts and the last drill, lets a new
//! leader take over the alerts its predecessor had firing, and survives restarts.
//!
//! One implementation in portable SQL ([`super::sql`]) serves every backend. Dead letters within
//! a window read the partial index of failed rows by `finished_at` (`async_task_failed_at`)
//! where the backend has one (MySQL has no partial index and reads the listing index's failed
//! rows, see its migration 0008).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use std::collections::BTreeMap;

use super::StoreError;
use super::encoding::millis;
use super::sql::{Arg, Cells, Portable, Via, count, stored};

/// The `event` of a drill in the alert log.
pub const DRILL: &str = "drill";

/// How one channel took one message.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct ChannelOutcome {
    /// The channel's name (`[[alerts.webhook]] name`, default `webhook-1`, `email-1`, ...).
    pub channel: String,
    /// `webhook` or `email`.
    pub kind: String,
    pub ok: bool,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One row of the alert log.
#[derive(Debug, Clone, PartialEq)]
pub struct AlertRecord {
    /// Assigned by the store (ignored when recording).
    pub id: i64,
    /// `firing`, `repeat`, `resolved` or `drill`.
    pub event: String,
    /// The alert's key (`dead_letters:mail`, `database`, ...; `drill` for a drill).
    pub alert: String,
    pub task_type: Option<String>,
    /// The figure that broke the rule (dead letters, pending tasks, seconds).
    pub value: u64,
    /// The message as sent.
    pub message: String,
    pub channels: Vec<ChannelOutcome>,
    /// The host that sent it.
    pub host_id: String,
    /// When the alert started firing (a drill: when it was sent).
    pub since: DateTime<Utc>,
    pub sent_at: DateTime<Utc>,
}

/// The alert concern of a store.
#[async_trait]
pub trait AlertLog: Send + Sync {
    /// Dead letters (failed tasks) per type that failed at or after `since`.
    async fn dead_letters_since(
        &self,
        since: DateTime<Utc>,
    ) -> Result<BTreeMap<String, u64>, StoreError>;

    /// Appends to the alert log; returns the row's id.
    async fn record_alert(&self, record: &AlertRecord) -> Result<i64, StoreError>;

    /// The newest `limit` rows of the alert log, newest first.
    async fn recent_alerts(&self, limit: usize) -> Result<Vec<AlertRecord>, StoreError>;

    /// For every alert whose latest row is `firing` or `repeat` (not resolved), that row.
    async fn open_alerts(&self) -> Result<Vec<AlertRecord>, StoreError>;

    /// The latest drill.
    async fn last_drill(&self) -> Result<Option<AlertRecord>, StoreError>;

    /// Forgets log rows sent before `before`, except drills and the latest row of each alert
    /// (so an open alert is never forgotten); returns how many.
    async fn prune_alerts(&self, before: DateTime<Utc>) -> Result<u64, StoreError>;
}

/// The channel outcomes as stored (a JSON array).
pub fn channels_to_json(channels: &[ChannelOutcome]) -> String {
    serde_json::to_string(channels).unwrap_or_else(|_| "[]".into())
}

/// Stored channel outcomes read back; an unreadable value reads as none.
pub fn channels_from_json(text: &str) -> Vec<ChannelOutcome> {
    serde_json::from_str(text).unwrap_or_default()
}

/// The columns every alert read selects, in the order [`record_from_row`] reads them.
const ALERT_COLUMNS: &str =
    "id, event, alert, task_type, value, message, channels, host_id, since, sent_at";

/// Turns a stored row into a record (times out of range read as the epoch).
fn record_from_row(row: &impl Cells) -> Result<AlertRecord, StoreError> {
    let time = |ms: i64| DateTime::from_timestamp_millis(ms).unwrap_or_default();
    Ok(AlertRecord {
        id: row.int(0)?,
        event: row.text(1)?,
        alert: row.text(2)?,
        task_type: row.opt_text(3)?,
        value: count(row.int(4)?),
        message: row.text(5)?,
        channels: channels_from_json(&row.text(6)?),
        host_id: row.text(7)?,
        since: time(row.int(8)?),
        sent_at: time(row.int(9)?),
    })
}

fn records(rows: Vec<impl Cells>) -> Result<Vec<AlertRecord>, StoreError> {
    rows.iter().map(record_from_row).collect()
}

/// The alert log in portable SQL, for every backend.
#[async_trait]
impl<S: Portable> AlertLog for S {
    async fn dead_letters_since(
        &self,
        since: DateTime<Utc>,
    ) -> Result<BTreeMap<String, u64>, StoreError> {
        // The partial index of failed rows by `finished_at` where the backend has one; the
        // status is written into the statement so the planner matches it to the predicate.
        let hint = self.dialect().use_index("async_task_failed_at");
        let mut statement = self.statement(&format!(
            "SELECT task_type, COUNT(*) FROM async_task {hint} \
             WHERE status = 3 AND finished_at >= ? GROUP BY task_type"
        ));
        statement.bind(Arg::Int(millis(since)));
        let rows = self.fetch(Via::Reader, &statement).await?;
        rows.iter()
            .map(|row| Ok((row.text(0)?, count(row.int(1)?))))
            .collect()
    }

    async fn record_alert(&self, record: &AlertRecord) -> Result<i64, StoreError> {
        let channels = channels_to_json(&record.channels);
        let mut statement = self.statement(
            "INSERT INTO spool_alert (event, alert, task_type, value, message, channels, host_id, since, sent_at) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        );
        statement
            .bind(Arg::Text(&record.event))
            .bind(Arg::Text(&record.alert))
            .bind(Arg::OptText(record.task_type.as_deref()))
            .bind(Arg::Int(stored(record.value)))
            .bind(Arg::Text(&record.message))
            .bind(Arg::Text(&channels))
            .bind(Arg::Text(&record.host_id))
            .bind(Arg::Int(millis(record.since)))
            .bind(Arg::Int(millis(record.sent_at)));
        self.insert_id(&statement).await
    }

    async fn recent_alerts(&self, limit: usize) -> Result<Vec<AlertRecord>, StoreError> {
        let mut statement = self.statement(&format!(
            "SELECT {ALERT_COLUMNS} FROM spool_alert ORDER BY id DESC LIMIT ?"
        ));
        statement.bind(Arg::Limit(limit));
        records(self.fetch(Via::Reader, &statement).await?)
    }

    async fn open_alerts(&self) -> Result<Vec<AlertRecord>, StoreError> {
        let statement = self.statement(&format!(
            "SELECT {ALERT_COLUMNS} FROM spool_alert \
             WHERE id IN (SELECT MAX(id) FROM spool_alert GROUP BY alert) \
               AND event IN ('firing', 'repeat') ORDER BY id"
        ));
        records(self.fetch(Via::Reader, &statement).await?)
    }

    async fn last_drill(&self) -> Result<Option<AlertRecord>, StoreError> {
        let mut statement = self.statement(&format!(
            "SELECT {ALERT_COLUMNS} FROM spool_alert WHERE alert = ? AND event = ? \
             ORDER BY id DESC LIMIT 1"
        ));
        statement.bind(Arg::Text(DRILL)).bind(Arg::Text(DRILL));
        let row = self.fetch_optional(Via::Reader, &statement).await?;
        row.as_ref().map(record_from_row).transpose()
    }

    async fn prune_alerts(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        // The latest rows as a derived table: MySQL refuses a subquery on the table a DELETE
        // changes (error 1093) unless it is materialized first.
        let mut statement = self.statement(
            "DELETE FROM spool_alert WHERE sent_at < ? AND event <> ? \
             AND id NOT IN (SELECT id FROM (SELECT MAX(id) AS id FROM spool_alert GROUP BY alert) AS latest)",
        );
        statement
            .bind(Arg::Int(millis(before)))
            .bind(Arg::Text(DRILL));
        self.execute(&statement).await
    }
}
