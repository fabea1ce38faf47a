//! Which requests this host serves at all, whoever sends them.
//!
//! **Host** (DNS rebinding): a web page on `evil.example` can make its own name resolve to
//! 127.0.0.1 and then script requests to "its" server, which is really this host on loopback.
//! The browser still sends `Host: evil.example`. So a host listening on loopback answers only to
//! `localhost`, `127.0.0.1` and `[::1]` (and the address it listens on) with its own port, and
//! to the names in `allowed_hosts`; any other `Host` gets 403 `forbidden_host`. A host listening
//! elsewhere checks names only when `allowed_hosts` is set (then it also answers to the address
//! a connection arrived on).
//!
//! **Origin** (cross-site requests): a page on another site can submit a form to
//! `POST /tasks/{id}/cancel` without reading the answer, and browsers attach no token the API
//! does not already see. Browsers mark such requests with `Origin` (and `Sec-Fetch-Site`), so a
//! change (any method but GET, HEAD and OPTIONS) that carries a foreign or `null` origin, or
//! `Sec-Fetch-Site: cross-site`, gets 403 `forbidden_origin`. Requests without those headers
//! (curl, the CLI, server-side code) are not browsers' and pass.

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, header};
use axum::middleware::Next;
use axum::response::Response;
use spool_rules::authority::{Authority, Host};
use std::net::SocketAddr;
use std::sync::Arc;

use super::error::ApiError;
use super::server::ConnectionInfo;
use crate::config::Config;

/// `NAME`, `NAME:PORT`, `IPV4:PORT` or `[IPV6]:PORT`, names lower-cased; `None` if malformed.
fn parse_authority(authority: &str) -> Option<(Host, Option<u16>)> {
    Authority::parse(authority).map(|Authority { host, port }| (host, port))
}

/// The names this host answers to.
#[derive(Debug, Clone)]
pub struct HostPolicy {
    /// The configured listen address, for requests that did not come through the server loop.
    listen: SocketAddr,
    /// Whether `Host` is checked at all.
    enforce: bool,
    /// Whether the API listens on loopback, so loopback names are its own.
    loopback: bool,
    /// `allowed_hosts`: a name without a port allows every port.
    extra: Vec<Authority>,
}

impl HostPolicy {
    pub fn new(config: &Config) -> HostPolicy {
        let loopback = config.listen.ip().is_loopback();
        let extra: Vec<_> = config
            .allowed_hosts
            .iter()
            .filter_map(|name| Authority::parse(name))
            .collect();
        HostPolicy {
            listen: config.listen,
            enforce: loopback || !extra.is_empty(),
            loopback,
            extra,
        }
    }

    /// Whether `name:port` names this host, reached on `local`.
    fn allows(&self, name: &Host, port: u16, local: SocketAddr) -> bool {
        let own_port = port == local.port();
        let own_name = match name {
            Host::Ip(ip) => *ip == local.ip() || (self.loopback && ip.is_loopback()),
            Host::Domain(domain) => self.loopback && domain == "localhost",
        };
        (own_name && own_port) || self.extra.iter().any(|allowed| allowed.admits(name, port))
    }

    /// Checks the request's `Host` (or absolute-form target); `Err` names what was refused.
    fn check_host(&self, request: &Request, local: SocketAddr) -> Result<(), String> {
        if !self.enforce {
            return Ok(());
        }
        let authorities = request
            .uri()
            .authority()
            .map(|a| a.as_str().to_string())
            .into_iter()
            .chain(
                request
                    .headers()
                    .get_all(header::HOST)
                    .iter()
                    .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned()),
            );
        for authority in authorities {
            // Without a port, the default port of plain HTTP.
            let allowed = parse_authority(&authority)
                .is_some_and(|(name, port)| self.allows(&name, port.unwrap_or(80), local));
            if !allowed {
                return Err(authority);
            }
        }
        Ok(())
    }

    /// Checks a change's `Origin` and `Sec-Fetch-Site`; `Err` names what was refused.
    fn check_origin(&self, headers: &HeaderMap, local: SocketAddr) -> Result<(), String> {
        if headers
            .get("sec-fetch-site")
            .is_some_and(|site| site.as_bytes().eq_ignore_ascii_case(b"cross-site"))
        {
            return Err("Sec-Fetch-Site: cross-site".into());
        }
        let Some(origin) = headers.get(header::ORIGIN) else {
            return Ok(());
        };
        let text = String::from_utf8_lossy(origin.as_bytes()).into_owned();
        let parsed = text.split_once("://").and_then(|(scheme, authority)| {
            let default_port = match scheme.to_ascii_lowercase().as_str() {
                "http" => 80,
                "https" => 443,
                _ => return None,
            };
            let (name, port) = parse_authority(authority)?;
            Some((name, port.unwrap_or(default_port), default_port))
        });
        let Some((name, port, default_port)) = parsed else {
            return Err(format!("Origin: {text}"));
        };
        let same_origin = if self.enforce {
            self.allows(&name, port, local)
        } else {
            // No list of names: the page must come from the name the request is sent to.
            headers
                .get(header::HOST)
                .and_then(|host| parse_authority(&String::from_utf8_lossy(host.as_bytes())))
                .is_some_and(|(host, host_port)| {
                    host == name && host_port.unwrap_or(default_port) == port
                })
        };
        if same_origin {
            Ok(())
        } else {
            Err(format!("Origin: {text}"))
        }
    }
}

/// Refuses requests for another `Host`, and changes from another origin, with 403.
pub async fn check_host_and_origin(
    State(policy): State<Arc<HostPolicy>>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let local = request
        .extensions()
        .get::<ConnectionInfo>()
        .map_or(policy.listen, |info| info.local);
    if let Err(host) = policy.check_host(&request, local) {
        return Err(ApiError::forbidden(
            "forbidden_host",
            format!(
                "this host does not answer to `{host}` (a guard against DNS rebinding): use localhost, 127.0.0.1 or [::1] with port {}, or add the name to allowed_hosts",
                local.port()
            ),
        ));
    }
    let reads = [Method::GET, Method::HEAD, Method::OPTIONS];
    if !reads.contains(request.method())
        && let Err(origin) = policy.check_origin(request.headers(), local)
    {
        return Err(ApiError::forbidden(
            "forbidden_origin",
            format!(
                "a web page from another site ({origin}) may not change tasks; browsers may only call this API from its own origin"
            ),
        ));
    }
    Ok(next.run(request).await)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn policy(listen: &str, allowed: &[&str]) -> HostPolicy {
        let settings = crate::config::Settings {
            listen: Some(listen.parse().unwrap()),
            allowed_hosts: Some(allowed.iter().map(|s| s.to_string()).collect()),
            // The policy on any address, whatever else a host there needs to start.
            open_api: Some(true),
            ..Default::default()
        };
        HostPolicy::new(&Config::from_settings(settings).unwrap())
    }

    fn host(policy: &HostPolicy, local: &str, value: &str) -> bool {
        let request = Request::builder()
            .uri("/tasks")
            .header(header::HOST, value)
            .body(axum::body::Body::empty())
            .unwrap();
        policy.check_host(&request, local.parse().unwrap()).is_ok()
    }

    #[test]
    fn a_loopback_host_answers_to_loopback_names_on_its_port() {
        let p = policy("127.0.0.1:8787", &[]);
        let local = "127.0.0.1:8787";
        for good in [
            "localhost:8787",
            "LOCALHOST:8787",
            "127.0.0.1:8787",
            "[::1]:8787",
            "[0:0:0:0:0:0:0:1]:8787",
        ] {
            assert!(host(&p, local, good), "{good}");
        }
        for bad in [
            "evil.example:8787",
            "localhost:8788",
            "localhost",
            "127.0.0.1",
            "localhost.evil:8787",
            "",
            "a b:8787",
            "[::1",
            "localhost:99999",
        ] {
            assert!(!host(&p, local, bad), "{bad:?}");
        }
        let request = Request::builder()
            .uri("http://evil.example:8787/tasks")
            .header(header::HOST, "localhost:8787")
            .body(axum::body::Body::empty())
            .unwrap();
        assert!(
            p.check_host(&request, local.parse().unwrap()).is_err(),
            "an absolute-form target is checked too"
        );
    }

    #[test]
    fn allowed_hosts_add_names_with_or_without_a_port() {
        let p = policy("127.0.0.1:8787", &["spool.internal", "proxy.local:8443"]);
        let local = "127.0.0.1:8787";
        assert!(host(&p, local, "spool.internal"));
        assert!(host(&p, local, "spool.internal:1234"));
        assert!(host(&p, local, "proxy.local:8443"));
        assert!(!host(&p, local, "proxy.local:8787"));
        assert!(host(&p, local, "localhost:8787"));
    }

    #[test]
    fn other_listen_addresses_check_names_only_when_told() {
        let open = policy("0.0.0.0:8787", &[]);
        assert!(host(&open, "10.0.0.5:8787", "anything.example"));
        let named = policy("0.0.0.0:8787", &["spool.example"]);
        assert!(host(&named, "10.0.0.5:8787", "spool.example"));
        assert!(
            host(&named, "10.0.0.5:8787", "10.0.0.5:8787"),
            "the address the connection arrived on"
        );
        assert!(!host(&named, "10.0.0.5:8787", "evil.example"));
        assert!(
            !host(&named, "10.0.0.5:8787", "localhost:8787"),
            "loopback names are not this host's when it listens elsewhere"
        );
    }

    #[test]
    fn changes_from_other_origins_are_refused() {
        let p = policy("127.0.0.1:8787", &[]);
        let local: SocketAddr = "127.0.0.1:8787".parse().unwrap();
        let check = |pairs: &[(&'static str, &'static str)]| {
            let mut headers = HeaderMap::new();
            for (name, value) in pairs {
                headers.insert(*name, HeaderValue::from_static(value));
            }
            p.check_origin(&headers, local).is_ok()
        };
        assert!(check(&[]));
        assert!(check(&[("origin", "http://localhost:8787")]));
        assert!(check(&[
            ("origin", "http://127.0.0.1:8787"),
            ("sec-fetch-site", "same-origin")
        ]));
        assert!(!check(&[("origin", "http://evil.example")]));
        assert!(
            !check(&[("origin", "http://localhost:3000")]),
            "another port is another origin"
        );
        assert!(!check(&[("origin", "null")]));
        assert!(!check(&[("origin", "file://")]));
        assert!(!check(&[("sec-fetch-site", "cross-site")]));

        let open = policy("0.0.0.0:8787", &[]);
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, HeaderValue::from_static("jobs.example:8787"));
        headers.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://jobs.example:8787"),
        );
        assert!(open.check_origin(&headers, local).is_ok());
        headers.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://evil.example"),
        );
        assert!(open.check_origin(&headers, local).is_err());
    }
}
