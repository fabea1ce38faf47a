//! Names a task carries: its type and its idempotency key.

/// Longest task type name, in bytes (the name is ASCII).
pub const MAX_TASK_TYPE: usize = 64;

/// Longest idempotency key, in characters (Unicode scalar values, as JSON Schema's
/// `maxLength` counts them): every backend stores and compares a key of this length exactly.
pub const MAX_IDEMPOTENCY_KEY: usize = 255;

/// Idempotency keys starting with this are the host's own (scheduled ticks, follow-up tasks):
/// no caller may choose one, so no caller can take such a key first.
pub const RESERVED_KEY_PREFIX: &str = "spool:";

/// Whether `name` is a task type name: 1 to 64 ASCII letters, digits, `_` or `-`. A task type
/// is also the file stem of its plugin (`report.wasm` handles type `report`), so the rule keeps
/// it a plain file name on every system.
pub fn is_valid_task_type(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_TASK_TYPE
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Whether `key` may be stored as an idempotency key: 1 to 255 characters, none of them a
/// control character. Whether a caller may choose it is [`is_reserved_key`]'s question.
pub fn is_valid_idempotency_key(key: &str) -> bool {
    !key.is_empty()
        && key.chars().count() <= MAX_IDEMPOTENCY_KEY
        && !key.chars().any(char::is_control)
}

/// Whether `key` is one of the host's own keys, which callers may not choose.
pub fn is_reserved_key(key: &str) -> bool {
    key.starts_with(RESERVED_KEY_PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_type_names_are_plain_file_stems() {
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
    fn idempotency_keys_count_characters_and_refuse_controls() {
        assert!(is_valid_idempotency_key("approval-1042"));
        assert!(is_valid_idempotency_key(&"k".repeat(255)));
        assert!(
            is_valid_idempotency_key(&"ключ".repeat(63)),
            "characters, not bytes"
        );
        assert!(!is_valid_idempotency_key(""));
        assert!(!is_valid_idempotency_key(&"k".repeat(256)));
        assert!(!is_valid_idempotency_key("line\nbreak"));
        assert!(!is_valid_idempotency_key("c1\u{85}"));
    }

    #[test]
    fn the_host_prefix_is_reserved() {
        assert!(is_reserved_key(
            "spool:schedule:config:nightly:2026-03-01T03:00:00.000Z"
        ));
        assert!(!is_reserved_key("spool-1"));
        assert!(!is_reserved_key("my:spool:key"));
    }
}
