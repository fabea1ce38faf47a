//! The client's checks (`client/src/rules.rs`) mirror the host's; these examples must get the
//! same answer from both.

use spool_client::rules;

#[test]
fn task_type_names_agree_with_the_host() {
    let examples = [
        "report",
        "send-mail",
        "cache_refresh",
        "A1",
        "-",
        "_",
        "x",
        &"x".repeat(64),
        &"x".repeat(65),
        "",
        "report.wasm",
        "a b",
        "../x",
        "a/b",
        "rapport-é",
        "tab\t",
        "ünï",
        "emoji-🙂",
        "semi;colon",
    ];
    for name in examples {
        assert_eq!(
            rules::is_valid_task_type(name),
            spool::plugins::loader::is_valid_task_type(name),
            "task type {name:?}"
        );
    }
}

#[test]
fn limits_agree_with_the_host() {
    assert_eq!(
        rules::MAX_IDEMPOTENCY_KEY,
        spool::enqueue::MAX_IDEMPOTENCY_KEY
    );
    assert_eq!(
        rules::DEFAULT_MAX_PAYLOAD,
        spool::config::DEFAULT_MAX_PAYLOAD
    );
}
