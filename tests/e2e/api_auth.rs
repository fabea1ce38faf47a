//! Tokens: with an API token configured, reads need a token too (payloads, results and logs are
//! data); a read token allows reads only; `/health` and the API description stay open, and
//! without a token `/health` tells only its status; the Bearer scheme is accepted in any case;
//! the CLI sends the right token for each command.

use serde_json::{Value, json};
use std::process::Command;

use crate::util::Workspace;

#[test]
fn reads_need_the_read_or_api_token_and_changes_the_api_token() {
    let ws = Workspace::with_plugins(&["noop"]);
    let host = ws.start(&["--api-token", "w-token", "--read-token", "r-token"]);
    let send =
        |method: &str, path: &str, authorization: Option<&str>| -> (u16, Value, Option<String>) {
            let mut request = match method {
                "GET" => host.http.get(format!("{}{path}", host.url)),
                _ => host
                    .http
                    .post(format!("{}{path}", host.url))
                    .json(&json!({"task_type": "noop", "delay": "1h"})),
            };
            if let Some(value) = authorization {
                request = request.header("authorization", value);
            }
            let response = request.send().unwrap();
            let challenge = response
                .headers()
                .get("www-authenticate")
                .map(|v| v.to_str().unwrap().to_string());
            (
                response.status().as_u16(),
                response.json().unwrap_or(Value::Null),
                challenge,
            )
        };

    let (status, task, _) = send("POST", "/tasks", Some("Bearer w-token"));
    assert_eq!(status, 201, "{task}");
    let id = task["id"].as_i64().unwrap();

    for path in ["/tasks", &format!("/tasks/{id}"), "/plugins"] {
        let (status, body, challenge) = send("GET", path, None);
        assert_eq!(status, 401, "GET {path} without a token: {body}");
        assert_eq!(body["error"]["code"], "unauthorized");
        assert_eq!(challenge.as_deref(), Some("Bearer"), "401 names the scheme");
        let (status, body, _) = send("GET", path, Some("Bearer wrong"));
        assert_eq!(status, 401, "GET {path} with a wrong token: {body}");
        for token in [
            "Bearer r-token",
            "bearer r-token",
            "BEARER w-token",
            "Bearer w-token",
        ] {
            let (status, body, _) = send("GET", path, Some(token));
            assert_eq!(status, 200, "GET {path} with {token}: {body}");
        }
    }
    let (_, task, _) = send("GET", &format!("/tasks/{id}"), Some("bearer r-token"));
    assert_eq!(
        task["payload"],
        json!({}),
        "the read token reads the task's data"
    );

    let (status, body, _) = send(
        "POST",
        &format!("/tasks/{id}/cancel"),
        Some("Bearer r-token"),
    );
    assert_eq!(status, 401, "the read token changes nothing: {body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("read token"),
        "{body}"
    );
    let (status, body, _) = send(
        "POST",
        &format!("/tasks/{id}/cancel"),
        Some("bEaReR w-token"),
    );
    assert_eq!(status, 200, "{body}");

    // The health check and the description stay open; without a token the health check says
    // only whether the host serves, the database's state and the leader.
    let (status, health, _) = send("GET", "/health", None);
    assert_eq!(
        (status, health["status"].as_str()),
        (200, Some("ok")),
        "{health}"
    );
    let mut fields: Vec<&str> = health
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.as_str())
        .collect();
    fields.sort();
    assert_eq!(fields, ["database", "leader", "status"], "{health}");
    let (status, health, _) = send("GET", "/health", Some("Bearer r-token"));
    assert_eq!(status, 200, "{health}");
    assert_eq!(
        health["counts"]["cancelled"], 1,
        "the read token sees the counts: {health}"
    );
    assert!(health["task_types"].is_array(), "{health}");
    let (status, spec, _) = send("GET", "/openapi.json", None);
    assert_eq!(status, 200);
    assert_eq!(
        spec["paths"]["/tasks/{id}"]["get"]["security"],
        json!([{"bearer": []}]),
        "reads are documented as needing the token"
    );
    assert!(spec["paths"]["/tasks/{id}"]["get"]["responses"]["401"].is_object());
    assert!(spec["paths"]["/health"]["get"].get("security").is_none());
}

#[test]
fn a_read_token_without_an_api_token_is_refused_at_start() {
    let stderr = refused_at_start(&["--listen", "127.0.0.1:0", "--read-token", "r"]);
    assert!(
        stderr.contains("setting `read_token` (--read-token): needs api_token"),
        "{stderr}"
    );
}

#[test]
fn an_address_beyond_loopback_without_a_token_is_refused_at_start() {
    let stderr = refused_at_start(&["--listen", "0.0.0.0:0"]);
    assert!(
        stderr.contains("setting `listen` (--listen): 0.0.0.0:0 is reachable from other machines")
            && stderr.contains("DNS rebinding"),
        "{stderr}"
    );
}

/// Starts `spool serve` with `args` (and no token from the environment); returns its error
/// output once it has exited with a failure.
fn refused_at_start(args: &[&str]) -> String {
    let ws = Workspace::with_plugins(&[]);
    let output = Command::new(env!("CARGO_BIN_EXE_spool"))
        .arg("serve")
        .args(args)
        .args(["--database-url", &ws.database_url()])
        .arg("--plugins")
        .arg(ws.plugin_dir())
        .env_remove("SPOOL_API_TOKEN")
        .env_remove("SPOOL_OPEN_API")
        .output()
        .unwrap();
    assert!(!output.status.success());
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn the_cli_sends_the_read_token_for_reads_and_the_api_token_for_changes() {
    let ws = Workspace::with_plugins(&["noop"]);
    let host = ws.start(&["--api-token", "w-token", "--read-token", "r-token"]);
    let spool = |args: &[&str]| host.cli(args, &[]);

    let (ok, out) = spool(&[
        "enqueue",
        "noop",
        "{}",
        "--delay",
        "1h",
        "--read-token",
        "r-token",
    ]);
    assert!(
        !ok && out.contains("unauthorized"),
        "a read token alone cannot enqueue: {out}"
    );
    let (ok, out) = spool(&[
        "enqueue",
        "noop",
        "{}",
        "--delay",
        "1h",
        "--token",
        "w-token",
        "--read-token",
        "r-token",
    ]);
    assert!(ok, "{out}");
    let id = serde_json::from_str::<Value>(&out).unwrap()["id"].to_string();
    for read in [
        vec!["tasks"],
        vec!["status", &id],
        vec!["plugins"],
        vec!["health"],
    ] {
        let (ok, out) = spool(&[read.as_slice(), &["--read-token", "r-token"][..]].concat());
        assert!(ok, "{read:?} with the read token: {out}");
        let (ok, out) = spool(&[read.as_slice(), &["--token", "w-token"][..]].concat());
        assert!(ok, "{read:?} with the API token: {out}");
    }
    let (ok, out) = spool(&["tasks"]);
    assert!(!ok && out.contains("unauthorized"), "{out}");
    let (ok, out) = spool(&[
        "cancel",
        &id,
        "--token",
        "w-token",
        "--read-token",
        "r-token",
    ]);
    assert!(
        ok && out.contains("cancelled"),
        "changes go with the API token even when a read token is given: {out}"
    );
}
