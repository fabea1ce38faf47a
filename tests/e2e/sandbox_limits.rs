//! Hostile handlers: a busy loop is stopped by fuel, a trap fails the task with its message,
//! and the host keeps serving other tasks throughout.

use serde_json::json;
use std::time::Duration;

use crate::util::Workspace;

const WAIT: Duration = Duration::from_secs(60);

#[test]
fn infinite_loop_is_stopped_by_fuel_while_other_tasks_complete() {
    let ws = Workspace::with_plugins(&["spin", "noop"]);
    ws.manifest("spin", "fuel = 200_000_000\n");
    let host = ws.start(&["--concurrency", "4"]);
    let spinners: Vec<i64> = (0..2)
        .map(|_| host.enqueue_with(json!({"task_type": "spin", "max_retry": 1}))["id"].as_i64().unwrap())
        .collect();
    let others: Vec<i64> = (0..20).map(|i| host.enqueue("noop", json!({"i": i}))["id"].as_i64().unwrap()).collect();
    for id in others {
        host.wait_for_status(id, "done", WAIT);
    }
    for id in spinners {
        let failed = host.wait_for_status(id, "failed", WAIT);
        let error = failed["last_error"].as_str().unwrap();
        assert!(error.contains("fuel exhausted"), "{error}");
        assert_eq!(failed["retry_count"], 2, "fuel exhaustion is retried like any failure");
    }
    let (status, health) = host.get("/health");
    assert_eq!(status, 200, "the host still serves: {health}");
}

#[test]
fn a_trap_fails_the_task_with_the_guests_message() {
    let ws = Workspace::with_plugins(&["trap", "flaky"]);
    let host = ws.start(&[]);
    let trapped = host.enqueue_with(json!({"task_type": "trap", "max_retry": 0}));
    let failed = host.wait_for_status(trapped["id"].as_i64().unwrap(), "failed", WAIT);
    let error = failed["last_error"].as_str().unwrap();
    assert!(error.contains("trap"), "{error}");
    let panicked = host.enqueue_with(json!({"task_type": "flaky", "payload": {"panic": "ledger is corrupt"}, "max_retry": 0}));
    let failed = host.wait_for_status(panicked["id"].as_i64().unwrap(), "failed", WAIT);
    assert!(failed["last_error"].as_str().unwrap().contains("trap"), "{failed:#}");
    let ok = host.enqueue("flaky", json!({}));
    host.wait_for_status(ok["id"].as_i64().unwrap(), "done", WAIT);
}

#[test]
fn no_state_leaks_between_tasks() {
    // Each attempt gets a fresh instance: the noop handler echoes its payload, and many
    // concurrent tasks each get exactly their own.
    let ws = Workspace::with_plugins(&["noop"]);
    let host = ws.start(&[]);
    let ids: Vec<(i64, i64)> = (0..50).map(|i| (i, host.enqueue("noop", json!({"n": i}))["id"].as_i64().unwrap())).collect();
    for (n, id) in ids {
        let done = host.wait_for_status(id, "done", WAIT);
        assert_eq!(done["result"], json!({"n": n}));
    }
}

#[test]
fn cpu_bound_handlers_do_not_starve_the_api() {
    // Every slot busy with a handler that only burns CPU; the API must still answer promptly.
    let ws = Workspace::with_plugins(&["spin"]);
    ws.manifest("spin", "fuel = 200_000_000_000\nmax_retry = 0\n");
    let host = ws.start(&["--concurrency", "4"]);
    let spinners: Vec<i64> = (0..4).map(|_| host.enqueue("spin", json!({}))["id"].as_i64().unwrap()).collect();
    for id in &spinners {
        host.wait_for_status(*id, "running", WAIT);
    }
    for _ in 0..20 {
        let asked = std::time::Instant::now();
        let (status, _) = host.get("/health");
        assert_eq!(status, 200);
        assert!(asked.elapsed() < Duration::from_secs(2), "the API took {:?} while handlers spun", asked.elapsed());
    }
    let (status, _) = host.post(&format!("/tasks/{}/cancel", spinners[0]), &json!({}));
    assert_eq!(status, 200, "changes are accepted too");
    assert!(spinners.iter().all(|id| host.task(*id)["status"] != "done"), "still spinning");
}
