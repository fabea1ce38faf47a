//! The benchmark's calls to a host's API: JSON in, JSON out, failing loudly.

use serde_json::{Value, json};

/// `GET url`, the answer as JSON.
pub async fn get_json(client: &reqwest::Client, url: &str) -> Value {
    client.get(url).send().await.unwrap().json().await.unwrap()
}

/// `POST url` with `body`, the answer as JSON.
pub async fn post_json(client: &reqwest::Client, url: &str, body: &Value) -> Value {
    client
        .post(url)
        .json(body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// Enqueues one task through the host at `base`; returns its id.
pub async fn enqueue(client: &reqwest::Client, base: &str, task_type: &str, payload: Value) -> i64 {
    let task = post_json(
        client,
        &format!("{base}/tasks"),
        &json!({"task_type": task_type, "payload": payload}),
    )
    .await;
    task["id"].as_i64().expect("an enqueued task's id")
}

/// Waits (long-poll) until task `id` is final; returns it.
pub async fn wait_done(client: &reqwest::Client, base: &str, id: i64) -> Value {
    get_json(client, &format!("{base}/tasks/{id}?wait=30s")).await
}
