//! The HTTP API (axum): the only module that speaks HTTP, server side and client side.
//!
//! [`router`] builds the whole application from shared state, so tests can drive it without a
//! socket. Routes and the OpenAPI description are registered together (utoipa-axum), which is
//! what keeps `GET /openapi.json` true: a route cannot exist without its description.
//! utoipa was picked because it derives the schemas from the very types the handlers
//! serialize; a hand-written spec drifts.

pub mod auth;
pub mod client;
pub mod error;
pub mod health;
pub mod plugins;
pub mod tasks;

use axum::extract::{DefaultBodyLimit, FromRequest};
use axum::routing::get;
use axum::{Json, Router};
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
    pub in_flight: Arc<crate::worker::in_flight::InFlight>,
    /// Attempt times and the due backlog, for estimated completion times.
    pub estimates: Arc<crate::worker::estimates::Estimates>,
}

/// A JSON body whose rejections (malformed JSON, wrong fields, too large) are [`ApiError`]s.
#[derive(FromRequest)]
#[from_request(via(axum::Json), rejection(ApiError))]
pub struct ApiJson<T>(pub T);

#[derive(OpenApi)]
#[openapi(
    info(title = "Spool", description = "Enqueue tasks, follow them, retry or cancel them. Handlers are WebAssembly components loaded from the host's plugin folder."),
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
        .routes(routes!(plugins::list_plugins));
    let writes = OpenApiRouter::new()
        .routes(routes!(tasks::enqueue))
        .routes(routes!(tasks::enqueue_batch))
        .routes(routes!(tasks::retry_task))
        .routes(routes!(tasks::cancel_task));
    OpenApiRouter::with_openapi(ApiDoc::openapi()).merge(reads).merge(writes).split_for_parts()
}

/// The OpenAPI description of this API.
pub fn openapi() -> utoipa::openapi::OpenApi {
    api().1
}

/// The whole HTTP application.
pub fn router(state: Arc<AppState>) -> Router {
    let (routes, spec) = api();
    let spec = Arc::new(spec);
    let body_limit = state.config.max_body_bytes;
    routes
        .route("/openapi.json", get(move || async move { Json(spec.as_ref().clone()) }))
        .layer(axum::middleware::from_fn_with_state(state.clone(), auth::require_token_for_changes))
        .layer(DefaultBodyLimit::max(body_limit))
        .with_state(state)
}
