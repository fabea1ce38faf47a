//! `GET /health`: is this host serving, does its database answer, what can it run.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use utoipa::ToSchema;

use super::AppState;
use crate::store::StatusCounts;

/// The host's health.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Health {
    /// `ok`, or `unavailable` when the database does not answer.
    pub status: String,
    /// `ok` or the database error.
    pub database: String,
    /// This host's lease-owner name.
    pub host_id: String,
    /// Task types this host runs.
    pub task_types: Vec<String>,
    /// Plugins that failed to load, with the reason.
    pub plugin_errors: std::collections::BTreeMap<String, String>,
    /// Tasks per state (absent when the database is unavailable).
    pub counts: Option<StatusCounts>,
}

/// Health of this host and its database.
#[utoipa::path(get, path = "/health", tag = "host",
    responses(
        (status = 200, description = "Serving", body = Health),
        (status = 503, description = "The database does not answer", body = Health),
    ))]
pub async fn health(State(state): State<Arc<AppState>>) -> (StatusCode, Json<Health>) {
    let counts = state.store.counts().await;
    let (status, database, counts) = match counts {
        Ok(counts) => (StatusCode::OK, "ok".to_string(), Some(counts)),
        Err(error) => (StatusCode::SERVICE_UNAVAILABLE, error.to_string(), None),
    };
    let health = Health {
        status: if status == StatusCode::OK { "ok" } else { "unavailable" }.to_string(),
        database,
        host_id: state.host_id.clone(),
        task_types: state.registry.task_types(),
        plugin_errors: state.registry.errors(),
        counts,
    };
    (status, Json(health))
}
