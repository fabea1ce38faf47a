//! `GET /plugins`: the task types this host runs, their versions and policies, and the plugin
//! files that failed to load.

use axum::Json;
use axum::extract::State;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use utoipa::ToSchema;

use super::AppState;
use super::error::ApiError;
use crate::plugins::registry::Source;
use crate::sandbox::capabilities::Capabilities;
use crate::store::control::TaskSelection;
use crate::task::Status;

/// A loaded task type.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PluginView {
    pub task_type: String,
    /// SHA-256 of the component file.
    pub version: String,
    /// The component file.
    pub path: String,
    /// How the host calls it: `handler` (the Spool world), `wasi-command` (a component
    /// exporting wasi:cli/run) or `wasi-preview1` (a core module with `_start`).
    pub kind: String,
    pub loaded_at: DateTime<Utc>,
    pub policy: PolicyView,
    #[schema(value_type = Capabilities)]
    pub capabilities: CapabilitiesView,
    /// The last failed attempt to load a newer file for this type (the loaded version keeps serving).
    pub last_error: Option<String>,
    /// Tasks of the type waiting to run.
    pub pending: u64,
    /// Whether the type is paused (`POST /types/{name}/pause`): its tasks wait pending.
    pub paused: bool,
    /// When this host started loading a new file for the type (reading, checking, compiling),
    /// if it is doing so now; the loaded version keeps serving meanwhile.
    pub loading_since: Option<DateTime<Utc>>,
    /// Where the serving build comes from: `folder` (this host's plugin folder) or
    /// `deployment` (deployed through the database to every host).
    #[serde(default)]
    pub source: String,
    /// The deployed version number serving (source `deployment`).
    #[serde(default)]
    pub deployed_version: Option<u64>,
    /// The candidate on trial beside it, and its share of the attempts.
    #[serde(default)]
    pub candidate: Option<CandidateView>,
    /// A file in this host's plugin folder for the same type, which the deployment shadows: it
    /// serves again only if the deployment is removed.
    #[serde(default)]
    pub shadowed_file: Option<String>,
}

/// A deployed candidate as `GET /plugins` shows it.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct CandidateView {
    pub version: u64,
    /// SHA-256 of the candidate's component.
    pub digest: String,
    /// Its share of the attempts, in percent.
    pub percent: u8,
}

/// A plugin's capabilities as `GET /plugins` shows them: the host's own grants, which it
/// serializes (environment variable names only), or, read back by a client, the JSON it got.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum CapabilitiesView {
    Granted(Capabilities),
    Shown(serde_json::Value),
}

impl<'de> Deserialize<'de> for CapabilitiesView {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        serde_json::Value::deserialize(deserializer).map(CapabilitiesView::Shown)
    }
}

/// A task type's effective policy.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PolicyView {
    pub max_retry: u32,
    pub backoff_base_ms: u64,
    pub backoff_max_ms: u64,
    pub backoff_jitter: f64,
    pub priority: i32,
    pub fuel: u64,
    pub timeout_ms: u64,
    pub memory_bytes: usize,
    /// Most tasks at once on this host; absent: only the host's concurrency limits it.
    pub concurrency: Option<usize>,
    /// Most task starts per second on this host; absent: unlimited.
    pub rate: Option<f64>,
}

/// A task type that is not loaded: its file failed to load, or was removed.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct UnloadedView {
    pub task_type: String,
    /// Why it is not loaded.
    pub error: Option<String>,
    /// When its file was removed (while this host served).
    pub removed_at: Option<DateTime<Utc>>,
    /// Its tasks waiting for a plugin to return.
    pub pending: u64,
    /// When this host started loading a file for the type, if it is doing so now (a first
    /// compile of a large component can take a minute).
    pub loading_since: Option<DateTime<Utc>>,
}

/// Everything about this host's plugins.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PluginsView {
    /// The plugin folder.
    pub folder: String,
    /// The grants root: the folder grants' `host` paths are relative to.
    pub grants_root: String,
    pub plugins: Vec<PluginView>,
    pub unloaded: Vec<UnloadedView>,
}

/// What a host says about pending tasks of a type it has no plugin for.
pub fn no_plugin_message(task_type: &str) -> String {
    format!(
        "no plugin for type {task_type}: its tasks wait pending until {task_type}.wasm is added to the plugin folder"
    )
}

/// The plugins of this host.
#[utoipa::path(get, path = "/plugins", tag = "host",
    responses((status = 200, description = "Loaded task types and load errors", body = PluginsView)))]
pub async fn list_plugins(
    State(state): State<Arc<AppState>>,
) -> Result<Json<PluginsView>, ApiError> {
    let pending = crate::store::reads::pending_by_type(
        &state
            .store
            .counts_by_type(&TaskSelection::in_state(Status::Pending))
            .await?,
    );
    let errors = state.registry.errors();
    let removed = state.registry.removed();
    let loading = state.registry.loading();
    let plugins: Vec<PluginView> = state
        .registry
        .plugins()
        .into_iter()
        .map(|plugin| {
            let p = &plugin.policy;
            PluginView {
                task_type: plugin.task_type.clone(),
                version: plugin.version.clone(),
                path: plugin.path.display().to_string(),
                kind: plugin.handler.kind().to_string(),
                loaded_at: plugin.loaded_at,
                policy: PolicyView {
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
                },
                capabilities: CapabilitiesView::Granted(p.capabilities.clone()),
                last_error: errors.get(&plugin.task_type).cloned(),
                pending: pending.get(&plugin.task_type).copied().unwrap_or(0),
                paused: state.paused.contains(&plugin.task_type),
                loading_since: loading.get(&plugin.task_type).copied(),
                source: match plugin.source {
                    Source::Folder => "folder".into(),
                    Source::Deployment { .. } => "deployment".into(),
                },
                deployed_version: match plugin.source {
                    Source::Deployment { number } => Some(number),
                    Source::Folder => None,
                },
                candidate: state
                    .registry
                    .deployed(&plugin.task_type)
                    .and_then(|deployed| {
                        let candidate = deployed.candidate.as_ref()?;
                        Some(CandidateView {
                            version: match candidate.plugin.source {
                                Source::Deployment { number } => number,
                                Source::Folder => 0,
                            },
                            digest: candidate.plugin.version.clone(),
                            percent: candidate.percent,
                        })
                    }),
                shadowed_file: match plugin.source {
                    Source::Deployment { .. } => state
                        .registry
                        .folder_plugin(&plugin.task_type)
                        .map(|file| file.path.display().to_string()),
                    Source::Folder => None,
                },
            }
        })
        .collect();
    let loaded: std::collections::BTreeSet<&str> =
        plugins.iter().map(|p| p.task_type.as_str()).collect();
    // Every type this host knows of but does not serve, with what it knows of each: a load
    // error, a removal, tasks waiting, a load in progress.
    let mut unloaded: std::collections::BTreeMap<String, UnloadedView> =
        std::collections::BTreeMap::new();
    fn entry<'a>(
        unloaded: &'a mut std::collections::BTreeMap<String, UnloadedView>,
        task_type: &str,
        pending: &std::collections::BTreeMap<String, u64>,
    ) -> &'a mut UnloadedView {
        unloaded
            .entry(task_type.to_string())
            .or_insert_with(|| UnloadedView {
                task_type: task_type.to_string(),
                error: None,
                removed_at: None,
                pending: pending.get(task_type).copied().unwrap_or(0),
                loading_since: None,
            })
    }
    let not_loaded = |task_type: &&String| !loaded.contains(task_type.as_str());
    for (task_type, error) in errors.iter().filter(|(t, _)| not_loaded(t)) {
        entry(&mut unloaded, task_type, &pending).error = Some(error.clone());
    }
    for (task_type, at) in removed.iter().filter(|(t, _)| not_loaded(t)) {
        entry(&mut unloaded, task_type, &pending).removed_at = Some(*at);
    }
    // Tasks of types no plugin here has ever served: enqueued by application SQL or another
    // host for a type this host does not have. They wait, pending, until a plugin arrives.
    for task_type in pending.keys().filter(not_loaded) {
        let view = entry(&mut unloaded, task_type, &pending);
        if view.error.is_none() && view.removed_at.is_none() && !loading.contains_key(task_type) {
            view.error = Some(no_plugin_message(task_type));
        }
    }
    // Types loading for the first time: not served yet, but on their way.
    for (task_type, since) in loading.iter().filter(|(t, _)| not_loaded(t)) {
        entry(&mut unloaded, task_type, &pending).loading_since = Some(*since);
    }
    Ok(Json(PluginsView {
        folder: state.config.plugins.display().to_string(),
        grants_root: state.config.grants_root.display().to_string(),
        plugins,
        unloaded: unloaded.into_values().collect(),
    }))
}
