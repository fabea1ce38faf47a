//! What a valid new task is, as far as the row itself can tell: the host's own rules, from the
//! crate that defines them for every Spool crate (`spool-rules`), and the JSON check the host
//! applies to payloads. The host adds what only it knows (which task types have a plugin, a
//! `max_payload` other than the default).

pub use spool_rules::json::{MAX_JSON_DEPTH, storable_json};
pub use spool_rules::limits::DEFAULT_MAX_PAYLOAD;
pub use spool_rules::names::{
    MAX_IDEMPOTENCY_KEY, MAX_TASK_TYPE, RESERVED_KEY_PREFIX, is_reserved_key,
    is_valid_idempotency_key, is_valid_task_type,
};

/// Whether `text` is one JSON value (the host parses payloads the same way: `serde_json`).
pub fn check_json(text: &str) -> Result<(), serde_json::Error> {
    serde_json::from_str::<serde::de::IgnoredAny>(text).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_are_one_json_value() {
        assert!(check_json(r#"{"a": [1, 2.5, null, "x"]}"#).is_ok());
        assert!(check_json("17").is_ok());
        assert!(check_json("{a: 1}").is_err());
        assert!(check_json("{} {}").is_err());
        assert!(check_json("").is_err());
    }
}
