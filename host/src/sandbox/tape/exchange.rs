//! Outbound HTTP on the tape: how a record keeps a request (method, URL, headers) and the
//! answer the guest got (a response's status, headers and body, or the error), the body that
//! copies a live response into the record as the guest reads it, and the response a replay
//! builds from the record without sending anything.
//!
//! Secrets never enter a record: the values of the request headers in [`SECRET_HEADERS`] and
//! of the response's `set-cookie` are kept as [`REDACTED`], and so is every occurrence of a
//! value the manifest marks secret (`secrets = ["NAME"]` names `[env]` variables) in the URL and
//! in header values.
//!
//! Errors are kept as wasi:http's guest-visible error codes ([`Failure`]): an error that carries
//! an I/O or hyper error is first turned into the code a guest would get for it, and that code
//! is what the live guest gets too, so a replay hands back exactly what the attempt saw.

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use serde::{Deserialize, Serialize};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use wasmtime_wasi_http::{Error, WasiBody};

use super::{Call, Tape};

/// What a record keeps instead of a secret.
pub const REDACTED: &str = "[redacted]";

/// Request headers whose values a record never keeps.
pub const SECRET_HEADERS: [&str; 3] = ["authorization", "proxy-authorization", "cookie"];

/// One outbound request and the answer the guest got.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exchange {
    pub method: String,
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub answer: HttpAnswer,
}

/// How an outbound request was answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum HttpAnswer {
    /// No answer had come when the attempt ended (it timed out or stopped waiting).
    Pending,
    Response {
        status: u16,
        headers: Vec<(String, String)>,
        /// The body as far as the guest read it.
        body: HttpBody,
        end: BodyEnd,
    },
    Failed {
        error: Failure,
    },
}

/// Where a recorded response body stops.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BodyEnd {
    /// The guest had not read it to the end when the attempt ended.
    Open,
    /// The body ended.
    Complete,
    /// Reading it failed with this error.
    Failed(Failure),
    /// The record reached `record_max` inside this body.
    Truncated,
}

/// Body bytes: text when they are UTF-8, hex otherwise.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "BodyText", into = "BodyText")]
pub struct HttpBody(pub Vec<u8>);

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum BodyText {
    Text(String),
    Hex(String),
}

impl From<HttpBody> for BodyText {
    fn from(body: HttpBody) -> Self {
        match String::from_utf8(body.0) {
            Ok(text) => BodyText::Text(text),
            Err(error) => BodyText::Hex(hex::encode(error.into_bytes())),
        }
    }
}

impl TryFrom<BodyText> for HttpBody {
    type Error = hex::FromHexError;
    fn try_from(text: BodyText) -> Result<Self, Self::Error> {
        Ok(HttpBody(match text {
            BodyText::Text(text) => text.into_bytes(),
            BodyText::Hex(hex) => hex::decode(hex)?,
        }))
    }
}

/// Declares [`Failure`], wasi:http's error codes as a record keeps them, with the conversions
/// to and from wasmtime-wasi-http's `Error` for every code that carries no I/O error.
macro_rules! failures {
    (
        plain: $($plain:ident),* ;
        one: $($one:ident($one_type:ty)),* ;
        named: $($named:ident { $($field:ident: $field_type:ty),* }),* $(;)?
    ) => {
        /// A wasi:http error code, as the guest got it.
        #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum Failure {
            $($plain,)*
            $($one($one_type),)*
            $($named { $($field: $field_type),* },)*
        }

        impl From<Failure> for Error {
            fn from(failure: Failure) -> Error {
                match failure {
                    $(Failure::$plain => Error::$plain,)*
                    $(Failure::$one(value) => Error::$one(value),)*
                    $(Failure::$named { $($field),* } => Error::$named { $($field),* },)*
                }
            }
        }

        impl Failure {
            /// The code, for an error that is one already.
            fn exact(error: Error) -> Result<Failure, Error> {
                Ok(match error {
                    $(Error::$plain => Failure::$plain,)*
                    $(Error::$one(value) => Failure::$one(value),)*
                    $(Error::$named { $($field),* } => Failure::$named { $($field),* },)*
                    other => return Err(other),
                })
            }
        }
    };
}

failures! {
    plain: DnsTimeout, DestinationNotFound, DestinationUnavailable, DestinationIpProhibited,
        DestinationIpUnroutable, ConnectionRefused, ConnectionTerminated, ConnectionTimeout,
        ConnectionReadTimeout, ConnectionWriteTimeout, ConnectionLimitReached, TlsProtocolError,
        TlsCertificateError, HttpRequestDenied, HttpRequestLengthRequired,
        HttpRequestMethodInvalid, HttpRequestUriInvalid, HttpRequestUriTooLong,
        HttpResponseIncomplete, HttpResponseTimeout, HttpUpgradeFailed, HttpProtocolError,
        LoopDetected, ConfigurationError;
    one: HttpRequestBodySize(Option<u64>), HttpRequestHeaderSectionSize(Option<u32>),
        HttpRequestTrailerSectionSize(Option<u32>), HttpResponseHeaderSectionSize(Option<u32>),
        HttpResponseBodySize(Option<u64>), HttpResponseTrailerSectionSize(Option<u32>),
        HttpResponseTransferCoding(Option<String>), HttpResponseContentCoding(Option<String>),
        InternalError(Option<String>);
    named: DnsError { rcode: Option<String>, info_code: Option<u16> },
        TlsAlertReceived { alert_id: Option<u8>, alert_message: Option<String> },
        HttpRequestHeaderSize { field_name: Option<String>, field_size: Option<u32> },
        HttpRequestTrailerSize { field_name: Option<String>, field_size: Option<u32> },
        HttpResponseHeaderSize { field_name: Option<String>, field_size: Option<u32> },
        HttpResponseTrailerSize { field_name: Option<String>, field_size: Option<u32> };
}

impl Failure {
    /// The code a guest gets for `error`: wasmtime-wasi-http's own mapping with its default
    /// hooks (a connect error is a refused connection unless the name did not resolve, a TLS
    /// error a TLS protocol error, another hyper error a protocol error).
    pub fn of(error: Error) -> Failure {
        use std::error::Error as _;
        match Failure::exact(error) {
            Ok(failure) => failure,
            Err(Error::Hyper(error)) => {
                let code = error.source().and_then(|cause| {
                    cause
                        .downcast_ref::<wasmtime_wasi_http::p2::bindings::http::types::ErrorCode>()
                        .cloned()
                });
                match code.map(|code| Failure::exact(Error::from(code))) {
                    Some(Ok(failure)) => failure,
                    _ if error.is_timeout() => Failure::HttpResponseTimeout,
                    _ => Failure::HttpProtocolError,
                }
            }
            Err(Error::Connect(error))
                if error.kind() == std::io::ErrorKind::AddrNotAvailable
                    || error
                        .to_string()
                        .starts_with("failed to lookup address information") =>
            {
                Failure::DnsError {
                    rcode: Some("address not available".into()),
                    info_code: None,
                }
            }
            Err(Error::Connect(_)) => Failure::ConnectionRefused,
            Err(Error::Tls(_)) => Failure::TlsProtocolError,
            Err(Error::InvalidDnsNameError(_)) => Failure::DnsError {
                rcode: Some("invalid dns name".into()),
                info_code: None,
            },
            Err(other) => Failure::InternalError(Some(other.to_string())),
        }
    }
}

impl Exchange {
    /// The request as a person reads it, for divergence reports.
    pub fn describe(&self) -> String {
        format!("http {} {}", self.method, self.url)
    }
}

impl Tape {
    /// Redacts the manifest's secret values in `text`.
    fn redact(&self, text: &str) -> String {
        self.secrets
            .iter()
            .filter(|secret| !secret.is_empty())
            .fold(text.to_string(), |text, secret| {
                text.replace(secret.as_str(), REDACTED)
            })
    }

    /// `headers` as a record keeps them.
    fn kept_headers(&self, headers: &http::HeaderMap, secret: &[&str]) -> Vec<(String, String)> {
        headers
            .iter()
            .map(|(name, value)| {
                let value = if secret.contains(&name.as_str()) {
                    REDACTED.to_string()
                } else {
                    self.redact(&String::from_utf8_lossy(value.as_bytes()))
                };
                (name.as_str().to_string(), value)
            })
            .collect()
    }

    /// Records a request the guest is sending (its answer comes later through
    /// [`Tape::http_answer`]). `None` when the record is full.
    pub fn http_request(
        &self,
        method: &str,
        url: &str,
        headers: &http::HeaderMap,
    ) -> Option<usize> {
        let exchange = Exchange {
            method: method.to_string(),
            url: self.redact(url),
            headers: self.kept_headers(headers, &SECRET_HEADERS),
            answer: HttpAnswer::Pending,
        };
        self.keep_at(Call::Http(exchange))
    }

    /// The answer to the request recorded at `slot`: a live response comes back with its body
    /// copied into the record as the guest reads it; an error is recorded and returned as the
    /// code the guest gets.
    pub fn http_answer(
        self: &Arc<Self>,
        slot: usize,
        answer: Result<http::Response<WasiBody>, Error>,
    ) -> Result<http::Response<WasiBody>, Error> {
        match answer {
            Err(error) => {
                let failure = Failure::of(error);
                self.http_update(slot, 0, |exchange| {
                    exchange.answer = HttpAnswer::Failed {
                        error: failure.clone(),
                    }
                });
                Err(failure.into())
            }
            Ok(response) => {
                let headers = self.kept_headers(response.headers(), &["set-cookie"]);
                let status = response.status().as_u16();
                self.http_update(slot, 0, |exchange| {
                    exchange.answer = HttpAnswer::Response {
                        status,
                        headers,
                        body: HttpBody::default(),
                        end: BodyEnd::Open,
                    }
                });
                let tape = self.clone();
                Ok(response.map(|body| {
                    http_body_util::BodyExt::boxed_unsync(RecordingBody {
                        inner: body,
                        tape,
                        slot,
                    })
                }))
            }
        }
    }

    /// Adds `data` to the recorded body at `slot`, or ends it.
    fn http_body(&self, slot: usize, data: Option<&[u8]>, end: Option<BodyEnd>) {
        self.http_update(slot, data.map_or(0, <[u8]>::len), |exchange| {
            if let HttpAnswer::Response {
                body, end: ended, ..
            } = &mut exchange.answer
                && *ended == BodyEnd::Open
            {
                if let Some(data) = data {
                    body.0.extend_from_slice(data);
                }
                if let Some(end) = end {
                    *ended = end;
                }
            }
        });
    }

    /// The recorded answer to the guest's next request, if the record holds this request next.
    /// A recorded URL with redacted parts matches a URL with anything in their place.
    pub fn http_replay(&self, method: &str, url: &str) -> Result<(usize, HttpAnswer), String> {
        let asked = format!("http {method} {url}");
        let number = self.next_number();
        self.next(&asked, |call| match call {
            Call::Http(exchange)
                if exchange.method == method && matches_redacted(&exchange.url, url) =>
            {
                Some(exchange.answer.clone())
            }
            _ => None,
        })
        .map(|answer| (number, answer))
    }
}

/// Whether `text` is `recorded` with something (or nothing) in place of each [`REDACTED`].
fn matches_redacted(recorded: &str, text: &str) -> bool {
    let mut parts = recorded.split(REDACTED);
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.ends_with(last)
}

/// A live response body that copies what the guest reads into the record.
struct RecordingBody {
    inner: WasiBody,
    tape: Arc<Tape>,
    slot: usize,
}

impl Body for RecordingBody {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    self.tape.http_body(self.slot, Some(data), None);
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(error))) => {
                let failure = Failure::of(error);
                self.tape
                    .http_body(self.slot, None, Some(BodyEnd::Failed(failure.clone())));
                Poll::Ready(Some(Err(failure.into())))
            }
            Poll::Ready(None) => {
                self.tape
                    .http_body(self.slot, None, Some(BodyEnd::Complete));
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A response body played back from the record: the recorded bytes, then how it ended.
pub struct ReplayedBody {
    data: Option<Bytes>,
    end: Option<BodyEnd>,
    tape: Arc<Tape>,
    /// The number of the call that recorded this body, for reports.
    call: usize,
}

impl ReplayedBody {
    pub fn new(tape: Arc<Tape>, call: usize, body: HttpBody, end: BodyEnd) -> Self {
        ReplayedBody {
            data: Some(Bytes::from(body.0)).filter(|data| !data.is_empty()),
            end: Some(end),
            tape,
            call,
        }
    }
}

impl Body for ReplayedBody {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        if let Some(data) = self.data.take() {
            return Poll::Ready(Some(Ok(Frame::data(data))));
        }
        let call = self.call;
        Poll::Ready(match self.end.take() {
            None | Some(BodyEnd::Complete) => None,
            Some(BodyEnd::Failed(failure)) => Some(Err(failure.into())),
            Some(BodyEnd::Open) => {
                self.tape.diverge(format!(
                    "call {call}: the guest read on in a response body the recorded attempt did not read to its end"
                ));
                Some(Err(Error::HttpResponseIncomplete))
            }
            Some(BodyEnd::Truncated) => {
                self.tape.diverge(super::truncated_at(call));
                Some(Err(Error::HttpResponseIncomplete))
            }
        })
    }

    fn is_end_stream(&self) -> bool {
        self.data.is_none() && matches!(self.end, None | Some(BodyEnd::Complete))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_are_kept_as_text_or_hex_and_read_back() {
        for bytes in [b"{\"ok\":true}".to_vec(), vec![0xff, 0x00, 0x10]] {
            let json = serde_json::to_string(&HttpBody(bytes.clone())).unwrap();
            assert!(json.starts_with(if bytes[0] == b'{' {
                "{\"text\""
            } else {
                "{\"hex\""
            }));
            let back: HttpBody = serde_json::from_str(&json).unwrap();
            assert_eq!(back.0, bytes);
        }
    }

    #[test]
    fn io_errors_become_the_codes_a_guest_gets() {
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert_eq!(
            Failure::of(Error::Connect(refused)),
            Failure::ConnectionRefused
        );
        assert_eq!(
            Failure::of(Error::Tls(std::io::Error::other("bad cert"))),
            Failure::TlsProtocolError
        );
        let failure = Failure::of(Error::DnsError {
            rcode: Some("NXDOMAIN".into()),
            info_code: None,
        });
        assert!(matches!(
            Error::from(failure.clone()),
            Error::DnsError { .. }
        ));
        let json = serde_json::to_string(&failure).unwrap();
        assert_eq!(serde_json::from_str::<Failure>(&json).unwrap(), failure);
    }

    #[test]
    fn a_redacted_url_matches_any_value_in_its_place() {
        let recorded = "https://api.example/v1?token=[redacted]&page=2";
        assert!(matches_redacted(
            recorded,
            "https://api.example/v1?token=abc&page=2"
        ));
        assert!(matches_redacted(recorded, recorded));
        assert!(!matches_redacted(
            recorded,
            "https://api.example/v1?token=abc&page=3"
        ));
        assert!(!matches_redacted(
            "https://a/[redacted]/[redacted]",
            "https://b/x/y"
        ));
        assert!(matches_redacted(
            "https://a/[redacted]/[redacted]",
            "https://a/x/y"
        ));
        assert!(matches_redacted("https://a/b", "https://a/b"));
        assert!(!matches_redacted("https://a/b", "https://a/bc"));
    }

    #[test]
    fn secrets_and_credentials_never_enter_a_record() {
        let tape = Tape::recording(1 << 20, vec!["s3cr3t".into()]);
        let mut headers = http::HeaderMap::new();
        headers.insert("authorization", "Bearer abc".parse().unwrap());
        headers.insert("x-api-key", "key-s3cr3t-1".parse().unwrap());
        headers.insert("accept", "application/json".parse().unwrap());
        let slot = tape
            .http_request("GET", "https://api.example/v1?token=s3cr3t", &headers)
            .unwrap();
        assert_eq!(slot, 0);
        let (calls, _) = tape.calls();
        let Call::Http(exchange) = &calls[0] else {
            panic!("{calls:?}")
        };
        assert_eq!(exchange.url, "https://api.example/v1?token=[redacted]");
        let header = |name: &str| {
            exchange
                .headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(header("authorization"), Some(REDACTED));
        assert_eq!(header("x-api-key"), Some("key-[redacted]-1"));
        assert_eq!(header("accept"), Some("application/json"));
    }
}
