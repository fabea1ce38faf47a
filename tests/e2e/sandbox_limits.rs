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
        .map(|_| {
            host.enqueue_with(json!({"task_type": "spin", "max_retry": 1}))["id"]
                .as_i64()
                .unwrap()
        })
        .collect();
    let others: Vec<i64> = (0..20)
        .map(|i| {
            host.enqueue("noop", json!({"i": i}))["id"]
                .as_i64()
                .unwrap()
        })
        .collect();
    for id in others {
        host.wait_for_status(id, "done", WAIT);
    }
    for id in spinners {
        let failed = host.wait_for_status(id, "failed", WAIT);
        let error = failed["last_error"].as_str().unwrap();
        assert!(error.contains("fuel exhausted"), "{error}");
        assert_eq!(
            (&failed["attempts"], &failed["retry_count"]),
            (&json!(2), &json!(1)),
            "fuel exhaustion is retried like any failure"
        );
        let outcomes: Vec<&str> = failed["history"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["outcome"].as_str().unwrap())
            .collect();
        assert_eq!(outcomes, ["timed_out", "timed_out"], "{failed:#}");
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
    assert!(
        error.contains("boom: handler panicked on purpose"),
        "the guest's panic message: {error}"
    );
    let panicked = host.enqueue_with(
        json!({"task_type": "flaky", "payload": {"panic": "ledger is corrupt"}, "max_retry": 0}),
    );
    let failed = host.wait_for_status(panicked["id"].as_i64().unwrap(), "failed", WAIT);
    assert!(
        failed["last_error"].as_str().unwrap().contains("trap"),
        "{failed:#}"
    );
    assert!(
        failed["last_error"]
            .as_str()
            .unwrap()
            .contains("ledger is corrupt"),
        "{failed:#}"
    );
    let ok = host.enqueue("flaky", json!({}));
    host.wait_for_status(ok["id"].as_i64().unwrap(), "done", WAIT);
}

#[test]
fn no_state_leaks_between_tasks() {
    // Each attempt gets a fresh instance: the noop handler echoes its payload, and many
    // concurrent tasks each get exactly their own.
    let ws = Workspace::with_plugins(&["noop"]);
    let host = ws.start(&[]);
    let ids: Vec<(i64, i64)> = (0..50)
        .map(|i| {
            (
                i,
                host.enqueue("noop", json!({"n": i}))["id"]
                    .as_i64()
                    .unwrap(),
            )
        })
        .collect();
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
    let spinners: Vec<i64> = (0..4)
        .map(|_| host.enqueue("spin", json!({}))["id"].as_i64().unwrap())
        .collect();
    for id in &spinners {
        host.wait_for_status(*id, "running", WAIT);
    }
    for _ in 0..20 {
        let asked = std::time::Instant::now();
        let (status, _) = host.get("/health");
        assert_eq!(status, 200);
        assert!(
            asked.elapsed() < Duration::from_secs(2),
            "the API took {:?} while handlers spun",
            asked.elapsed()
        );
    }
    let (status, _) = host.post(&format!("/tasks/{}/cancel", spinners[0]), &json!({}));
    assert_eq!(status, 200, "changes are accepted too");
    assert!(
        spinners.iter().all(|id| host.task(*id)["status"] != "done"),
        "still spinning"
    );
}

#[test]
fn memory_hog_is_stopped_and_the_host_stays_bounded() {
    let ws = Workspace::with_plugins(&["memhog", "noop"]);
    ws.manifest("memhog", "memory = \"32MiB\"\nmax_retry = 0\n");
    let host = ws.start(&[]);
    let hogs: Vec<i64> = (0..3)
        .map(|_| host.enqueue("memhog", json!({}))["id"].as_i64().unwrap())
        .collect();
    for id in hogs {
        let failed = host.wait_for_status(id, "failed", WAIT);
        let error = failed["last_error"].as_str().unwrap();
        assert!(
            error.contains("memory limit") && error.contains(&(32u64 << 20).to_string()),
            "{error}"
        );
    }
    let rss_mib = crate::util::rss_kib(host.child.as_ref().unwrap().id()) / 1024;
    assert!(
        rss_mib < 400,
        "host resident memory {rss_mib} MiB after three hogs"
    );
    let ok = host.enqueue("noop", json!({}));
    host.wait_for_status(ok["id"].as_i64().unwrap(), "done", WAIT);
}

#[test]
fn deep_recursion_is_a_stack_overflow_failure() {
    let ws = Workspace::with_plugins(&["deeprec"]);
    let host = ws.start(&[]);
    let task = host.enqueue_with(json!({"task_type": "deeprec", "max_retry": 0}));
    let failed = host.wait_for_status(task["id"].as_i64().unwrap(), "failed", WAIT);
    assert!(
        failed["last_error"]
            .as_str()
            .unwrap()
            .contains("stack overflow"),
        "{failed:#}"
    );
}

#[test]
fn wall_clock_limit_stops_a_handler_stuck_in_a_host_call_and_a_busy_one() {
    let ws = Workspace::with_plugins(&["stuck", "spin"]);
    ws.manifest("stuck", "timeout = \"1s\"\nmax_retry = 0\n");
    ws.manifest(
        "spin",
        "timeout = \"1s\"\nfuel = 1_000_000_000_000\nmax_retry = 0\n",
    );
    let host = ws.start(&[]);
    for task_type in ["stuck", "spin"] {
        let task = host.enqueue(task_type, json!({}));
        let failed = host.wait_for_status(task["id"].as_i64().unwrap(), "failed", WAIT);
        let error = failed["last_error"].as_str().unwrap();
        assert!(
            error.contains("timed out") && error.contains("1s"),
            "{task_type}: {error}"
        );
    }
}

#[test]
fn output_is_captured_into_a_bounded_task_log() {
    let ws = Workspace::with_plugins(&["chatty", "report"]);
    let host = ws.start(&[]);
    let small = host.enqueue("chatty", json!({"bytes": 300}));
    let done = host.wait_for_status(small["id"].as_i64().unwrap(), "done", WAIT);
    let log = done["log"].as_str().unwrap();
    assert!(log.contains(&"x".repeat(90)), "stdout is in the log: {log}");
    let flood = host.enqueue("chatty", json!({"bytes": 20_000_000}));
    let done = host.wait_for_status(flood["id"].as_i64().unwrap(), "done", WAIT);
    assert_eq!(done["result"]["printed"], 20_000_000);
    let log = done["log"].as_str().unwrap();
    assert!(log.len() < 70_000, "log is bounded: {} bytes", log.len());
    assert!(
        log.contains("bytes of output were dropped"),
        "the log says it was cut"
    );
    let report = host.enqueue(
        "report",
        json!({"rows": [{"k": "a", "v": 1}], "group_by": "k", "sum": "v"}),
    );
    let done = host.wait_for_status(report["id"].as_i64().unwrap(), "done", WAIT);
    assert!(
        done["log"].as_str().unwrap().contains("[info]"),
        "log() calls are in the task log: {done:#}"
    );
}

#[test]
fn cancelling_a_running_task_interrupts_it() {
    let ws = Workspace::with_plugins(&["sleepy", "noop"]);
    let host = ws.start(&["--concurrency", "1"]);
    let long = host.enqueue("sleepy", json!({"ms": 60000}));
    let id = long["id"].as_i64().unwrap();
    host.wait_for_status(id, "running", WAIT);
    let queued = host.enqueue("noop", json!({}));
    let (status, body) = host.post(&format!("/tasks/{id}/cancel"), &json!({}));
    assert_eq!(status, 200, "{body}");
    // The only slot frees at once: the next task runs long before the sleeper would have ended.
    host.wait_for_status(
        queued["id"].as_i64().unwrap(),
        "done",
        Duration::from_secs(20),
    );
    assert_eq!(host.task(id)["status"], "cancelled");
    assert!(host.log().contains("interrupted"), "{}", host.log());
}
