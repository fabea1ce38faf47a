//! The test handlers' HTTP client (plugins/testing/httpclient): a request the server received
//! whole and answered is a success, even when the connection is gone by the time the client
//! finishes sending the body.

use serde_json::{Value, json};
use std::time::Duration;

use crate::util::{TestServer, Workspace};

#[test]
fn an_answered_request_is_a_success_even_if_the_server_closed_early() {
    let server = TestServer::start_closing_early("accepted");
    let ws = Workspace::with_plugins(&["httpget"]);
    ws.manifest(
        "httpget",
        &format!(
            "max_retry = 3\nbackoff_base = \"100ms\"\n[http]\nallow = [\"127.0.0.1:{}\"]\n",
            server.port
        ),
    );
    let host = ws.start(&["--concurrency", "4"]);
    // The client races the host's HTTP stack: often it is still flushing the body when the
    // server has answered and closed. Twenty requests make that all but certain to happen.
    let url = format!("http://127.0.0.1:{}/send", server.port);
    let tasks: Vec<Value> = (0..20)
        .map(|_| json!({"task_type": "httpget", "payload": {"url": url, "post": 4 << 20}}))
        .collect();
    let (status, body) = host.post("/tasks/batch", &json!({ "tasks": tasks }));
    assert_eq!(status, 201, "{body}");
    for task in body["tasks"].as_array().unwrap() {
        let done = host.wait_final(task["id"].as_i64().unwrap());
        assert_eq!(done["status"], "done", "{done:#}");
        assert_eq!(done["result"]["status"], 200);
        assert_eq!(done["result"]["body"], "accepted");
        assert_eq!(done["retry_count"], 0, "{done:#}");
    }
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(server.count(), 20, "each request sent once");
}
