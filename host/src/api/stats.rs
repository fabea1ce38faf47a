//! `GET /stats`: the queue's history for the dashboard's overview, read from the points the
//! leader's sampler keeps ([`crate::worker::upkeep::sampler`]), and the backlog now.
//!
//! The shape is flat and stable: one series per task type, each a list of points oldest first,
//! every point self-contained (its time, its span, the backlog at its end, what finished in it).
//! A type has no point where it was idle. `current` is the backlog now, from a store read this
//! host caches for [`BACKLOG_TTL`] ([`BacklogCache`], shared with `GET /metrics`), so many
//! dashboards and scrapers cost one cheap read every few seconds.

use axum::Json;
use axum::extract::{Query, State};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;
use utoipa::{IntoParams, ToSchema};

use super::AppState;
use super::error::{ApiError, ErrorBody};
use super::reuse::Reused;
use crate::store::reads::Backlog;
use crate::store::stats::{StatsPoint, Tier};
use crate::store::{Store, StoreError};
use crate::worker::upkeep::sampler::{self, MINUTE_MS};

/// How long a backlog read is reused.
pub const BACKLOG_TTL: Duration = Duration::from_secs(5);

/// A backlog read, per task type, shared by the requests that use it.
pub type SharedBacklog = Arc<BTreeMap<String, Backlog>>;

/// The backlog of the whole database, read at most once per [`BACKLOG_TTL`] on this host.
pub struct BacklogCache {
    last: Reused<BTreeMap<String, Backlog>>,
    /// Every type the backlog has named, so a type that emptied reads zero, not its last value.
    seen: std::sync::Mutex<BTreeSet<String>>,
}

impl Default for BacklogCache {
    fn default() -> Self {
        BacklogCache {
            last: Reused::new(BACKLOG_TTL),
            seen: Default::default(),
        }
    }
}

impl BacklogCache {
    /// The backlog (at most [`BACKLOG_TTL`] old) and when it was read.
    pub async fn get(
        &self,
        store: &dyn Store,
    ) -> Result<(DateTime<Utc>, SharedBacklog), StoreError> {
        self.last
            .get(|at| async move {
                let backlog = store.backlog(at).await?;
                self.seen
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .extend(backlog.keys().cloned());
                Ok(backlog)
            })
            .await
    }

    /// Every task type the backlog has named since this host started.
    pub fn seen(&self) -> BTreeSet<String> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// How far back `GET /stats` looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, ToSchema)]
pub enum Window {
    /// The last hour, one point per sampling interval (10 s by default).
    #[serde(rename = "1h")]
    Hour,
    /// The last day, one point per minute.
    #[serde(rename = "1d")]
    Day,
    /// The last week, one point per 10 minutes.
    #[serde(rename = "7d")]
    Week,
}

impl Window {
    fn length(self) -> chrono::Duration {
        match self {
            Window::Hour => chrono::Duration::hours(1),
            Window::Day => chrono::Duration::days(1),
            Window::Week => chrono::Duration::days(7),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Window::Hour => "1h",
            Window::Day => "1d",
            Window::Week => "7d",
        }
    }
}

/// What `GET /stats` is asked for: the window and, optionally, one task type.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct StatsQuery {
    /// `1h` (default), `1d` or `7d`.
    #[param(inline)]
    pub window: Option<Window>,
    /// Only this task type.
    pub task_type: Option<String>,
}

/// The queue's history over a window, and its backlog now.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct StatsResponse {
    /// The window asked for: `1h`, `1d` or `7d`.
    pub window: String,
    /// How many seconds each point covers: the sampling interval (10 by default) for `1h`, 60
    /// for `1d`, 600 for `7d`. A point's `finished` counts are over its span.
    pub step_seconds: u64,
    /// The window's start and end.
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    /// One series per task type, by name.
    pub series: Vec<TypeSeries>,
    /// The backlog now, per task type with pending, running or failed tasks.
    pub current: Vec<CurrentBacklog>,
    /// When `current` was read (it is reused for a few seconds).
    pub current_at: DateTime<Utc>,
}

/// The points of one task type, oldest first. Where a type has no point it was idle (nothing
/// pending, running, failed or finished).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct TypeSeries {
    pub task_type: String,
    pub points: Vec<Point>,
}

/// One point: the backlog at `at`, and what finished in the `step_seconds` before it.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Point {
    /// The end of the span the point covers.
    pub at: DateTime<Utc>,
    pub pending: u64,
    pub running: u64,
    /// Dead letters (failed tasks waiting for a person).
    pub failed: u64,
    /// How long the oldest due pending task had waited at `at`, in seconds; null when none
    /// was due.
    pub oldest_pending_seconds: Option<f64>,
    /// Tasks that finished in the span, by outcome.
    pub finished: Outcomes,
    /// The same, per minute (the counts divided by the span in minutes).
    pub finished_per_minute: OutcomeRates,
    /// The median and 95th percentile of the attempt times of the tasks that finished done or
    /// failed in the span, in milliseconds; null when none did. Over a minute or more these
    /// come from the samples' percentiles: p50 their weighted mean, p95 their largest.
    pub attempt_p50_ms: Option<u64>,
    pub attempt_p95_ms: Option<u64>,
}

/// Counts by outcome.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, ToSchema)]
pub struct Outcomes {
    pub done: u64,
    pub failed: u64,
    pub cancelled: u64,
}

/// Rates by outcome, per minute.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, ToSchema)]
pub struct OutcomeRates {
    pub done: f64,
    pub failed: f64,
    pub cancelled: f64,
}

/// The backlog of one task type now.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct CurrentBacklog {
    pub task_type: String,
    pub pending: u64,
    pub running: u64,
    pub failed: u64,
    /// How long the oldest due pending task has waited, in seconds; null when none is due.
    pub oldest_pending_seconds: Option<f64>,
}

impl From<&StatsPoint> for Point {
    fn from(p: &StatsPoint) -> Point {
        let minutes = (p.span_ms as f64 / MINUTE_MS as f64).max(f64::MIN_POSITIVE);
        Point {
            at: p.at,
            pending: p.pending,
            running: p.running,
            failed: p.failed,
            oldest_pending_seconds: p.oldest_pending_ms.map(|ms| ms as f64 / 1000.0),
            finished: Outcomes {
                done: p.finished_done,
                failed: p.finished_failed,
                cancelled: p.finished_cancelled,
            },
            finished_per_minute: OutcomeRates {
                done: p.finished_done as f64 / minutes,
                failed: p.finished_failed as f64 / minutes,
                cancelled: p.finished_cancelled as f64 / minutes,
            },
            attempt_p50_ms: p.attempt_p50_ms,
            attempt_p95_ms: p.attempt_p95_ms,
        }
    }
}

/// How long the oldest due task waited, in seconds, at `now`.
pub fn waited_seconds(backlog: &Backlog, now: DateTime<Utc>) -> Option<f64> {
    backlog
        .oldest_due
        .map(|due| (now - due).num_milliseconds().max(0) as f64 / 1000.0)
}

/// The queue's history: backlog, throughput and attempt times per task type.
#[utoipa::path(get, path = "/stats", tag = "host", params(StatsQuery),
    responses(
        (status = 200, description = "Points per task type over the window, and the backlog now", body = StatsResponse),
        (status = 400, description = "Invalid window", body = ErrorBody),
    ))]
pub async fn get_stats(
    State(state): State<Arc<AppState>>,
    query: Result<Query<StatsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<StatsResponse>, ApiError> {
    let Query(query) = query.map_err(|rejection| {
        ApiError::bad_request(format!(
            "{}; window is 1h, 1d or 7d and task_type a task type's name",
            rejection.body_text()
        ))
    })?;
    let window = query.window.unwrap_or(Window::Hour);
    let task_type = query.task_type.as_deref();
    let to = Utc::now();
    let from = to - window.length();
    let (tier, step_ms) = match window {
        Window::Hour => (
            Tier::Samples,
            state.config.stats_interval.as_millis() as i64,
        ),
        Window::Day => (Tier::Minutes, MINUTE_MS),
        Window::Week => (Tier::Minutes, 10 * MINUTE_MS),
    };
    let mut points = state.store.read_stats(tier, from, to, task_type).await?;
    if window == Window::Week {
        points = sampler::rebucket(points, step_ms);
    }
    let mut series: BTreeMap<String, Vec<Point>> = BTreeMap::new();
    for p in &points {
        series
            .entry(p.task_type.clone())
            .or_default()
            .push(p.into());
    }
    for points in series.values_mut() {
        points.sort_by_key(|p| p.at);
    }
    let (current_at, backlog) = state.stats.get(state.store.as_ref()).await?;
    let current = backlog
        .iter()
        .filter(|(name, _)| task_type.is_none_or(|wanted| wanted == name.as_str()))
        .map(|(name, b)| CurrentBacklog {
            task_type: name.clone(),
            pending: b.pending,
            running: b.running,
            failed: b.failed,
            oldest_pending_seconds: waited_seconds(b, current_at),
        })
        .collect();
    Ok(Json(StatsResponse {
        window: window.name().to_string(),
        step_seconds: (step_ms / 1000).max(1) as u64,
        from,
        to,
        series: series
            .into_iter()
            .map(|(task_type, points)| TypeSeries { task_type, points })
            .collect(),
        current,
        current_at,
    }))
}
