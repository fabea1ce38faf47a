//! API errors: one type, rendered as JSON with a stable machine-readable `code` and a message
//! that tells the caller what to do. Database internals never leak into a response.

use axum::Json;
use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

use crate::store::StoreError;

/// The body of every error response.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

/// What went wrong.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// Stable identifier: `invalid_json`, `invalid_request`, `unknown_task_type`,
    /// `payload_too_large`, `unauthorized`, `forbidden_host`, `forbidden_origin`, `not_found`,
    /// `method_not_allowed`, `conflict`, `request_timeout`, `unsupported_media_type`,
    /// `unavailable`, `internal`, `no_channels` and `drill_failed` (`POST /alerts/drill`),
    /// `invalid_plugin` and `deploy_token_required` (`POST /plugins/{name}/deploy`).
    pub code: &'static str,
    /// Human-readable explanation with the fix.
    pub message: String,
    /// For `unknown_task_type`: the task types this host can run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub known_task_types: Option<Vec<String>>,
    /// For batch requests: the position of the offending task.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<usize>,
}

/// An error an API handler returns.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub detail: ErrorDetail,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            detail: ErrorDetail {
                code,
                message: message.into(),
                known_task_types: None,
                index: None,
            },
        }
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_request", message)
    }

    pub fn too_large(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large", message)
    }

    pub fn unknown_task_type(task_type: &str, known: Vec<String>) -> Self {
        let listed = if known.is_empty() {
            "none: add NAME.wasm to the plugin folder".to_string()
        } else {
            known.join(", ")
        };
        let mut error = ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "unknown_task_type",
            format!("no plugin handles task type `{task_type}`; known task types: {listed}"),
        );
        error.detail.known_task_types = Some(known);
        error
    }

    /// A request without a token that allows it; answered with `WWW-Authenticate: Bearer`.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }

    /// A request this host refuses to serve whoever sends it (a foreign `Host` or `Origin`).
    pub fn forbidden(code: &'static str, message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::FORBIDDEN, code, message)
    }

    /// A malformed path or query parameter.
    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }

    /// Marks which task of a batch the error is about.
    pub fn at_index(mut self, index: usize) -> Self {
        self.detail.message = format!("tasks[{index}]: {}", self.detail.message);
        self.detail.index = Some(index);
        self
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status;
        let mut response = (status, Json(ErrorBody { error: self.detail })).into_response();
        if status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

impl From<PathRejection> for ApiError {
    fn from(rejection: PathRejection) -> Self {
        ApiError::bad_request(format!(
            "{}; a task id is a whole number up to 9223372036854775807",
            rejection.body_text()
        ))
    }
}

impl From<QueryRejection> for ApiError {
    fn from(rejection: QueryRejection) -> Self {
        ApiError::bad_request(format!(
            "{}; status is one of pending, running, done, failed, cancelled, limit is 1 to 1000, before a task id, and since and until RFC 3339 times such as 2026-12-01T10:00:00Z",
            rejection.body_text()
        ))
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        ApiError::from(&error)
    }
}

impl From<std::sync::Arc<StoreError>> for ApiError {
    fn from(error: std::sync::Arc<StoreError>) -> Self {
        ApiError::from(error.as_ref())
    }
}

impl From<&StoreError> for ApiError {
    fn from(error: &StoreError) -> Self {
        match error {
            StoreError::NotFound(_) => {
                ApiError::new(StatusCode::NOT_FOUND, "not_found", error.to_string())
            }
            StoreError::Conflict { .. } => {
                ApiError::new(StatusCode::CONFLICT, "conflict", error.to_string())
            }
            StoreError::Unavailable(_) | StoreError::Closed => {
                tracing::warn!("the database is unavailable serving a request: {error}");
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "unavailable",
                    "the task database is not answering; nothing was changed, try again shortly",
                )
            }
            StoreError::Database(_) => {
                tracing::error!("the database refused a request: {error}");
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "database_error",
                    "the task database refused the request; nothing was changed; see the host's log",
                )
            }
            _ => {
                tracing::error!("store error serving a request: {error}");
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    "internal error; see the host's log",
                )
            }
        }
    }
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        match &rejection {
            JsonRejection::JsonSyntaxError(_) => ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_json",
                format!(
                    "the request body is not valid JSON: {}",
                    rejection.body_text()
                ),
            ),
            JsonRejection::JsonDataError(_) => ApiError::invalid(format!(
                "the request body does not have the expected fields: {}",
                rejection.body_text()
            )),
            JsonRejection::MissingJsonContentType(_) => ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "send the body as JSON with `Content-Type: application/json`",
            ),
            _ if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => ApiError::too_large(
                "the request body is larger than this host accepts (max_body); split the batch or shrink the payloads",
            ),
            _ => ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                rejection.body_text(),
            ),
        }
    }
}
