//! Graceful shutdown: running tasks finish within the grace period; what cannot finish goes
//! back to pending uncounted; a second signal stops at once. Nothing is lost either way.

use serde_json::json;
use std::time::Duration;

use crate::util::Workspace;

const WAIT: Duration = Duration::from_secs(60);

#[test]
fn sigterm_lets_running_tasks_finish() {
    let ws = Workspace::with_plugins(&["sleepy"]);
    let mut host = ws.start(&["--shutdown-grace", "30s"]);
    let task = host.enqueue("sleepy", json!({"ms": 1500}));
    let id = task["id"].as_i64().unwrap();
    host.wait_for_status(id, "running", WAIT);
    host.signal("TERM");
    assert!(host.wait_exit(WAIT), "clean exit:\n{}", host.log());
    let host = ws.start(&[]);
    let done = host.task(id);
    assert_eq!(
        done["status"], "done",
        "finished during the grace period: {done:#}"
    );
    assert_eq!(done["retry_count"], 0);
}

#[test]
fn tasks_past_the_grace_period_return_to_pending_uncounted() {
    let ws = Workspace::with_plugins(&["sleepy"]);
    let mut host = ws.start(&["--shutdown-grace", "300ms"]);
    let task = host.enqueue("sleepy", json!({"ms": 20000}));
    let id = task["id"].as_i64().unwrap();
    host.wait_for_status(id, "running", WAIT);
    host.signal("TERM");
    assert!(host.wait_exit(WAIT), "clean exit:\n{}", host.log());
    // Read the row through a host that cannot run it, so it stays as the first host left it.
    let reader = ws_reader(&ws);
    let left = reader.task(id);
    assert_eq!(left["status"], "pending", "{left:#}");
    assert_eq!(left["retry_count"], 0, "a released attempt is not counted");
    assert!(left["lease_owner"].is_null());
}

#[test]
fn second_signal_stops_at_once_and_loses_nothing() {
    let ws = Workspace::with_plugins(&["sleepy"]);
    let mut host = ws.start(&["--shutdown-grace", "60s"]);
    let task = host.enqueue("sleepy", json!({"ms": 30000}));
    let id = task["id"].as_i64().unwrap();
    host.wait_for_status(id, "running", WAIT);
    host.signal("TERM");
    std::thread::sleep(Duration::from_millis(300));
    host.signal("TERM");
    let started = std::time::Instant::now();
    assert!(
        host.wait_exit(Duration::from_secs(20)),
        "clean exit:\n{}",
        host.log()
    );
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "the second signal should not wait for the grace period"
    );
    let reader = ws_reader(&ws);
    assert_eq!(reader.task(id)["status"], "pending");
}

/// A host on the same database with the sleepy plugin renamed away, so it serves reads only.
fn ws_reader(ws: &Workspace) -> crate::util::Host {
    std::fs::remove_file(ws.plugin_dir().join("sleepy.wasm")).unwrap();
    ws.start(&[])
}
