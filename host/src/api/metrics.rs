//! `GET /metrics`: the host's metrics in the Prometheus text format, and the middleware that
//! counts HTTP requests by route and status.
//!
//! The counters and histograms come from the workers through [`crate::instruments`] (the
//! `metrics` facade with `metrics-exporter-prometheus`'s recorder, which renders the text). The
//! gauges of the whole queue (backlog by type and state, oldest pending age) are set here, at
//! scrape time, from the backlog the API caches ([`super::stats::BacklogCache`], at most one
//! store read every few seconds per host whatever the scrape rate). Like every read, the route
//! needs the read token (or the API token) when the host has tokens.
//!
//! Requests are labelled by the route's template (`/tasks/{id}`), never by the raw path, so ids
//! cannot grow the number of series; a path no route matches counts as `other`.

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

use super::AppState;
use super::error::{ApiError, ErrorBody};
use crate::instruments;

/// The Prometheus text format's content type.
const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Metrics of this host and its queue, in the Prometheus text format.
#[utoipa::path(get, path = "/metrics", tag = "host",
    responses(
        (status = 200, description = "Prometheus text format (version 0.0.4): tasks finished by type and outcome, attempt duration and queue wait histograms by type, backlog by type and state, oldest pending age, attempts in flight, plugin loads and load errors, fuel used, HTTP requests by route and status", body = String, content_type = "text/plain"),
        (status = 500, description = "This process has another metrics recorder installed", body = ErrorBody),
    ))]
pub async fn get_metrics(State(state): State<Arc<AppState>>) -> Result<Response, ApiError> {
    let Some(handle) = instruments::handle() else {
        return Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "this process installed another metrics recorder before the host started, so the host has no metrics to show",
        ));
    };
    let (now, backlog) = state.stats.get(state.store.as_ref()).await?;
    for task_type in state.stats.seen() {
        let entry = backlog.get(&task_type).cloned().unwrap_or_default();
        for (name, value) in [
            ("pending", entry.pending),
            ("running", entry.running),
            ("failed", entry.failed),
        ] {
            metrics::gauge!(instruments::BACKLOG, "task_type" => task_type.clone(), "state" => name)
                .set(value as f64);
        }
        metrics::gauge!(instruments::OLDEST_PENDING, "task_type" => task_type.clone())
            .set(super::stats::waited_seconds(&entry, now).unwrap_or(0.0));
    }
    metrics::gauge!(instruments::IN_FLIGHT).set(state.in_flight.attempts().len() as f64);
    Ok(([(header::CONTENT_TYPE, TEXT_FORMAT)], handle.render()).into_response())
}

/// The route templates of the API, to label requests by.
pub struct Routes {
    /// Each template split into segments, `None` for a parameter.
    templates: Vec<(String, Vec<Option<String>>)>,
}

impl Routes {
    /// The templates of `paths` (the OpenAPI description's keys, such as `/tasks/{id}`).
    pub fn new<'a>(paths: impl IntoIterator<Item = &'a str>) -> Routes {
        let templates = paths
            .into_iter()
            .map(|path| {
                let segments = path
                    .split('/')
                    .map(|s| (!(s.starts_with('{') && s.ends_with('}'))).then(|| s.to_string()))
                    .collect();
                (path.to_string(), segments)
            })
            .collect();
        Routes { templates }
    }

    /// The template `path` matches (the one with the most literal segments), or `other`.
    pub fn label(&self, path: &str) -> String {
        let segments: Vec<&str> = path.split('/').collect();
        self.templates
            .iter()
            .filter(|(_, template)| {
                template.len() == segments.len()
                    && template
                        .iter()
                        .zip(&segments)
                        .all(|(t, s)| t.as_deref().is_none_or(|literal| literal == *s))
            })
            .max_by_key(|(_, template)| template.iter().filter(|t| t.is_some()).count())
            .map_or_else(|| "other".to_string(), |(name, _)| name.clone())
    }
}

/// Counts every answered request by method, route template and status.
pub async fn count_requests(
    State(routes): State<Arc<Routes>>,
    request: Request,
    next: Next,
) -> Response {
    let method = request.method().as_str().to_string();
    let route = routes.label(request.uri().path());
    let response = next.run(request).await;
    metrics::counter!(
        instruments::HTTP_REQUESTS,
        "method" => method,
        "route" => route,
        "status" => response.status().as_u16().to_string()
    )
    .increment(1);
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_labelled_by_template_never_by_id() {
        let routes = Routes::new([
            "/tasks",
            "/tasks/{id}",
            "/tasks/batch",
            "/tasks/{id}/retry",
            "/metrics",
        ]);
        assert_eq!(routes.label("/tasks/42"), "/tasks/{id}");
        assert_eq!(routes.label("/tasks/batch"), "/tasks/batch");
        assert_eq!(routes.label("/tasks/7/retry"), "/tasks/{id}/retry");
        assert_eq!(routes.label("/tasks"), "/tasks");
        assert_eq!(routes.label("/metrics"), "/metrics");
        assert_eq!(routes.label("/tasks/7/unknown"), "other");
        assert_eq!(routes.label("/wp-admin/install.php"), "other");
    }
}
