//! What alerting needs from the database: the figures its rules read (dead letters of each type
//! within a window, the backlog and its oldest due task per type) and the alert log
//! (`spool_alert`): every alert and drill sent, by which host, through which channels with
//! what outcome. The log lets every host show recent alerts and the last drill, lets a new
//! leader take over the alerts its predecessor had firing, and survives restarts.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use std::collections::BTreeMap;

use super::StoreError;

/// The `event` of a drill in the alert log.
pub const DRILL: &str = "drill";

/// Pending tasks of one type.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Backlog {
    pub pending: u64,
    /// The earliest `next_run_at` among them that is due now; None when all are scheduled
    /// for later.
    pub oldest_due: Option<DateTime<Utc>>,
}

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

    /// Pending tasks per type, with the oldest one due at `now`.
    async fn backlog_by_type(
        &self,
        now: DateTime<Utc>,
    ) -> Result<BTreeMap<String, Backlog>, StoreError>;

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

/// A stored alert row read back: `(id, event, alert, task_type, value, message, channels,
/// host_id, since, sent_at)` as every backend selects them.
pub type AlertRow = (
    i64,
    String,
    String,
    Option<String>,
    i64,
    String,
    String,
    String,
    i64,
    i64,
);

/// The columns every backend selects for an [`AlertRow`], in order.
pub const ALERT_COLUMNS: &str =
    "id, event, alert, task_type, value, message, channels, host_id, since, sent_at";

/// Turns a stored row into a record (times out of range read as the epoch).
pub fn record_from_row(row: AlertRow) -> AlertRecord {
    let (id, event, alert, task_type, value, message, channels, host_id, since, sent_at) = row;
    let time = |ms: i64| DateTime::from_timestamp_millis(ms).unwrap_or_default();
    AlertRecord {
        id,
        event,
        alert,
        task_type,
        value: u64::try_from(value).unwrap_or(0),
        message,
        channels: channels_from_json(&channels),
        host_id,
        since: time(since),
        sent_at: time(sent_at),
    }
}

/// Builds the per-type backlog from `(task_type, pending, oldest next_run_at)` rows.
pub fn backlog_from_rows(
    rows: impl IntoIterator<Item = (String, i64, Option<i64>)>,
    now: DateTime<Utc>,
) -> BTreeMap<String, Backlog> {
    let now = super::encoding::millis(now);
    rows.into_iter()
        .map(|(task_type, pending, oldest)| {
            let oldest_due = oldest
                .filter(|ms| *ms <= now)
                .and_then(DateTime::from_timestamp_millis);
            (
                task_type,
                Backlog {
                    pending: u64::try_from(pending).unwrap_or(0),
                    oldest_due,
                },
            )
        })
        .collect()
}
