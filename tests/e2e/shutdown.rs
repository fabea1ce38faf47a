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

#[test]
fn tasks_claimed_ahead_go_back_to_pending_at_shutdown() {
    // A backlog of short tasks: the host claims ahead of its slots (worker/run/ready.rs), so at any
    // moment of the drain some tasks are leased to it without running yet.
    let ws = Workspace::with_plugins(&["noop"]);
    let mut host = ws.start(&["--concurrency", "2"]);
    let total = 20_000;
    for _ in 0..total / 1000 {
        let tasks: Vec<_> = (0..1000)
            .map(|n| json!({"task_type": "noop", "payload": {"n": n}}))
            .collect();
        let (status, body) = host.post("/tasks/batch", &json!({"tasks": tasks}));
        assert_eq!(status, 201, "{body}");
    }
    // The listing reads the table now (`/health`'s counts may be a second old).
    host.eventually("part of the backlog done", || {
        let (_, done) = host.get("/tasks?status=done&limit=1");
        (done["tasks"]
            .as_array()
            .is_some_and(|tasks| !tasks.is_empty()))
        .then_some(())
    });
    host.signal("TERM");
    assert!(host.wait_exit(WAIT), "clean exit:\n{}", host.log());
    std::fs::remove_file(ws.plugin_dir().join("noop.wasm")).unwrap();
    let reader = ws.start(&[]);
    let (_, health) = reader.get("/health");
    let counts = &health["counts"];
    let (done, pending) = (
        counts["done"].as_u64().unwrap(),
        counts["pending"].as_u64().unwrap(),
    );
    assert!(
        pending > 0,
        "the drain should still have been under way: {health:#}"
    );
    assert_eq!(
        counts["running"], 0,
        "nothing stays leased to a stopped host: {health:#}"
    );
    assert_eq!(done + pending, total, "{health:#}");
}

/// A host on the same database with the sleepy plugin renamed away, so it serves reads only.
fn ws_reader(ws: &Workspace) -> crate::util::Host {
    std::fs::remove_file(ws.plugin_dir().join("sleepy.wasm")).unwrap();
    ws.start(&[])
}
