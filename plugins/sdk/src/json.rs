//! JSON helpers for payloads and results.
//!
//! Payloads arrive as JSON text and results are stored as JSON text by convention; these
//! helpers convert between that text and typed values, mapping errors to the right
//! [`Failure`].

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::Failure;

pub use serde_json::{Value, json};

/// Parses the task's payload into `T`.
///
/// A payload that is not valid JSON, or does not have the shape of `T`, becomes
/// [`Failure::Fail`] with the message `payload is not valid: …`: the payload is the same on
/// every attempt, so retrying cannot help.
pub fn parse_payload<T: DeserializeOwned>(payload: &str) -> Result<T, Failure> {
    serde_json::from_str(payload).map_err(|e| Failure::Fail(format!("payload is not valid: {e}")))
}

/// Serializes `value` as the JSON text of the task's result.
///
/// Serialization fails only for values JSON cannot express (such as a map with non-string
/// keys); that is a bug in the handler, reported as [`Failure::Fail`].
pub fn to_result<T: Serialize + ?Sized>(value: &T) -> Result<String, Failure> {
    serde_json::to_string(value)
        .map_err(|e| Failure::Fail(format!("result could not be serialized as JSON: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize, PartialEq)]
    struct Payload {
        n: u32,
    }

    #[test]
    fn parses_a_valid_payload() {
        assert_eq!(
            parse_payload::<Payload>(r#"{"n": 3}"#).unwrap(),
            Payload { n: 3 }
        );
    }

    #[test]
    fn a_bad_payload_is_a_permanent_failure() {
        match parse_payload::<Payload>(r#"{"n": "three"}"#) {
            Err(Failure::Fail(message)) => assert!(message.starts_with("payload is not valid: ")),
            other => panic!("unexpected {other:?}"),
        }
        assert!(matches!(
            parse_payload::<Payload>("not json"),
            Err(Failure::Fail(_))
        ));
    }

    #[test]
    fn serializes_a_result() {
        assert_eq!(to_result(&json!({ "ok": true })).unwrap(), r#"{"ok":true}"#);
    }
}
