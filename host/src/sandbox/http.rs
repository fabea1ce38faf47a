//! Outbound HTTP for guests (wasi:http), limited to the hosts a plugin's manifest allows.
//!
//! The check runs before any connection is made: a denied request fails inside the guest with
//! wasi:http's `HTTP-request-denied` error and a line in the task log saying why.

use std::future::Future;
use wasmtime_wasi_http::{RequestOptions, WasiBody, WasiHttpHooks};

use std::sync::Arc;

use super::capabilities::Capabilities;
use super::output::TaskLog;
use super::tape::Tape;

/// The per-attempt HTTP policy.
pub struct AllowList {
    capabilities: Capabilities,
    log: TaskLog,
    /// A replay's tape: no request leaves the machine.
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
        let uri = request.uri();
        if let Some(tape) = self.tape.as_ref().filter(|tape| tape.is_replay()) {
            let problem = tape.http_not_replayed(request.method().as_str(), &uri.to_string());
            self.log.line(&format!("[spool] {problem}"));
            return Box::new(async { Err(wasmtime_wasi_http::Error::HttpRequestDenied) });
        }
        let host = uri.host().unwrap_or_default().to_string();
        let https = uri.scheme() == Some(&http::uri::Scheme::HTTPS);
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        if !self.capabilities.http_permits(&host, port) {
            self.log.line(&format!(
                "[spool] outbound HTTP to {host}:{port} denied: not listed in the manifest's [http] allow"
            ));
            return Box::new(async { Err(wasmtime_wasi_http::Error::HttpRequestDenied) });
        }
        // Allowed: the default client does the request.
        let mut default = DefaultHooks;
        default.send_request(request, options, fut)
    }
}

/// wasmtime-wasi-http's own client behaviour.
struct DefaultHooks;
impl WasiHttpHooks for DefaultHooks {}
