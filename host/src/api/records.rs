//! Attempt records for `spool replay` (reads: the read token where tokens are set):
//! `GET /tasks/{id}/records` lists a task's recorded attempts, `GET /tasks/{id}/records/{attempt}`
//! returns one record ([`crate::sandbox::tape::Recording`]), and `GET /builds/{digest}` the
//! bytes of a build a record names.

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use utoipa::ToSchema;

use super::error::{ApiError, ErrorBody};
use super::{ApiPath, AppState};
use crate::task::TaskId;

/// One recorded attempt, without its contents.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RecordSummary {
    pub attempt: u32,
    /// Hex SHA-256 of the build that ran (`GET /builds/{digest}`).
    pub build: String,
    /// Size of the record, in bytes.
    pub bytes: u64,
    /// The record reached the type's `record_max`: a replay stops where it was cut.
    pub truncated: bool,
    pub recorded_at: DateTime<Utc>,
}

/// A task's recorded attempts.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RecordsView {
    pub task_id: TaskId,
    pub records: Vec<RecordSummary>,
}

fn not_found(message: String) -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", message)
}

/// The recorded attempts of a task, oldest first (empty when none was recorded).
#[utoipa::path(get, path = "/tasks/{id}/records", tag = "tasks",
    params(("id" = i64, Path, description = "Task id")),
    responses(
        (status = 200, description = "The task's recorded attempts", body = RecordsView),
        (status = 400, description = "The id is not a whole number within 64 bits", body = ErrorBody),
        (status = 404, description = "No such task", body = ErrorBody),
    ))]
pub async fn list_records(
    State(state): State<Arc<AppState>>,
    ApiPath(id): ApiPath<TaskId>,
) -> Result<Json<RecordsView>, ApiError> {
    let records = state.store.records(id).await?;
    if records.is_empty() && state.store.get(id).await?.is_none() {
        super::archived::find(&state, id).await?;
    }
    Ok(Json(RecordsView {
        task_id: id,
        records: records
            .into_iter()
            .map(|r| RecordSummary {
                attempt: r.attempt,
                build: r.build,
                bytes: r.bytes,
                truncated: r.truncated,
                recorded_at: r.recorded_at,
            })
            .collect(),
    }))
}

/// One attempt's record: the task and payload it ran with, every host call in order with the
/// answer the guest got, and how it ended (docs/replay.md).
#[utoipa::path(get, path = "/tasks/{id}/records/{attempt}", tag = "tasks",
    params(("id" = i64, Path, description = "Task id"), ("attempt" = u32, Path, description = "Attempt number")),
    responses(
        (status = 200, description = "The record", body = Object),
        (status = 400, description = "The id or attempt is not a whole number", body = ErrorBody),
        (status = 404, description = "No record of that attempt", body = ErrorBody),
    ))]
pub async fn get_record(
    State(state): State<Arc<AppState>>,
    ApiPath((id, attempt)): ApiPath<(TaskId, u32)>,
) -> Result<Response, ApiError> {
    let stored = state.store.record(id, attempt).await?.ok_or_else(|| {
        not_found(format!(
            "attempt {attempt} of task {id} has no record: its type records only the attempts its manifest's `record` asks for (by default those that did not succeed); `GET /tasks/{id}/records` lists the recorded ones"
        ))
    })?;
    let body = stored.record.unwrap_or_default();
    Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response())
}

/// The bytes of a build a record names (or a deployed one), as the host stored them.
#[utoipa::path(get, path = "/builds/{digest}", tag = "host",
    params(("digest" = String, Path, description = "Hex SHA-256 of the build")),
    responses(
        (status = 200, description = "The component", content_type = "application/wasm"),
        (status = 404, description = "No build with that digest is stored (or it is not a hex SHA-256)", body = ErrorBody),
    ))]
pub async fn get_build(
    State(state): State<Arc<AppState>>,
    ApiPath(digest): ApiPath<String>,
) -> Result<Response, ApiError> {
    if digest.len() != 64 || !digest.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(not_found(format!(
            "no build `{digest}`: a build is named by 64 hex digits, the `plugin_version` of an attempt"
        )));
    }
    let bytes = state
        .store
        .build(&digest.to_ascii_lowercase())
        .await?
        .ok_or_else(|| {
            not_found(format!(
                "no build {digest} is stored: builds are kept for deployed versions and recorded attempts; pass the file with `spool replay --build FILE.wasm`"
            ))
        })?;
    Ok(([(header::CONTENT_TYPE, "application/wasm")], bytes).into_response())
}
