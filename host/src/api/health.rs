//! `GET /health`: is this host serving, does its database answer, what can it run.
//!
//! The check costs the database nothing per request, however often it is asked: whether the
//! database answers comes from the host's watch ([`crate::worker::database_watch`]), so while it
//! is away the 503 comes at once; the counts come from one read shared by every request for
//! [`COUNTS_TTL`] ([`super::reuse::Reused`]). When the host has tokens, a caller without one (a load
//! balancer's probe) gets only the status, the database's state and the leader; the rest
//! (task types, counts, plugin errors, warnings) needs the read token.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;
use utoipa::ToSchema;

use super::AppState;
use super::auth::MayRead;
use crate::store::StatusCounts;
use crate::store::control::TaskSelection;
use crate::task::Status;

/// How long the counts `/health` shows are reused.
pub const COUNTS_TTL: Duration = Duration::from_secs(1);

/// The host's health. Every field but `status`, `database` and `leader` needs read access when
/// the host has tokens, and is left out otherwise.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Health {
    /// `ok`, or `unavailable` when the database does not answer or a service of the host died.
    pub status: String,
    /// `ok`, or which database does not answer (its address without credentials; the
    /// driver's error text stays in the host's log).
    pub database: String,
    /// The host that runs maintenance (rescuer) for every host on this database, as this host
    /// last saw it; absent while unknown (the database is away).
    pub leader: Option<String>,
    /// This host's lease-owner name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_id: Option<String>,
    /// Whether this host is that leader.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leading: Option<bool>,
    /// Task types this host runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_types: Option<Vec<String>>,
    /// Plugins that failed to load, with the reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugin_errors: Option<BTreeMap<String, String>>,
    /// Tasks per state, at most a second old (absent when the database is unavailable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counts: Option<StatusCounts>,
    /// Pending tasks of types this host has no plugin for, with why they wait
    /// ("no plugin for type X"); absent when the database is unavailable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_without_plugin: Option<BTreeMap<String, WaitingType>>,
    /// Task types paused on this database (as this host last read them): their tasks stay
    /// pending until `POST /types/{name}/resume`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused_types: Option<Vec<String>>,
    /// Services of this host that died (dispatcher, completer, SQLite's writer thread), with
    /// why; the host stops (or, for the writer, every write fails until it is restarted).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub failed_services: BTreeMap<String, String>,
    /// Things to look at that do not make the host unhealthy: no alert channel configured, no
    /// alert drill in the last 90 days (or ever), a failed last drill.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warnings: Option<Vec<String>>,
}

/// Pending tasks of a type no plugin here runs.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct WaitingType {
    pub pending: u64,
    pub reason: String,
}

impl Health {
    /// The answer anyone may see: the status, the database's state and the leader.
    pub fn bare(status: &str, database: String, leader: Option<String>) -> Health {
        Health {
            status: status.to_string(),
            database,
            leader,
            host_id: None,
            leading: None,
            task_types: None,
            plugin_errors: None,
            counts: None,
            waiting_without_plugin: None,
            paused_types: None,
            failed_services: BTreeMap::new(),
            warnings: None,
        }
    }
}

/// What `/health` reads from the database, shared by the requests of one [`COUNTS_TTL`].
pub struct Readings {
    counts: StatusCounts,
    pending_by_type: BTreeMap<String, u64>,
    warnings: Vec<String>,
}

/// Health of this host and its database.
#[utoipa::path(get, path = "/health", tag = "host",
    responses(
        (status = 200, description = "Serving", body = Health),
        (status = 503, description = "The database does not answer, or a service of this host died", body = Health),
    ))]
pub async fn health(
    State(state): State<Arc<AppState>>,
    may_read: Option<axum::Extension<MayRead>>,
) -> (StatusCode, Json<Health>) {
    let may_read = may_read.is_none_or(|axum::Extension(MayRead(yes))| yes);
    let readings = match state.database.check() {
        Err(error) => Err(error),
        Ok(()) if !may_read => Ok(None),
        Ok(()) => state
            .health
            .get(|_| read(&state))
            .await
            .map(|(_, readings)| Some(readings)),
    };
    let (mut status, database) = match &readings {
        Ok(_) => (StatusCode::OK, "ok".to_string()),
        Err(error) => {
            tracing::warn!("health check: the database does not answer: {error}");
            let database = format!(
                "unavailable: the task database {} does not answer",
                crate::store::describe_url(&state.config.database_url)
            );
            (StatusCode::SERVICE_UNAVAILABLE, database)
        }
    };
    let failed_services: BTreeMap<String, String> = state
        .failures
        .all()
        .into_iter()
        .map(|(name, why)| (name.to_string(), why))
        .chain(state.store.failed_part())
        .collect();
    if !failed_services.is_empty() {
        status = StatusCode::SERVICE_UNAVAILABLE;
    }
    let word = if status == StatusCode::OK {
        "ok"
    } else {
        "unavailable"
    };
    let mut health = Health::bare(word, database, state.leadership.leader());
    if may_read {
        let readings = readings.ok().flatten();
        let loaded: BTreeSet<String> = state.registry.task_types().into_iter().collect();
        health.waiting_without_plugin = readings.as_ref().map(|r| {
            r.pending_by_type
                .iter()
                .filter(|(task_type, _)| !loaded.contains(*task_type))
                .map(|(task_type, pending)| {
                    let reason = super::plugins::no_plugin_message(task_type);
                    let waiting = WaitingType {
                        pending: *pending,
                        reason,
                    };
                    (task_type.clone(), waiting)
                })
                .collect()
        });
        health.counts = readings.as_ref().map(|r| r.counts.clone());
        health.warnings = Some(readings.map(|r| r.warnings.clone()).unwrap_or_default());
        health.host_id = Some(state.host_id.clone());
        health.leading = Some(state.leadership.is_leader());
        health.task_types = Some(loaded.into_iter().collect());
        health.plugin_errors = Some(state.registry.errors());
        health.paused_types = Some(state.paused.all());
        health.failed_services = failed_services;
    }
    (status, Json(health))
}

/// The database reads behind the counts and warnings.
async fn read(state: &AppState) -> Result<Readings, crate::store::StoreError> {
    let counts = state.store.counts().await?;
    let pending = state
        .store
        .counts_by_type(&TaskSelection::in_state(Status::Pending))
        .await?;
    Ok(Readings {
        counts,
        pending_by_type: crate::store::reads::pending_by_type(&pending),
        warnings: super::alerts::health_warnings(state).await,
    })
}
