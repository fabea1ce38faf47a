//! `host[:port]` as a `Host` header, `allowed_hosts`, a manifest's `[http] allow` list or a
//! request's URL gives it: `NAME`, `NAME:PORT`, `IPV4`, `IPV4:PORT`, `[IPV6]` or `[IPV6]:PORT`.
//! Names are compared without regard to case, so they are kept lower-cased.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The host part: an address, or a name made of letters, digits, `.`, `-` and `_`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    Ip(IpAddr),
    Domain(String),
}

impl Host {
    /// Reads a host alone: a name, an IPv4 address, or an IPv6 address with or without its
    /// brackets (a URL's host keeps them, a socket address does not).
    pub fn parse(text: &str) -> Option<Host> {
        let text = text.trim();
        if let Some(inner) = text.strip_prefix('[') {
            let ip: Ipv6Addr = inner.strip_suffix(']')?.parse().ok()?;
            return Some(Host::Ip(IpAddr::V6(ip)));
        }
        if let Ok(ip) = text.parse::<Ipv6Addr>() {
            return Some(Host::Ip(IpAddr::V6(ip)));
        }
        Host::name_or_v4(text)
    }

    fn name_or_v4(text: &str) -> Option<Host> {
        if text.is_empty()
            || !text
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
        {
            return None;
        }
        Some(match text.parse::<Ipv4Addr>() {
            Ok(ip) => Host::Ip(IpAddr::V4(ip)),
            Err(_) => Host::Domain(text.to_ascii_lowercase()),
        })
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]"),
            Host::Ip(ip) => write!(f, "{ip}"),
            Host::Domain(name) => f.write_str(name),
        }
    }
}

/// A host and, when one is written, a port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authority {
    pub host: Host,
    pub port: Option<u16>,
}

impl Authority {
    /// Reads `host[:port]`; `None` when it is anything else (a scheme, a path, user info, an
    /// empty or non-numeric port, a bare IPv6 address with a port but no brackets).
    pub fn parse(text: &str) -> Option<Authority> {
        let text = text.trim();
        let (host, port) = if let Some(rest) = text.strip_prefix('[') {
            let (ip, after) = rest.split_once(']')?;
            let ip: Ipv6Addr = ip.parse().ok()?;
            let port = match after {
                "" => None,
                _ => Some(after.strip_prefix(':')?),
            };
            (Host::Ip(IpAddr::V6(ip)), port)
        } else {
            let (host, port) = match text.split_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (text, None),
            };
            (Host::name_or_v4(host)?, port)
        };
        let port = match port {
            Some(port) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => {
                Some(port.parse().ok()?)
            }
            Some(_) => return None,
            None => None,
        };
        Some(Authority { host, port })
    }

    /// Whether this authority, as an allow-list entry, admits `host` on `port`: the same host,
    /// and the same port unless the entry names none (then every port).
    pub fn admits(&self, host: &Host, port: u16) -> bool {
        self.host == *host && self.port.is_none_or(|own| own == port)
    }
}

impl fmt::Display for Authority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.port {
            Some(port) => write!(f, "{}:{port}", self.host),
            None => write!(f, "{}", self.host),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn domain(name: &str) -> Host {
        Host::Domain(name.into())
    }

    #[test]
    fn authorities_are_hosts_with_an_optional_port() {
        let parsed = Authority::parse(" API.Example.com:8443 ").unwrap();
        assert_eq!(parsed.host, domain("api.example.com"));
        assert_eq!(parsed.port, Some(8443));
        assert_eq!(Authority::parse("localhost").unwrap().port, None);
        assert_eq!(
            Authority::parse("127.0.0.1:8025").unwrap().host,
            Host::Ip("127.0.0.1".parse().unwrap())
        );
        let v6 = Authority::parse("[::1]:8787").unwrap();
        assert_eq!(v6.host, Host::Ip("::1".parse().unwrap()));
        assert_eq!(v6.to_string(), "[::1]:8787");
        assert_eq!(Authority::parse("[::1]").unwrap().port, None);
        for bad in [
            "",
            "http://x",
            "x/y",
            "user@host",
            "a b",
            "host:",
            "host:port",
            "host:70000",
            "host:+80",
            "::1",
            "[::1]8080",
            "[nope]:1",
        ] {
            assert_eq!(Authority::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn an_entry_without_a_port_admits_every_port() {
        let any_port = Authority::parse("api.example.com").unwrap();
        assert!(any_port.admits(&domain("api.example.com"), 443));
        assert!(any_port.admits(&Host::parse("API.example.com").unwrap(), 80));
        assert!(!any_port.admits(&domain("api.example.com.evil.net"), 443));
        let one_port = Authority::parse("127.0.0.1:8025").unwrap();
        assert!(one_port.admits(&Host::parse("127.0.0.1").unwrap(), 8025));
        assert!(!one_port.admits(&Host::parse("127.0.0.1").unwrap(), 8026));
    }

    #[test]
    fn hosts_take_ipv6_with_or_without_brackets() {
        let ip = Host::Ip("::1".parse().unwrap());
        assert_eq!(Host::parse("[::1]"), Some(ip.clone()));
        assert_eq!(Host::parse("::1"), Some(ip));
        assert_eq!(Host::parse("bad host"), None);
    }
}
