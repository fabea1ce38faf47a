//! Dead letters and queue control, end to end: bulk retry of exactly the selected dead letters
//! once their cause is fixed (the dry run's counts match), bulk discard, and pausing a task type
//! (its tasks wait while another type keeps flowing, then run on resume), on one host and
//! across two hosts sharing a PostgreSQL or MariaDB database. The CLI commands are driven too.

use serde_json::{Value, json};
use std::process::Command;
use std::time::Duration;

use crate::servers::{self, Backend};
use crate::util::{Host, Workspace, artifact, deploy, eventually};

const WAIT: Duration = Duration::from_secs(30);

/// Runs the `spool` CLI against `host`; returns success and stdout.
fn spool(host: &Host, args: &[&str]) -> (bool, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_spool"))
        .args(args)
        .args(["--url", &host.url])
        .env_remove("SPOOL_API_TOKEN")
        .env_remove("SPOOL_READ_TOKEN")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    let stderr = String::from_utf8_lossy(&output.stderr);
    (output.status.success(), format!("{stdout}{stderr}"))
}

fn ids(tasks: &[Value]) -> Vec<i64> {
    let mut ids: Vec<i64> = tasks.iter().map(|t| t["id"].as_i64().unwrap()).collect();
    ids.sort();
    ids
}

fn listed(host: &Host, query: &str) -> Vec<i64> {
    let (status, page) = host.get(&format!("/tasks?limit=1000&{query}"));
    assert_eq!(status, 200, "{page}");
    ids(page["tasks"].as_array().unwrap())
}

fn type_view(host: &Host, task_type: &str) -> Value {
    let (status, view) = host.get("/types");
    assert_eq!(status, 200, "{view}");
    view["types"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["task_type"] == task_type)
        .cloned()
        .unwrap_or(Value::Null)
}

#[test]
fn selected_dead_letters_are_retried_in_bulk_once_fixed_and_the_rest_discarded() {
    let ws = Workspace::with_plugins(&["noop"]);
    ws.add_plugin("flaky", "mail");
    let host = ws.start(&[]);
    let enqueue = |payload: Value| {
        host.enqueue_with(json!({"task_type": "mail", "payload": payload, "max_retry": 0}))
    };
    let outage: Vec<Value> = (0..3)
        .map(|_| enqueue(json!({"fail": "mail service down (503)"})))
        .collect();
    let broken: Vec<Value> = (0..2)
        .map(|_| enqueue(json!({"fail": "template missing"})))
        .collect();
    let fine = host.enqueue("noop", json!({"n": 1}));
    for task in outage.iter().chain(&broken).chain([&fine]) {
        host.wait_final(task["id"].as_i64().unwrap());
    }

    // The dead letters of the outage, found by their error text.
    assert_eq!(
        listed(&host, "status=failed&error_contains=service%20down"),
        ids(&outage)
    );
    assert_eq!(
        listed(&host, "type=mail&status=failed").len(),
        5,
        "every dead letter"
    );

    // A filter without a condition would select everything: refused unless `all` says so.
    let (status, body) = host.post("/tasks/retry", &json!({}));
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "selects_everything");
    let (status, body) = host.post("/tasks/retry", &json!({"all": true, "dry_run": true}));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["matched"], 6);
    assert_eq!(body["eligible"], 5);

    let filter = json!({"task_type": "mail", "status": "failed", "error_contains": "service down"});
    let mut dry = filter.clone();
    dry["dry_run"] = json!(true);
    let (status, counted) = host.post("/tasks/retry", &dry);
    assert_eq!(status, 200, "{counted}");
    assert_eq!(
        (
            &counted["matched"],
            &counted["eligible"],
            &counted["changed"]
        ),
        (&json!(3), &json!(3), &json!(0))
    );
    assert_eq!(listed(&host, "type=mail&status=failed").len(), 5);
    // The CLI's dry run says the same.
    let (ok, out) = spool(
        &host,
        &[
            "retry",
            "--type",
            "mail",
            "--status",
            "failed",
            "--error",
            "service down",
            "--since",
            "1h",
            "--dry-run",
        ],
    );
    assert!(ok, "{out}");
    assert!(out.contains("would change 3 of 3 selected tasks"), "{out}");

    // The cause is fixed (a mail handler that works is deployed); retry exactly those.
    let before = type_view(&host, "mail")["version"].clone();
    deploy(&artifact("noop"), &ws.plugin_dir().join("mail.wasm"));
    host.eventually("the fixed mail handler", || {
        (type_view(&host, "mail")["version"] != before).then_some(())
    });
    let (status, retried) = host.post("/tasks/retry", &filter);
    assert_eq!(status, 200, "{retried}");
    assert_eq!(retried["changed"], counted["eligible"]);
    for task in &outage {
        let done = host.wait_for_status(task["id"].as_i64().unwrap(), "done", WAIT);
        assert_eq!(done["retry_count"], 0, "{done}");
    }
    assert_eq!(
        listed(&host, "type=mail&status=failed"),
        ids(&broken),
        "only the selected dead letters were retried"
    );

    // The rest are discarded: cancelled, kept with their error.
    let (ok, out) = spool(&host, &["discard", "--type", "mail", "--status", "failed"]);
    assert!(ok, "{out}");
    assert!(out.contains("2 of 2 selected tasks changed"), "{out}");
    for task in &broken {
        let task = host.task(task["id"].as_i64().unwrap());
        assert_eq!(task["status"], "cancelled");
        let error = task["last_error"].as_str().unwrap();
        assert!(
            error.starts_with("discarded by an operator while failed: ")
                && error.contains("template missing"),
            "{error}"
        );
    }
    let mail = type_view(&host, "mail");
    assert_eq!(mail["counts"]["done"], 3, "{mail}");
    assert_eq!(mail["counts"]["cancelled"], 2, "{mail}");
    assert_eq!(mail["load_state"], "loaded");

    // `spool retry ID` retries one task.
    let one = broken[0]["id"].as_i64().unwrap();
    let (ok, out) = spool(&host, &["retry", &one.to_string()]);
    assert!(ok, "{out}");
    host.wait_for_status(one, "done", WAIT);
}

#[test]
fn a_paused_type_waits_while_another_flows_and_runs_on_resume() {
    let ws = Workspace::with_plugins(&["noop"]);
    ws.add_plugin("noop", "mail");
    ws.add_plugin("noop", "report");
    let host = ws.start(&[]);
    // One report runs first, so the host has an attempt time to estimate from.
    let first = host.enqueue("report", json!({"first": true}))["id"]
        .as_i64()
        .unwrap();
    host.wait_for_status(first, "done", WAIT);
    let (ok, out) = spool(&host, &["pause", "report"]);
    assert!(ok, "{out}");
    assert!(out.contains("\"paused\": true"), "{out}");

    let reports: Vec<i64> = (0..3)
        .map(|i| {
            let task = host.enqueue("report", json!({"i": i}));
            assert!(
                task["estimated_done_at"].is_null(),
                "a paused type's task has no estimate: {task}"
            );
            task["id"].as_i64().unwrap()
        })
        .collect();
    let mails: Vec<i64> = (0..3)
        .map(|i| {
            host.enqueue("mail", json!({"i": i}))["id"]
                .as_i64()
                .unwrap()
        })
        .collect();
    for id in &mails {
        host.wait_for_status(*id, "done", WAIT);
    }
    // Several poll intervals (100 ms here) later, the reports still wait.
    std::thread::sleep(Duration::from_millis(600));
    for id in &reports {
        assert_eq!(host.task(*id)["status"], "pending");
    }
    assert!(host.task(reports[0])["estimated_done_at"].is_null());
    let report = type_view(&host, "report");
    assert_eq!(report["paused"], true, "{report}");
    assert_eq!(report["counts"]["pending"], 3, "{report}");
    assert!(report["mean_attempt_ms"].is_u64(), "{report}");
    assert_eq!(type_view(&host, "mail")["paused"], false);
    let (_, health) = host.get("/health");
    assert_eq!(health["paused_types"], json!(["report"]), "{health}");
    let (_, plugins) = host.get("/plugins");
    let paused: Vec<&Value> = plugins["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["paused"] == true)
        .collect();
    assert_eq!(paused.len(), 1);
    assert_eq!(paused[0]["task_type"], "report");
    let (ok, out) = spool(&host, &["types"]);
    assert!(ok && out.contains("PAUSED since"), "{out}");

    let (ok, out) = spool(&host, &["resume", "report"]);
    assert!(ok, "{out}");
    for id in &reports {
        host.wait_for_status(*id, "done", WAIT);
    }
    assert_eq!(type_view(&host, "report")["paused"], false);

    // Pausing checks the name.
    let (status, body) = host.post("/types/no%20such/pause", &json!({}));
    assert_eq!(status, 400, "{body}");
}

#[test]
fn a_pause_through_one_host_holds_on_another_on_postgres() {
    let Some(url) =
        servers::url(Backend::Postgres).map(|_| servers::fresh_database(Backend::Postgres))
    else {
        return;
    };
    pause_across_two_hosts(url);
}

#[test]
fn a_pause_through_one_host_holds_on_another_on_mariadb() {
    let Some(url) = servers::url(Backend::MySql).map(|_| servers::fresh_database(Backend::MySql))
    else {
        return;
    };
    pause_across_two_hosts(url);
}

/// Two hosts on one database: a pause through the first holds on the second (within its poll
/// interval), the other type keeps flowing, and a resume through the second restarts both.
fn pause_across_two_hosts(url: String) {
    let ws = Workspace::with_plugins(&["noop"]).on_database(url);
    ws.add_plugin("noop", "mail");
    ws.add_plugin("noop", "report");
    let first = ws.start(&[]);
    let second = ws.start(&[]);
    let (status, body) = first.post("/types/report/pause", &json!({}));
    assert_eq!(status, 200, "{body}");
    // The other host reads the pause within its poll interval (100 ms here).
    eventually(WAIT, "the pause on the second host", || {
        let (_, health) = second.get("/health");
        (health["paused_types"] == json!(["report"])).then_some(())
    });

    let reports: Vec<i64> = (0..5)
        .map(|i| {
            second.enqueue("report", json!({"i": i}))["id"]
                .as_i64()
                .unwrap()
        })
        .collect();
    let mails: Vec<i64> = (0..5)
        .map(|i| {
            second.enqueue("mail", json!({"i": i}))["id"]
                .as_i64()
                .unwrap()
        })
        .collect();
    for id in &mails {
        second.wait_for_status(*id, "done", WAIT);
    }
    std::thread::sleep(Duration::from_millis(600));
    for id in &reports {
        assert_eq!(
            second.task(*id)["status"],
            "pending",
            "paused on both hosts"
        );
    }

    let (status, body) = second.post("/types/report/resume", &json!({}));
    assert_eq!(status, 200, "{body}");
    for id in &reports {
        first.wait_for_status(*id, "done", WAIT);
    }
}
