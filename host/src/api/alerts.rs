//! `GET /alerts` (the rules, what is firing, recent alerts, the last drill) and
//! `POST /alerts/drill` (send a marked test alert through every channel, record it).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use utoipa::ToSchema;

use super::AppState;
use super::error::{ApiError, ErrorDetail};
use crate::alerts::DrillReport;
use crate::store::alerts::{AlertRecord, ChannelOutcome};

/// How many alert-log rows `GET /alerts` shows.
const RECENT: usize = 50;

/// A rule.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct RuleView {
    /// `dead_letters`, `backlog`, `oldest_pending`, `plugin_load` or `database`.
    pub kind: String,
    /// The task type it is limited to; absent: every type.
    pub task_type: Option<String>,
    /// The rule in words.
    pub description: String,
}

/// A channel (without secrets).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ChannelView {
    pub name: String,
    /// `webhook` or `email`.
    pub kind: String,
    /// A webhook's scheme, host and port; an e-mail channel's recipients and server.
    pub target: String,
}

/// An alert that is firing.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct FiringView {
    /// The alert's key: `dead_letters:TYPE`, `backlog:TYPE`, `oldest_pending:TYPE`,
    /// `plugin_load:TYPE` or `database`.
    pub alert: String,
    pub task_type: Option<String>,
    /// The figure that broke the rule (dead letters in the window, pending tasks, seconds).
    pub count: u64,
    /// What holds, in words.
    pub text: String,
    pub since: DateTime<Utc>,
    pub last_sent: DateTime<Utc>,
}

/// A row of the alert log.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SentView {
    pub id: i64,
    /// `firing`, `repeat`, `resolved` or `drill`.
    pub event: String,
    pub alert: String,
    pub task_type: Option<String>,
    pub count: u64,
    /// The message as sent.
    pub message: String,
    /// The host that sent it.
    pub host_id: String,
    pub since: DateTime<Utc>,
    pub sent_at: DateTime<Utc>,
    pub channels: Vec<ChannelOutcome>,
}

impl From<AlertRecord> for SentView {
    fn from(r: AlertRecord) -> Self {
        SentView {
            id: r.id,
            event: r.event,
            alert: r.alert,
            task_type: r.task_type,
            count: r.value,
            message: r.message,
            host_id: r.host_id,
            since: r.since,
            sent_at: r.sent_at,
            channels: r.channels,
        }
    }
}

/// Alerting at a glance.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct AlertsView {
    /// The link every alert carries.
    pub dashboard_url: String,
    /// A firing alert is sent again after this many seconds while it lasts.
    pub cooldown_secs: u64,
    pub rules: Vec<RuleView>,
    pub channels: Vec<ChannelView>,
    /// Alerts firing now: those over the task table (as the leading host sent them) and this
    /// host's own (its plugins, its database).
    pub firing: Vec<FiringView>,
    /// The newest rows of the alert log (every host's), newest first; empty while the database
    /// does not answer.
    pub recent: Vec<SentView>,
    /// The latest drill; absent when none is on record.
    pub last_drill: Option<DrillReport>,
    /// No drill in the last 90 days (or none at all): time for one.
    pub drill_due: bool,
    /// What is wrong with the alert chain: no channel, a drill due or failed, the database
    /// not answering.
    pub warnings: Vec<String>,
}

/// Alert rules, firing alerts, recent alerts and the last drill.
#[utoipa::path(get, path = "/alerts", tag = "host",
    responses((status = 200, description = "Alerting at a glance", body = AlertsView)))]
pub async fn get_alerts(State(state): State<Arc<AppState>>) -> Json<AlertsView> {
    let alerts = &state.alerts;
    let config = &alerts.config;
    let mut warnings = Vec::new();
    let mut firing: Vec<FiringView> = Vec::new();
    let mut recent = Vec::new();
    let mut last_drill = None;
    let read = async {
        Ok::<_, crate::store::StoreError>((
            state.store.open_alerts().await?,
            state.store.recent_alerts(RECENT).await?,
            alerts.last_drill().await?,
        ))
    };
    match read.await {
        Ok((open, sent, drill)) => {
            firing.extend(
                open.into_iter()
                    .filter(|r| {
                        crate::alerts::rules::condition_of_key(&r.alert, 0, String::new())
                            .is_some_and(|c| c.shared)
                    })
                    .map(|r| FiringView {
                        text: crate::alerts::message::condition_text(&r.message),
                        alert: r.alert,
                        task_type: r.task_type,
                        count: r.value,
                        since: r.since,
                        last_sent: r.sent_at,
                    }),
            );
            recent = sent.into_iter().map(SentView::from).collect();
            last_drill = drill;
        }
        Err(error) => {
            tracing::warn!("GET /alerts: the alert log cannot be read: {error}");
            warnings.push(
                "the task database does not answer: alerts over the task table, recent alerts and the last drill cannot be shown".to_string(),
            );
        }
    }
    for active in alerts.firing_here() {
        if !firing.iter().any(|f| f.alert == active.condition.key) {
            firing.push(FiringView {
                alert: active.condition.key.clone(),
                task_type: active.condition.task_type.clone(),
                count: active.condition.value,
                text: active.condition.text.clone(),
                since: active.since,
                last_sent: active.last_sent,
            });
        }
    }
    let now = Utc::now();
    let drill_due = last_drill.as_ref().is_none_or(|d: &DrillReport| {
        (now - d.at).to_std().unwrap_or_default() > crate::alerts::config::DRILL_MAX_AGE
    });
    warnings.extend(alerts.drill_warnings(last_drill.as_ref(), now));
    Json(AlertsView {
        dashboard_url: config.dashboard_url.clone(),
        cooldown_secs: config.cooldown.as_secs(),
        rules: config
            .rules
            .iter()
            .map(|rule| RuleView {
                kind: rule.kind().to_string(),
                task_type: rule.task_type().map(str::to_string),
                description: rule.describe(),
            })
            .collect(),
        channels: config
            .channels
            .iter()
            .map(|channel| ChannelView {
                name: channel.name().to_string(),
                kind: channel.kind().to_string(),
                target: channel.target(),
            })
            .collect(),
        firing,
        recent,
        last_drill,
        drill_due,
        warnings,
    })
}

/// A drill in which a channel failed.
#[derive(Debug, Serialize, ToSchema)]
pub struct DrillFailed {
    /// `drill_failed`, with the failing channels and their errors in the message.
    pub error: ErrorDetail,
    pub drill: DrillReport,
}

/// The warnings `/health` shows about alerting: no channel, no drill in 90 days, a failed last
/// drill. Empty while the database does not answer (`/health` says so already).
pub async fn health_warnings(state: &AppState) -> Vec<String> {
    match state.alerts.last_drill().await {
        Ok(last) => state.alerts.drill_warnings(last.as_ref(), Utc::now()),
        Err(_) => Vec::new(),
    }
}

/// Sends a marked test alert through every configured channel and records when.
#[utoipa::path(post, path = "/alerts/drill", tag = "host",
    responses(
        (status = 200, description = "Every channel took the test alert", body = DrillReport),
        (status = 409, description = "No alert channel is configured (`no_channels`)", body = super::error::ErrorBody),
        (status = 502, description = "A channel failed (`drill_failed`): each channel's outcome is in `drill`", body = DrillFailed),
    ))]
pub async fn drill(State(state): State<Arc<AppState>>) -> Result<Response, ApiError> {
    if state.alerts.channels.is_empty() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "no_channels",
            "no alert channel is configured: add [[alerts.webhook]] or [[alerts.email]] to spool.toml and restart the host",
        ));
    }
    let report = state.alerts.drill().await;
    if report.ok {
        return Ok((StatusCode::OK, Json(report)).into_response());
    }
    let error = ApiError::new(
        StatusCode::BAD_GATEWAY,
        "drill_failed",
        format!(
            "the alert drill failed: {}; alerts do not reach a person through these channels: fix them and run the drill again",
            report.failures()
        ),
    );
    Ok((
        StatusCode::BAD_GATEWAY,
        Json(DrillFailed {
            error: error.detail,
            drill: report,
        }),
    )
        .into_response())
}
