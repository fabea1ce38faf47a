//! What the API answers while the host waits for its database at start: `GET /health` 503
//! saying so, and 503 `unavailable` to every other request. A supervisor's probe thus sees a
//! host that is alive and waiting, not one that crashed or hangs; nothing else is served until
//! the database answers and the host has started (see [`crate::host::start`]).

use axum::Json;
use axum::Router;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;

use super::error::ApiError;
use super::health::Health;

/// The router served while waiting for the database named by `database` (its URL as
/// [`crate::store::describe_url`] shows it).
pub fn router(database: String) -> Router {
    let health = Health::bare(
        "unavailable",
        format!(
            "unavailable: the host is starting and waits for the task database {database} to answer"
        ),
        None,
    );
    let refusal = format!(
        "the host is starting and waits for its task database {database}; nothing was changed, try again shortly"
    );
    let health = std::sync::Arc::new(health);
    Router::new()
        .route(
            "/health",
            get(move || {
                let health = health.clone();
                async move {
                    (
                        StatusCode::SERVICE_UNAVAILABLE,
                        Json(health.as_ref().clone()),
                    )
                }
            }),
        )
        .fallback(move || {
            let refusal = refusal.clone();
            async move {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", refusal)
                    .into_response()
            }
        })
}
