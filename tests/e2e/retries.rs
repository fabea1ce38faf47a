//! Retries with exponential backoff, dead letters, permanent failures, snoozes.

use serde_json::json;
use std::time::Duration;

use crate::util::Workspace;

const WAIT: Duration = Duration::from_secs(30);

#[test]
fn transient_failures_retry_then_succeed() {
    let ws = Workspace::with_plugins(&["flaky"]);
    let host = ws.start(&["--backoff-base", "100ms"]);
    let task = host.enqueue("flaky", json!({"fail_until_attempt": 2}));
    let done = host.wait_for_status(task["id"].as_i64().unwrap(), "done", WAIT);
    assert_eq!(done["attempts"], 3, "{done:#}");
    assert_eq!(done["retry_count"], 2);
    assert!(
        done["last_error"].is_null(),
        "cleared by the success: {done:#}"
    );
    let history = done["history"].as_array().unwrap();
    assert!(
        history[1]["error"].as_str().unwrap().contains("attempt 2"),
        "the history keeps every failure: {done:#}"
    );
}

#[test]
fn retries_run_out_into_a_dead_letter_with_the_last_error() {
    let ws = Workspace::with_plugins(&["flaky"]);
    let host = ws.start(&["--backoff-base", "200ms"]);
    let task = host.enqueue_with(
        json!({"task_type": "flaky", "payload": {"fail_until_attempt": 100}, "max_retry": 2}),
    );
    let started = std::time::Instant::now();
    let failed = host.wait_for_status(task["id"].as_i64().unwrap(), "failed", WAIT);
    let error = failed["last_error"].as_str().unwrap();
    assert!(error.contains("attempt 3"), "{error}");
    assert!(error.contains("gave up after 3 attempts"), "{error}");
    assert_eq!(
        (&failed["attempts"], &failed["retry_count"]),
        (&json!(3), &json!(2)),
        "three attempts, two retries: {failed:#}"
    );
    // Backoff 200 ms then 400 ms: the dead letter cannot come sooner than 600 ms.
    assert!(
        started.elapsed() >= Duration::from_millis(600),
        "retries did not back off"
    );
}

#[test]
fn manifest_sets_the_types_retry_policy() {
    let ws = Workspace::with_plugins(&["flaky"]);
    ws.manifest("flaky", "max_retry = 1\nbackoff_base = \"50ms\"\n");
    let host = ws.start(&[]);
    let task = host.enqueue("flaky", json!({"fail_until_attempt": 100}));
    assert_eq!(
        task["max_retry"], 1,
        "the manifest's max_retry is the default for the type"
    );
    let failed = host.wait_for_status(task["id"].as_i64().unwrap(), "failed", WAIT);
    assert_eq!(failed["attempts"], 2);
    assert_eq!(failed["retry_count"], 1);
}

#[test]
fn fail_skips_retries() {
    let ws = Workspace::with_plugins(&["flaky"]);
    let host = ws.start(&["--backoff-base", "50ms"]);
    let task = host.enqueue_with(
        json!({"task_type": "flaky", "payload": {"fail": "address rejected"}, "max_retry": 5}),
    );
    let failed = host.wait_for_status(task["id"].as_i64().unwrap(), "failed", WAIT);
    assert_eq!(failed["attempts"], 1);
    assert!(
        failed["last_error"]
            .as_str()
            .unwrap()
            .contains("address rejected")
    );
}

#[test]
fn snooze_reschedules_without_using_a_retry() {
    let ws = Workspace::with_plugins(&["flaky"]);
    let host = ws.start(&[]);
    let task = host.enqueue_with(
        json!({"task_type": "flaky", "payload": {"snooze_seconds": 30}, "max_retry": 0}),
    );
    let id = task["id"].as_i64().unwrap();
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let t = host.task(id);
        if t["status"] == "pending" && t["attempted_at"].is_string() {
            assert_eq!(t["retry_count"], 0, "a snooze is not a failure: {t:#}");
            let next =
                chrono::DateTime::parse_from_rfc3339(t["next_run_at"].as_str().unwrap()).unwrap();
            let attempted =
                chrono::DateTime::parse_from_rfc3339(t["attempted_at"].as_str().unwrap()).unwrap();
            assert!(next - attempted >= chrono::Duration::seconds(29), "{t:#}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "never snoozed: {t:#}");
        std::thread::sleep(Duration::from_millis(25));
    }
}
