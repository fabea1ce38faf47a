//! The API keeps its contract at the edges: every error is the JSON error shape, values out of
//! range are 422 (never a panic that drops the connection), and a listing's page is bounded in
//! bytes as well as in tasks.

use serde_json::{Value, json};
use std::process::Command;

use crate::util::Workspace;

#[test]
fn malformed_ids_routes_and_methods_answer_the_json_error_shape() {
    let ws = Workspace::with_plugins(&["noop"]);
    let host = ws.start(&[]);
    for (method, path) in [
        ("GET", "/tasks/9223372036854775808"),
        ("POST", "/tasks/9223372036854775808/retry"),
        ("POST", "/tasks/99999999999999999999999/cancel"),
        ("GET", "/tasks/abc"),
        ("GET", "/tasks/1.5"),
    ] {
        let (status, body) = host.raw(
            &format!(
                "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Length: 0",
                host.addr()
            ),
            "",
        );
        assert_eq!(status, 400, "{method} {path}: {body}");
        assert_eq!(
            body["error"]["code"], "invalid_request",
            "{method} {path}: {body}"
        );
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("task id"),
            "{body}"
        );
    }
    let (status, body) = host.get("/nowhere");
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (404, Some("not_found")),
        "{body}"
    );
    let response = host
        .http
        .delete(format!("{}/tasks", host.url))
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 405);
    assert!(
        response.headers()["allow"]
            .to_str()
            .unwrap()
            .contains("POST")
    );
    let body: Value = response.json().unwrap();
    assert_eq!(body["error"]["code"], "method_not_allowed");
    for query in [
        "limit=0",
        "limit=1001",
        "limit=-1",
        "before=x",
        "status=lost",
    ] {
        let (status, body) = host.get(&format!("/tasks?{query}"));
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (400, Some("invalid_request")),
            "{query}: {body}"
        );
    }
}

#[test]
fn out_of_range_values_are_rejected_with_422() {
    let ws = Workspace::with_plugins(&["noop"]);
    let host = ws.start(&[]);
    let refused = [
        json!({"task_type": "noop", "delay": 1e15}),
        json!({"task_type": "noop", "delay": 3155760001u64}),
        json!({"task_type": "noop", "delay": -1}),
        json!({"task_type": "noop", "delay": "100000000y"}),
        json!({"task_type": "noop", "delay": "1h 30m"}),
        json!({"task_type": "noop", "delay": "99999d"}),
        json!({"task_type": "noop", "run_at": "+20000-01-01T00:00:00Z"}),
        json!({"task_type": "noop", "max_retry": 4294967295u64}),
        json!({"task_type": "noop", "max_retry": 1001}),
        json!({"task_type": "noop", "max_retry": 2.5}),
        json!({"task_type": "noop", "priority": 2147483648u64}),
        json!({"task_type": "noop", "priority": -2147483649i64}),
        json!({"task_type": "noop", "idempotency_key": ""}),
        json!({"task_type": "noop", "idempotency_key": "é".repeat(256)}),
        json!({"task_type": "noop", "payload": nested(65)}),
    ];
    for request in refused {
        let (status, body) = host.post("/tasks", &request);
        assert_eq!(status, 422, "{request}: {body}");
        assert_eq!(
            body["error"]["code"], "invalid_request",
            "{request}: {body}"
        );
    }
    assert!(host.all_tasks().is_empty(), "nothing was stored");

    // The edges themselves are accepted; a time before 1970 counts as 1970.
    let accepted = [
        (json!({"task_type": "noop", "payload": nested(64)}), None),
        (
            json!({"task_type": "noop", "delay": 3155760000u64, "max_retry": 1000}),
            None,
        ),
        (
            json!({"task_type": "noop", "delay": "9999d", "priority": 2147483647}),
            None,
        ),
        (
            json!({"task_type": "noop", "delay": "999999999999ms", "priority": -2147483648i64}),
            None,
        ),
        (
            json!({"task_type": "noop", "run_at": "9999-12-31T23:59:59Z", "priority": 7.0}),
            Some("9999-12-31T23:59:59Z"),
        ),
        (
            json!({"task_type": "noop", "run_at": "0001-01-01T00:00:00Z"}),
            Some("1970-01-01T00:00:00Z"),
        ),
        (
            json!({"task_type": "noop", "run_at": null, "delay": "1h", "idempotency_key": "é".repeat(255)}),
            None,
        ),
    ];
    for (request, due) in accepted {
        let (status, body) = host.post("/tasks", &request);
        assert_eq!(status, 201, "{request}: {body}");
        if let Some(due) = due {
            assert_eq!(body["next_run_at"], due, "{body}");
        }
    }
    let (status, _) = host.get("/health");
    assert_eq!(status, 200, "the host is still serving");
}

#[test]
fn a_listing_page_stops_at_4_mib_and_continues_with_its_cursor() {
    let ws = Workspace::with_plugins(&["noop"]);
    let host = ws.start(&["--max-payload", "1MiB"]);
    let blob = "x".repeat(900 << 10);
    let ids: Vec<i64> = (0..6)
        .map(|i| {
            host.enqueue_with(
                json!({"task_type": "noop", "delay": "1h", "payload": {"i": i, "blob": blob}}),
            )["id"]
                .as_i64()
                .unwrap()
        })
        .collect();
    for i in 0..5 {
        host.enqueue_with(json!({"task_type": "noop", "delay": "1h", "payload": {"small": i}}));
    }

    let (status, first) = host.get("/tasks?limit=1000");
    assert_eq!(status, 200);
    let first_ids: Vec<i64> = first["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_i64().unwrap())
        .collect();
    // Newest first: the five small tasks, then large ones until 4 MiB.
    assert_eq!(
        first_ids.len(),
        9,
        "5 small tasks and 4 of 900 KiB fit in 4 MiB: {first_ids:?}"
    );
    let next = first["next_before"].as_i64().expect("a cursor to the rest");
    assert_eq!(next, ids[2]);
    let (status, second) = host.get(&format!("/tasks?limit=1000&before={next}"));
    assert_eq!(status, 200);
    let second_ids: Vec<i64> = second["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_i64().unwrap())
        .collect();
    assert_eq!(second_ids, vec![ids[1], ids[0]]);
    assert!(
        second["next_before"].is_null(),
        "the last page has no cursor: {}",
        second["next_before"]
    );
    // A page of one task is never split, whatever its size.
    let (_, one) = host.get("/tasks?limit=1");
    assert_eq!(one["tasks"].as_array().unwrap().len(), 1);

    let output = Command::new(env!("CARGO_BIN_EXE_spool"))
        .args(["tasks", "--limit", "1000", "--url", &host.url])
        .env_remove("SPOOL_API_TOKEN")
        .env_remove("SPOOL_READ_TOKEN")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        text.lines().filter(|line| line.contains(" noop ")).count(),
        9,
        "{text}"
    );
    assert!(
        text.contains(&format!("(more: spool tasks --before {next}")),
        "{text}"
    );
}

/// Arrays nested `depth` deep.
fn nested(depth: usize) -> serde_json::Value {
    (1..depth).fold(json!([]), |inner, _| json!([inner]))
}
