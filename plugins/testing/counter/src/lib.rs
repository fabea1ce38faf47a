//! `counter` (test handler): a counter in the task type's key-value store.
//!
//! Used to test the host's key-value store (`spool_sdk::kv`).
//!
//! # Payload and result
//!
//! A JSON object with exactly one of these fields:
//!
//! | payload             | what it does                                               | result              |
//! | ------------------- | ---------------------------------------------------------- | ------------------- |
//! | `{"key": "hits"}`   | reads `hits` (0 when unset), adds 1 and stores it (decimal) | `{"value": 1}`      |
//! | `{"delete": "hits"}` | removes `hits`                                            | `{"deleted": true}` (false when it did not exist) |
//!
//! A stored value that is not a whole number fails permanently, as does any other payload.
//! The read and the write are two host calls: tasks running at the same time can lose
//! increments.

use serde::Deserialize;
use spool_sdk::{Failure, Handler, TaskInfo, json, kv, log};

/// The `counter` handler.
struct Counter;

/// What the payload asks for.
#[derive(Debug, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case")]
enum Request {
    /// Increment the counter under this key.
    Key(String),
    /// Delete this key.
    Delete(String),
}

impl Handler for Counter {
    fn handle(_task: TaskInfo, payload: String) -> Result<String, Failure> {
        match json::parse_payload(&payload)? {
            Request::Key(key) => {
                let value = next(&key, kv::get(&key).as_deref())?;
                kv::set(&key, value.to_string());
                log::info(format!("{key} = {value}"));
                json::to_result(&json::json!({ "value": value }))
            }
            Request::Delete(key) => {
                let deleted = kv::delete(&key);
                log::info(format!("deleted {key}: {deleted}"));
                json::to_result(&json::json!({ "deleted": deleted }))
            }
        }
    }
}

spool_sdk::export_handler!(Counter);

/// The counter's next value, from its stored text (`None` when unset).
fn next(key: &str, stored: Option<&str>) -> Result<u64, Failure> {
    let current = match stored {
        None => 0,
        Some(text) => text.parse::<u64>().map_err(|e| {
            Failure::Fail(format!("kv key {key} holds {text:?}, not a counter: {e}"))
        })?,
    };
    Ok(current.saturating_add(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_from_zero() {
        assert_eq!(next("hits", None).unwrap(), 1);
        assert_eq!(next("hits", Some("41")).unwrap(), 42);
        assert!(matches!(next("hits", Some("many")), Err(Failure::Fail(_))));
    }

    #[test]
    fn parses_each_request() {
        assert_eq!(
            json::parse_payload::<Request>(r#"{"key": "hits"}"#).unwrap(),
            Request::Key("hits".into())
        );
        assert_eq!(
            json::parse_payload::<Request>(r#"{"delete": "hits"}"#).unwrap(),
            Request::Delete("hits".into())
        );
        assert!(json::parse_payload::<Request>(r#"{"hits": 1}"#).is_err());
    }
}
