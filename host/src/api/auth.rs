//! The optional API tokens. With an API token configured, every request but `GET /health`,
//! `GET /openapi.json` and the dashboard's page and files (`GET /`, `GET /ui/...`) must present
//! a token: payloads, results and logs are data too. Changes
//! need the API token; reads take it or the read token, if one is configured.
//!
//! Deploying code is a stronger right than changing tasks: with a deploy token configured,
//! deploying, promoting, rolling back and removing a handler's deployment need the deploy
//! token, and the API token alone is refused. Every request that passes carries the [`Right`]
//! it was allowed by, which the deployment history records.

use axum::extract::{Request, State};
use axum::http::{Method, header};
use axum::middleware::Next;
use axum::response::Response;
use sha2::{Digest, Sha256};
use std::sync::Arc;
use subtle::ConstantTimeEq;

use super::AppState;
use super::error::ApiError;

/// What a request may need to present.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Nothing: the health check, the API description and the dashboard's files.
    Open,
    /// The read token or the API token.
    Read,
    /// The API token.
    Change,
    /// The deploy token where one is configured, else the API token.
    Deploy,
}

/// The right a request was allowed by: `deploy` (the deploy token), `api` (the API token),
/// `read` (the read token) or `open` (no token is configured).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Right(pub &'static str);

/// The access a request needs: GET, HEAD and OPTIONS read, every other method changes.
pub fn access(method: &Method, path: &str) -> Access {
    let reads = [Method::GET, Method::HEAD, Method::OPTIONS];
    match (reads.contains(method), path) {
        (true, "/health" | "/openapi.json" | "/") => Access::Open,
        // The dashboard's files: code, no data (the data comes from the API).
        (true, path) if path.starts_with("/ui/") => Access::Open,
        (true, _) => Access::Read,
        (false, path) if is_deploy_path(path) => Access::Deploy,
        (false, _) => Access::Change,
    }
}

/// `/plugins/{type}/deploy`, `/plugins/{type}/promote`, `/plugins/{type}/rollback` and
/// `/plugins/{type}/deployment` (removing it).
fn is_deploy_path(path: &str) -> bool {
    let mut parts = path.trim_start_matches('/').split('/');
    matches!(
        (parts.next(), parts.next(), parts.next(), parts.next()),
        (
            Some("plugins"),
            Some(_),
            Some("deploy" | "promote" | "rollback"),
            None
        )
    )
}

/// Whether the caller may read (no token is configured, or it sent the read or API token);
/// set on every request that passes, so an open route such as `GET /health` can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MayRead(pub bool);

/// Rejects a request with 401 unless it carries `Authorization: Bearer <token>` with a token
/// that allows what it does. Everything passes when no token is configured.
pub async fn require_token(
    State(state): State<Arc<AppState>>,
    mut request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let Some(api_token) = &state.config.api_token else {
        request.extensions_mut().insert(MayRead(true));
        request.extensions_mut().insert(Right("open"));
        return Ok(next.run(request).await);
    };
    let access = access(request.method(), request.uri().path());
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(bearer);
    let is = |token: Option<&str>| {
        presented.is_some_and(|presented| token.is_some_and(|token| same_token(presented, token)))
    };
    let deploy_token = state.config.deploy_token.as_deref();
    let (is_api_token, is_read_token) =
        (is(Some(api_token)), is(state.config.read_token.as_deref()));
    let is_deploy_token = is(deploy_token);
    let right = if is_deploy_token {
        "deploy"
    } else if is_api_token {
        "api"
    } else if is_read_token {
        "read"
    } else {
        "none"
    };
    match access {
        Access::Open => {}
        Access::Read if is_api_token || is_read_token || is_deploy_token => {}
        Access::Change if is_api_token => {}
        Access::Deploy if is_deploy_token || (deploy_token.is_none() && is_api_token) => {}
        Access::Deploy if is_api_token => {
            return Err(ApiError::forbidden(
                "deploy_token_required",
                "this host has a deploy token: deploying, promoting and rolling back need it, not the API token (the CLI reads SPOOL_DEPLOY_TOKEN)",
            ));
        }
        Access::Change | Access::Deploy if is_read_token => {
            return Err(ApiError::unauthorized(
                "the read token does not allow changes: send the API token",
            ));
        }
        Access::Read => {
            return Err(ApiError::unauthorized(
                "this host requires a token for reads: send `Authorization: Bearer <token>` with the read token or the API token (the CLI reads SPOOL_READ_TOKEN or SPOOL_API_TOKEN)",
            ));
        }
        Access::Deploy if deploy_token.is_some() => {
            return Err(ApiError::unauthorized(
                "this host requires the deploy token for deploys: send `Authorization: Bearer <token>` (the CLI reads SPOOL_DEPLOY_TOKEN)",
            ));
        }
        Access::Change | Access::Deploy => {
            return Err(ApiError::unauthorized(
                "this host requires the API token for changes: send `Authorization: Bearer <token>` (the CLI reads SPOOL_API_TOKEN)",
            ));
        }
    }
    request
        .extensions_mut()
        .insert(MayRead(is_api_token || is_read_token || is_deploy_token));
    request.extensions_mut().insert(Right(right));
    Ok(next.run(request).await)
}

/// The token of an `Authorization` value in the Bearer scheme, whose name is case-insensitive
/// (RFC 9110, section 11.1): `Bearer t`, `bearer t` and `BEARER t` all give `t`.
fn bearer(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once([' ', '\t'])?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// Whether a presented token is the configured one, in time that depends on neither.
///
/// A comparison that stops at the first differing byte answers faster the less of a guess is
/// right, which lets a caller who can time many requests find the token byte by byte. Both
/// tokens are hashed first, so the comparison always covers 32 bytes and leaks not even the
/// token's length, and the digests are compared with `subtle`, whose comparison the compiler
/// cannot turn back into an early exit.
fn same_token(presented: &str, expected: &str) -> bool {
    let presented = Sha256::digest(presented.as_bytes());
    let expected = Sha256::digest(expected.as_bytes());
    presented.ct_eq(&expected).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compares_tokens() {
        assert!(same_token("secret", "secret"));
        assert!(!same_token("secret", "secreT"));
        assert!(!same_token("secret", "secrets"));
        assert!(!same_token("", "secret"));
    }

    #[test]
    fn bearer_scheme_in_any_case() {
        for value in [
            "Bearer t0k",
            "bearer t0k",
            "BEARER t0k",
            "  Bearer   t0k  ",
            "bEaReR\tt0k",
        ] {
            assert_eq!(bearer(value), Some("t0k"), "{value:?}");
        }
        for value in ["Basic t0k", "Bearer", "Bearer ", "Bearert0k", "t0k"] {
            assert_eq!(bearer(value), None, "{value:?}");
        }
    }

    #[test]
    fn reads_changes_and_open_routes() {
        assert_eq!(access(&Method::GET, "/health"), Access::Open);
        assert_eq!(access(&Method::GET, "/openapi.json"), Access::Open);
        assert_eq!(access(&Method::GET, "/"), Access::Open);
        assert_eq!(access(&Method::GET, "/ui/0123abcd/app.js"), Access::Open);
        assert_eq!(access(&Method::POST, "/"), Access::Change);
        assert_eq!(access(&Method::GET, "/uix"), Access::Read);
        assert_eq!(access(&Method::POST, "/health"), Access::Change);
        assert_eq!(access(&Method::GET, "/tasks/1"), Access::Read);
        assert_eq!(access(&Method::HEAD, "/plugins"), Access::Read);
        assert_eq!(access(&Method::POST, "/tasks/1/cancel"), Access::Change);
        assert_eq!(access(&Method::DELETE, "/tasks/1"), Access::Change);
    }
}
