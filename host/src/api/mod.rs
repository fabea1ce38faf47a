//! The HTTP API (axum): its routes, errors and OpenAPI description, and the client that calls
//! it. (Outbound HTTP of other kinds lives with its purpose: alert webhooks in `alerts`, a
//! handler's `wasi:http` requests in `sandbox`.)
//!
//! [`router`] builds the whole application from shared state, so tests can drive it without a
//! socket. Routes and the OpenAPI description are registered together (utoipa-axum), which is
//! what keeps `GET /openapi.json` true: a route cannot exist without its description.
//! utoipa was picked because it derives the schemas from the very types the handlers
//! serialize; a hand-written spec drifts.

pub mod alerts;
pub mod archived;
pub mod auth;
pub mod client;
pub mod control;
pub mod dashboard;
pub mod deploy;
pub mod durations;
pub mod error;
pub mod guard;
pub mod health;
pub mod long_poll;
pub mod metrics;
pub mod object;
pub mod paging;
pub mod plugins;
pub mod records;
pub mod reuse;
pub mod schedules;
pub mod server;
pub mod spec;
pub mod stats;
pub mod tasks;
pub mod waiting;

use axum::extract::{DefaultBodyLimit, FromRequest, FromRequestParts, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::de::DeserializeOwned;
use std::sync::Arc;
use tokio::sync::Notify;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::config::Config;
use crate::plugins::Registry;
use crate::store::SharedStore;
use error::ApiError;

/// What every handler can reach.
pub struct AppState {
    pub store: SharedStore,
    pub registry: Arc<Registry>,
    pub config: Arc<Config>,
    /// Wakes the local dispatcher after an enqueue.
    pub wake: Arc<Notify>,
    /// This host's identity, as written into leases.
    pub host_id: String,
    /// Group-commits enqueues.
    pub enqueuer: crate::enqueue::Enqueuer,
    /// Attempts running here, so a cancel can interrupt them.
    pub in_flight: Arc<crate::worker::run::in_flight::InFlight>,
    /// Which host runs maintenance.
    pub leadership: Arc<crate::worker::upkeep::leader::Leadership>,
    /// Services that died (the host is then stopping); `/health` reports them.
    pub failures: Arc<crate::worker::supervisor::ServiceFailures>,
    /// Attempt times and the due backlog, for estimated completion times.
    pub estimates: Arc<crate::worker::run::estimates::Estimates>,
    /// This host's counts of how each build did (`GET /types`).
    pub tallies: Arc<crate::worker::run::tallies::BuildTallies>,
    /// Tasks just committed here, for requests waiting on a task (`GET /tasks/{id}?wait=`).
    pub finished: Arc<crate::worker::run::finished::Finished>,
    /// Ends waiting requests when the host stops.
    pub shutdown: crate::shutdown::Shutdown,
    /// What this host knows of the periodic tasks' ticks (`GET /schedules`).
    pub schedules: Arc<crate::worker::upkeep::scheduler::ScheduleBoard>,
    /// The backlog, read at most every few seconds for `GET /stats` and `GET /metrics`.
    pub stats: Arc<stats::BacklogCache>,
    /// Task types paused on this database, as this host's dispatcher obeys them.
    pub paused: Arc<crate::worker::run::paused::PausedTypes>,
    /// Alert channels, this host's firing alerts and the drill.
    pub alerts: Arc<crate::alerts::Alerts>,
    /// Whether the database answers, as this host's watch last found.
    pub database: Arc<crate::worker::database_watch::DatabaseState>,
    /// The counts `GET /health` shows, read at most once per [`health::COUNTS_TTL`].
    pub health: reuse::Reused<health::Readings>,
    /// Checks and compiles deployed builds as the plugin folder's files are.
    pub loader: Arc<crate::plugins::PluginLoader>,
    /// Wakes this host's deployment sync after a deploy, promote or rollback here.
    pub deploy_wake: Arc<Notify>,
}

/// A JSON body whose rejections (malformed JSON, wrong fields, too large) are [`ApiError`]s,
/// and which must arrive within the body timeout (408 `request_timeout` otherwise). The body
/// must be a JSON object ([`object::Object`]): an array is refused with 422 `invalid_request`.
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned> FromRequest<Arc<AppState>> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &Arc<AppState>) -> Result<Self, ApiError> {
        let timeout = state.config.body_timeout;
        match tokio::time::timeout(
            timeout,
            Json::<object::Object<T>>::from_request(request, state),
        )
        .await
        {
            Ok(Ok(Json(object::Object(value)))) => Ok(ApiJson(value)),
            Ok(Err(rejection)) => Err(rejection.into()),
            Err(_) => Err(ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "request_timeout",
                format!("the request body did not arrive within {timeout:?} (body_timeout)"),
            )),
        }
    }
}

/// Path parameters whose rejections (an id that is not a 64-bit number) are [`ApiError`]s.
#[derive(FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(ApiError))]
pub struct ApiPath<T>(pub T);

#[derive(OpenApi)]
#[openapi(
    info(title = "Spool", description = "Enqueue tasks, follow them, retry or cancel them. Handlers are WebAssembly components loaded from the host's plugin folder.\n\n\
Errors are `{\"error\": {\"code\", \"message\"}}`. When the host has an API token, every operation but `GET /health` needs a bearer token: the API token, or for reads the read token. \
A host on loopback answers only to its own names (403 `forbidden_host`), and refuses changes sent by browser pages of another origin (403 `forbidden_origin`). \
`GET /tasks` pages by tasks (`limit`) and by size: a page stops once its payloads, results, logs and errors reach 4 MiB; `next_before` continues it."),
    modifiers(&BearerAuth),
    tags((name = "tasks", description = "The task queue"), (name = "host", description = "This host and its plugins"))
)]
struct ApiDoc;

/// Declares the optional bearer token in the description.
struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The routes and their OpenAPI description, before state is attached.
fn api() -> (Router<Arc<AppState>>, utoipa::openapi::OpenApi) {
    let reads = OpenApiRouter::new()
        .routes(routes!(tasks::get_task))
        .routes(routes!(tasks::list_tasks))
        .routes(routes!(health::health))
        .routes(routes!(schedules::list_schedules))
        .routes(routes!(plugins::list_plugins))
        .routes(routes!(stats::get_stats))
        .routes(routes!(metrics::get_metrics))
        .routes(routes!(control::list_types))
        .routes(routes!(alerts::get_alerts))
        .routes(routes!(deploy::versions))
        .routes(routes!(records::list_records))
        .routes(routes!(records::get_record))
        .routes(routes!(records::get_build));
    let writes = OpenApiRouter::new()
        .routes(routes!(tasks::enqueue))
        .routes(routes!(tasks::enqueue_batch))
        .routes(routes!(tasks::retry_task))
        .routes(routes!(tasks::cancel_task))
        .routes(routes!(control::retry_tasks))
        .routes(routes!(control::discard_tasks))
        .routes(routes!(control::pause_type))
        .routes(routes!(control::resume_type))
        .routes(routes!(alerts::drill))
        .routes(routes!(deploy::promote))
        .routes(routes!(deploy::rollback))
        .routes(routes!(deploy::remove));
    // A build may be larger than any other body (max_plugin_size, not max_body): the deploy
    // form bounds each of its fields itself.
    let deploys = OpenApiRouter::new()
        .routes(routes!(deploy::deploy))
        .layer(DefaultBodyLimit::disable());
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .merge(reads)
        .merge(writes)
        .merge(deploys)
        .split_for_parts()
}

/// The OpenAPI description of this API.
pub fn openapi() -> utoipa::openapi::OpenApi {
    api().1
}

/// The whole HTTP application.
pub fn router(state: Arc<AppState>) -> Router {
    let (routes, base) = api();
    let route_labels = Arc::new(metrics::Routes::new(
        base.paths
            .paths
            .keys()
            .map(String::as_str)
            .chain(["/openapi.json"]),
    ));
    let spec = Arc::new(spec::describe(&state.config, base));
    let body_limit = state.config.max_body;
    let host_policy = Arc::new(guard::HostPolicy::new(&state.config));
    routes
        .merge(dashboard::routes())
        .route(
            "/openapi.json",
            get(move |State(state): State<Arc<AppState>>| async move {
                Json(spec::with_task_types(&spec, state.registry.task_types()))
            }),
        )
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::require_token,
        ))
        .layer(axum::middleware::from_fn_with_state(
            host_policy,
            guard::check_host_and_origin,
        ))
        .layer(axum::middleware::from_fn(json_for_bare_errors))
        .layer(axum::middleware::from_fn_with_state(
            route_labels,
            metrics::count_requests,
        ))
        .layer(DefaultBodyLimit::max(body_limit))
        .with_state(state)
}

/// Gives the router's own answers for an unknown route (404) or method (405), which have no
/// body, the JSON error shape every other error has (keeping `Allow`).
async fn json_for_bare_errors(request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    if response.headers().contains_key(header::CONTENT_TYPE) {
        return response;
    }
    let error = match response.status() {
        StatusCode::NOT_FOUND => ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            "no such route; GET /openapi.json lists them",
        ),
        StatusCode::METHOD_NOT_ALLOWED => ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "this route does not take this method; the Allow header lists the ones it takes",
        ),
        _ => return response,
    };
    let mut json = error.into_response();
    if let Some(allow) = response.headers().get(header::ALLOW) {
        json.headers_mut().insert(header::ALLOW, allow.clone());
    }
    json
}
