//! `GET /openapi.json` describes every route, and its task schema matches real responses.

use serde_json::{Value, json};
use std::collections::BTreeSet;

use crate::util::Workspace;

#[test]
fn openapi_describes_every_route_and_the_real_task_shape() {
    let ws = Workspace::with_plugins(&["noop"]);
    let host = ws.start(&[]);
    let (status, spec) = host.get("/openapi.json");
    assert_eq!(status, 200);
    assert!(spec["openapi"].as_str().unwrap().starts_with("3."));
    let routes: BTreeSet<(String, String)> = spec["paths"]
        .as_object()
        .unwrap()
        .iter()
        .flat_map(|(path, item)| {
            item.as_object()
                .unwrap()
                .keys()
                .map(move |method| (method.clone(), path.clone()))
        })
        .collect();
    let expected: BTreeSet<(String, String)> = [
        ("post", "/tasks"),
        ("get", "/tasks"),
        ("post", "/tasks/batch"),
        ("get", "/tasks/{id}"),
        ("post", "/tasks/{id}/retry"),
        ("post", "/tasks/{id}/cancel"),
        ("get", "/health"),
        ("get", "/plugins"),
        ("get", "/stats"),
        ("get", "/metrics"),
        ("get", "/schedules"),
        ("get", "/alerts"),
        ("post", "/alerts/drill"),
        ("post", "/tasks/retry"),
        ("post", "/tasks/discard"),
        ("get", "/types"),
        ("post", "/types/{name}/pause"),
        ("post", "/types/{name}/resume"),
        ("post", "/plugins/{name}/deploy"),
        ("post", "/plugins/{name}/promote"),
        ("post", "/plugins/{name}/rollback"),
        ("get", "/plugins/{name}/versions"),
        ("get", "/tasks/{id}/records"),
        ("get", "/tasks/{id}/records/{attempt}"),
        ("get", "/builds/{digest}"),
        ("delete", "/plugins/{name}/deployment"),
    ]
    .into_iter()
    .map(|(m, p)| (m.to_string(), p.to_string()))
    .collect();
    assert_eq!(routes, expected);

    // Every documented route answers (none is 404/405 on this host).
    for (method, path) in &expected {
        let path = path.replace("{id}", "1");
        let response = match method.as_str() {
            "get" => host.http.get(format!("{}{path}", host.url)).send().unwrap(),
            "delete" => host
                .http
                .delete(format!("{}{path}", host.url))
                .send()
                .unwrap(),
            _ => host
                .http
                .post(format!("{}{path}", host.url))
                .json(&json!({"task_type": "noop", "tasks": []}))
                .send()
                .unwrap(),
        };
        assert_ne!(response.status().as_u16(), 405, "{method} {path}");
    }

    // The documented task properties are exactly the fields a real task has.
    let task = host.enqueue("noop", json!({"a": 1}));
    let schema = &spec["components"]["schemas"]["TaskView"]["properties"];
    let documented: BTreeSet<&str> = schema
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let mut actual: BTreeSet<&str> = task
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    // The enqueue answer adds `duplicate` and `payload_differs` to the task; its own schema
    // documents them.
    let enqueue_schema = spec["components"]["schemas"]["EnqueueResponse"].to_string();
    assert!(
        actual.remove("duplicate"),
        "the enqueue answer says whether it was a duplicate"
    );
    assert!(enqueue_schema.contains("\"duplicate\""), "{enqueue_schema}");
    assert!(
        actual.remove("payload_differs"),
        "the enqueue answer says whether a duplicate's payload differs"
    );
    assert!(
        enqueue_schema.contains("\"payload_differs\""),
        "{enqueue_schema}"
    );
    assert_eq!(documented, actual);
    assert!(actual.contains("estimated_done_at"));
    let error_schema: &Value = &spec["components"]["schemas"]["ErrorDetail"]["properties"];
    assert!(error_schema.get("code").is_some() && error_schema.get("message").is_some());
}

#[test]
fn openapi_documents_what_the_host_really_answers() {
    let ws = Workspace::with_plugins(&["noop", "report"]);
    let host = ws.start(&["--max-batch", "70"]);
    let (_, spec) = host.get("/openapi.json");
    let responses = |method: &str, path: &str| -> BTreeSet<String> {
        spec["paths"][path][method]["responses"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect()
    };
    for path in ["/tasks", "/tasks/batch"] {
        let documented = responses("post", path);
        for status in ["400", "403", "408", "413", "415", "422", "503"] {
            assert!(
                documented.contains(status),
                "POST {path} documents {status}: {documented:?}"
            );
        }
    }
    for (method, path) in [
        ("get", "/tasks/{id}"),
        ("post", "/tasks/{id}/retry"),
        ("post", "/tasks/{id}/cancel"),
    ] {
        assert!(
            responses(method, path).contains("400"),
            "{method} {path} documents a malformed id"
        );
    }
    // Without a token nothing is required, so no 401 and no security requirement.
    assert!(!responses("get", "/tasks").contains("401"));
    assert!(spec["paths"]["/tasks"]["get"].get("security").is_none());

    let request = &spec["components"]["schemas"]["EnqueueRequest"];
    assert_eq!(
        request["not"]["required"],
        json!(["run_at", "delay"]),
        "run_at and delay exclude each other: {request}"
    );
    assert_eq!(
        request["properties"]["task_type"]["enum"],
        json!(["noop", "report"]),
        "the host's task types"
    );
    assert_eq!(request["properties"]["max_retry"]["maximum"], json!(1000));
    assert_eq!(
        spec["components"]["schemas"]["BatchRequest"]["properties"]["tasks"]["maxItems"],
        json!(70)
    );
    let delay = request["properties"]["delay"]["oneOf"].to_string();
    assert!(
        delay.contains("3155760000") && delay.contains("pattern"),
        "{delay}"
    );
    let links = &spec["paths"]["/tasks"]["post"]["responses"]["201"]["links"];
    assert_eq!(links["GetTask"]["operationId"], "get_task", "{links}");
    assert_eq!(links["GetTask"]["parameters"]["id"], "$response.body#/id");
}
