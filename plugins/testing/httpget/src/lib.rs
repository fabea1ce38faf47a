//! `httpget` (test handler): fetches a URL over `wasi:http`.
//!
//! Used to test the host's outbound HTTP (`wasi:http/outgoing-handler`) and its allow list.
//!
//! # Payload
//!
//! ```json
//! {"url": "http://127.0.0.1:8080/path"}
//! ```
//!
//! With `"post": N`, it sends `POST url` with a body of `N` bytes (`x`, as `text/plain`)
//! instead of `GET url`. With `"bearer": "TOKEN"`, it sends `authorization: Bearer TOKEN`.
//!
//! # Result
//!
//! ```json
//! {"status": 200, "body": "…"}
//! ```
//!
//! Any status counts as success; the body is decoded as UTF-8 (invalid sequences replaced).
//! A request that cannot be made or gets no response (a bad URL, a host that refuses it, a
//! connection error) fails permanently with `http request failed: <error>`.

use serde::Deserialize;
use spool_sdk::{Failure, Handler, TaskInfo, json, log};

/// The `httpget` handler.
struct Httpget;

/// The payload.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Request {
    url: String,
    #[serde(default)]
    post: Option<usize>,
    #[serde(default)]
    bearer: Option<String>,
}

impl Handler for Httpget {
    fn handle(_task: TaskInfo, payload: String) -> Result<String, Failure> {
        let Request { url, post, bearer } = json::parse_payload(&payload)?;
        let authorization = bearer.map(|token| format!("Bearer {token}"));
        let headers: Vec<(&str, &str)> = authorization
            .as_deref()
            .map(|value| ("authorization", value))
            .into_iter()
            .collect();
        let response = match post {
            Some(bytes) => {
                log::info(format!("POST {url} ({bytes} bytes)"));
                httpclient::post(&url, "text/plain", &headers, "x".repeat(bytes).as_bytes())
            }
            None => {
                log::info(format!("GET {url}"));
                httpclient::get_with_headers(&url, &headers)
            }
        }
        .map_err(|err| Failure::Fail(format!("http request failed: {err}")))?;
        log::info(format!("{url}: {}", response.status));
        json::to_result(&json::json!({ "status": response.status, "body": response.body }))
    }
}

spool_sdk::export_handler!(Httpget);
