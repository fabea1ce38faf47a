//! The queue's core promises: a task runs to done with the plugin's result, priorities order a
//! backlog, idempotency keys never make a second row, cancel and retry work.

use serde_json::json;
use std::time::Duration;

use crate::util::Workspace;

const WAIT: Duration = Duration::from_secs(30);

#[test]
fn enqueued_task_runs_to_done_with_the_plugins_result() {
    let ws = Workspace::with_plugins(&["report"]);
    let host = ws.start(&[]);
    let task = host.enqueue(
        "report",
        json!({"title": "t", "group_by": "region", "sum": "amount",
               "rows": [{"region": "north", "amount": 10}, {"region": "north", "amount": 5}, {"region": "south", "amount": 1}]}),
    );
    assert_eq!(task["status"], "pending");
    assert_eq!(task["duplicate"], false);
    let done = host.wait_for_status(task["id"].as_i64().unwrap(), "done", WAIT);
    let result = &done["result"];
    assert!(
        result.is_object(),
        "result should be the handler's JSON: {done:#}"
    );
    let text = result.to_string();
    assert!(text.contains("north") && text.contains("south"), "{text}");
    assert!(text.contains("15"), "north's sum 15 should be in {text}");
    assert_eq!(done["attempts"], 1);
    assert_eq!(
        done["progress"], 100,
        "the report plugin reports progress: {done:#}"
    );
    assert_eq!(done["plugin_version"].as_str().unwrap().len(), 64);
    assert!(done["finished_at"].is_string());
}

#[test]
fn higher_priority_overtakes_a_backlog() {
    let ws = Workspace::with_plugins(&["sleepy", "noop"]);
    let host = ws.start(&["--concurrency", "1"]);
    // Occupy the only slot, then build a backlog behind it.
    let blocker = host.enqueue("sleepy", json!({"ms": 1500}));
    host.wait_for_status(blocker["id"].as_i64().unwrap(), "running", WAIT);
    let mut low = Vec::new();
    let mut high = Vec::new();
    for i in 0..5 {
        low.push(host.enqueue_with(json!({"task_type": "noop", "payload": {"n": i}, "priority": 0}))["id"].as_i64().unwrap());
        high.push(host.enqueue_with(json!({"task_type": "noop", "payload": {"n": i}, "priority": 10}))["id"].as_i64().unwrap());
    }
    let started = |id: i64| {
        let task = host.wait_for_status(id, "done", WAIT);
        chrono::DateTime::parse_from_rfc3339(task["attempted_at"].as_str().unwrap()).unwrap()
    };
    let last_high = high.iter().map(|id| started(*id)).max().unwrap();
    let first_low = low.iter().map(|id| started(*id)).min().unwrap();
    assert!(
        last_high <= first_low,
        "every high-priority task should start before any low one"
    );
    // Within a priority, first come first served.
    let low_starts: Vec<_> = low.iter().map(|id| started(*id)).collect();
    assert!(
        low_starts.windows(2).all(|w| w[0] <= w[1]),
        "{low_starts:?}"
    );
}

#[test]
fn idempotency_key_returns_the_existing_task() {
    let ws = Workspace::with_plugins(&["noop"]);
    let host = ws.start(&[]);
    let request =
        json!({"task_type": "noop", "payload": {"order": 7}, "idempotency_key": "order-7"});
    let first = host.enqueue_with(request.clone());
    let (status, second) = host.post("/tasks", &request);
    assert_eq!(status, 200, "{second}");
    assert_eq!(second["duplicate"], true);
    assert_eq!(second["id"], first["id"]);
    // Also inside a batch, and against the existing row.
    let (status, batch) = host.post(
        "/tasks/batch",
        &json!({"tasks": [
            {"task_type": "noop", "idempotency_key": "order-8"},
            {"task_type": "noop", "idempotency_key": "order-8"},
            {"task_type": "noop", "idempotency_key": "order-7"},
            {"task_type": "noop"}
        ]}),
    );
    assert_eq!(status, 201, "{batch}");
    let tasks = batch["tasks"].as_array().unwrap();
    assert_eq!(
        tasks
            .iter()
            .map(|t| t["duplicate"].as_bool().unwrap())
            .collect::<Vec<_>>(),
        [false, true, true, false]
    );
    assert_eq!(tasks[0]["id"], tasks[1]["id"]);
    assert_eq!(tasks[2]["id"], first["id"]);
    assert_eq!(
        host.all_tasks().len(),
        3,
        "one row per key plus the keyless task"
    );
}

#[test]
fn cancel_and_retry_move_tasks_between_states() {
    let ws = Workspace::with_plugins(&["noop"]);
    let host = ws.start(&[]);
    let later = host.enqueue_with(json!({"task_type": "noop", "payload": {}, "delay": "1h"}));
    let id = later["id"].as_i64().unwrap();
    let (status, cancelled) = host.post(&format!("/tasks/{id}/cancel"), &json!({}));
    assert_eq!(status, 200, "{cancelled}");
    assert_eq!(cancelled["status"], "cancelled");
    let (status, again) = host.post(&format!("/tasks/{id}/cancel"), &json!({}));
    assert_eq!(status, 409, "cancelling twice is a conflict: {again}");
    assert_eq!(again["error"]["code"], "conflict");
    let (status, retried) = host.post(&format!("/tasks/{id}/retry"), &json!({}));
    assert_eq!(status, 200, "{retried}");
    assert_eq!(retried["status"], "pending");
    host.wait_for_status(id, "done", WAIT);
    let (status, body) = host.post(&format!("/tasks/{id}/retry"), &json!({}));
    assert_eq!(status, 409, "a done task is not retried: {body}");
    let (status, body) = host.post("/tasks/999999/cancel", &json!({}));
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"]["code"], "not_found");
}

#[test]
fn listing_filters_by_status_and_type_and_pages() {
    let ws = Workspace::with_plugins(&["noop", "flaky"]);
    let host = ws.start(&[]);
    let ids: Vec<i64> = (0..5)
        .map(|i| {
            host.enqueue("noop", json!({"i": i}))["id"]
                .as_i64()
                .unwrap()
        })
        .collect();
    let failing = host.enqueue_with(json!({"task_type": "flaky", "payload": {"fail": "no"}}));
    for id in &ids {
        host.wait_for_status(*id, "done", WAIT);
    }
    host.wait_for_status(failing["id"].as_i64().unwrap(), "failed", WAIT);
    let (_, failed) = host.get("/tasks?status=failed");
    assert_eq!(failed["tasks"].as_array().unwrap().len(), 1);
    let (_, page) = host.get("/tasks?type=noop&limit=3");
    let first: Vec<i64> = page["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_i64().unwrap())
        .collect();
    assert_eq!(first, [ids[4], ids[3], ids[2]]);
    let next = page["next_before"].as_i64().unwrap();
    let (_, page) = host.get(&format!("/tasks?type=noop&limit=3&before={next}"));
    let second: Vec<i64> = page["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_i64().unwrap())
        .collect();
    assert_eq!(second, [ids[1], ids[0]]);
    assert!(page["next_before"].is_null());
    let (status, body) = host.get("/tasks?status=exploded");
    assert_eq!(status, 400, "{body}");
}

#[test]
fn delayed_task_waits_for_its_time() {
    let ws = Workspace::with_plugins(&["noop"]);
    let host = ws.start(&[]);
    let task = host.enqueue_with(json!({"task_type": "noop", "payload": {}, "delay": 1.0}));
    let id = task["id"].as_i64().unwrap();
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(host.task(id)["status"], "pending", "not due yet");
    let done = host.wait_for_status(id, "done", WAIT);
    let created =
        chrono::DateTime::parse_from_rfc3339(done["created_at"].as_str().unwrap()).unwrap();
    let attempted =
        chrono::DateTime::parse_from_rfc3339(done["attempted_at"].as_str().unwrap()).unwrap();
    assert!(
        attempted - created >= chrono::Duration::milliseconds(1000),
        "ran too early"
    );
}

#[test]
fn enqueue_answers_carry_an_estimated_completion_time() {
    let ws = Workspace::with_plugins(&["sleepy"]);
    let host = ws.start(&["--concurrency", "2"]);
    let parse = |value: &serde_json::Value| {
        chrono::DateTime::parse_from_rfc3339(value.as_str().unwrap()).unwrap()
    };

    let first = host.enqueue_with(
        json!({"task_type": "sleepy", "payload": {"ms": 300}, "idempotency_key": "first"}),
    );
    assert!(
        first["estimated_done_at"].is_null(),
        "no attempt of the type has finished yet: {first:#}"
    );
    host.wait_for_status(first["id"].as_i64().unwrap(), "done", WAIT);

    // Six tasks on two slots after one attempt of about 0.3 s: three rounds, later and later.
    let tasks: Vec<_> = (0..6)
        .map(|_| json!({"task_type": "sleepy", "payload": {"ms": 300}}))
        .collect();
    let (status, batch) = host.post("/tasks/batch", &json!({"tasks": tasks}));
    assert_eq!(status, 201, "{batch:#}");
    let estimates: Vec<_> = batch["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| parse(&t["estimated_done_at"]))
        .collect();
    let created = parse(&batch["tasks"][0]["created_at"]);
    assert!(estimates[0] > created, "{batch:#}");
    assert!(
        estimates.windows(2).all(|w| w[0] <= w[1]),
        "later tasks are estimated later: {estimates:?}"
    );
    let spread = (estimates[5] - estimates[0]).num_milliseconds();
    assert!(
        spread >= 300,
        "two more rounds of about 0.3 s each separate the first and the last: {estimates:?}"
    );
    assert!(
        estimates[5] < created + chrono::Duration::seconds(30),
        "{estimates:?}"
    );

    // The status API estimates a waiting task too, and stops once it is done.
    let last_id = batch["tasks"][5]["id"].as_i64().unwrap();
    let waiting = host.task(last_id);
    if waiting["status"] == "pending" || waiting["status"] == "running" {
        assert!(!waiting["estimated_done_at"].is_null(), "{waiting:#}");
    }
    let done = host.wait_for_status(last_id, "done", WAIT);
    assert!(done["estimated_done_at"].is_null(), "{done:#}");

    // A delayed task is estimated after its start time.
    let delayed =
        host.enqueue_with(json!({"task_type": "sleepy", "payload": {"ms": 300}, "delay": "60s"}));
    assert!(
        parse(&delayed["estimated_done_at"]) >= parse(&delayed["next_run_at"]),
        "{delayed:#}"
    );
    assert!(
        parse(&delayed["estimated_done_at"]) > created + chrono::Duration::seconds(59),
        "{delayed:#}"
    );
    let polled = host.task(delayed["id"].as_i64().unwrap());
    assert!(
        parse(&polled["estimated_done_at"]) >= parse(&polled["next_run_at"]),
        "{polled:#}"
    );

    // A duplicate of a finished task has nothing left to estimate.
    let (status, again) = host.post(
        "/tasks",
        &json!({"task_type": "sleepy", "payload": {"ms": 300}, "idempotency_key": "first"}),
    );
    assert_eq!(status, 200, "{again:#}");
    assert_eq!(again["duplicate"], true);
    assert!(again["estimated_done_at"].is_null(), "{again:#}");
}
