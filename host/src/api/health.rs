//! `GET /health`: is this host serving, does its database answer, what can it run.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use utoipa::ToSchema;

use super::AppState;
use crate::store::StatusCounts;
use crate::store::control::TaskSelection;
use crate::task::Status;

/// The host's health.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Health {
    /// `ok`, or `unavailable` when the database does not answer.
    pub status: String,
    /// `ok`, or which database does not answer (its address without credentials; the
    /// driver's error text stays in the host's log).
    pub database: String,
    /// This host's lease-owner name.
    pub host_id: String,
    /// The host that runs maintenance (rescuer) for every host on this database, as this host
    /// last saw it; absent while unknown (the database is away).
    pub leader: Option<String>,
    /// Whether this host is that leader.
    pub leading: bool,
    /// Task types this host runs.
    pub task_types: Vec<String>,
    /// Plugins that failed to load, with the reason.
    pub plugin_errors: std::collections::BTreeMap<String, String>,
    /// Tasks per state (absent when the database is unavailable).
    pub counts: Option<StatusCounts>,
    /// Pending tasks of types this host has no plugin for, with why they wait
    /// ("no plugin for type X"); absent when the database is unavailable.
    pub waiting_without_plugin: Option<std::collections::BTreeMap<String, WaitingType>>,
    /// Task types paused on this database (as this host last read them): their tasks stay
    /// pending until `POST /types/{name}/resume`.
    #[serde(default)]
    pub paused_types: Vec<String>,
    /// Services of this host that died (dispatcher, completer, SQLite's writer thread), with
    /// why; the host stops (or, for the writer, every write fails until it is restarted).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub failed_services: std::collections::BTreeMap<String, String>,
    /// Things to look at that do not make the host unhealthy: no alert channel configured, no
    /// alert drill in the last 90 days (or ever), a failed last drill.
    #[serde(default)]
    pub warnings: Vec<String>,
}

/// Pending tasks of a type no plugin here runs.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct WaitingType {
    pub pending: u64,
    pub reason: String,
}

/// Health of this host and its database.
#[utoipa::path(get, path = "/health", tag = "host",
    responses(
        (status = 200, description = "Serving", body = Health),
        (status = 503, description = "The database does not answer", body = Health),
    ))]
pub async fn health(State(state): State<Arc<AppState>>) -> (StatusCode, Json<Health>) {
    let answers = async {
        Ok::<_, crate::store::StoreError>((
            state.store.counts().await?,
            crate::store::reads::pending_by_type(
                &state
                    .store
                    .counts_by_type(&TaskSelection::in_state(Status::Pending))
                    .await?,
            ),
        ))
    };
    let (status, database, counts, waiting) = match answers.await {
        Ok((counts, pending)) => {
            let loaded: std::collections::BTreeSet<String> =
                state.registry.task_types().into_iter().collect();
            let waiting = pending
                .into_iter()
                .filter(|(task_type, _)| !loaded.contains(task_type))
                .map(|(task_type, pending)| {
                    let reason = super::plugins::no_plugin_message(&task_type);
                    (task_type, WaitingType { pending, reason })
                })
                .collect();
            (
                StatusCode::OK,
                "ok".to_string(),
                Some(counts),
                Some(waiting),
            )
        }
        Err(error) => {
            tracing::warn!("health check: the database does not answer: {error}");
            let database = format!(
                "unavailable: the task database {} does not answer",
                crate::store::describe_url(&state.config.database_url)
            );
            (StatusCode::SERVICE_UNAVAILABLE, database, None, None)
        }
    };
    let failed_services: std::collections::BTreeMap<String, String> = state
        .failures
        .all()
        .into_iter()
        .map(|(name, why)| (name.to_string(), why))
        .chain(state.store.failed_part())
        .collect();
    let status = if failed_services.is_empty() {
        status
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let health = Health {
        status: if status == StatusCode::OK {
            "ok"
        } else {
            "unavailable"
        }
        .to_string(),
        database,
        host_id: state.host_id.clone(),
        leader: state.leadership.leader(),
        leading: state.leadership.is_leader(),
        task_types: state.registry.task_types(),
        plugin_errors: state.registry.errors(),
        counts,
        waiting_without_plugin: waiting,
        paused_types: state.paused.all(),
        failed_services,
        warnings: super::alerts::health_warnings(&state).await,
    };
    (status, Json(health))
}
