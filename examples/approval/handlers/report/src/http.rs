//! `GET` over wasi:http, blocking: enough for reading the report's data from the app.

use std::io::Read;

use wasip2::http::outgoing_handler;
use wasip2::http::types::{Fields, IncomingBody, Method, OutgoingRequest, Scheme};

/// Sends `GET url` (`http://host:port/path`) and returns the status and the body. The host
/// refuses a destination its manifest's `[http] allow` does not list.
pub fn get(url: &str) -> Result<(u16, String), String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("{url:?} is not an http:// URL"))?;
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let path = if path.is_empty() { "/" } else { path };

    let request = OutgoingRequest::new(Fields::new());
    request
        .set_method(&Method::Get)
        .and_then(|()| request.set_scheme(Some(&Scheme::Http)))
        .and_then(|()| request.set_authority(Some(authority)))
        .and_then(|()| request.set_path_with_query(Some(path)))
        .map_err(|()| format!("invalid request to {url:?}"))?;
    let future = outgoing_handler::handle(request, None).map_err(|e| e.to_string())?;
    let response = loop {
        match future.get() {
            Some(Ok(result)) => break result.map_err(|e| e.to_string())?,
            Some(Err(())) => return Err("response already taken".into()),
            None => future.subscribe().block(),
        }
    };
    let status = response.status();
    let body = response
        .consume()
        .map_err(|()| "response body already taken".to_string())?;
    let mut bytes = Vec::new();
    {
        let mut stream = body
            .stream()
            .map_err(|()| "response body stream already taken".to_string())?;
        stream
            .read_to_end(&mut bytes)
            .map_err(|e| format!("reading the response: {e}"))?;
    } // The stream goes before the body is finished.
    drop(IncomingBody::finish(body));
    Ok((status, String::from_utf8_lossy(&bytes).into_owned()))
}
