//! What a client meets: paging `spool tasks` from the CLI, payloads that must be JSON
//! documents, idempotency keys reused with another payload, and load errors in `spool plugins`.

use serde_json::{Value, json};
use std::process::Command;

use crate::util::Workspace;

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

/// The ids in a `spool tasks` table, and the command its `(more: ...)` line gives.
fn table(out: &str) -> (Vec<i64>, Option<Vec<String>>) {
    let ids = out
        .lines()
        .skip(1)
        .filter_map(|line| line.split_whitespace().next()?.parse().ok())
        .collect();
    let more = out.lines().find_map(|line| {
        let command = line.strip_prefix("(more: spool ")?.strip_suffix(')')?;
        Some(command.split(' ').map(String::from).collect())
    });
    (ids, more)
}

#[test]
fn spool_tasks_pages_with_before() {
    let ws = Workspace::with_plugins(&["noop", "sleepy"]);
    let host = ws.start(&[]);
    let mut noops: Vec<i64> = (0..5)
        .map(|_| {
            host.enqueue_with(json!({"task_type": "noop", "delay": "1h"}))["id"]
                .as_i64()
                .unwrap()
        })
        .collect();
    host.enqueue_with(json!({"task_type": "sleepy", "payload": {"ms": 1}, "delay": "1h"}));
    noops.reverse();

    // Page after page, following the printed command, with its filters kept.
    let mut args: Vec<String> = [
        "tasks", "--type", "noop", "--status", "pending", "--limit", "2",
    ]
    .map(String::from)
    .to_vec();
    let mut seen = Vec::new();
    loop {
        let args_ref: Vec<&str> = args.iter().map(String::as_str).collect();
        let (ok, out, err) = spool(&host.url, &args_ref);
        assert!(ok, "{out}{err}");
        let (ids, more) = table(&out);
        seen.extend(ids);
        match more {
            Some(next) => {
                assert!(
                    next.windows(2).any(|w| w == ["--type", "noop"])
                        && next.windows(2).any(|w| w == ["--status", "pending"])
                        && next.windows(2).any(|w| w == ["--limit", "2"]),
                    "{out}"
                );
                args = next;
            }
            None => break,
        }
        assert!(seen.len() <= 6, "paging does not end: {seen:?}");
    }
    assert_eq!(seen, noops);

    let (ok, out, _) = spool(&host.url, &["tasks", "--before", &noops[1].to_string()]);
    assert!(ok);
    assert_eq!(table(&out), (noops[2..].to_vec(), None), "{out}");
}

#[test]
fn spool_plugins_shows_load_errors_on_one_line_and_in_full_by_name() {
    let ws = Workspace::with_plugins(&["noop"]);
    ws.add_plugin("wrongworld", "wrongworld");
    // A manifest error is reported with the offending TOML quoted over several lines.
    ws.manifest("noop", "max_retry = 3\ntimeout = [1, 2]\n");
    let host = ws.start(&[]);
    // The error of a task type, loaded (`last_error`) or not (`error`).
    let error_of = |view: &Value, name: &str| -> Option<String> {
        ["plugins", "unloaded"]
            .iter()
            .flat_map(|list| view[*list].as_array().cloned().unwrap_or_default())
            .find(|p| p["task_type"] == name)
            .and_then(|p| {
                p["last_error"]
                    .as_str()
                    .or(p["error"].as_str())
                    .map(String::from)
            })
    };
    let full = host.eventually("both load errors", || {
        let (_, view) = host.get("/plugins");
        error_of(&view, "wrongworld")?;
        error_of(&view, "noop")
    });
    let full = full.as_str();
    assert!(
        full.trim().contains('\n'),
        "a multi-line error to show: {full}"
    );

    let (ok, out, err) = spool(&host.url, &["plugins"]);
    assert!(ok, "{err}");
    let rows: Vec<&str> = out.lines().skip(2).collect();
    assert_eq!(rows.len(), 2, "one line per plugin:\n{out}");
    let noop = rows.iter().find(|r| r.starts_with("noop ")).unwrap();
    assert!(noop.contains("spool plugins noop shows all"), "{noop}");
    let start: String = full.trim().chars().take(60).collect();
    assert!(noop.contains(&start), "{noop}");
    assert!(
        rows.iter()
            .any(|r| r.starts_with("wrongworld ") && r.contains("not loaded")),
        "{out}"
    );

    let (ok, out, err) = spool(&host.url, &["plugins", "noop"]);
    assert!(ok, "{err}");
    assert!(out.contains(full), "the whole error:\n{out}");
    let (ok, out, err) = spool(&host.url, &["plugins", "wrongworld"]);
    assert!(ok && out.contains("not loaded"), "{out}{err}");
    let (ok, out, _) = spool(&host.url, &["plugins", "noop", "--json"]);
    let json: Value = serde_json::from_str(&out).unwrap();
    assert!(
        ok && (json["last_error"] == full || json["error"] == full),
        "{json}"
    );
    let (ok, _, err) = spool(&host.url, &["plugins", "invoice"]);
    assert!(
        !ok && err.contains("no plugin for task type `invoice`") && err.contains("noop"),
        "{err}"
    );
}

#[test]
fn payloads_encoded_twice_are_refused_and_a_reused_key_says_when_payloads_differ() {
    let ws = Workspace::with_plugins(&["noop"]);
    let host = ws.start(&[]);
    for doubled in [r#"{"rows": [1, 2]}"#, " [1, 2]", "{not json"] {
        let (status, body) = host.post("/tasks", &json!({"task_type": "noop", "payload": doubled}));
        assert_eq!(status, 422, "{body}");
        assert_eq!(body["error"]["code"], "invalid_request");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("encoded twice")
                && message.contains("send the object or array itself"),
            "{message}"
        );
        let (status, body) = host.post(
            "/tasks/batch",
            &json!({"tasks": [{"task_type": "noop"}, {"task_type": "noop", "payload": doubled}]}),
        );
        assert_eq!(
            (status, body["error"]["index"].as_u64()),
            (422, Some(1)),
            "{body}"
        );
    }
    // Other strings, and every other JSON value, stay valid payloads.
    for fine in [
        json!("hello"),
        json!("x{"),
        json!(7),
        json!(null),
        json!([1]),
        json!({"a": "{}"}),
    ] {
        let task = host.enqueue("noop", fine.clone());
        assert_eq!(task["payload"], fine);
    }
    let (ok, _, err) = spool(&host.url, &["enqueue", "noop", r#""{\"a\": 1}""#]);
    assert!(!ok && err.contains("encoded twice"), "{err}");

    let first = host.enqueue_with(
        json!({"task_type": "noop", "idempotency_key": "k-1", "delay": "1h",
        "payload": {"a": 1, "b": [1, 2]}}),
    );
    assert_eq!(
        (
            first["duplicate"].as_bool(),
            first["payload_differs"].as_bool()
        ),
        (Some(false), Some(false))
    );
    // The same value written another way (key order, spacing) is the same payload.
    let (status, same) = host.post_raw(
        "/tasks",
        r#"{"idempotency_key":"k-1","payload":{ "b":[1,2], "a":1 },"task_type":"noop"}"#,
        "application/json",
    );
    assert_eq!(status, 200, "{same}");
    assert_eq!(
        (
            same["duplicate"].as_bool(),
            same["payload_differs"].as_bool()
        ),
        (Some(true), Some(false))
    );
    assert_eq!(same["id"], first["id"]);
    let (status, other) = host.post(
        "/tasks",
        &json!({"task_type": "noop", "idempotency_key": "k-1",
        "payload": {"a": 2}}),
    );
    assert_eq!(status, 200, "{other}");
    assert_eq!(
        (
            other["duplicate"].as_bool(),
            other["payload_differs"].as_bool()
        ),
        (Some(true), Some(true))
    );
    assert_eq!(
        other["payload"],
        json!({"a": 1, "b": [1, 2]}),
        "the kept task's payload"
    );
    let (status, batch) = host.post(
        "/tasks/batch",
        &json!({"tasks": [
            {"task_type": "noop", "idempotency_key": "k-1", "payload": {"a": 1, "b": [1, 2]}},
            {"task_type": "noop", "idempotency_key": "k-1", "payload": {}},
        ]}),
    );
    assert_eq!(status, 201, "{batch}");
    let differs: Vec<_> = batch["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["payload_differs"].clone())
        .collect();
    assert_eq!(differs, [json!(false), json!(true)]);
}
