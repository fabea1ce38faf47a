//! Deploying handler builds through the shared database: `POST /plugins/{name}/deploy` (a
//! build, optionally as a canary), `POST /plugins/{name}/promote`, `POST
//! /plugins/{name}/rollback` and `GET /plugins/{name}/versions`. Any host of a database takes
//! them; every host of it serves the result (`plugins::deployed`).
//!
//! A deploy is checked the way the plugin folder's loader checks a file before anything is
//! stored: the size cap, the manifest, and a compile of the component (which also leaves the
//! compiled artifact in this host's cache). A build that fails any check is refused with a 4xx
//! saying why, and nothing changes.

use axum::Json;
use axum::extract::{Multipart, Query, Request, State};
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::sync::Arc;
use utoipa::{IntoParams, ToSchema};

use super::auth::Right;
use super::control::{TypePath, type_name};
use super::error::{ApiError, ErrorBody};
use super::server::ConnectionInfo;
use super::{ApiPath, AppState};
use crate::plugins::deployed::{build_shared, version_path};
use crate::plugins::loader::{MAX_MANIFEST_BYTES, Named};
use crate::plugins::registry::Source;
use crate::plugins::rollout::{self, Refusal};
use crate::plugins::tally::{Tally, per_build};
use crate::store::deployments::{
    Actor, DeployEvent, Deployment, DeploymentChange, NewVersion, Version,
};

/// A type's deployment: what every host serves for it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DeploymentView {
    pub task_type: String,
    /// The version every attempt runs that the candidate does not take.
    pub stable: Option<u64>,
    /// The version on trial.
    pub candidate: Option<u64>,
    /// The candidate's share of the attempts, in percent.
    pub canary_percent: u8,
    /// When the candidate's trial started.
    pub canary_since: Option<DateTime<Utc>>,
    /// Incremented by every change.
    pub revision: u64,
    pub updated_at: DateTime<Utc>,
}

/// One kept version of a type.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct VersionView {
    pub number: u64,
    /// Hex SHA-256 of the component: the `plugin_version` its attempts record.
    pub digest: String,
    pub size: u64,
    /// `stable`, `candidate` or `kept`.
    pub state: String,
    pub manifest: Option<String>,
    pub deployed_at: DateTime<Utc>,
    /// The right it was deployed with: `deploy`, `api` or `open`.
    pub deployed_by: String,
    /// The deploying client's address.
    pub origin: Option<String>,
    /// How the build did, over every host and window (absent before its first attempt).
    #[serde(default)]
    pub figures: Option<FiguresView>,
}

/// How a build did: its attempts on every host, counted as they ended.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct FiguresView {
    pub attempts: u64,
    /// Attempts that ended in a retry, a failure, a crash or a timeout.
    pub failures: u64,
    /// Attempt times (within about a fifth).
    pub p50_ms: Option<u64>,
    pub p95_ms: Option<u64>,
    /// The mean fuel of the attempts whose fuel is known.
    pub mean_fuel: Option<u64>,
    /// The most memory one attempt held (all linear memories and tables), in bytes.
    pub peak_memory: u64,
}

impl From<&Tally> for FiguresView {
    fn from(t: &Tally) -> Self {
        FiguresView {
            attempts: t.attempts,
            failures: t.failures,
            p50_ms: t.wall_ms_at(0.5),
            p95_ms: t.wall_ms_at(0.95),
            mean_fuel: t.mean_fuel(),
            peak_memory: t.memory_peak,
        }
    }
}

/// One entry of the deployment history.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DeployEventView {
    pub at: DateTime<Utc>,
    /// `deploy`, `canary`, `promote` or `rollback`.
    pub action: String,
    pub version: Option<u64>,
    /// The right the change was made with (`deploy`, `api`, `open`), or `leader` for a verdict.
    pub right: String,
    /// The client's address, or the deciding host.
    pub origin: Option<String>,
    pub detail: Option<String>,
}

/// A type's deployment, its kept versions (newest first) and its history (newest first).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct VersionsView {
    pub deployment: DeploymentView,
    pub versions: Vec<VersionView>,
    pub history: Vec<DeployEventView>,
}

/// The answer to a deploy: the deployment after it and the new version.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DeployedView {
    pub deployment: DeploymentView,
    pub version: VersionView,
}

impl From<&Deployment> for DeploymentView {
    fn from(d: &Deployment) -> Self {
        DeploymentView {
            task_type: d.task_type.clone(),
            stable: d.stable,
            candidate: d.candidate,
            canary_percent: d.canary_percent,
            canary_since: d.canary_since,
            revision: d.revision,
            updated_at: d.updated_at,
        }
    }
}

fn version_view(version: &Version, deployment: &Deployment) -> VersionView {
    let state = if deployment.stable == Some(version.number) {
        "stable"
    } else if deployment.candidate == Some(version.number) {
        "candidate"
    } else {
        "kept"
    };
    VersionView {
        number: version.number,
        digest: version.digest.clone(),
        size: version.size,
        state: state.into(),
        manifest: version.manifest.clone(),
        deployed_at: version.deployed_at,
        deployed_by: version.deployed_by.clone(),
        origin: version.origin.clone(),
        figures: None,
    }
}

fn event_view(event: &DeployEvent) -> DeployEventView {
    DeployEventView {
        at: event.at,
        action: event.action.clone(),
        version: event.version,
        right: event.actor.right.clone(),
        origin: event.actor.origin.clone(),
        detail: event.detail.clone(),
    }
}

/// The history entries `GET /plugins/{name}/versions` shows.
const HISTORY_SHOWN: usize = 50;

/// Who is asking, for the history.
fn actor(request: &Request) -> Actor {
    let right = request
        .extensions()
        .get::<Right>()
        .map_or("open", |right| right.0);
    let origin = request
        .extensions()
        .get::<ConnectionInfo>()
        .map(|info| info.peer.ip().to_string());
    Actor {
        right: right.into(),
        origin,
    }
}

fn refused(refusal: Refusal) -> ApiError {
    let status = match refusal {
        Refusal::NotDeployed(_) | Refusal::NoSuchVersion { .. } => StatusCode::NOT_FOUND,
        _ => StatusCode::CONFLICT,
    };
    let code = match status {
        StatusCode::NOT_FOUND => "not_found",
        _ => "conflict",
    };
    ApiError::new(status, code, refusal.to_string())
}

fn changed_meanwhile(task_type: &str) -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        "conflict",
        format!(
            "the deployment of {task_type} changed while this request was decided; look again (spool versions {task_type}) and retry"
        ),
    )
}

/// The deploy form (`multipart/form-data`), as the API description gives it.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct DeployForm {
    /// The handler build: a component of the handler world, or a WASI program.
    #[schema(value_type = String, format = Binary)]
    component: Vec<u8>,
    /// Its manifest (TOML text); absent: the host's defaults.
    manifest: Option<String>,
    /// Run the build as a candidate on this share of the attempts (percent).
    #[schema(minimum = 1, maximum = 100)]
    canary: Option<u8>,
}

/// What a deploy request carries.
struct Upload {
    component: Vec<u8>,
    manifest: Option<String>,
    canary: Option<u8>,
}

/// Reads the multipart form of a deploy: `component` (the `.wasm` bytes), optionally
/// `manifest` (TOML text) and `canary` (a percentage, 1 to 100).
async fn read_upload(mut form: Multipart, max_component: usize) -> Result<Upload, ApiError> {
    let (mut component, mut manifest, mut canary) = (None, None, None);
    while let Some(mut field) = form
        .next_field()
        .await
        .map_err(|error| ApiError::invalid(format!("the form cannot be read: {error}")))?
    {
        let name = field.name().unwrap_or_default().to_string();
        let limit = match name.as_str() {
            "component" => max_component,
            "manifest" => MAX_MANIFEST_BYTES as usize,
            "canary" => 16,
            other => {
                return Err(ApiError::invalid(format!(
                    "unknown form field `{other}`: a deploy takes `component`, `manifest` and `canary`"
                )));
            }
        };
        let mut bytes = Vec::new();
        while let Some(chunk) = field
            .chunk()
            .await
            .map_err(|error| ApiError::invalid(format!("the form cannot be read: {error}")))?
        {
            if bytes.len() + chunk.len() > limit {
                return Err(ApiError::too_large(format!(
                    "form field `{name}` is over its limit of {limit} bytes{}",
                    if name == "component" {
                        " (max_plugin_size)"
                    } else {
                        ""
                    }
                )));
            }
            bytes.extend_from_slice(&chunk);
        }
        match name.as_str() {
            "component" => component = Some(bytes),
            "manifest" => {
                manifest =
                    Some(String::from_utf8(bytes).map_err(|_| {
                        ApiError::invalid("form field `manifest` is not UTF-8 text")
                    })?)
            }
            _ => {
                let text = String::from_utf8_lossy(&bytes).trim().to_string();
                let percent = text
                    .parse::<u8>()
                    .ok()
                    .filter(|p| (1..=100).contains(p))
                    .ok_or_else(|| {
                        ApiError::invalid(format!(
                            "canary = {text:?}: a percentage of the attempts, 1 to 100"
                        ))
                    })?;
                canary = Some(percent);
            }
        }
    }
    let component = component.ok_or_else(|| {
        ApiError::invalid("the form has no `component` field: send the .wasm file as `component`")
    })?;
    Ok(Upload {
        component,
        manifest,
        canary,
    })
}

/// Deploy a handler build for a task type to every host of the database: as the stable version
/// at once, or with `canary` as a candidate that runs that share of the type's attempts. The
/// body is a `multipart/form-data` form: `component` (the `.wasm` file), optionally `manifest`
/// (its TOML manifest) and `canary` (a percentage). The build is checked as the plugin folder
/// checks a file; a build that fails is refused and nothing changes. Needs the deploy token
/// where one is configured.
#[utoipa::path(post, path = "/plugins/{name}/deploy", tag = "host", params(TypePath),
    request_body(content = DeployForm, content_type = "multipart/form-data"),
    responses(
        (status = 201, description = "Deployed", body = DeployedView),
        (status = 400, description = "Not a task type name", body = ErrorBody),
        (status = 403, description = "The API token alone cannot deploy (a deploy token is set)", body = ErrorBody),
        (status = 409, description = "A canary needs a stable version that differs from the candidate", body = ErrorBody),
        (status = 413, description = "The component is over max_plugin_size", body = ErrorBody),
        (status = 415, description = "The body is not a multipart/form-data form", body = ErrorBody),
        (status = 422, description = "Not a handler build, or its manifest is invalid", body = ErrorBody),
        (status = 503, description = "The database does not answer", body = ErrorBody),
    ))]
pub async fn deploy(
    State(state): State<Arc<AppState>>,
    ApiPath(path): ApiPath<TypePath>,
    request: Request,
) -> Result<(StatusCode, Json<DeployedView>), ApiError> {
    let task_type = type_name(path)?;
    let actor = actor(&request);
    let form = <Multipart as axum::extract::FromRequest<()>>::from_request(request, &())
        .await
        .map_err(|rejection| {
            ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                format!(
                    "{rejection}: send the build as a multipart/form-data form (curl -F component=@FILE.wasm)"
                ),
            )
        })?;
    let timeout = state.config.body_timeout;
    let upload = tokio::time::timeout(
        timeout.max(std::time::Duration::from_secs(60)),
        read_upload(form, state.config.max_plugin_size),
    )
    .await
    .map_err(|_| {
        ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "request_timeout",
            "the build did not arrive in time",
        )
    })??;
    let digest = hex::encode(Sha256::digest(&upload.component));
    let current = state.store.deployment(&task_type).await?;
    if let Some(percent) = upload.canary {
        let stable = current.as_ref().and_then(|d| d.stable);
        let Some(stable) = stable else {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "conflict",
                format!(
                    "canary = {percent}: {task_type} has no stable version for a candidate to be compared with; deploy without --canary first"
                ),
            ));
        };
        let stable_build = state.store.version(&task_type, stable).await?;
        if stable_build.is_some_and(|version| version.digest == digest) {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "conflict",
                format!(
                    "this build is {task_type}'s stable version {stable} already: a canary compares two builds; deploy without --canary to change only the manifest"
                ),
            ));
        }
    }
    // Checked as the folder's loader checks a file: the compile also fills this host's cache.
    let number = current.as_ref().map_or(1, |d| d.last_version + 1);
    let named = Named {
        task_type: task_type.clone(),
        path: version_path(&task_type, number),
        manifest_path: format!("{} (manifest)", version_path(&task_type, number).display()).into(),
        source: Source::Deployment { number },
    };
    build_shared(
        &state.loader,
        &state.store,
        named,
        upload.component.clone(),
        upload.manifest.as_deref(),
    )
    .await
    .map_err(|error| match error {
        crate::plugins::LoadError::TooLarge { .. } => ApiError::too_large(error.to_string()),
        other => ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_plugin",
            format!("{other}; nothing was deployed"),
        ),
    })?;
    state.store.store_build(&digest, &upload.component).await?;
    let deployment = state
        .store
        .deploy(&NewVersion {
            task_type: &task_type,
            digest: &digest,
            size: upload.component.len() as u64,
            manifest: upload.manifest.as_deref(),
            canary_percent: upload.canary,
            actor: &actor,
            detail: None,
        })
        .await?;
    let number = upload
        .canary
        .and(deployment.candidate)
        .or(deployment.stable)
        .unwrap_or(deployment.last_version);
    let version = state
        .store
        .version(&task_type, number)
        .await?
        .ok_or_else(|| {
            ApiError::from(crate::store::StoreError::Database(format!(
                "version {number} of {task_type} was not recorded"
            )))
        })?;
    if let Err(error) = state
        .store
        .prune_versions(&task_type, state.config.keep_versions)
        .await
    {
        tracing::warn!(task_type = %task_type, "cannot prune old versions: {error}");
    }
    tracing::info!(task_type = %task_type, version = number, digest = %&digest[..12], canary = upload.canary, right = %actor.right, "deployed");
    state.deploy_wake.notify_one();
    Ok((
        StatusCode::CREATED,
        Json(DeployedView {
            version: version_view(&version, &deployment),
            deployment: DeploymentView::from(&deployment),
        }),
    ))
}

/// Applies a decision of [`rollout`] on the revision it was made from.
async fn apply(
    state: &AppState,
    deployment: &Deployment,
    target: rollout::Target,
    actor: &Actor,
    detail: Option<&str>,
) -> Result<Json<DeploymentView>, ApiError> {
    let changed = state
        .store
        .change_deployment(&DeploymentChange {
            task_type: &deployment.task_type,
            expected_revision: deployment.revision,
            stable: target.stable,
            candidate: target.candidate,
            canary_percent: target.canary_percent,
            action: target.action,
            version: target.version,
            actor,
            detail,
        })
        .await?
        .ok_or_else(|| changed_meanwhile(&deployment.task_type))?;
    tracing::info!(task_type = %deployment.task_type, action = target.action, version = target.version, right = %actor.right, "deployment changed");
    state.deploy_wake.notify_one();
    Ok(Json(DeploymentView::from(&changed)))
}

async fn deployment_of(state: &AppState, task_type: &str) -> Result<Deployment, ApiError> {
    state
        .store
        .deployment(task_type)
        .await?
        .filter(|d| d.stable.is_some())
        .ok_or_else(|| refused(Refusal::NotDeployed(task_type.to_string())))
}

/// Decides with `rule` on the type's deployment as it is now, and applies the decision.
async fn decide(
    state: &AppState,
    path: TypePath,
    actor: Actor,
    rule: impl FnOnce(&Deployment) -> Result<rollout::Target, Refusal>,
) -> Result<Json<DeploymentView>, ApiError> {
    let task_type = type_name(path)?;
    let deployment = deployment_of(state, &task_type).await?;
    let target = rule(&deployment).map_err(refused)?;
    apply(state, &deployment, target, &actor, None).await
}

/// Promote a type's candidate: it becomes the stable version on every host and the trial ends.
#[utoipa::path(post, path = "/plugins/{name}/promote", tag = "host", params(TypePath),
    responses(
        (status = 200, description = "Promoted", body = DeploymentView),
        (status = 400, description = "Not a task type name, or an invalid parameter", body = ErrorBody),
        (status = 404, description = "The type is not deployed", body = ErrorBody),
        (status = 409, description = "No candidate, or the deployment changed meanwhile", body = ErrorBody),
    ))]
pub async fn promote(
    State(state): State<Arc<AppState>>,
    ApiPath(path): ApiPath<TypePath>,
    request: Request,
) -> Result<Json<DeploymentView>, ApiError> {
    decide(&state, path, actor(&request), rollout::promote).await
}

/// Where to roll back to.
#[derive(Debug, Deserialize, IntoParams)]
pub struct RollbackQuery {
    /// The version to serve; without it, the candidate on trial is dropped, or else the
    /// newest kept version before the stable one serves.
    pub to: Option<u64>,
    /// Why, for the history.
    pub reason: Option<String>,
}

/// Roll a type back on every host: drop its candidate, or serve an older version.
#[utoipa::path(post, path = "/plugins/{name}/rollback", tag = "host", params(TypePath, RollbackQuery),
    responses(
        (status = 200, description = "Rolled back", body = DeploymentView),
        (status = 400, description = "Not a task type name, or an invalid parameter", body = ErrorBody),
        (status = 404, description = "The type is not deployed, or has no such version", body = ErrorBody),
        (status = 409, description = "Nothing to roll back to, or the deployment changed meanwhile", body = ErrorBody),
    ))]
pub async fn rollback(
    State(state): State<Arc<AppState>>,
    ApiPath(path): ApiPath<TypePath>,
    query: Result<Query<RollbackQuery>, axum::extract::rejection::QueryRejection>,
    request: Request,
) -> Result<Json<DeploymentView>, ApiError> {
    let task_type = type_name(path)?;
    let Query(query) = query.map_err(|rejection| {
        ApiError::bad_request(format!(
            "{}; `to` is a version number (spool versions {task_type} lists them)",
            rejection.body_text()
        ))
    })?;
    let actor = actor(&request);
    let deployment = deployment_of(&state, &task_type).await?;
    let kept: Vec<u64> = state
        .store
        .versions(&task_type)
        .await?
        .iter()
        .map(|v| v.number)
        .collect();
    let target = rollout::roll_back(&deployment, &kept, query.to).map_err(refused)?;
    let reason = query
        .reason
        .map(|r| r.chars().take(500).collect::<String>());
    apply(&state, &deployment, target, &actor, reason.as_deref()).await
}

/// Stop serving a type from the database, on every host: its deployment keeps its versions and
/// history (a later deploy serves it again), and a host whose plugin folder has a file for the
/// type serves that file again.
#[utoipa::path(delete, path = "/plugins/{name}/deployment", tag = "host", params(TypePath),
    responses(
        (status = 200, description = "No longer served from the database", body = DeploymentView),
        (status = 400, description = "Not a task type name", body = ErrorBody),
        (status = 404, description = "The type is not deployed", body = ErrorBody),
        (status = 409, description = "The deployment changed meanwhile", body = ErrorBody),
    ))]
pub async fn remove(
    State(state): State<Arc<AppState>>,
    ApiPath(path): ApiPath<TypePath>,
    request: Request,
) -> Result<Json<DeploymentView>, ApiError> {
    decide(&state, path, actor(&request), |d| Ok(rollout::remove(d))).await
}

/// A deployed type's kept versions and its deployment history.
#[utoipa::path(get, path = "/plugins/{name}/versions", tag = "host", params(TypePath),
    responses(
        (status = 200, description = "The versions and the history", body = VersionsView),
        (status = 400, description = "Not a task type name, or an invalid parameter", body = ErrorBody),
        (status = 404, description = "The type was never deployed", body = ErrorBody),
    ))]
pub async fn versions(
    State(state): State<Arc<AppState>>,
    ApiPath(path): ApiPath<TypePath>,
) -> Result<Json<VersionsView>, ApiError> {
    let task_type = type_name(path)?;
    let deployment = state
        .store
        .deployment(&task_type)
        .await?
        .ok_or_else(|| refused(Refusal::NotDeployed(task_type.clone())))?;
    let versions = state.store.versions(&task_type).await?;
    let history = state.store.deploy_events(&task_type, HISTORY_SHOWN).await?;
    let figures = per_build(&state.store.tallies(&task_type, None).await?);
    Ok(Json(VersionsView {
        versions: versions
            .iter()
            .map(|v| VersionView {
                figures: figures.get(&v.digest).map(FiguresView::from),
                ..version_view(v, &deployment)
            })
            .collect(),
        history: history.iter().map(event_view).collect(),
        deployment: DeploymentView::from(&deployment),
    }))
}
