//! A host killed with SIGKILL mid-task loses nothing: after a restart the rescuer takes the
//! task back and it completes.

use serde_json::json;
use std::time::Duration;

use crate::util::Workspace;

const WAIT: Duration = Duration::from_secs(60);

#[test]
fn task_of_a_killed_host_completes_after_restart() {
    let ws = Workspace::with_plugins(&["sleepy"]);
    let flags = ["--lease", "1s", "--rescue-interval", "200ms"];
    let mut host = ws.start(&flags);
    let task = host.enqueue("sleepy", json!({"ms": 3000}));
    let id = task["id"].as_i64().unwrap();
    let running = host.wait_for_status(id, "running", WAIT);
    assert!(running["lease_owner"].is_string());
    host.kill();

    let host = ws.start(&flags);
    let done = host.wait_for_status(id, "done", WAIT);
    assert_eq!(done["result"], json!({"slept_ms": 3000}));
    assert_eq!(
        done["retry_count"], 1,
        "the killed attempt counts: {done:#}"
    );
    assert!(
        done["last_error"].is_null(),
        "cleared by the success: {done:#}"
    );
    assert_eq!(done["history"][0]["outcome"], "rescued", "{done:#}");
    assert!(
        done["history"][0]["error"]
            .as_str()
            .unwrap()
            .contains("lease expired"),
        "{done:#}"
    );
    assert_eq!(done["history"][1]["outcome"], "done", "{done:#}");
    assert_eq!(host.all_tasks().len(), 1);
}

#[test]
fn queued_tasks_survive_a_kill() {
    let ws = Workspace::with_plugins(&["noop"]);
    let mut host = ws.start(&[]);
    let ids: Vec<i64> = (0..10)
        .map(|i| {
            host.enqueue_with(json!({"task_type": "noop", "payload": {"i": i}, "delay": "2s"}))
                    ["id"]
                    .as_i64()
                    .unwrap()
        })
        .collect();
    host.kill();
    let host = ws.start(&[]);
    for id in ids {
        host.wait_for_status(id, "done", WAIT);
    }
}
