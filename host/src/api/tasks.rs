//! The task endpoints: enqueue (one or a batch), read, list, retry, cancel.

use axum::Json;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use utoipa::{IntoParams, ToSchema};

use super::durations::{Delay, delay_schema, parse_wait};
use super::error::{ApiError, ErrorBody};
use super::paging::{DEFAULT_PAGE, MAX_PAGE};
use super::{ApiJson, ApiPath, AppState};
use crate::enqueue::{
    RejectReason, TaskRequest, check_caller_key, check_not_double_encoded, due_at, prepare,
};
use crate::store::TaskFilter;
use crate::task::{Enqueued, NewTask, Status, Task, TaskId};
use crate::worker::run::estimates::Estimator;

/// Options of `GET /tasks/{id}`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct WaitQuery {
    /// Long-poll: answer as soon as the task is done, failed or cancelled, or once this long
    /// has passed (then with its current state, still 200). Whole seconds (`30` or `30s`) or
    /// milliseconds (`500ms`), at most the host's `max_wait` (60 s unless lowered; 400 beyond).
    /// Tasks this host finishes answer at once; tasks finished by another host sharing the
    /// database are seen within about a second. A host that is stopping answers at once.
    #[param(
        pattern = "^((0|[1-9]|[1-5][0-9]{1}|60)s?|(0|[1-9][0-9]{0,3}|[1-5][0-9]{4}|60000)ms)$",
        example = "30s"
    )]
    pub wait: Option<String>,
}

/// A task to enqueue.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EnqueueRequest {
    /// The task type: a plugin `TASK_TYPE.wasm` must be loaded on this host (the enum lists the
    /// types this host ran when it served this description; plugins may come and go).
    #[schema(pattern = "^[A-Za-z0-9_-]{1,64}$")]
    pub task_type: String,
    /// Any JSON value; handed to the handler as text. Defaults to `{}`. A JSON string that
    /// starts with `{` or `[` (after spaces), a document encoded twice or a broken one, is
    /// refused with 422: send the object or array itself. Arrays and objects may nest at most
    /// 64 deep (`MAX_JSON_DEPTH`, the same on every database), and a string may not hold a lone
    /// UTF-16 surrogate escape such as `\ud800`: both are refused with 422.
    #[serde(default = "empty_object")]
    #[schema(value_type = Value)]
    pub payload: serde_json::Value,
    /// Higher runs first; defaults to the task type's manifest priority, else 0.
    #[schema(minimum = -2147483648, maximum = 2147483647)]
    #[serde(default, deserialize_with = "whole_number")]
    pub priority: Option<i32>,
    /// Run no earlier than this time (RFC 3339, years 0000 to 9999; a time before 1970 counts
    /// as 1970-01-01T00:00:00Z). Excludes `delay`.
    pub run_at: Option<DateTime<Utc>>,
    /// Run no earlier than this long from now, at most 100 years: seconds as a number, or a
    /// whole number with one unit (`ms`, `s`, `m`, `h`, `d`) such as "90s", "5m" or "36h".
    /// Excludes `run_at`.
    #[schema(schema_with = delay_schema)]
    pub delay: Option<Delay>,
    /// Retries after the first attempt (at most 1000); defaults to the task type's manifest,
    /// else the host's.
    #[schema(maximum = 1000)]
    #[serde(default, deserialize_with = "whole_number")]
    pub max_retry: Option<u32>,
    /// At most one task per (task type, key): enqueueing the same key again returns the
    /// existing task with `duplicate: true`. 1 to 255 characters, no control characters
    /// (every backend can store and compare the key exactly), not starting with `spool:`
    /// (reserved for the keys the host makes: scheduled ticks, follow-up tasks).
    #[schema(
        min_length = 1,
        max_length = 255,
        pattern = "^(?!spool:)[^\\x00-\\x1f\\x7f-\\x9f]*$"
    )]
    pub idempotency_key: Option<String>,
}

fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(Default::default())
}

/// An optional whole number that fits `T`, written as JSON Schema's `integer` allows: `7` or
/// `7.0`, not `7.5`.
fn whole_number<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: TryFrom<i64>,
{
    use serde::de::Error;
    let Some(number) = Option::<serde_json::Number>::deserialize(deserializer)? else {
        return Ok(None);
    };
    let whole = number.as_i64().or_else(|| {
        // Exactly representable and within i64: the float is that whole number.
        number
            .as_f64()
            .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15)
            .map(|f| f as i64)
    });
    let fits = whole.and_then(|n| T::try_from(n).ok());
    fits.map(Some).ok_or_else(|| {
        D::Error::custom(format!(
            "{number} is not a whole number in range ({})",
            std::any::type_name::<T>()
        ))
    })
}

/// A batch of tasks, inserted all together or not at all.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchRequest {
    #[serde(deserialize_with = "super::object::list")]
    pub tasks: Vec<EnqueueRequest>,
}

/// A task as the API shows it.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct TaskView {
    pub id: TaskId,
    pub task_type: String,
    pub status: Status,
    /// The payload as enqueued: any JSON value.
    #[schema(value_type = Value)]
    pub payload: serde_json::Value,
    pub priority: i32,
    /// Attempts started so far: one per claim, the running one included, and ones handed back
    /// at shutdown too. Never reset (an API retry resets `retry_count`, not this).
    pub attempts: u32,
    /// Retries scheduled so far: failed attempts that sent the task back to pending (a dead
    /// letter's last attempt schedules none). Reset by an API retry.
    pub retry_count: u32,
    /// Retries allowed after the first attempt.
    pub max_retry: u32,
    /// When the task runs next (pending) or last became due.
    pub next_run_at: DateTime<Utc>,
    pub idempotency_key: Option<String>,
    /// The handler's result on success: parsed JSON when the handler returned JSON text,
    /// otherwise the text as a string.
    #[schema(value_type = Value)]
    pub result: Option<serde_json::Value>,
    /// The latest failed attempt's error; `null` once an attempt succeeded (`history` keeps
    /// every attempt's error).
    pub last_error: Option<String>,
    /// Latest progress the handler reported (0–100) and its note.
    pub progress: Option<u8>,
    pub progress_note: Option<String>,
    /// Content hash of the plugin build that ran the latest attempt.
    pub plugin_version: Option<String>,
    /// What the latest finished attempt printed: stdout, stderr and log calls (bounded).
    pub log: Option<String>,
    /// How many follow-ups deep the task is: 0 when enqueued from outside, its parent's depth
    /// plus one when a handler enqueued it (bounded by the parent type's `[enqueue] max_depth`).
    #[serde(default)]
    pub depth: u32,
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
    /// True for a task that moved to the archive (finished tasks move there after the host's
    /// `archive_after`, dead letters after `dead_letter_retention`): only `GET /tasks/{id}`
    /// finds it; listings show the live table; it cannot be retried.
    #[serde(default)]
    pub archived: bool,
    /// When the task moved to the archive; `null` while it is in the live table.
    #[serde(default)]
    pub archived_at: Option<DateTime<Utc>>,
}

impl From<Task> for TaskView {
    fn from(task: Task) -> Self {
        TaskView {
            id: task.id,
            task_type: task.task_type,
            status: task.status,
            payload: task.payload,
            priority: task.priority,
            attempts: task.attempts,
            retry_count: task.retry_count,
            max_retry: task.max_retry,
            next_run_at: task.next_run_at,
            idempotency_key: task.idempotency_key,
            result: task
                .result
                .map(|text| serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text))),
            last_error: task.last_error,
            progress: task.progress,
            progress_note: task.progress_note,
            plugin_version: task.plugin_version,
            log: task.log,
            depth: task.depth,
            lease_owner: task.lease_owner,
            lease_expires_at: task.lease_expires_at,
            attempted_at: task.attempted_at,
            finished_at: task.finished_at,
            created_at: task.created_at,
            updated_at: task.updated_at,
            estimated_done_at: None,
            archived: false,
            archived_at: None,
        }
    }
}

/// One task with its attempt history, as `GET /tasks/{id}` shows it.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct TaskDetail {
    #[serde(flatten)]
    pub task: TaskView,
    /// The task's attempts, oldest first: the first and the latest
    /// 20 are kept in full (`attempts` counts them all).
    pub history: Vec<crate::store::history::AttemptRecord>,
}

/// The answer to an enqueue.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct EnqueueResponse {
    #[serde(flatten)]
    pub task: TaskView,
    /// True when the idempotency key matched an existing task: nothing new was inserted.
    pub duplicate: bool,
    /// True when the idempotency key matched an existing task whose payload is another JSON
    /// value than this request's (compared as values: key order and spacing do not count).
    /// The existing task, with its own payload, is what was kept.
    pub payload_differs: bool,
}

impl EnqueueResponse {
    fn new(
        enqueued: Enqueued,
        sent: &serde_json::Value,
        estimated_done_at: Option<DateTime<Utc>>,
    ) -> Self {
        let payload_differs = enqueued.duplicate && enqueued.task.payload != *sent;
        let mut task = TaskView::from(enqueued.task);
        task.estimated_done_at = estimated_done_at;
        EnqueueResponse {
            task,
            duplicate: enqueued.duplicate,
            payload_differs,
        }
    }
}

/// This host's completion estimates (see [`crate::worker::run::estimates`]).
fn estimator(state: &AppState) -> Estimator<'_> {
    Estimator {
        estimates: &state.estimates,
        store: state.store.as_ref(),
        registry: &state.registry,
        host_concurrency: state.config.concurrency,
        paused: &state.paused,
    }
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
    /// Most tasks in the page, 1 to 1000 (default 50). A page also ends early once its
    /// tasks' payloads, results, logs and errors reach 4 MiB.
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u16>,
    /// Only tasks with smaller ids: pass the previous page's `next_before`.
    #[param(value_type = Option<i64>)]
    pub before: Option<TaskId>,
    /// Only tasks whose last error contains this text (case-sensitive), 1 to 1000 characters.
    #[param(min_length = 1, max_length = 1000)]
    pub error_contains: Option<String>,
    /// Only tasks whose time is at or after this (RFC 3339): when they finished (done, failed,
    /// cancelled), or when they were created if they have not finished.
    pub since: Option<DateTime<Utc>>,
    /// Only tasks whose time (as for `since`) is before this.
    pub until: Option<DateTime<Utc>>,
}

/// A page of tasks, newest first.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct TaskPage {
    pub tasks: Vec<TaskView>,
    /// The cursor for the next page (pass it as `before`); absent on the last page. Present
    /// whenever the page ended at `limit` or at 4 MiB, so the next page may be empty.
    pub next_before: Option<TaskId>,
}

/// Validates a request and applies defaults (shared with follow-up tasks: [`prepare`]).
fn new_task(
    request: EnqueueRequest,
    state: &AppState,
    now: DateTime<Utc>,
) -> Result<NewTask, ApiError> {
    let invalid = |reason: RejectReason| ApiError::invalid(reason.to_string());
    check_not_double_encoded(&request.payload)
        .and_then(|()| check_caller_key(request.idempotency_key.as_deref()))
        .map_err(invalid)?;
    let delay = request.delay.as_ref().map(Delay::to_duration).transpose()?;
    let run_at = due_at(request.run_at, delay, now).map_err(invalid)?;
    let request = TaskRequest {
        task_type: request.task_type,
        payload: request.payload.to_string(),
        priority: request.priority,
        max_retry: request.max_retry,
        run_at,
        idempotency_key: request.idempotency_key,
    };
    prepare(request, &state.registry, state.config.max_payload).map_err(|reason| match reason {
        RejectReason::UnknownTaskType {
            ref task_type,
            ref known,
        } => ApiError::unknown_task_type(task_type, known.clone()),
        RejectReason::PayloadTooLarge { .. } => ApiError::too_large(reason.to_string()),
        other => ApiError::invalid(other.to_string()),
    })
}

/// Enqueue a task.
#[utoipa::path(post, path = "/tasks", tag = "tasks", request_body = EnqueueRequest,
    responses(
        (status = 201, description = "Enqueued", body = EnqueueResponse),
        (status = 200, description = "A task with this idempotency key already exists; it is returned and nothing was inserted", body = EnqueueResponse),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 408, description = "The body did not arrive within the body timeout", body = ErrorBody),
        (status = 413, description = "Payload or body too large", body = ErrorBody),
        (status = 415, description = "The body is not sent as `Content-Type: application/json`", body = ErrorBody),
        (status = 422, description = "Missing or invalid fields, or an unknown task type", body = ErrorBody),
    ))]
pub async fn enqueue(
    State(state): State<Arc<AppState>>,
    ApiJson(request): ApiJson<EnqueueRequest>,
) -> Result<impl IntoResponse, ApiError> {
    let sent = request.payload.clone();
    let task = new_task(request, &state, Utc::now())?;
    state.database.check()?;
    let enqueued = state
        .enqueuer
        .enqueue(vec![task])
        .await?
        .pop()
        .expect("one result per task");
    if !enqueued.duplicate {
        state.wake.notify_one();
    }
    let status = if enqueued.duplicate {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    let estimated = estimator(&state)
        .for_enqueued(std::slice::from_ref(&enqueued))
        .await
        .pop()
        .flatten();
    Ok((
        status,
        Json(EnqueueResponse::new(enqueued, &sent, estimated)),
    ))
}

/// Enqueue many tasks in one transaction: all are inserted, or none.
#[utoipa::path(post, path = "/tasks/batch", tag = "tasks", request_body = BatchRequest,
    responses(
        (status = 201, description = "Enqueued, in request order", body = BatchResponse),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 408, description = "The body did not arrive within the body timeout", body = ErrorBody),
        (status = 413, description = "Body, batch or a payload too large", body = ErrorBody),
        (status = 415, description = "The body is not sent as `Content-Type: application/json`", body = ErrorBody),
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
    let sent: Vec<serde_json::Value> = request.tasks.iter().map(|t| t.payload.clone()).collect();
    let tasks = request
        .tasks
        .into_iter()
        .enumerate()
        .map(|(index, task)| new_task(task, &state, now).map_err(|e| e.at_index(index)))
        .collect::<Result<Vec<_>, _>>()?;
    state.database.check()?;
    let enqueued = state.enqueuer.enqueue(tasks).await?;
    if enqueued.iter().any(|e| !e.duplicate) {
        state.wake.notify_one();
    }
    let estimates = estimator(&state).for_enqueued(&enqueued).await;
    let tasks = enqueued
        .into_iter()
        .zip(estimates)
        .zip(&sent)
        .map(|((e, at), sent)| EnqueueResponse::new(e, sent, at))
        .collect();
    Ok((StatusCode::CREATED, Json(BatchResponse { tasks })))
}

/// Read one task: status, attempts with their history, progress, result or last error. With
/// `wait`, a long-poll: the answer comes as soon as the task is done, failed or cancelled, or
/// when the wait ends (with the task as it is then).
#[utoipa::path(get, path = "/tasks/{id}", tag = "tasks",
    params(("id" = i64, Path, description = "Task id"), WaitQuery),
    responses(
        (status = 200, description = "The task and its attempt history (when waiting: final, or as it is when the wait ended)", body = TaskDetail),
        (status = 400, description = "The id is not a whole number within 64 bits, or `wait` is not a duration up to the host's `max_wait`", body = ErrorBody),
        (status = 404, description = "No such task, in the live table or the archive", body = ErrorBody),
    ))]
pub async fn get_task(
    State(state): State<Arc<AppState>>,
    ApiPath(id): ApiPath<TaskId>,
    query: Result<Query<WaitQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<TaskDetail>, ApiError> {
    let Query(query) = query?;
    let max = state.config.max_wait;
    let wait = match &query.wait {
        None => None,
        Some(text) => Some(parse_wait(text, max).ok_or_else(|| {
            ApiError::bad_request(format!(
                "wait `{text}` is not a wait this host allows: whole seconds (\"30s\" or 30) or milliseconds (\"500ms\"), without leading zeros, at most {}s (max_wait)",
                max.as_secs_f64()
            ))
        })?),
    };
    // Subscribed before the read: a completion committed after it wakes the wait below.
    let finished = wait.map(|_| state.finished.subscribe());
    let mut task = match read_task(&state, id).await {
        // Not in the live table: an archived task is final, so there is nothing to wait for.
        Err(error) if error.status == StatusCode::NOT_FOUND => {
            let view = super::archived::find(&state, id).await?;
            let history = state.store.attempt_history(id).await?;
            return Ok(Json(TaskDetail {
                task: view,
                history,
            }));
        }
        read => read?,
    };
    if let (Some(wait), Some(finished)) = (wait, finished) {
        task = super::long_poll::until_final(&state, task, wait, finished).await?;
    }
    let estimated_done_at = estimator(&state).for_task(&task).await?;
    let history = state.store.attempt_history(id).await?;
    let mut view = TaskView::from(task);
    view.estimated_done_at = estimated_done_at;
    Ok(Json(TaskDetail {
        task: view,
        history,
    }))
}

/// One task, or 404.
pub(super) async fn read_task(state: &AppState, id: TaskId) -> Result<Task, ApiError> {
    match state.store.get(id).await? {
        Some(task) => Ok(task),
        None => Err(crate::store::StoreError::NotFound(id).into()),
    }
}

/// List tasks, newest first, optionally by status, type, error text and time. A page ends at `limit` tasks, or
/// earlier once its tasks' payloads, results, logs and errors reach 4 MiB; `next_before` then
/// continues it. Listings show the live table: tasks moved to the archive are found by id only
/// (`GET /tasks/{id}`).
#[utoipa::path(get, path = "/tasks", tag = "tasks", params(ListQuery),
    responses(
        (status = 200, description = "A page of tasks", body = TaskPage),
        (status = 400, description = "Invalid filter", body = ErrorBody),
    ))]
pub async fn list_tasks(
    State(state): State<Arc<AppState>>,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<TaskPage>, ApiError> {
    let Query(query) = query?;
    let limit = usize::from(query.limit.unwrap_or(DEFAULT_PAGE as u16));
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(ApiError::bad_request(format!(
            "limit {limit} is out of range: 1 to {MAX_PAGE}"
        )));
    }
    if let Some(text) = &query.error_contains {
        let length = text.chars().count();
        if !(1..=super::control::MAX_ERROR_TEXT).contains(&length) {
            return Err(ApiError::bad_request(format!(
                "error_contains must be 1 to {} characters",
                super::control::MAX_ERROR_TEXT
            )));
        }
    }
    let filter = TaskFilter {
        status: query.status,
        task_type: query.task_type,
        before_id: query.before,
        limit,
        error_contains: query.error_contains,
        since: query.since,
        until: query.until,
    };
    let (tasks, next_before) = super::paging::read_page(
        state.store.as_ref(),
        filter,
        super::paging::largest_row(&state.config),
    )
    .await?;
    let page = tasks.into_iter().map(TaskView::from).collect();
    Ok(Json(TaskPage {
        tasks: page,
        next_before,
    }))
}

/// Send a failed or cancelled task back to the queue with a fresh retry budget.
#[utoipa::path(post, path = "/tasks/{id}/retry", tag = "tasks",
    params(("id" = i64, Path, description = "Task id")),
    responses(
        (status = 200, description = "Pending again", body = TaskView),
        (status = 400, description = "The id is not a whole number within 64 bits", body = ErrorBody),
        (status = 404, description = "No such task", body = ErrorBody),
        (status = 409, description = "The task is not failed or cancelled, or it is archived (archived tasks cannot be retried)", body = ErrorBody),
    ))]
pub async fn retry_task(
    State(state): State<Arc<AppState>>,
    ApiPath(id): ApiPath<TaskId>,
) -> Result<Json<TaskView>, ApiError> {
    let task = match state.store.retry(id, Utc::now()).await {
        Err(crate::store::StoreError::NotFound(_)) => {
            return Err(super::archived::not_live(&state, id, "retried").await);
        }
        changed => changed?,
    };
    state.wake.notify_one();
    Ok(Json(task.into()))
}

/// Cancel a pending or running task. A running attempt is interrupted (at once on this host,
/// within a lease-heartbeat on another) and its outcome discarded.
#[utoipa::path(post, path = "/tasks/{id}/cancel", tag = "tasks",
    params(("id" = i64, Path, description = "Task id")),
    responses(
        (status = 200, description = "Cancelled", body = TaskView),
        (status = 400, description = "The id is not a whole number within 64 bits", body = ErrorBody),
        (status = 404, description = "No such task", body = ErrorBody),
        (status = 409, description = "The task already finished (archived tasks included)", body = ErrorBody),
    ))]
pub async fn cancel_task(
    State(state): State<Arc<AppState>>,
    ApiPath(id): ApiPath<TaskId>,
) -> Result<Json<TaskView>, ApiError> {
    let task = match state.store.cancel(id, Utc::now()).await {
        Err(crate::store::StoreError::NotFound(_)) => {
            return Err(super::archived::not_live(&state, id, "cancelled").await);
        }
        changed => changed?,
    };
    state.in_flight.cancel_task(id);
    state.finished.publish([id]);
    Ok(Json(task.into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::durations::{DELAY_PATTERN, MAX_DELAY};

    #[test]
    fn whole_numbers_may_be_written_with_a_zero_fraction() {
        #[derive(Deserialize)]
        struct Fields {
            #[serde(default, deserialize_with = "whole_number")]
            n: Option<i32>,
        }
        let n = |text: &str| {
            serde_json::from_str::<Fields>(text)
                .map(|f| f.n)
                .map_err(|_| ())
        };
        assert_eq!(n(r#"{"n": 7}"#), Ok(Some(7)));
        assert_eq!(n(r#"{"n": 7.0}"#), Ok(Some(7)));
        assert_eq!(n(r#"{"n": -2147483648}"#), Ok(Some(i32::MIN)));
        assert_eq!(n(r#"{"n": null}"#), Ok(None));
        assert_eq!(n("{}"), Ok(None));
        for bad in [
            r#"{"n": 7.5}"#,
            r#"{"n": 2147483648}"#,
            r#"{"n": 1e300}"#,
            r#"{"n": "7"}"#,
            r#"{"n": 18446744073709551615}"#,
        ] {
            assert_eq!(n(bad), Err(()), "{bad}");
        }
    }

    #[test]
    fn the_description_states_the_limits_the_code_enforces() {
        let spec = serde_json::to_value(super::super::openapi()).unwrap();
        let fields = &spec["components"]["schemas"]["EnqueueRequest"]["properties"];
        assert_eq!(
            fields["max_retry"]["maximum"],
            serde_json::json!(spool_rules::limits::MAX_RETRY.max)
        );
        assert_eq!(
            fields["idempotency_key"]["maxLength"],
            serde_json::json!(spool_rules::names::MAX_IDEMPOTENCY_KEY)
        );
        let delay = fields["delay"]["oneOf"].as_array().unwrap();
        assert_eq!(delay[1]["maximum"].as_f64(), Some(MAX_DELAY.as_secs_f64()));
        assert_eq!(delay[2]["pattern"], DELAY_PATTERN);
        let limit = spec["paths"]["/tasks"]["get"]["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "limit")
            .unwrap();
        assert_eq!(limit["schema"]["maximum"], serde_json::json!(MAX_PAGE));
    }
}
