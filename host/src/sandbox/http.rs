//! Outbound HTTP for guests (wasi:http), limited to the hosts a plugin's manifest allows.
//!
//! The check runs before any connection is made: a denied request fails inside the guest with
//! wasi:http's `HTTP-request-denied` error and a line in the task log saying why. With a tape
//! ([`super::tape`]) each request and its answer are recorded, and a replay answers from the
//! record without sending anything.

use std::future::Future;
use wasmtime_wasi_http::{RequestOptions, WasiBody, WasiHttpHooks};

use std::sync::Arc;

use super::capabilities::Capabilities;
use super::output::TaskLog;
use super::tape::{HttpAnswer, ReplayedBody, Tape};

/// The per-attempt HTTP policy.
pub struct AllowList {
    capabilities: Capabilities,
    log: TaskLog,
    /// The attempt's tape: requests and responses are recorded on it, or, in a replay,
    /// answered from it and never sent.
    tape: Option<Arc<Tape>>,
}

impl AllowList {
    pub fn new(capabilities: Capabilities, log: TaskLog, tape: Option<Arc<Tape>>) -> Self {
        AllowList {
            capabilities,
            log,
            tape,
        }
    }
}

type ResponseFuture = Box<
    dyn Future<
            Output = wasmtime_wasi_http::Result<(
                http::Response<WasiBody>,
                Box<dyn Future<Output = Result<(), wasmtime_wasi_http::Error>> + Send>,
            )>,
        > + Send,
>;

impl WasiHttpHooks for AllowList {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        fut: Box<dyn Future<Output = Result<(), wasmtime_wasi_http::Error>> + Send>,
    ) -> ResponseFuture {
        let method = request.method().as_str().to_string();
        let url = request.uri().to_string();
        let tape = self.tape.clone();
        if let Some(tape) = tape.as_ref().filter(|tape| tape.is_replay()) {
            return self.replay(tape.clone(), request, &method, &url);
        }
        let uri = request.uri();
        let host = uri.host().unwrap_or_default().to_string();
        let https = uri.scheme() == Some(&http::uri::Scheme::HTTPS);
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let slot = tape.as_ref().and_then(|tape| {
            Some((
                tape.clone(),
                tape.http_request(&method, &url, request.headers())?,
            ))
        });
        if !self.capabilities.http_permits(&host, port) {
            self.log.line(&format!(
                "[spool] outbound HTTP to {host}:{port} denied: not listed in the manifest's [http] allow"
            ));
            if let Some((tape, slot)) = slot {
                let _ = tape.http_answer(slot, Err(wasmtime_wasi_http::Error::HttpRequestDenied));
            }
            return Box::new(async { Err(wasmtime_wasi_http::Error::HttpRequestDenied) });
        }
        // Allowed: the default client does the request.
        let sent = DefaultHooks.send_request(request, options, fut);
        let Some((tape, slot)) = slot else {
            return sent;
        };
        Box::new(async move {
            match Box::into_pin(sent).await {
                Ok((response, io)) => Ok((tape.http_answer(slot, Ok(response))?, io)),
                Err(error) => Err(tape
                    .http_answer(slot, Err(error))
                    .expect_err("an error is recorded as one")),
            }
        })
    }
}

impl AllowList {
    /// A replayed request: nothing is sent. What the guest writes into the request body is
    /// read and dropped, then the recorded answer comes back; a request the record does not
    /// hold next is refused inside the guest and reported as where the replay left the record.
    fn replay(
        &mut self,
        tape: Arc<Tape>,
        request: http::Request<WasiBody>,
        method: &str,
        url: &str,
    ) -> ResponseFuture {
        let (call, answer) = match tape.http_replay(method, url) {
            Ok(found) => found,
            Err(problem) => {
                self.log.line(&format!(
                    "[spool] replay: outbound HTTP {method} {url} refused: {problem}"
                ));
                return Box::new(async { Err(wasmtime_wasi_http::Error::HttpRequestDenied) });
            }
        };
        Box::new(async move {
            use http_body_util::BodyExt;
            let _ = request.into_body().collect().await;
            let (status, headers, body, end) = match answer {
                HttpAnswer::Failed { error } => return Err(error.into()),
                // The attempt ended waiting for it: so does the replay, at its time limit.
                HttpAnswer::Pending => std::future::pending().await,
                HttpAnswer::Response {
                    status,
                    headers,
                    body,
                    end,
                } => (status, headers, body, end),
            };
            let mut response = http::Response::builder().status(status);
            for (name, value) in headers {
                response = response.header(name, value);
            }
            let response = response
                .body(ReplayedBody::new(tape, call, body, end).boxed_unsync())
                .map_err(|error| {
                    wasmtime_wasi_http::Error::InternalError(Some(format!(
                        "replay: the recorded response does not build: {error}"
                    )))
                })?;
            let io: Box<dyn Future<Output = Result<(), wasmtime_wasi_http::Error>> + Send> =
                Box::new(async { Ok(()) });
            Ok((response, io))
        })
    }
}

/// wasmtime-wasi-http's own client behaviour.
struct DefaultHooks;
impl WasiHttpHooks for DefaultHooks {}
