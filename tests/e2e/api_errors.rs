//! Bad requests get a clear JSON error with a stable code, and nothing is stored.

use serde_json::json;

use crate::util::Workspace;

#[test]
fn bad_requests_are_rejected_and_nothing_is_stored() {
    let ws = Workspace::with_plugins(&["noop", "report"]);
    let host = ws.start(&[
        "--max-payload",
        "1KiB",
        "--max-body",
        "64KiB",
        "--max-batch",
        "50",
    ]);

    let (status, body) = host.post_raw("/tasks", "{\"task_type\": \"noop\", ", "application/json");
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "invalid_json");

    let (status, body) = host.post("/tasks", &json!({"payload": {}}));
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["code"], "invalid_request");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("task_type"),
        "{body}"
    );

    let (status, body) = host.post(
        "/tasks",
        &json!({"task_type": "noop", "priority": "urgent"}),
    );
    assert_eq!(status, 422, "{body}");

    let (status, body) = host.post("/tasks", &json!({"task_type": "invoice"}));
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["code"], "unknown_task_type");
    assert_eq!(body["error"]["known_task_types"], json!(["noop", "report"]));
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("noop, report")
    );

    let big = "x".repeat(2000);
    let (status, body) = host.post(
        "/tasks",
        &json!({"task_type": "noop", "payload": {"blob": big}}),
    );
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["error"]["code"], "payload_too_large");

    let huge = "y".repeat(100_000);
    let (status, body) = host.post(
        "/tasks",
        &json!({"task_type": "noop", "payload": {"blob": huge}}),
    );
    assert_eq!(status, 413, "a body over max_body is refused: {body}");
    assert_eq!(body["error"]["code"], "payload_too_large");

    let (status, body) = host.post_raw("/tasks", "{\"task_type\": \"noop\"}", "text/plain");
    assert_eq!(status, 415, "{body}");

    let (status, body) = host.post(
        "/tasks",
        &json!({"task_type": "noop", "delay": "30s", "run_at": "2030-01-01T00:00:00Z"}),
    );
    assert_eq!(status, 422, "{body}");

    // One bad task spoils the batch: nothing of it is inserted.
    let (status, body) = host.post(
        "/tasks/batch",
        &json!({"tasks": [{"task_type": "noop"}, {"task_type": "noop"}, {"task_type": "nope"}]}),
    );
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["index"], 2);
    let many: Vec<_> = (0..51).map(|_| json!({"task_type": "noop"})).collect();
    let (status, body) = host.post("/tasks/batch", &json!({ "tasks": many }));
    assert_eq!(status, 413, "{body}");

    assert!(
        host.all_tasks().is_empty(),
        "no rejected request may leave a row"
    );
    let (status, _) = host.get("/tasks/12345");
    assert_eq!(status, 404);
}

#[test]
fn api_token_guards_changes_and_reads() {
    let ws = Workspace::with_plugins(&["noop"]);
    let host = ws.start(&["--api-token", "s3cret"]);
    let (status, body) = host.post("/tasks", &json!({"task_type": "noop"}));
    assert_eq!(status, 401, "{body}");
    assert_eq!(body["error"]["code"], "unauthorized");
    let response = host
        .http
        .post(format!("{}/tasks", host.url))
        .bearer_auth("wrong")
        .json(&json!({"task_type": "noop"}))
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 401);
    let response = host
        .http
        .post(format!("{}/tasks", host.url))
        .bearer_auth("s3cret")
        .json(&json!({"task_type": "noop"}))
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 201);
    let (status, body) = host.get("/tasks");
    assert_eq!(
        status, 401,
        "payloads and results are data: reads need the token too: {body}"
    );
    let page: serde_json::Value = host
        .http
        .get(format!("{}/tasks", host.url))
        .bearer_auth("s3cret")
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(
        page["tasks"].as_array().unwrap().len(),
        1,
        "only the authorized enqueue stored a task"
    );
    let (status, _) = host.get("/health");
    assert_eq!(status, 200);
}

/// Every body the API takes is a JSON object. A derived Rust struct would also read an array of
/// its fields in order, so `[[], null, null, null, null, null, false, true]` would be a discard
/// of every task; each route that takes a body must refuse it and change nothing.
#[test]
fn array_bodies_are_refused_on_every_route() {
    let ws = Workspace::with_plugins(&["noop"]);
    let host = ws.start(&[]);
    let (status, body) = host.post("/tasks", &json!({"task_type": "noop", "delay": "1h"}));
    assert_eq!(status, 201, "{body}");
    let waiting = body["id"].clone();

    let (_, spec) = host.get("/openapi.json");
    let (mut taking_a_body, mut taking_a_form) = (Vec::new(), Vec::new());
    for (path, operations) in spec["paths"].as_object().unwrap() {
        let content = &operations["post"]["requestBody"]["content"];
        if content["application/json"].is_object() {
            taking_a_body.push(path.clone());
        } else if content["multipart/form-data"].is_object() {
            taking_a_form.push(path.clone());
        }
    }
    taking_a_body.sort();
    assert_eq!(
        taking_a_body,
        ["/tasks", "/tasks/batch", "/tasks/discard", "/tasks/retry"],
        "a new route with a body: it is covered below, update this list"
    );
    // The deploy takes a form (a build's bytes), and says so to a JSON body.
    assert_eq!(taking_a_form, ["/plugins/{name}/deploy"]);
    let (status, body) = host.post("/plugins/noop/deploy", &json!(["noop"]));
    assert_eq!(status, 415, "{body}");
    assert_eq!(body["error"]["code"], "unsupported_media_type", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("multipart/form-data"),
        "{body}"
    );

    let every_field_of_a_bulk_request = json!([[], null, null, null, null, null, false, true]);
    let arrays = [
        json!([[]]),
        json!([]),
        json!(["noop"]),
        every_field_of_a_bulk_request,
    ];
    for path in &taking_a_body {
        for array in &arrays {
            let (status, body) = host.post(path, array);
            assert_eq!(status, 422, "POST {path} {array}: {body}");
            assert_eq!(body["error"]["code"], "invalid_request", "{body}");
            let message = body["error"]["message"].as_str().unwrap();
            assert!(message.contains("expected a JSON object"), "{message}");
        }
    }
    let (status, body) = host.post("/tasks/batch", &json!({"tasks": [["noop"]]}));
    assert_eq!(status, 422, "a task in a batch is an object too: {body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("expected a JSON object"),
        "{body}"
    );

    let tasks = host.all_tasks();
    assert_eq!(tasks.len(), 1, "no refused body may add a task: {tasks:?}");
    assert_eq!(tasks[0]["id"], waiting);
    assert_eq!(
        tasks[0]["status"], "pending",
        "no refused body may discard the waiting task"
    );
}
