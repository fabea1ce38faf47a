//! Dead letters and queue control: bulk retry and discard by filter (`POST /tasks/retry`,
//! `POST /tasks/discard`, with a dry run that only counts), the task types with their counts,
//! plugin and pause state (`GET /types`), and pausing and resuming a type on every host
//! (`POST /types/{name}/pause`, `/resume`). The store does the work in bounded batches
//! (`store/control.rs`); this module validates and answers.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use utoipa::{IntoParams, ToSchema};

use super::deploy::FiguresView;
use super::error::{ApiError, ErrorBody};
use super::plugins::PolicyView;
use super::{ApiJson, ApiPath, AppState};
use crate::store::StatusCounts;
use crate::store::control::{self, BulkAction, MAX_SELECTED_IDS, TaskSelection};
use crate::task::{Status, TaskId};
use spool_rules::names::is_valid_task_type;

/// The longest `error_contains`, in characters.
pub const MAX_ERROR_TEXT: usize = 1000;

/// Which tasks a bulk retry or discard applies to. Every condition given must hold. A body
/// without any condition selects every task and is refused (409 `selects_everything`) unless
/// it says `"all": true`.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BulkRequest {
    /// Only these tasks (at most 1000 ids).
    #[serde(default, deserialize_with = "whole_ids")]
    #[schema(max_items = 1000)]
    pub ids: Vec<TaskId>,
    /// Only tasks of this type.
    #[schema(pattern = "^[A-Za-z0-9_-]{1,64}$")]
    pub task_type: Option<String>,
    /// Only tasks in this state (the action still changes only the states it applies to).
    pub status: Option<Status>,
    /// Only tasks whose last error contains this text (case-sensitive), 1 to 1000 characters.
    #[schema(min_length = 1, max_length = 1000)]
    pub error_contains: Option<String>,
    /// Only tasks whose time is at or after this (RFC 3339): when they finished (done, failed,
    /// cancelled), or when they were created if they have not finished.
    pub since: Option<DateTime<Utc>>,
    /// Only tasks whose time (as for `since`) is before this.
    pub until: Option<DateTime<Utc>>,
    /// Count only: change nothing, answer what would change.
    #[serde(default)]
    pub dry_run: bool,
    /// Allow a body without any condition (every task).
    #[serde(default)]
    pub all: bool,
}

/// Task ids written as JSON Schema's `integer` allows: `7` or `7.0`, not `7.5`.
fn whole_ids<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Vec<TaskId>, D::Error> {
    use serde::de::Error;
    let numbers = Vec::<serde_json::Number>::deserialize(deserializer)?;
    numbers
        .into_iter()
        .map(|number| {
            number
                .as_i64()
                .or_else(|| {
                    // Exactly representable and within i64: the float is that whole number.
                    number
                        .as_f64()
                        .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15)
                        .map(|f| f as i64)
                })
                .ok_or_else(|| D::Error::custom(format!("{number} is not a task id")))
        })
        .collect()
}

/// What a bulk retry or discard selected and changed.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct BulkResponse {
    /// `retry` or `discard`.
    pub action: String,
    pub dry_run: bool,
    /// Tasks the filter selects, in any state.
    pub matched: u64,
    /// Of those, the tasks in a state the action applies to (retry: failed or cancelled;
    /// discard: failed or pending): what a dry run would change. Running and done tasks are
    /// never changed.
    pub eligible: u64,
    /// Tasks changed (0 in a dry run). Below `eligible` when tasks changed state meanwhile.
    pub changed: u64,
    /// The selected tasks per state, counted before any change.
    pub by_status: StatusCounts,
}

/// A task type: its tasks, its plugin on this host, whether it is paused.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct TypeView {
    pub task_type: String,
    /// Its tasks per state (on the whole database).
    pub counts: StatusCounts,
    /// Whether the type is paused (on every host sharing the database): its tasks stay
    /// pending, enqueues still work.
    pub paused: bool,
    pub paused_at: Option<DateTime<Utc>>,
    /// Its plugin on this host: `loaded`, `failed` (its file did not load and no version
    /// serves), `removed` (its file was removed while this host served) or `absent`.
    pub load_state: String,
    /// The loaded plugin's version (SHA-256 of the component file).
    pub version: Option<String>,
    pub loaded_at: Option<DateTime<Utc>>,
    /// The last failed load (when loaded, the loaded version keeps serving).
    pub load_error: Option<String>,
    /// The loaded plugin's effective policy.
    pub policy: Option<PolicyView>,
    /// This host's moving average of the type's attempt times, in milliseconds; absent until
    /// an attempt finished here.
    pub mean_attempt_ms: Option<u64>,
    /// What the attempts of the loaded build cost on this host since it started: attempts,
    /// failures, p50/p95 time, mean fuel, peak memory (absent before its first attempt here).
    /// `GET /plugins/{name}/versions` has a deployed build's figures over every host.
    #[serde(default)]
    pub cost: Option<FiguresView>,
}

/// Every task type the database has tasks of, this host has a plugin for (or failed to load),
/// or that is paused.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct TypesView {
    pub types: Vec<TypeView>,
}

/// A type's pause state after a pause or resume.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PauseView {
    pub task_type: String,
    pub paused: bool,
    /// When it was paused (the first pause, when paused twice).
    pub paused_at: Option<DateTime<Utc>>,
}

/// The task type in a `/types/{name}/…` or `/plugins/{name}/…` path.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct TypePath {
    /// A task type name: letters, digits, `_` and `-`, at most 64.
    #[param(pattern = "^[A-Za-z0-9_-]{1,64}$")]
    pub name: String,
}

impl BulkRequest {
    /// The selection, once the request is checked.
    fn selection(&self) -> Result<TaskSelection, ApiError> {
        if self.ids.len() > MAX_SELECTED_IDS {
            return Err(ApiError::invalid(format!(
                "ids lists {} tasks; at most {MAX_SELECTED_IDS} at once (or select them by type, state, error or time)",
                self.ids.len()
            )));
        }
        if let Some(task_type) = self.task_type.as_deref().filter(|t| !is_valid_task_type(t)) {
            return Err(ApiError::invalid(format!(
                "task_type `{task_type}` is not a task type name (letters, digits, `_` or `-`, at most 64 characters)"
            )));
        }
        if let Some(text) = &self.error_contains {
            let length = text.chars().count();
            if !(1..=MAX_ERROR_TEXT).contains(&length) {
                return Err(ApiError::invalid(format!(
                    "error_contains must be 1 to {MAX_ERROR_TEXT} characters"
                )));
            }
        }
        let selection = TaskSelection {
            ids: self.ids.clone(),
            task_type: self.task_type.clone(),
            status: self.status,
            error_contains: self.error_contains.clone(),
            since: self.since,
            until: self.until,
        };
        if selection.is_everything() && !self.all {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "selects_everything",
                "this filter has no condition and would select every task: add ids, task_type, status, error_contains, since or until, or send \"all\": true to mean every task",
            ));
        }
        Ok(selection)
    }
}

/// Runs a bulk action for a request.
async fn bulk(
    state: &AppState,
    action: BulkAction,
    request: BulkRequest,
) -> Result<Json<BulkResponse>, ApiError> {
    let selection = request.selection()?;
    let report = control::run_bulk(
        state.store.as_ref(),
        action,
        &selection,
        request.dry_run,
        Utc::now(),
    )
    .await?;
    if report.changed > 0 {
        tracing::info!(
            ?action,
            ?selection,
            changed = report.changed,
            "bulk {action:?} done"
        );
        if action == BulkAction::Retry {
            state.wake.notify_one();
        }
    }
    Ok(Json(BulkResponse {
        action: match action {
            BulkAction::Retry => "retry",
            BulkAction::Discard => "discard",
        }
        .to_string(),
        dry_run: request.dry_run,
        matched: report.matched,
        eligible: report.eligible,
        changed: report.changed,
        by_status: report.by_status,
    }))
}

/// Send the failed or cancelled tasks a filter selects back to the queue (due now, with a fresh
/// retry budget), in batches; with `dry_run`, only count them. Other states are left alone.
#[utoipa::path(post, path = "/tasks/retry", tag = "tasks", request_body = BulkRequest,
    responses(
        (status = 200, description = "What the filter selected and what changed", body = BulkResponse),
        (status = 400, description = "The body is not JSON", body = ErrorBody),
        (status = 409, description = "The filter has no condition and `all` is not true", body = ErrorBody),
        (status = 413, description = "The body is too large", body = ErrorBody),
        (status = 415, description = "The body is not sent as JSON", body = ErrorBody),
        (status = 422, description = "A field is invalid", body = ErrorBody),
        (status = 503, description = "The database does not answer", body = ErrorBody),
    ))]
pub async fn retry_tasks(
    State(state): State<Arc<AppState>>,
    ApiJson(request): ApiJson<BulkRequest>,
) -> Result<Json<BulkResponse>, ApiError> {
    bulk(&state, BulkAction::Retry, request).await
}

/// Discard the failed or pending tasks a filter selects: they become cancelled, kept for the
/// record, with `last_error` starting "discarded by an operator while failed" (or pending)
/// followed by their last error. In batches; with `dry_run`, only count them. Running tasks are
/// left alone (cancel one with `POST /tasks/{id}/cancel`).
#[utoipa::path(post, path = "/tasks/discard", tag = "tasks", request_body = BulkRequest,
    responses(
        (status = 200, description = "What the filter selected and what changed", body = BulkResponse),
        (status = 400, description = "The body is not JSON", body = ErrorBody),
        (status = 409, description = "The filter has no condition and `all` is not true", body = ErrorBody),
        (status = 413, description = "The body is too large", body = ErrorBody),
        (status = 415, description = "The body is not sent as JSON", body = ErrorBody),
        (status = 422, description = "A field is invalid", body = ErrorBody),
        (status = 503, description = "The database does not answer", body = ErrorBody),
    ))]
pub async fn discard_tasks(
    State(state): State<Arc<AppState>>,
    ApiJson(request): ApiJson<BulkRequest>,
) -> Result<Json<BulkResponse>, ApiError> {
    bulk(&state, BulkAction::Discard, request).await
}

/// The task types: counts per state, this host's plugin (version, load state, policy), mean
/// attempt time here, and whether each is paused.
#[utoipa::path(get, path = "/types", tag = "host",
    responses(
        (status = 200, description = "Every known task type", body = TypesView),
        (status = 503, description = "The database does not answer", body = ErrorBody),
    ))]
pub async fn list_types(State(state): State<Arc<AppState>>) -> Result<Json<TypesView>, ApiError> {
    let counts = state
        .store
        .counts_by_type(&TaskSelection::default())
        .await?;
    let paused: BTreeMap<String, DateTime<Utc>> = state
        .store
        .paused_types()
        .await?
        .into_iter()
        .map(|p| (p.task_type, p.paused_at))
        .collect();
    let plugins: BTreeMap<String, _> = state
        .registry
        .plugins()
        .into_iter()
        .map(|p| (p.task_type.clone(), p))
        .collect();
    let errors = state.registry.errors();
    let removed = state.registry.removed();
    let names: BTreeSet<&String> = counts
        .keys()
        .chain(paused.keys())
        .chain(plugins.keys())
        .chain(errors.keys())
        .chain(removed.keys())
        .collect();
    let types = names
        .into_iter()
        .map(|name| {
            let plugin = plugins.get(name);
            let load_state = if plugin.is_some() {
                "loaded"
            } else if errors.contains_key(name) {
                "failed"
            } else if removed.contains_key(name) {
                "removed"
            } else {
                "absent"
            };
            TypeView {
                task_type: name.clone(),
                counts: counts.get(name).cloned().unwrap_or_default(),
                paused: paused.contains_key(name),
                paused_at: paused.get(name).copied(),
                load_state: load_state.to_string(),
                version: plugin.map(|p| p.version.clone()),
                loaded_at: plugin.map(|p| p.loaded_at),
                load_error: errors.get(name).cloned(),
                policy: plugin.map(|p| policy_view(&p.policy)),
                mean_attempt_ms: state
                    .estimates
                    .mean_attempt(name)
                    .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
                cost: plugin
                    .and_then(|p| state.tallies.on_this_host(name, &p.version))
                    .map(|tally| FiguresView::from(&tally)),
            }
        })
        .collect();
    Ok(Json(TypesView { types }))
}

/// A policy as the API shows it (the same view as `GET /plugins`).
fn policy_view(p: &crate::plugins::Policy) -> PolicyView {
    PolicyView {
        max_retry: p.max_retry,
        backoff_base_ms: p.backoff.base.as_millis() as u64,
        backoff_max_ms: p.backoff.max_delay.as_millis() as u64,
        backoff_jitter: p.backoff.jitter,
        priority: p.priority,
        fuel: p.fuel,
        timeout_ms: p.timeout.as_millis() as u64,
        memory_bytes: p.memory_bytes,
        concurrency: p.concurrency,
        rate: p.rate,
    }
}

/// The type name in a path, checked.
pub(super) fn type_name(path: TypePath) -> Result<String, ApiError> {
    if is_valid_task_type(&path.name) {
        Ok(path.name)
    } else {
        Err(ApiError::bad_request(format!(
            "`{}` is not a task type name (letters, digits, `_` or `-`, at most 64 characters)",
            path.name
        )))
    }
}

/// Pause a task type on every host sharing the database: its tasks stay pending (running ones
/// finish), enqueues still work, other types keep flowing. This host stops claiming it at
/// once, other hosts within their poll interval. Pausing a paused type changes nothing.
#[utoipa::path(post, path = "/types/{name}/pause", tag = "host", params(TypePath),
    responses(
        (status = 200, description = "Paused", body = PauseView),
        (status = 400, description = "Not a task type name", body = ErrorBody),
        (status = 503, description = "The database does not answer", body = ErrorBody),
    ))]
pub async fn pause_type(
    State(state): State<Arc<AppState>>,
    ApiPath(path): ApiPath<TypePath>,
) -> Result<Json<PauseView>, ApiError> {
    let name = type_name(path)?;
    let paused = state.store.pause_type(&name, Utc::now()).await?;
    state.paused.set(&name, true);
    tracing::info!(task_type = %name, "task type paused");
    Ok(Json(PauseView {
        task_type: name,
        paused: true,
        paused_at: Some(paused.paused_at),
    }))
}

/// Resume a paused task type: its pending tasks run again (on this host at once, on other
/// hosts within their poll interval). Resuming a type that is not paused changes nothing.
#[utoipa::path(post, path = "/types/{name}/resume", tag = "host", params(TypePath),
    responses(
        (status = 200, description = "Not paused (any more)", body = PauseView),
        (status = 400, description = "Not a task type name", body = ErrorBody),
        (status = 503, description = "The database does not answer", body = ErrorBody),
    ))]
pub async fn resume_type(
    State(state): State<Arc<AppState>>,
    ApiPath(path): ApiPath<TypePath>,
) -> Result<Json<PauseView>, ApiError> {
    let name = type_name(path)?;
    let was_paused = state.store.resume_type(&name).await?;
    state.paused.set(&name, false);
    state.wake.notify_one();
    if was_paused {
        tracing::info!(task_type = %name, "task type resumed");
    }
    Ok(Json(PauseView {
        task_type: name,
        paused: false,
        paused_at: None,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_need_a_condition_or_all() {
        let parse = |text: &str| serde_json::from_str::<BulkRequest>(text);
        let everything = parse("{}").unwrap().selection().unwrap_err();
        assert_eq!(everything.status, StatusCode::CONFLICT);
        assert!(parse(r#"{"all": true}"#).unwrap().selection().is_ok());
        let ids = parse(r#"{"ids": [7, 8.0]}"#).unwrap();
        assert_eq!(ids.ids, [7, 8]);
        assert!(parse(r#"{"ids": [7.5]}"#).is_err());
        assert!(parse(r#"{"ids": null}"#).is_err());
        assert!(parse(r#"{"status": "failed", "extra": 1}"#).is_err());
        let invalid = |text: &str| parse(text).unwrap().selection().unwrap_err().status;
        assert_eq!(
            invalid(r#"{"task_type": "no such"}"#),
            StatusCode::UNPROCESSABLE_ENTITY
        );
        assert_eq!(
            invalid(r#"{"error_contains": ""}"#),
            StatusCode::UNPROCESSABLE_ENTITY
        );
        let many = format!(r#"{{"ids": {:?}}}"#, (0..1001).collect::<Vec<i64>>());
        assert_eq!(invalid(&many), StatusCode::UNPROCESSABLE_ENTITY);
    }
}
