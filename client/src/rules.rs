//! What a valid new task is, as far as the row itself can tell.
//!
//! These rules mirror the host's: `prepare` in `host/src/enqueue.rs` (what `POST /tasks` and
//! handlers' follow-up tasks accept), the task type name rule it calls in
//! `host/src/plugins/loader.rs`, and the field types of `NewTask` in `host/src/task.rs`
//! (priority `i32`, max_retry `u32`, which [`Task`](crate::Task) keeps). This crate does not
//! depend on the `spool` crate, so that an application that only enqueues does not compile the
//! host; change both sides together. The tests in `client/tests/enqueue/rules.rs` check that
//! they answer the same on examples.

/// Longest task type name, in bytes (the name is ASCII).
pub const MAX_TASK_TYPE: usize = 64;

/// Longest accepted idempotency key, in characters (the host's `MAX_IDEMPOTENCY_KEY`).
pub const MAX_IDEMPOTENCY_KEY: usize = 255;

/// The default payload limit, in bytes: the host's default `max_payload` (1 MiB). A host
/// configured with a larger `max_payload` runs larger payloads written by SQL too; raise this
/// crate's limit per task with [`Task::max_payload`](crate::Task::max_payload) to match.
pub const DEFAULT_MAX_PAYLOAD: usize = 1 << 20;

/// Whether `name` is a task type name: 1 to 64 ASCII letters, digits, `_` or `-` (the plugin
/// file name without `.wasm`: `report.wasm` handles task type `report`).
pub fn is_valid_task_type(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_TASK_TYPE
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Whether `key` is an acceptable idempotency key: 1 to 255 characters, no control characters.
pub fn is_valid_idempotency_key(key: &str) -> bool {
    !key.is_empty()
        && key.chars().count() <= MAX_IDEMPOTENCY_KEY
        && !key.chars().any(char::is_control)
}

/// Whether `text` is one JSON value (the host parses payloads the same way: `serde_json`).
pub fn check_json(text: &str) -> Result<(), serde_json::Error> {
    serde_json::from_str::<serde::de::IgnoredAny>(text).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_type_names() {
        for good in [
            "report",
            "send-mail",
            "cache_refresh",
            "A1",
            &"x".repeat(64),
        ] {
            assert!(is_valid_task_type(good), "{good}");
        }
        for bad in [
            "",
            "report.wasm",
            "a b",
            "../x",
            "rapport-é",
            &"x".repeat(65),
        ] {
            assert!(!is_valid_task_type(bad), "{bad}");
        }
    }

    #[test]
    fn idempotency_keys_and_json() {
        assert!(is_valid_idempotency_key("approval-1042"));
        assert!(is_valid_idempotency_key(&"k".repeat(255)));
        assert!(!is_valid_idempotency_key(""));
        assert!(!is_valid_idempotency_key(&"k".repeat(256)));
        assert!(
            is_valid_idempotency_key(&"ключ".repeat(60)),
            "characters, not bytes"
        );
        assert!(!is_valid_idempotency_key("a\u{0}b"));
        assert!(!is_valid_idempotency_key("line\nbreak"));
        assert!(check_json(r#"{"a": [1, 2.5, null, "x"]}"#).is_ok());
        assert!(check_json("17").is_ok());
        assert!(check_json("{a: 1}").is_err());
        assert!(check_json("{} {}").is_err());
        assert!(check_json("").is_err());
    }
}
