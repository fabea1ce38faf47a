//! A small blocking HTTP client over `wasi:http/outgoing-handler`, shared by the test handlers
//! that talk to the network (`httpget`, `mailer`).
//!
//! It is a library, not a component. Each request waits on WASI pollables until the whole
//! response has arrived; the body is read into memory. Only `http://` and `https://` URLs
//! are accepted. The host decides whether the request is allowed at all.
//!
//! A server may answer before it has read the whole request body and close the connection
//! (an error page, or a service that needs no more than the head): writing the rest of the
//! body then fails, yet the answer is there. The client always waits for the response, and
//! reports a body error only when no response came: a request the server answered is never
//! turned into a failure, whose retry would repeat the effect.

use std::fmt;
use std::io::{Read, Write};

use wasip2::http::outgoing_handler;
use wasip2::http::types::{Fields, IncomingBody, Method, OutgoingBody, OutgoingRequest, Scheme};

/// A response: its status code and its body, decoded as UTF-8 (invalid sequences replaced).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The HTTP status code.
    pub status: u16,
    /// The body text.
    pub body: String,
}

/// Why a request failed: a bad URL, a refused request, or a transport error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error(String);

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

/// Shorthand for an [`Error`] with a formatted message.
fn error(message: impl Into<String>) -> Error {
    Error(message.into())
}

/// Sends `GET url`.
pub fn get(url: &str) -> Result<Response, Error> {
    send(Method::Get, url, &[], None)
}

/// Sends `GET url` with extra `headers`.
pub fn get_with_headers(url: &str, headers: &[(&str, &str)]) -> Result<Response, Error> {
    send(Method::Get, url, headers, None)
}

/// Sends `POST url` with `body`, of type `content_type` (and its `content-length`), and extra
/// `headers`.
pub fn post(
    url: &str,
    content_type: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<Response, Error> {
    let length = body.len().to_string();
    let mut all = vec![("content-type", content_type), ("content-length", &length)];
    all.extend_from_slice(headers);
    send(Method::Post, url, &all, Some(body))
}

/// The parts of an `http(s)://authority/path?query` URL.
#[derive(Debug, PartialEq, Eq)]
struct Target<'a> {
    https: bool,
    authority: &'a str,
    path_with_query: String,
}

/// Splits `url` into scheme, authority and path with query (the path defaults to `/`). A
/// fragment is dropped.
fn parse_url(url: &str) -> Result<Target<'_>, Error> {
    let (https, rest) = if let Some(rest) = url.strip_prefix("http://") {
        (false, rest)
    } else if let Some(rest) = url.strip_prefix("https://") {
        (true, rest)
    } else {
        return Err(error(format!(
            "unsupported URL {url:?}: expected http:// or https://"
        )));
    };
    let rest = rest.split('#').next().unwrap_or_default();
    let (authority, path_with_query) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
    if authority.is_empty() {
        return Err(error(format!("URL {url:?} has no host")));
    }
    let path_with_query = if path_with_query.starts_with('/') {
        path_with_query.to_owned()
    } else {
        format!("/{path_with_query}")
    };
    Ok(Target {
        https,
        authority,
        path_with_query,
    })
}

/// Sends one request and reads the whole response.
fn send(
    method: Method,
    url: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> Result<Response, Error> {
    let target = parse_url(url)?;
    let fields: Vec<(String, Vec<u8>)> = headers
        .iter()
        .map(|(name, value)| (name.to_string(), value.as_bytes().to_vec()))
        .collect();
    let fields = Fields::from_list(&fields).map_err(|e| error(format!("bad header: {e}")))?;
    let request = OutgoingRequest::new(fields);
    let scheme = if target.https {
        Scheme::Https
    } else {
        Scheme::Http
    };
    request
        .set_method(&method)
        .and_then(|()| request.set_scheme(Some(&scheme)))
        .and_then(|()| request.set_authority(Some(target.authority)))
        .and_then(|()| request.set_path_with_query(Some(&target.path_with_query)))
        .map_err(|()| error(format!("invalid request to {url:?}")))?;
    let outgoing_body = match body {
        Some(_) => Some(
            request
                .body()
                .map_err(|()| error("request body already taken"))?,
        ),
        None => None,
    };

    let future = outgoing_handler::handle(request, None).map_err(|e| error(e.to_string()))?;

    // Why sending the body failed, if it did: reported only if no response comes.
    let mut body_error = None;
    if let (Some(outgoing_body), Some(bytes)) = (outgoing_body, body) {
        {
            let mut stream = outgoing_body
                .write()
                .map_err(|()| error("request body stream already taken"))?;
            if let Err(e) = stream
                .write_all(bytes)
                .and_then(|()| Write::flush(&mut stream))
            {
                body_error = Some(format!("writing the request body: {e}"));
            }
        } // The stream must be dropped before its body is finished.
        if let Err(e) = OutgoingBody::finish(outgoing_body, None) {
            body_error.get_or_insert_with(|| format!("finishing the request body: {e}"));
        }
    }

    let response = loop {
        match future.get() {
            Some(Ok(Ok(response))) => break response,
            Some(Ok(Err(e))) => {
                return Err(error(match body_error {
                    Some(body) => format!("{body}; and no response: {e}"),
                    None => e.to_string(),
                }));
            }
            Some(Err(())) => return Err(error("response already taken")),
            None => future.subscribe().block(),
        }
    };
    let status = response.status();
    let incoming_body = response
        .consume()
        .map_err(|()| error("response body already taken"))?;
    let mut bytes = Vec::new();
    {
        let mut stream = incoming_body
            .stream()
            .map_err(|()| error("response body stream already taken"))?;
        stream
            .read_to_end(&mut bytes)
            .map_err(|e| error(format!("reading the response body: {e}")))?;
    } // Likewise: drop the stream before finishing the body.
    drop(IncomingBody::finish(incoming_body));
    Ok(Response {
        status,
        body: String::from_utf8_lossy(&bytes).into_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(https: bool, authority: &'static str, path_with_query: &str) -> Target<'static> {
        Target {
            https,
            authority,
            path_with_query: path_with_query.to_owned(),
        }
    }

    #[test]
    fn splits_urls() {
        assert_eq!(
            parse_url("http://127.0.0.1:8080/send?x=1").unwrap(),
            target(false, "127.0.0.1:8080", "/send?x=1")
        );
        assert_eq!(
            parse_url("https://example.com").unwrap(),
            target(true, "example.com", "/")
        );
        assert_eq!(
            parse_url("http://h/a#frag").unwrap(),
            target(false, "h", "/a")
        );
        assert_eq!(
            parse_url("http://h?q=1").unwrap(),
            target(false, "h", "/?q=1")
        );
    }

    #[test]
    fn rejects_bad_urls() {
        assert!(parse_url("ftp://h/").is_err());
        assert!(parse_url("http:///path").is_err());
        assert!(parse_url("127.0.0.1:80/").is_err());
    }
}
