//! The task endpoints: enqueue (one or a batch), read, list, retry, cancel.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;
use utoipa::{IntoParams, ToSchema};

use super::error::{ApiError, ErrorBody};
use super::{ApiJson, AppState};
use crate::enqueue::{prepare, RejectReason, TaskRequest};
use crate::store::TaskFilter;
use crate::task::{chrono_duration, Enqueued, NewTask, Status, Task, TaskId};
use crate::worker::estimates::{estimate_done, Capacity};

/// Default and largest page of a listing.
const DEFAULT_PAGE: usize = 50;
const MAX_PAGE: usize = 1000;

/// A task to enqueue.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EnqueueRequest {
    /// The task type: a plugin `TASK_TYPE.wasm` must be loaded on this host.
    pub task_type: String,
    /// Any JSON value; handed to the handler as text. Defaults to `{}`.
    #[serde(default = "empty_object")]
    #[schema(value_type = Object)]
    pub payload: serde_json::Value,
    /// Higher runs first; defaults to the task type's manifest priority, else 0.
    pub priority: Option<i32>,
    /// Run no earlier than this time (RFC 3339). Excludes `delay`.
    pub run_at: Option<DateTime<Utc>>,
    /// Run no earlier than this long from now: seconds as a number, or text such as "90s" or
    /// "5m". Excludes `run_at`.
    #[schema(value_type = Option<String>, example = "30s")]
    pub delay: Option<Delay>,
    /// Retries after the first attempt; defaults to the task type's manifest, else the host's.
    pub max_retry: Option<u32>,
    /// At most one task per (task type, key): enqueueing the same key again returns the
    /// existing task with `duplicate: true`.
    pub idempotency_key: Option<String>,
}

fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(Default::default())
}

/// A delay given as seconds or as a human-readable duration.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Delay {
    Seconds(f64),
    Text(String),
}

impl Delay {
    fn to_duration(&self) -> Result<Duration, ApiError> {
        match self {
            Delay::Seconds(s) if s.is_finite() && *s >= 0.0 => Duration::try_from_secs_f64(*s)
                .map_err(|_| ApiError::invalid(format!("delay {s} is out of range"))),
            Delay::Seconds(s) => Err(ApiError::invalid(format!("delay {s} must be zero or more seconds"))),
            Delay::Text(text) => humantime::parse_duration(text).map_err(|e| {
                ApiError::invalid(format!("delay `{text}` is not a duration ({e}); write e.g. \"30s\" or \"5m\""))
            }),
        }
    }
}

/// A batch of tasks, inserted all together or not at all.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchRequest {
    pub tasks: Vec<EnqueueRequest>,
}

/// A task as the API shows it.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct TaskView {
    pub id: TaskId,
    pub task_type: String,
    pub status: Status,
    #[schema(value_type = Object)]
    pub payload: serde_json::Value,
    pub priority: i32,
    /// Attempts started so far.
    pub attempts: u32,
    /// Failed attempts so far.
    pub retry_count: u32,
    /// Retries allowed after the first attempt.
    pub max_retry: u32,
    /// When the task runs next (pending) or last became due.
    pub next_run_at: DateTime<Utc>,
    pub idempotency_key: Option<String>,
    /// The handler's result on success: parsed JSON when the handler returned JSON text,
    /// otherwise the text as a string.
    #[schema(value_type = Option<Object>)]
    pub result: Option<serde_json::Value>,
    /// The latest failure's message.
    pub last_error: Option<String>,
    /// Latest progress the handler reported (0–100) and its note.
    pub progress: Option<u8>,
    pub progress_note: Option<String>,
    /// Content hash of the plugin build that ran the latest attempt.
    pub plugin_version: Option<String>,
    /// What the latest finished attempt printed: stdout, stderr and log calls (bounded).
    pub log: Option<String>,
    /// The host running the task (while running).
    pub lease_owner: Option<String>,
    pub lease_expires_at: Option<DateTime<Utc>>,
    pub attempted_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// When the task should be done, estimated by this host from the type's recent attempt
    /// times, the due tasks of its type ahead of it and how many of its tasks may run at once.
    /// Given in enqueue answers and by `GET /tasks/{id}` for a pending or running task; `null`
    /// otherwise, and while no attempt of the type has finished on this host.
    pub estimated_done_at: Option<DateTime<Utc>>,
}

impl From<Task> for TaskView {
    fn from(task: Task) -> Self {
        let attempts = task.retry_count + u32::from(matches!(task.status, Status::Running | Status::Done));
        TaskView {
            id: task.id,
            task_type: task.task_type,
            status: task.status,
            payload: task.payload,
            priority: task.priority,
            attempts,
            retry_count: task.retry_count,
            max_retry: task.max_retry,
            next_run_at: task.next_run_at,
            idempotency_key: task.idempotency_key,
            result: task.result.map(|text| {
                serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text))
            }),
            last_error: task.last_error,
            progress: task.progress,
            progress_note: task.progress_note,
            plugin_version: task.plugin_version,
            log: task.log,
            lease_owner: task.lease_owner,
            lease_expires_at: task.lease_expires_at,
            attempted_at: task.attempted_at,
            finished_at: task.finished_at,
            created_at: task.created_at,
            updated_at: task.updated_at,
            estimated_done_at: None,
        }
    }
}

/// The answer to an enqueue.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct EnqueueResponse {
    #[serde(flatten)]
    pub task: TaskView,
    /// True when the idempotency key matched an existing task: nothing new was inserted.
    pub duplicate: bool,
}

impl EnqueueResponse {
    fn new(enqueued: Enqueued, estimated_done_at: Option<DateTime<Utc>>) -> Self {
        let mut task = TaskView::from(enqueued.task);
        task.estimated_done_at = estimated_done_at;
        EnqueueResponse { task, duplicate: enqueued.duplicate }
    }
}

/// Estimated completion times for tasks just enqueued, in order. A task is estimated behind
/// the due backlog of its type and behind the tasks of its type earlier in the same request.
async fn estimate(state: &AppState, enqueued: &[Enqueued]) -> Vec<Option<DateTime<Utc>>> {
    // No attempt of these types has finished here yet: nothing to estimate, no backlog to read.
    if enqueued.iter().all(|e| state.estimates.mean_attempt(&e.task.task_type).is_none()) {
        return vec![None; enqueued.len()];
    }
    let now = Utc::now();
    let backlog = match state.estimates.fresh_backlog() {
        Some(backlog) => Some(backlog),
        None => match state.store.due_by_type(now).await {
            Ok(backlog) => {
                state.estimates.set_backlog(backlog.clone());
                Some(backlog)
            }
            Err(error) => {
                tracing::debug!("no completion estimate: reading the backlog failed: {error}");
                None
            }
        },
    };
    let mut earlier_in_request: std::collections::HashMap<&str, u64> = Default::default();
    enqueued
        .iter()
        .map(|e| {
            let task = &e.task;
            let position = earlier_in_request.entry(task.task_type.as_str()).or_default();
            let ahead = backlog.as_ref()?.get(&task.task_type).copied().unwrap_or(0) + *position;
            *position += 1;
            if task.status != Status::Pending {
                return None;
            }
            estimate_pending(state, task, ahead, now)
        })
        .collect()
}

/// The estimate for a pending task with `ahead` due tasks of its type before it.
fn estimate_pending(state: &AppState, task: &Task, ahead: u64, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let mean = state.estimates.mean_attempt(&task.task_type)?;
    let plugin = state.registry.get(&task.task_type)?;
    let capacity = Capacity {
        slots: plugin.policy.concurrency.unwrap_or(state.config.concurrency).min(state.config.concurrency),
        rate: plugin.policy.rate,
    };
    Some(estimate_done(task.next_run_at.max(now), ahead, capacity, mean))
}

/// The estimate for one task being looked at: behind exactly the due tasks of its type that
/// will be claimed before it, or, while it runs, one mean attempt after it started.
async fn estimate_one(state: &AppState, task: &Task) -> Result<Option<DateTime<Utc>>, ApiError> {
    let now = Utc::now();
    Ok(match task.status {
        Status::Pending => {
            let ahead = state.store.count_ahead(task, now).await?;
            estimate_pending(state, task, ahead, now)
        }
        Status::Running => match (state.estimates.mean_attempt(&task.task_type), task.attempted_at) {
            (Some(mean), Some(started)) => Some((started + chrono_duration(mean)).max(now)),
            _ => None,
        },
        _ => None,
    })
}

/// The answer to a batch enqueue, in request order.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct BatchResponse {
    pub tasks: Vec<EnqueueResponse>,
}

/// Filters and paging of a listing.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Only tasks in this state.
    pub status: Option<Status>,
    /// Only tasks of this type.
    #[serde(rename = "type")]
    #[param(rename = "type")]
    pub task_type: Option<String>,
    /// Page size (default 50, at most 1000).
    pub limit: Option<usize>,
    /// Only tasks with smaller ids: pass the previous page's `next_before`.
    pub before: Option<TaskId>,
}

/// A page of tasks, newest first.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct TaskPage {
    pub tasks: Vec<TaskView>,
    /// The cursor for the next page, absent on the last page.
    pub next_before: Option<TaskId>,
}

/// Validates a request and applies defaults (shared with follow-up tasks: [`prepare`]).
fn new_task(request: EnqueueRequest, state: &AppState, now: DateTime<Utc>) -> Result<NewTask, ApiError> {
    let run_at = match (request.run_at, &request.delay) {
        (Some(_), Some(_)) => return Err(ApiError::invalid("give either run_at or delay, not both")),
        (Some(at), None) => at,
        (None, Some(delay)) => now + chrono_duration(delay.to_duration()?),
        (None, None) => now,
    };
    let request = TaskRequest {
        task_type: request.task_type,
        payload: request.payload.to_string(),
        priority: request.priority,
        max_retry: request.max_retry,
        run_at,
        idempotency_key: request.idempotency_key,
    };
    prepare(request, &state.registry, state.config.max_payload_bytes).map_err(|reason| match reason {
        RejectReason::UnknownTaskType { ref task_type, ref known } => ApiError::unknown_task_type(task_type, known.clone()),
        RejectReason::PayloadTooLarge { .. } => ApiError::too_large(reason.to_string()),
        other => ApiError::invalid(other.to_string()),
    })
}

/// Enqueue a task.
#[utoipa::path(post, path = "/tasks", tag = "tasks", request_body = EnqueueRequest,
    security((), ("bearer" = [])),
    responses(
        (status = 201, description = "Enqueued", body = EnqueueResponse),
        (status = 200, description = "A task with this idempotency key already exists; it is returned and nothing was inserted", body = EnqueueResponse),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 401, description = "Missing or wrong API token", body = ErrorBody),
        (status = 413, description = "Payload or body too large", body = ErrorBody),
        (status = 422, description = "Missing or invalid fields, or an unknown task type", body = ErrorBody),
    ))]
pub async fn enqueue(
    State(state): State<Arc<AppState>>,
    ApiJson(request): ApiJson<EnqueueRequest>,
) -> Result<impl IntoResponse, ApiError> {
    let task = new_task(request, &state, Utc::now())?;
    let enqueued = state.enqueuer.enqueue(vec![task]).await?.pop().expect("one result per task");
    if !enqueued.duplicate {
        state.wake.notify_one();
    }
    let status = if enqueued.duplicate { StatusCode::OK } else { StatusCode::CREATED };
    let estimated = estimate(&state, std::slice::from_ref(&enqueued)).await.pop().flatten();
    Ok((status, Json(EnqueueResponse::new(enqueued, estimated))))
}

/// Enqueue many tasks in one transaction: all are inserted, or none.
#[utoipa::path(post, path = "/tasks/batch", tag = "tasks", request_body = BatchRequest,
    security((), ("bearer" = [])),
    responses(
        (status = 201, description = "Enqueued, in request order", body = BatchResponse),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 401, description = "Missing or wrong API token", body = ErrorBody),
        (status = 413, description = "Body, batch or a payload too large", body = ErrorBody),
        (status = 422, description = "A task is invalid (its index is given); nothing was inserted", body = ErrorBody),
    ))]
pub async fn enqueue_batch(
    State(state): State<Arc<AppState>>,
    ApiJson(request): ApiJson<BatchRequest>,
) -> Result<impl IntoResponse, ApiError> {
    if request.tasks.len() > state.config.max_batch {
        return Err(ApiError::too_large(format!(
            "the batch has {} tasks; this host accepts at most {} per request (max_batch)",
            request.tasks.len(),
            state.config.max_batch
        )));
    }
    let now = Utc::now();
    let tasks = request
        .tasks
        .into_iter()
        .enumerate()
        .map(|(index, task)| new_task(task, &state, now).map_err(|e| e.at_index(index)))
        .collect::<Result<Vec<_>, _>>()?;
    let enqueued = state.enqueuer.enqueue(tasks).await?;
    if enqueued.iter().any(|e| !e.duplicate) {
        state.wake.notify_one();
    }
    let estimates = estimate(&state, &enqueued).await;
    let tasks = enqueued.into_iter().zip(estimates).map(|(e, at)| EnqueueResponse::new(e, at)).collect();
    Ok((StatusCode::CREATED, Json(BatchResponse { tasks })))
}

/// Read one task: status, attempts, progress, result or last error.
#[utoipa::path(get, path = "/tasks/{id}", tag = "tasks",
    params(("id" = i64, Path, description = "Task id")),
    responses(
        (status = 200, description = "The task", body = TaskView),
        (status = 404, description = "No such task", body = ErrorBody),
    ))]
pub async fn get_task(
    State(state): State<Arc<AppState>>,
    Path(id): Path<TaskId>,
) -> Result<Json<TaskView>, ApiError> {
    let Some(task) = state.store.get(id).await? else {
        return Err(crate::store::StoreError::NotFound(id).into());
    };
    let estimated_done_at = estimate_one(&state, &task).await?;
    let mut view = TaskView::from(task);
    view.estimated_done_at = estimated_done_at;
    Ok(Json(view))
}

/// List tasks, newest first, optionally by status and type.
#[utoipa::path(get, path = "/tasks", tag = "tasks", params(ListQuery),
    responses(
        (status = 200, description = "A page of tasks", body = TaskPage),
        (status = 400, description = "Invalid filter", body = ErrorBody),
    ))]
pub async fn list_tasks(
    State(state): State<Arc<AppState>>,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<TaskPage>, ApiError> {
    let Query(query) = query.map_err(|rejection| {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", format!(
            "{}; status is one of pending, running, done, failed, cancelled",
            rejection.body_text()
        ))
    })?;
    let limit = query.limit.unwrap_or(DEFAULT_PAGE).clamp(1, MAX_PAGE);
    let filter = TaskFilter { status: query.status, task_type: query.task_type, before_id: query.before, limit };
    let tasks = state.store.list(&filter).await?;
    let next_before = (tasks.len() == limit).then(|| tasks.last().map(|t| t.id)).flatten();
    Ok(Json(TaskPage { tasks: tasks.into_iter().map(TaskView::from).collect(), next_before }))
}

/// Send a failed or cancelled task back to the queue with a fresh retry budget.
#[utoipa::path(post, path = "/tasks/{id}/retry", tag = "tasks",
    params(("id" = i64, Path, description = "Task id")),
    security((), ("bearer" = [])),
    responses(
        (status = 200, description = "Pending again", body = TaskView),
        (status = 401, description = "Missing or wrong API token", body = ErrorBody),
        (status = 404, description = "No such task", body = ErrorBody),
        (status = 409, description = "The task is not failed or cancelled", body = ErrorBody),
    ))]
pub async fn retry_task(
    State(state): State<Arc<AppState>>,
    Path(id): Path<TaskId>,
) -> Result<Json<TaskView>, ApiError> {
    let task = state.store.retry(id, Utc::now()).await?;
    state.wake.notify_one();
    Ok(Json(task.into()))
}

/// Cancel a pending or running task. A running attempt is interrupted (at once on this host,
/// within a lease-heartbeat on another) and its outcome discarded.
#[utoipa::path(post, path = "/tasks/{id}/cancel", tag = "tasks",
    params(("id" = i64, Path, description = "Task id")),
    security((), ("bearer" = [])),
    responses(
        (status = 200, description = "Cancelled", body = TaskView),
        (status = 401, description = "Missing or wrong API token", body = ErrorBody),
        (status = 404, description = "No such task", body = ErrorBody),
        (status = 409, description = "The task already finished", body = ErrorBody),
    ))]
pub async fn cancel_task(
    State(state): State<Arc<AppState>>,
    Path(id): Path<TaskId>,
) -> Result<Json<TaskView>, ApiError> {
    let task = state.store.cancel(id, Utc::now()).await?;
    state.in_flight.cancel(id);
    Ok(Json(task.into()))
}
