//! The task endpoints: enqueue (one or a batch), read, list, retry, cancel.

use axum::Json;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;
use utoipa::{IntoParams, ToSchema};

use super::error::{ApiError, ErrorBody};
use super::{ApiJson, ApiPath, AppState};
use crate::enqueue::{RejectReason, TaskRequest, prepare};
use crate::store::TaskFilter;
use crate::task::{Enqueued, NewTask, Status, Task, TaskId, chrono_duration};
use crate::worker::estimates::Estimator;

/// Default and largest page of a listing, in tasks.
const DEFAULT_PAGE: usize = 50;
const MAX_PAGE: usize = 1000;
/// A listing page stops taking tasks once their payloads, results, logs and errors would pass
/// this many bytes (a page holds at least one task, however large).
pub const PAGE_BYTES: usize = 4 << 20;
/// Tasks are read from the database a few at a time while a page fills, so that a listing
/// holds about this many bytes of rows at once even when every row is as large as allowed.
const READ_BYTES: usize = 16 << 20;
/// What an attempt's error and progress note may add to a row, beyond payload, result and log.
const ROW_EXTRA_BYTES: usize = 64 << 10;

/// The longest `delay`: 100 years of 365.25 days.
pub const MAX_DELAY: Duration = Duration::from_secs(36_525 * 86_400);
/// The pattern `delay` text follows: a whole number and one unit, each unit's number short
/// enough to stay within [`MAX_DELAY`]. [`Delay::to_duration`] accepts exactly these.
pub const DELAY_PATTERN: &str = "^([0-9]{1,12}ms|[0-9]{1,9}s|[0-9]{1,7}m|[0-9]{1,5}h|[0-9]{1,4}d)$";

/// The pattern of `wait` on a host whose longest wait is the default, 60 s: [`wait_pattern`]
/// of [`crate::config::DEFAULT_MAX_WAIT`] (a host with a lower `max_wait` describes its own).
pub const WAIT_PATTERN: &str =
    "^((0|[1-9]|[1-5][0-9]{1}|60)s?|(0|[1-9][0-9]{0,3}|[1-5][0-9]{4}|60000)ms)$";

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

/// The regular expression of canonical whole numbers (no leading zero) from 0 to `n`.
fn numbers_up_to(n: u128) -> String {
    let digits: Vec<u8> = n.to_string().bytes().map(|b| b - b'0').collect();
    let len = digits.len();
    let mut alternatives = vec!["0".to_string()];
    if len >= 2 {
        alternatives.push(match len {
            2 => "[1-9]".to_string(),
            _ => format!("[1-9][0-9]{{0,{}}}", len - 2),
        });
    }
    for (i, &digit) in digits.iter().enumerate() {
        let lowest = u8::from(i == 0);
        if digit <= lowest {
            continue;
        }
        let prefix: String = digits[..i].iter().map(|d| char::from(b'0' + d)).collect();
        let class = if digit - 1 == lowest {
            lowest.to_string()
        } else {
            format!("[{lowest}-{}]", digit - 1)
        };
        let rest = match len - i - 1 {
            0 => String::new(),
            rest => format!("[0-9]{{{rest}}}"),
        };
        alternatives.push(format!("{prefix}{class}{rest}"));
    }
    if n > 0 {
        alternatives.push(n.to_string());
    }
    alternatives.join("|")
}

/// The pattern `wait` follows on a host whose longest wait is `max`: exactly the values
/// [`parse_wait`] accepts.
pub fn wait_pattern(max: Duration) -> String {
    format!(
        "^(({})s?|({})ms)$",
        numbers_up_to(u128::from(max.as_secs())),
        numbers_up_to(max.as_millis())
    )
}

/// A `wait` value: whole seconds (`30`, `30s`) or milliseconds (`500ms`), written without
/// leading zeros, at most `max`.
fn parse_wait(text: &str, max: Duration) -> Option<Duration> {
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let (number, unit) = text.split_at(digits);
    if digits == 0 || (digits > 1 && number.starts_with('0')) || digits > 20 {
        return None;
    }
    let number: u64 = number.parse().ok()?;
    let wait = match unit {
        "" | "s" => Duration::from_secs(number),
        "ms" => Duration::from_millis(number),
        _ => return None,
    };
    (wait <= max).then_some(wait)
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
    /// refused with 422: send the object or array itself.
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

/// The schema of `delay`: null, a number of seconds, or text in [`DELAY_PATTERN`].
fn delay_schema() -> utoipa::openapi::schema::Schema {
    use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, SchemaType, Type};
    OneOfBuilder::new()
        .item(ObjectBuilder::new().schema_type(Type::Null))
        .item(
            ObjectBuilder::new()
                .schema_type(SchemaType::new(Type::Number))
                .minimum(Some(0.0))
                .maximum(Some(MAX_DELAY.as_secs_f64())),
        )
        .item(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .pattern(Some(DELAY_PATTERN)),
        )
        .examples([serde_json::json!("30s")])
        .build()
        .into()
}

/// A delay given as seconds or as a whole number with a unit.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Delay {
    Seconds(f64),
    Text(String),
}

impl Delay {
    /// The delay, if it is one [`delay_schema`] describes.
    fn to_duration(&self) -> Result<Duration, ApiError> {
        let out_of_range = || {
            ApiError::invalid(format!(
                "delay {self} is out of range: at most 100 years (3155760000 seconds)"
            ))
        };
        let duration = match self {
            Delay::Seconds(s) if *s >= 0.0 => Duration::try_from_secs_f64(*s).map_err(|_| out_of_range())?,
            Delay::Seconds(s) => return Err(ApiError::invalid(format!("delay {s} must be zero or more seconds"))),
            Delay::Text(text) => parse_delay(text).ok_or_else(|| {
                ApiError::invalid(format!(
                    "delay `{text}` is not a duration: write a whole number with one unit, ms, s, m, h or d (\"90s\", \"5m\", \"36h\"), or seconds as a number"
                ))
            })?,
        };
        if duration > MAX_DELAY {
            return Err(out_of_range());
        }
        Ok(duration)
    }
}

impl std::fmt::Display for Delay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Delay::Seconds(s) => write!(f, "{s}"),
            Delay::Text(text) => write!(f, "`{text}`"),
        }
    }
}

/// Parses text that matches [`DELAY_PATTERN`], and nothing else.
fn parse_delay(text: &str) -> Option<Duration> {
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let (number, unit) = text.split_at(digits);
    let (unit_ms, most_digits) = match unit {
        "ms" => (1, 12),
        "s" => (1_000, 9),
        "m" => (60_000, 7),
        "h" => (3_600_000, 5),
        "d" => (86_400_000, 4),
        _ => return None,
    };
    if !(1..=most_digits).contains(&digits) {
        return None;
    }
    Some(Duration::from_millis(number.parse::<u64>().ok()? * unit_ms))
}

/// The latest `run_at` accepted: the end of year 9999, the last an RFC 3339 time can name.
fn latest_run_at() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("9999-12-31T23:59:59.999999999Z")
        .expect("a valid time")
        .to_utc()
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

/// What a string payload may not look like: JSON whitespace, then `{` or `[` (described in
/// the OpenAPI description as the payload's `not`).
pub const DOUBLE_ENCODED_PATTERN: &str = "^[ \t\r\n]*[\\[{]";

/// Refuses a payload that is a JSON string starting with `{` or `[`: a document encoded
/// twice (or a broken one), which the handler would receive as a quoted string.
fn check_payload(payload: &serde_json::Value) -> Result<(), ApiError> {
    let serde_json::Value::String(text) = payload else {
        return Ok(());
    };
    let inner = text.trim_start_matches([' ', '\t', '\r', '\n']);
    if inner.starts_with('{') || inner.starts_with('[') {
        return Err(ApiError::invalid(
            "payload is a JSON string that starts with { or [, a JSON document encoded twice; send the object or array itself: \"payload\": {\"k\": 1}, not \"payload\": \"{\\\"k\\\": 1}\"",
        ));
    }
    Ok(())
}

/// This host's completion estimates (see [`crate::worker::estimates`]).
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
    check_payload(&request.payload)?;
    if let Some(key) = &request.idempotency_key
        && key.starts_with(crate::schedule::RESERVED_KEY_PREFIX)
    {
        return Err(ApiError::invalid(format!(
            "idempotency_key {key:?}: keys starting with `{}` are reserved for the keys the host makes (scheduled ticks, follow-up tasks); choose another key",
            crate::schedule::RESERVED_KEY_PREFIX
        )));
    }
    let run_at = match (request.run_at, &request.delay) {
        (Some(_), Some(_)) => {
            return Err(ApiError::invalid("give either run_at or delay, not both"));
        }
        (Some(at), None) if at > latest_run_at() => {
            return Err(ApiError::invalid(format!(
                "run_at {at} is out of range: at most 9999-12-31T23:59:59Z"
            )));
        }
        // Every database can store it, and a task due long ago is simply due.
        (Some(at), None) => at.max(DateTime::UNIX_EPOCH),
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
    if let (Some(wait), Some(mut finished)) = (wait, finished) {
        let deadline = tokio::time::Instant::now() + wait;
        let stopping = state.shutdown.reached(crate::shutdown::Stage::Graceful);
        tokio::pin!(stopping);
        let mut woken_by_completer = true;
        while !task.status.is_final() && tokio::time::Instant::now() < deadline {
            let recheck =
                (tokio::time::Instant::now() + crate::worker::finished::RECHECK).min(deadline);
            let read_again = tokio::select! {
                () = &mut stopping => break,
                () = tokio::time::sleep_until(recheck) => true,
                batch = finished.recv(), if woken_by_completer => match batch {
                    Ok(ids) => ids.contains(&id),
                    // Fell behind: whatever was missed may have been this task.
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => true,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                        woken_by_completer = false;
                        false
                    }
                },
            };
            if read_again {
                task = read_task(&state, id).await?;
            }
        }
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
async fn read_task(state: &AppState, id: TaskId) -> Result<Task, ApiError> {
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
    // Rows are read a few at a time, as many as fit READ_BYTES if each were as large as this
    // host lets a row grow, and the page stops at PAGE_BYTES.
    let largest_row = state.config.max_payload
        + state.config.max_result
        + crate::sandbox::output::DEFAULT_LOG_LIMIT
        + ROW_EXTRA_BYTES;
    let per_read = (READ_BYTES / largest_row).clamp(1, limit);
    if let Some(text) = &query.error_contains {
        let length = text.chars().count();
        if !(1..=super::control::MAX_ERROR_TEXT).contains(&length) {
            return Err(ApiError::bad_request(format!(
                "error_contains must be 1 to {} characters",
                super::control::MAX_ERROR_TEXT
            )));
        }
    }
    let mut filter = TaskFilter {
        status: query.status,
        task_type: query.task_type,
        before_id: query.before,
        limit: per_read,
        error_contains: query.error_contains,
        since: query.since,
        until: query.until,
    };
    let mut page: Vec<TaskView> = Vec::new();
    let mut bytes = 0;
    let more = 'fill: loop {
        filter.limit = per_read.min(limit - page.len());
        let tasks = state.store.list(&filter).await?;
        let exhausted = tasks.len() < filter.limit;
        for task in tasks {
            let size = data_bytes(&task);
            if !page.is_empty() && bytes + size > PAGE_BYTES {
                break 'fill true;
            }
            bytes += size;
            filter.before_id = Some(task.id);
            page.push(TaskView::from(task));
        }
        if exhausted {
            break false;
        }
        if page.len() == limit {
            break true;
        }
    };
    let next_before = if more {
        page.last().map(|t| t.id)
    } else {
        None
    };
    Ok(Json(TaskPage {
        tasks: page,
        next_before,
    }))
}

/// What a task's data weighs in a listing: its payload (as JSON), result, log, error and
/// progress note.
fn data_bytes(task: &Task) -> usize {
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut payload = Counter(0);
    let _ = serde_json::to_writer(&mut payload, &task.payload);
    let text = |field: &Option<String>| field.as_ref().map_or(0, String::len);
    payload.0
        + text(&task.result)
        + text(&task.log)
        + text(&task.last_error)
        + text(&task.progress_note)
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

    #[test]
    fn delays_follow_their_pattern_exactly() {
        assert_eq!(parse_delay("90s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_delay("5m"), Some(Duration::from_secs(300)));
        assert_eq!(parse_delay("0036h"), Some(Duration::from_secs(36 * 3600)));
        assert_eq!(
            parse_delay("9999d"),
            Some(Duration::from_secs(9999 * 86_400))
        );
        assert_eq!(
            parse_delay("999999999999ms"),
            Some(Duration::from_millis(999_999_999_999))
        );
        for bad in [
            "",
            "s",
            "90",
            "1h30m",
            "1h 30m",
            " 5m",
            "5 m",
            "5M",
            "99999d",
            "1000000000s",
            "-5s",
            "5.5s",
            "٣s",
            "1y",
        ] {
            assert_eq!(parse_delay(bad), None, "{bad:?}");
        }
        // Every delay the pattern allows is within the longest delay.
        for longest in [
            "999999999999ms",
            "999999999s",
            "9999999m",
            "99999h",
            "9999d",
        ] {
            assert!(parse_delay(longest).unwrap() <= MAX_DELAY, "{longest}");
        }
        let seconds = |s: f64| Delay::Seconds(s).to_duration().map_err(|e| e.status);
        assert_eq!(seconds(MAX_DELAY.as_secs_f64()), Ok(MAX_DELAY));
        assert!(seconds(MAX_DELAY.as_secs_f64() + 1.0).is_err());
        assert!(seconds(1e300).is_err());
        assert!(seconds(-0.5).is_err());
    }

    #[test]
    fn waits_follow_their_pattern_exactly() {
        assert_eq!(wait_pattern(crate::config::DEFAULT_MAX_WAIT), WAIT_PATTERN);
        assert_eq!(
            wait_pattern(Duration::from_millis(200)),
            "^((0)s?|(0|[1-9][0-9]{0,1}|1[0-9]{2}|200)ms)$"
        );
        let max = Duration::from_secs(60);
        assert_eq!(parse_wait("30s", max), Some(Duration::from_secs(30)));
        assert_eq!(parse_wait("30", max), Some(Duration::from_secs(30)));
        assert_eq!(parse_wait("60s", max), Some(max));
        assert_eq!(parse_wait("0", max), Some(Duration::ZERO));
        assert_eq!(parse_wait("500ms", max), Some(Duration::from_millis(500)));
        assert_eq!(parse_wait("60000ms", max), Some(max));
        for bad in [
            "",
            "s",
            "61s",
            "60001ms",
            "030s",
            "1m",
            "5 s",
            "-1",
            "1.5s",
            "99999999999999999999999s",
        ] {
            assert_eq!(parse_wait(bad, max), None, "{bad:?}");
        }
        // Every number up to a few past the limit, in both units: the pattern (checked here
        // by its own alternatives) and the parser agree.
        for max_ms in [200u64, 1_000, 5_500, 60_000] {
            let max = Duration::from_millis(max_ms);
            let pattern = wait_pattern(max);
            for n in 0..max_ms + 50 {
                for unit in ["", "s", "ms"] {
                    let text = format!("{n}{unit}");
                    assert_eq!(
                        parse_wait(&text, max).is_some(),
                        matches_pattern(&pattern, &text),
                        "{text} against {pattern}"
                    );
                }
            }
        }
    }

    /// Whether `text` matches a pattern made by [`wait_pattern`]: a small matcher for exactly
    /// that shape (alternatives of digits, `[a-b]` classes and `{m}` / `{m,n}` repeats).
    fn matches_pattern(pattern: &str, text: &str) -> bool {
        let body = &pattern[3..pattern.len() - 2];
        let (seconds, millis) = body.split_once(")s?|(").unwrap();
        let millis = millis.trim_end_matches(")ms");
        let number_matches = |alternatives: &str, number: &str| {
            alternatives
                .split('|')
                .any(|alt| matches_number(alt, number))
        };
        if let Some(number) = text.strip_suffix("ms") {
            return number_matches(millis, number);
        }
        let number = text.strip_suffix('s').unwrap_or(text);
        number_matches(seconds, number)
    }

    fn matches_number(alternative: &str, number: &str) -> bool {
        // Tokens: a digit, or a class [a-b], each optionally followed by {m} or {m,n}.
        let mut tokens: Vec<(u8, u8, usize, usize)> = Vec::new();
        let bytes = alternative.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            let (low, high) = if bytes[i] == b'[' {
                let token = (bytes[i + 1], bytes[i + 3]);
                i += 5;
                token
            } else {
                i += 1;
                (bytes[i - 1], bytes[i - 1])
            };
            let (mut least, mut most) = (1, 1);
            if bytes.get(i) == Some(&b'{') {
                let end = i + alternative[i..].find('}').unwrap();
                let counts = &alternative[i + 1..end];
                match counts.split_once(',') {
                    Some((a, b)) => (least, most) = (a.parse().unwrap(), b.parse().unwrap()),
                    None => (least, most) = (counts.parse().unwrap(), counts.parse().unwrap()),
                }
                i = end + 1;
            }
            tokens.push((low, high, least, most));
        }
        fn rest(tokens: &[(u8, u8, usize, usize)], text: &[u8]) -> bool {
            let Some(&(low, high, least, most)) = tokens.first() else {
                return text.is_empty();
            };
            (least..=most).any(|count| {
                text.len() >= count
                    && text[..count].iter().all(|c| (low..=high).contains(c))
                    && rest(&tokens[1..], &text[count..])
            })
        }
        rest(&tokens, number.as_bytes())
    }

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
            serde_json::json!(crate::enqueue::MAX_RETRY)
        );
        assert_eq!(
            fields["idempotency_key"]["maxLength"],
            serde_json::json!(crate::enqueue::MAX_IDEMPOTENCY_KEY)
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
