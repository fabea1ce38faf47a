//! `GET /schedules`: every periodic task this host knows (spool.toml's and its plugins'
//! manifests'), when each runs next, and the last tick enqueued, as far as this host knows.

use axum::Json;
use axum::extract::State;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use utoipa::ToSchema;

use super::AppState;
use super::error::ApiError;
use crate::schedule::Source;
use crate::task::TaskId;
use crate::worker::upkeep::scheduler::all_schedules;

/// One periodic task.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ScheduleView {
    /// The task type each tick enqueues.
    pub task_type: String,
    /// The schedule's name within its type and source (`default` when the entry has none).
    pub name: String,
    /// Where it is declared: `manifest` (the type's plugin manifest; it exists while the
    /// plugin is loaded) or `spool.toml`.
    pub source: Source,
    /// The cron expression (five fields, or six with seconds first), when it has one.
    pub cron: Option<String>,
    /// The interval in milliseconds, when it ticks `every` so long (at whole multiples since
    /// 1970-01-01T00:00:00Z).
    pub every_ms: Option<u64>,
    /// The interval as written, e.g. `15m`.
    pub every: Option<String>,
    /// The IANA time zone a cron expression is read in (`UTC` for intervals).
    pub timezone: String,
    /// The payload of every task it enqueues.
    #[schema(value_type = Value)]
    pub payload: serde_json::Value,
    /// Its tasks' priority, when the entry sets one (else the type's manifest's, else 0).
    pub priority: Option<i32>,
    /// The next tick.
    pub next_run_at: Option<DateTime<Utc>>,
    /// The latest tick enqueued: as the leading host enqueued it, or else found among the
    /// schedule's last two ticks; `null` when neither was enqueued (a new schedule, or one
    /// that has been down for a while).
    pub last_tick: Option<DateTime<Utc>>,
    /// The task of `last_tick`.
    pub last_task_id: Option<TaskId>,
    /// Whether this host has a plugin for the type. Without one anywhere, its tasks wait pending.
    pub plugin_loaded: bool,
}

/// Every periodic task this host knows.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SchedulesView {
    /// Whether this host leads, and so is the one enqueueing ticks.
    pub leading: bool,
    /// By source (spool.toml first), task type and name.
    pub schedules: Vec<ScheduleView>,
}

/// The latest tick enqueued, and its task, looked up by key among the last two ticks: what a
/// host that does not run the scheduler can know.
async fn last_enqueued(
    state: &AppState,
    schedule: &crate::schedule::Schedule,
    now: DateTime<Utc>,
) -> Result<Option<(DateTime<Utc>, TaskId)>, ApiError> {
    let mut at = now;
    for _ in 0..2 {
        let Some(tick) = schedule.spec.timing.latest_at_or_before(at) else {
            break;
        };
        let key = schedule.idempotency_key(tick);
        if let Some(task) = state.store.task_with_key(&schedule.task_type, &key).await? {
            return Ok(Some((tick, task)));
        }
        at = tick - chrono::Duration::milliseconds(1);
    }
    Ok(None)
}

/// The periodic tasks.
#[utoipa::path(get, path = "/schedules", tag = "host",
    responses((status = 200, description = "Every periodic task: spool.toml's and this host's plugins' manifests', with the next and last ticks", body = SchedulesView)))]
pub async fn list_schedules(
    State(state): State<Arc<AppState>>,
) -> Result<Json<SchedulesView>, ApiError> {
    let now = Utc::now();
    let mut schedules = Vec::new();
    for schedule in all_schedules(&state.config.schedules, &state.registry) {
        let known = state
            .schedules
            .get(&schedule.id())
            .and_then(|k| k.last_tick.zip(k.last_task));
        let last = match known {
            Some(last) => Some(last),
            None => last_enqueued(&state, &schedule, now).await?,
        };
        let timing = &schedule.spec.timing;
        schedules.push(ScheduleView {
            plugin_loaded: state.registry.get(&schedule.task_type).is_some(),
            cron: timing.cron().map(str::to_string),
            every_ms: timing.every().map(|d| d.as_millis() as u64),
            every: timing
                .every()
                .map(|d| humantime::format_duration(d).to_string()),
            timezone: timing.timezone().name().to_string(),
            payload: serde_json::from_str(&schedule.spec.payload)
                .unwrap_or(serde_json::Value::Null),
            priority: schedule.spec.priority,
            next_run_at: timing.next_after(now),
            last_tick: last.map(|(tick, _)| tick),
            last_task_id: last.map(|(_, task)| task),
            task_type: schedule.task_type,
            name: schedule.spec.name,
            source: schedule.source,
        });
    }
    schedules.sort_by(|a, b| {
        let order = |s: &ScheduleView| {
            (
                s.source != Source::Config,
                s.task_type.clone(),
                s.name.clone(),
            )
        };
        order(a).cmp(&order(b))
    });
    Ok(Json(SchedulesView {
        leading: state.leadership.is_leader(),
        schedules,
    }))
}
