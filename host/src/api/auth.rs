//! The optional API token: when configured, every mutating request must present it.

use axum::extract::{Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;
use std::sync::Arc;

use super::error::ApiError;
use super::AppState;

/// Rejects a mutating request (any method but GET, HEAD, OPTIONS) with 401 unless it carries
/// `Authorization: Bearer <token>` matching the configured token. Reads stay open, and
/// everything passes when no token is configured.
pub async fn require_token_for_changes(
    State(state): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let reads = [Method::GET, Method::HEAD, Method::OPTIONS];
    if let (Some(expected), false) = (&state.config.api_token, reads.contains(request.method())) {
        let presented = request
            .headers()
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.strip_prefix("Bearer "))
            .map(str::trim);
        if !presented.is_some_and(|token| constant_time_eq(token.as_bytes(), expected.as_bytes())) {
            return Err(ApiError::unauthorized());
        }
    }
    Ok(next.run(request).await)
}

/// Compares without stopping at the first difference, so response time does not reveal how
/// much of a guessed token was right.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::constant_time_eq;

    #[test]
    fn compares_tokens() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secrets"));
    }
}
