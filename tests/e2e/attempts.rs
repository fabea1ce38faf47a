//! Every attempt on record: `GET /tasks/{id}` carries the task's attempt history (each attempt
//! with its host, plugin build, times, outcome, error and log) and `spool status` prints it as
//! a table, on SQLite and on each configured server database.

use serde_json::{Value, json};
use std::process::Command;
use std::time::Duration;

use crate::servers;
use crate::util::{Host, Workspace};

const WAIT: Duration = Duration::from_secs(30);

fn id(task: &Value) -> i64 {
    task["id"].as_i64().unwrap()
}

fn history(task: &Value) -> &Vec<Value> {
    task["history"]
        .as_array()
        .expect("GET /tasks/{id} has a history")
}

/// A transient failure then a success, and a dead letter: what the history and the task's
/// counters say about each.
fn retries_are_on_record(host: &Host) {
    let flaky = host.enqueue("flaky", json!({"fail_until_attempt": 1}));
    let done = host.wait_for_status(id(&flaky), "done", WAIT);
    let attempts = history(&done);
    assert_eq!(attempts.len(), 2, "{done:#}");
    let (first, second) = (&attempts[0], &attempts[1]);
    assert_eq!(
        (&first["attempt"], &first["outcome"]),
        (&json!(1), &json!("retry"))
    );
    assert!(
        first["error"]
            .as_str()
            .unwrap()
            .contains("failure on attempt 1"),
        "{done:#}"
    );
    assert!(
        first["log"].as_str().unwrap().contains("attempt 1 of"),
        "the first attempt's own log: {done:#}"
    );
    assert_eq!(
        (&second["attempt"], &second["outcome"]),
        (&json!(2), &json!("done"))
    );
    assert!(second["error"].is_null(), "{done:#}");
    assert!(
        second["log"].as_str().unwrap().contains("attempt 2 of")
            && !second["log"].as_str().unwrap().contains("attempt 1 of"),
        "the second attempt's own log: {done:#}"
    );
    for attempt in attempts {
        assert!(
            attempt["host"].as_str().is_some_and(|h| !h.is_empty()),
            "{done:#}"
        );
        assert_eq!(attempt["plugin_version"], done["plugin_version"]);
        let started = attempt["started_at"].as_str().unwrap();
        let finished = attempt["finished_at"].as_str().unwrap();
        let (started, finished) = (
            chrono::DateTime::parse_from_rfc3339(started).unwrap(),
            chrono::DateTime::parse_from_rfc3339(finished).unwrap(),
        );
        assert!(started <= finished);
        // What the attempt cost, as the sandbox measured it: the handler's own time (within
        // the record's span), its fuel and its peak memory (at least one wasm page).
        let cost = &attempt["cost"];
        let wall_ms = cost["wall_ms"].as_i64().expect("a wall time");
        assert!(
            wall_ms <= (finished - started).num_milliseconds() + 1,
            "{done:#}"
        );
        assert!(cost["fuel_used"].as_u64().unwrap() > 0, "{done:#}");
        assert!(cost["peak_memory"].as_u64().unwrap() >= 65536, "{done:#}");
    }
    assert_eq!(
        (&done["attempts"], &done["retry_count"], &done["last_error"]),
        (&json!(2), &json!(1), &Value::Null),
        "{done:#}"
    );

    let dead = host.enqueue_with(
        json!({"task_type": "flaky", "payload": {"fail_until_attempt": 100}, "max_retry": 2}),
    );
    let failed = host.wait_for_status(id(&dead), "failed", WAIT);
    assert_eq!(
        (&failed["attempts"], &failed["retry_count"]),
        (&json!(3), &json!(2)),
        "three attempts, two retries: {failed:#}"
    );
    let outcomes: Vec<(u64, &str)> = history(&failed)
        .iter()
        .map(|a| {
            (
                a["attempt"].as_u64().unwrap(),
                a["outcome"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(outcomes, [(1, "retry"), (2, "retry"), (3, "retry")]);
    assert!(
        failed["last_error"]
            .as_str()
            .unwrap()
            .contains("gave up after 3 attempts"),
        "{failed:#}"
    );
}

#[test]
fn a_retried_task_and_a_dead_letter_show_every_attempt() {
    let ws = Workspace::with_plugins(&["flaky"]);
    let host = ws.start(&["--backoff-base", "50ms"]);
    retries_are_on_record(&host);

    // The description documents exactly the fields a record has.
    let (_, spec) = host.get("/openapi.json");
    let schemas = &spec["components"]["schemas"];
    let keys = |value: &Value| -> Vec<String> {
        let mut keys: Vec<String> = value.as_object().unwrap().keys().cloned().collect();
        keys.sort();
        keys
    };
    let task = host.task(id(&host.all_tasks()[0]));
    assert_eq!(
        keys(&schemas["AttemptRecord"]["properties"]),
        keys(&history(&task)[0])
    );
    assert!(
        schemas["TaskDetail"].to_string().contains("\"history\""),
        "{}",
        schemas["TaskDetail"]
    );
}

#[test]
fn attempts_are_on_record_on_postgres_and_mysql() {
    for backend in [servers::Backend::Postgres, servers::Backend::MySql] {
        if servers::url(backend).is_none() {
            continue;
        }
        let ws = Workspace::with_plugins(&["flaky"]).on_database(servers::fresh_database(backend));
        let host = ws.start(&["--backoff-base", "50ms"]);
        retries_are_on_record(&host);
    }
}

#[test]
fn a_cancelled_attempt_is_on_record_and_spool_status_prints_the_history() {
    let ws = Workspace::with_plugins(&["flaky", "sleepy"]);
    let host = ws.start(&["--backoff-base", "50ms"]);
    let sleeper = host.enqueue("sleepy", json!({"ms": 20_000}));
    host.wait_for_status(id(&sleeper), "running", WAIT);
    let (status, cancelled) = host.post(&format!("/tasks/{}/cancel", id(&sleeper)), &json!({}));
    assert_eq!(status, 200, "{cancelled}");
    let task = host.task(id(&sleeper));
    let attempts = history(&task);
    assert_eq!(attempts.len(), 1, "{task:#}");
    assert_eq!(attempts[0]["outcome"], "cancelled", "{task:#}");
    assert!(attempts[0]["started_at"].is_string(), "{task:#}");
    assert!(
        attempts[0]["cost"].is_null(),
        "an interrupted attempt has no measured cost: {task:#}"
    );

    let flaky = host.enqueue("flaky", json!({"fail_until_attempt": 1}));
    host.wait_for_status(id(&flaky), "done", WAIT);
    let output = Command::new(env!("CARGO_BIN_EXE_spool"))
        .args(["status", &id(&flaky).to_string()])
        .env("SPOOL_URL", &host.url)
        .env_remove("SPOOL_API_TOKEN")
        .output()
        .unwrap();
    assert!(output.status.success());
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    // stdout is the task as JSON, as before; the table goes beside it.
    let printed: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(printed["status"], "done");
    assert!(printed.get("history").is_none(), "{stdout}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert!(
        lines[0].contains("ATTEMPT") && lines[0].contains("OUTCOME"),
        "{stderr}"
    );
    assert!(
        lines[1].trim_start().starts_with("1  retry") && lines[1].contains("failure on attempt 1"),
        "{stderr}"
    );
    assert!(lines[2].trim_start().starts_with("2  done"), "{stderr}");
    assert!(
        lines[0].contains("FUEL") && lines[0].contains("MEMORY") && lines[2].contains("iB  "),
        "each attempt's fuel and peak memory: {stderr}"
    );
}
