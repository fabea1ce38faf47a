//! Host services from a real guest: the effect ledger (also across a SIGKILL), the per-type
//! key-value store, follow-up tasks with derived idempotency keys, and concurrency and rate
//! limits per type.

use serde_json::json;
use std::time::Duration;

use crate::util::{TestServer, Workspace, eventually};

const WAIT: Duration = Duration::from_secs(60);

#[test]
fn the_effect_ledger_prevents_a_second_send_after_a_retry() {
    let sink = TestServer::start("queued");
    let ws = Workspace::with_plugins(&["mailer"]);
    ws.manifest(
        "mailer",
        &format!(
            "backoff_base = \"100ms\"\n[http]\nallow = [\"127.0.0.1:{}\"]\n",
            sink.port
        ),
    );
    let host = ws.start(&[]);
    let task = host.enqueue("mailer", json!({"to": "ana@example.com", "sink": format!("http://127.0.0.1:{}/send", sink.port), "fail_after_send_on_attempt": 1}));
    let done = host.wait_for_status(task["id"].as_i64().unwrap(), "done", WAIT);
    assert_eq!(done["attempts"], 2, "{done:#}");
    assert_eq!(
        done["result"]["sent"], false,
        "the retry saw the recorded effect and did not send"
    );
    assert_eq!(sink.count(), 1, "exactly one mail");
}

#[test]
fn the_effect_ledger_survives_a_killed_host() {
    let sink = TestServer::start("queued");
    let ws = Workspace::with_plugins(&["mailer"]);
    ws.manifest(
        "mailer",
        &format!("[http]\nallow = [\"127.0.0.1:{}\"]\n", sink.port),
    );
    let flags = ["--lease", "1s", "--rescue-interval", "200ms"];
    let mut host = ws.start(&flags);
    let task = host.enqueue("mailer", json!({"to": "ana@example.com", "sink": format!("http://127.0.0.1:{}/send", sink.port), "sleep_after_send_ms": 5000}));
    let id = task["id"].as_i64().unwrap();
    eventually(WAIT, "the mail to be sent", || {
        (sink.count() == 1).then_some(())
    });
    std::thread::sleep(Duration::from_millis(300)); // the record-effect call returns right after
    host.kill();
    let host = ws.start(&flags);
    let done = host.wait_for_status(id, "done", WAIT);
    assert_eq!(
        done["retry_count"], 1,
        "the killed attempt counted: {done:#}"
    );
    assert_eq!(done["result"]["sent"], false);
    assert_eq!(sink.count(), 1, "no second mail after the crash");
}

#[test]
fn key_value_store_is_per_task_type() {
    let ws = Workspace::with_plugins(&["counter"]);
    ws.add_plugin("counter", "other_counter");
    let host = ws.start(&[]);
    let mut values = Vec::new();
    for _ in 0..3 {
        let task = host.enqueue("counter", json!({"key": "hits"}));
        values.push(
            host.wait_for_status(task["id"].as_i64().unwrap(), "done", WAIT)["result"]["value"]
                .as_i64()
                .unwrap(),
        );
    }
    assert_eq!(values, [1, 2, 3]);
    let other = host.enqueue("other_counter", json!({"key": "hits"}));
    let other = host.wait_for_status(other["id"].as_i64().unwrap(), "done", WAIT);
    assert_eq!(
        other["result"]["value"], 1,
        "another type does not see the first one's keys"
    );
    let deleted = host.enqueue("counter", json!({"delete": "hits"}));
    assert_eq!(
        host.wait_for_status(deleted["id"].as_i64().unwrap(), "done", WAIT)["result"]["deleted"],
        true
    );
}

#[test]
fn follow_ups_of_a_retried_parent_are_enqueued_once() {
    let ws = Workspace::with_plugins(&["fanout", "noop"]);
    ws.manifest(
        "fanout",
        "backoff_base = \"100ms\"\n[enqueue]\nallow = [\"noop\", \"does-not-exist\"]\n",
    );
    let host = ws.start(&[]);
    let parent = host.enqueue(
        "fanout",
        json!({"children": 3, "task_type": "noop", "fail_on_attempt": 1}),
    );
    let done = host.wait_for_status(parent["id"].as_i64().unwrap(), "done", WAIT);
    assert_eq!(done["attempts"], 2, "{done:#}");
    let children: Vec<i64> = done["result"]["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_i64().unwrap())
        .collect();
    assert_eq!(children.len(), 3);
    let noops: Vec<_> = host
        .all_tasks()
        .into_iter()
        .filter(|t| t["task_type"] == "noop")
        .collect();
    assert_eq!(noops.len(), 3, "the retry did not fan out a second time");
    for id in children {
        let child = host.wait_for_status(id, "done", WAIT);
        assert_eq!(child["payload"]["parent"], parent["id"]);
    }
    let unknown = host.enqueue("fanout", json!({"enqueue_unknown": true}));
    let unknown = host.wait_for_status(unknown["id"].as_i64().unwrap(), "done", WAIT);
    assert!(
        unknown["result"]["error"]
            .as_str()
            .unwrap()
            .contains("no plugin handles task type `does-not-exist`"),
        "{unknown:#}"
    );
}

fn time_of(task: &serde_json::Value, field: &str) -> chrono::DateTime<chrono::FixedOffset> {
    chrono::DateTime::parse_from_rfc3339(task[field].as_str().unwrap()).unwrap()
}

#[test]
fn per_type_concurrency_and_rate_limits_hold() {
    let ws = Workspace::with_plugins(&["sleepy", "noop"]);
    ws.manifest("sleepy", "concurrency = 1\n");
    ws.manifest("noop", "rate = 2.0\n");
    let host = ws.start(&["--concurrency", "8"]);
    let sleepers: Vec<i64> = (0..3)
        .map(|_| {
            host.enqueue("sleepy", json!({"ms": 300}))["id"]
                .as_i64()
                .unwrap()
        })
        .collect();
    let noops: Vec<i64> = (0..6)
        .map(|_| host.enqueue("noop", json!({}))["id"].as_i64().unwrap())
        .collect();
    let mut spans: Vec<_> = sleepers
        .iter()
        .map(|id| {
            let t = host.wait_for_status(*id, "done", WAIT);
            (time_of(&t, "attempted_at"), time_of(&t, "finished_at"))
        })
        .collect();
    spans.sort();
    assert!(
        spans.windows(2).all(|w| w[1].0 >= w[0].1),
        "at most one sleepy at a time: {spans:?}"
    );
    let mut starts: Vec<_> = noops
        .iter()
        .map(|id| time_of(&host.wait_for_status(*id, "done", WAIT), "attempted_at"))
        .collect();
    starts.sort();
    let spread = starts[5] - starts[0];
    // A burst of 2, then 2 per second: the sixth start comes at least ~2 s after the first.
    assert!(
        spread >= chrono::Duration::milliseconds(1800),
        "6 starts at rate 2/s took only {spread:?}"
    );
}
