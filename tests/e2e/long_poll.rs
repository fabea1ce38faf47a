//! `GET /tasks/{id}?wait=`: a long-poll answered as soon as the task is final, woken by the
//! completer's commit, and `--wait` in the CLI that uses it.

use serde_json::{Value, json};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::util::{Host, Workspace};

/// `GET path` with its duration.
fn timed_get(host: &Host, path: &str) -> (u16, Value, Duration) {
    let started = Instant::now();
    let (status, body) = host.get(path);
    (status, body, started.elapsed())
}

#[test]
fn a_long_poll_answers_as_soon_as_the_task_is_done() {
    let ws = Workspace::with_plugins(&["sleepy", "noop"]);
    let host = ws.start(&[]);
    // Warm the type (its first attempt compiles nothing, but loads the instance pool).
    let warm = host.enqueue("noop", json!({}));
    host.wait_final(warm["id"].as_i64().unwrap());

    // A handler that sleeps 1.2 s: the long-poll answers once it is done, long before its
    // 30 s wait, and about when the task itself finished.
    let task = host.enqueue("sleepy", json!({"ms": 1200}));
    let id = task["id"].as_i64().unwrap();
    let (status, body, elapsed) = timed_get(&host, &format!("/tasks/{id}?wait=30s"));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "done", "{body}");
    assert!(elapsed < Duration::from_secs(15), "{elapsed:?}");
    assert!(elapsed >= Duration::from_millis(1200), "{elapsed:?}");

    // Quick tasks: a long-poll right after the enqueue answers within a fraction of the
    // ~200 ms the CLI used to sleep between polls; compared with a plain read in the same
    // run, it costs the attempt, not a poll interval.
    let mut waits = Vec::new();
    let mut reads = Vec::new();
    for _ in 0..10 {
        let id = host.enqueue("noop", json!({}))["id"].as_i64().unwrap();
        let (status, body, elapsed) = timed_get(&host, &format!("/tasks/{id}?wait=30s"));
        assert_eq!(
            (status, body["status"].as_str()),
            (200, Some("done")),
            "{body}"
        );
        waits.push(elapsed);
        reads.push(timed_get(&host, &format!("/tasks/{id}")).2);
    }
    waits.sort();
    reads.sort();
    let (wait, read) = (waits[waits.len() / 2], reads[reads.len() / 2]);
    eprintln!("median long-poll on a noop task {wait:?}, median read {read:?}");
    assert!(
        wait < Duration::from_millis(200).max(read * 20),
        "median long-poll {wait:?} against a read's {read:?}"
    );
}

#[test]
fn a_long_poll_on_an_unfinished_task_ends_with_its_current_state() {
    let ws = Workspace::with_plugins(&["noop"]);
    let host = ws.start(&[]);
    let later = host.enqueue_with(json!({"task_type": "noop", "delay": "1h"}));
    let id = later["id"].as_i64().unwrap();
    let (status, body, elapsed) = timed_get(&host, &format!("/tasks/{id}?wait=1500ms"));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "pending");
    assert!(
        elapsed >= Duration::from_millis(1500) && elapsed < Duration::from_secs(6),
        "{elapsed:?}"
    );
    // A cancel on this host ends the wait at once.
    let waiting = {
        let url = format!("{}/tasks/{id}?wait=60s", host.url);
        std::thread::spawn(move || {
            let started = Instant::now();
            let body: Value = reqwest::blocking::get(url).unwrap().json().unwrap();
            (body, started.elapsed())
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    let (status, _) = host.post(&format!("/tasks/{id}/cancel"), &json!({}));
    assert_eq!(status, 200);
    let (body, elapsed) = waiting.join().unwrap();
    assert_eq!(body["status"], "cancelled", "{body}");
    assert!(elapsed < Duration::from_secs(10), "{elapsed:?}");

    // Waits that are not durations, or beyond the cap, are refused in the error shape.
    for bad in ["61s", "60001ms", "1m", "abc", "030s", "-1"] {
        let (status, body) = host.get(&format!("/tasks/{id}?wait={bad}"));
        assert_eq!(status, 400, "{bad}: {body}");
        assert_eq!(body["error"]["code"], "invalid_request", "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains("at most 60s"), "{message}");
    }
    let (status, body) = host.get("/tasks/999999?wait=1s");
    assert_eq!(status, 404, "{body}");
}

#[test]
fn a_stopping_host_ends_waits_at_once() {
    let ws = Workspace::with_plugins(&["noop"]);
    let mut host = ws.start(&[]);
    let later = host.enqueue_with(json!({"task_type": "noop", "delay": "1h"}));
    let url = format!("{}/tasks/{}?wait=60s", host.url, later["id"]);
    let waiting = std::thread::spawn(move || {
        let started = Instant::now();
        let response = reqwest::blocking::get(url).unwrap();
        let status = response.status().as_u16();
        let body: Value = response.json().unwrap();
        (status, body, started.elapsed())
    });
    std::thread::sleep(Duration::from_millis(500));
    host.signal("TERM");
    let (status, body, elapsed) = waiting.join().unwrap();
    assert_eq!(
        (status, body["status"].as_str()),
        (200, Some("pending")),
        "{body}"
    );
    // Well within the 5 s a request being handled gets at shutdown.
    assert!(elapsed < Duration::from_secs(4), "{elapsed:?}");
    assert!(host.wait_exit(Duration::from_secs(20)));
}

fn spool(url: &str, args: &[&str]) -> (bool, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_spool"))
        .args(args)
        .env("SPOOL_URL", url)
        .env_remove("SPOOL_API_TOKEN")
        .env_remove("SPOOL_READ_TOKEN")
        .output()
        .unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn cli_wait_prints_the_finished_task() {
    // A host that allows only 1 s waits: the CLI falls back to them and still waits it out.
    let ws = Workspace::with_plugins(&["sleepy", "trap"]);
    let host = ws.start(&["--max-wait", "1s"]);
    let (status, spec) = host.get("/openapi.json");
    assert_eq!(status, 200);
    let wait = spec["paths"]["/tasks/{id}"]["get"]["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "wait")
        .unwrap()
        .clone();
    assert_eq!(
        wait["schema"]["pattern"], "^((0|1)s?|(0|[1-9][0-9]{0,2}|1000)ms)$",
        "{wait}"
    );
    let (status, _) = host.get("/tasks/1?wait=2s");
    assert_eq!(status, 400);

    let (ok, out, err) = spool(
        &host.url,
        &["enqueue", "sleepy", r#"{"ms": 2500}"#, "--wait"],
    );
    assert!(ok, "{out}{err}");
    let task: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(task["status"], "done");
    assert_eq!(task["result"]["slept_ms"], 2500);

    let id = host.enqueue("sleepy", json!({"ms": 1500}))["id"].to_string();
    let (ok, out, err) = spool(&host.url, &["status", &id, "--wait"]);
    assert!(ok, "{out}{err}");
    let task: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(task["status"], "done");

    let failing = host.enqueue_with(json!({"task_type": "trap", "max_retry": 0}));
    let (ok, out, err) = spool(&host.url, &["status", &failing["id"].to_string(), "--wait"]);
    assert!(!ok, "{out}");
    assert!(
        out.contains("\"failed\"") && err.contains("is failed"),
        "{out}{err}"
    );
}
