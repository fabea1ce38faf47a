//! Deny by default: no files, environment or network unless a manifest grants them.

use serde_json::json;
use std::time::Duration;

use crate::util::{TestServer, Workspace};

const WAIT: Duration = Duration::from_secs(60);

#[test]
fn files_and_environment_only_where_granted() {
    let ws = Workspace::with_plugins(&[]);
    ws.add_plugin("readfile", "closed");
    ws.add_plugin("readfile", "granted");
    std::fs::create_dir_all(ws.grants_dir().join("data")).unwrap();
    std::fs::create_dir_all(ws.grants_dir().join("out")).unwrap();
    std::fs::write(ws.grants_dir().join("data/in.txt"), "secret report input").unwrap();
    ws.manifest(
        "granted",
        "[[dirs]]\nhost = \"data\"\nguest = \"/data\"\n[[dirs]]\nhost = \"out\"\nguest = \"/out\"\nwritable = true\n[env]\nMAIL_FROM = \"ops@example.com\"\n",
    );
    let host = ws.start(&[]);
    let run = |task_type: &str, payload: serde_json::Value| {
        let task =
            host.enqueue_with(json!({"task_type": task_type, "payload": payload, "max_retry": 0}));
        host.wait_final(task["id"].as_i64().unwrap())
    };

    let denied = run("closed", json!({"path": "/data/in.txt"}));
    assert_eq!(denied["status"], "failed");
    assert!(
        denied["last_error"]
            .as_str()
            .unwrap()
            .contains("cannot read"),
        "{denied:#}"
    );
    let escape = run("closed", json!({"path": "/etc/hostname"}));
    assert_eq!(
        escape["status"], "failed",
        "no host file is visible: {escape:#}"
    );
    let no_env = run("closed", json!({"env": "HOME"}));
    assert_eq!(
        no_env["result"]["value"],
        serde_json::Value::Null,
        "no host environment: {no_env:#}"
    );

    let read = run("granted", json!({"path": "/data/in.txt"}));
    assert_eq!(read["result"]["content"], "secret report input", "{read:#}");
    let read_only = run(
        "granted",
        json!({"write": {"path": "/data/new.txt", "content": "x"}}),
    );
    assert_eq!(
        read_only["status"], "failed",
        "read-only grant: {read_only:#}"
    );
    assert!(!ws.grants_dir().join("data/new.txt").exists());
    let written = run(
        "granted",
        json!({"write": {"path": "/out/report.svg", "content": "<svg/>"}}),
    );
    assert_eq!(written["status"], "done", "{written:#}");
    assert_eq!(
        std::fs::read_to_string(ws.grants_dir().join("out/report.svg")).unwrap(),
        "<svg/>"
    );
    let outside = run("granted", json!({"path": "/data/../../../etc/hostname"}));
    assert_eq!(
        outside["status"], "failed",
        "no escape from a grant: {outside:#}"
    );
    let env = run("granted", json!({"env": "MAIL_FROM"}));
    assert_eq!(env["result"]["value"], "ops@example.com");
}

#[test]
fn outbound_http_only_to_listed_hosts() {
    let allowed = TestServer::start("hello from the mail api");
    let other = TestServer::start("should never be reached");
    let ws = Workspace::with_plugins(&["httpget"]);
    ws.manifest(
        "httpget",
        &format!(
            "max_retry = 0\n[http]\nallow = [\"127.0.0.1:{}\"]\n",
            allowed.port
        ),
    );
    let host = ws.start(&[]);
    let ok = host.enqueue(
        "httpget",
        json!({"url": format!("http://127.0.0.1:{}/send", allowed.port)}),
    );
    let ok = host.wait_for_status(ok["id"].as_i64().unwrap(), "done", WAIT);
    assert_eq!(ok["result"]["status"], 200);
    assert_eq!(ok["result"]["body"], "hello from the mail api");
    assert_eq!(allowed.count(), 1);

    let denied = host.enqueue(
        "httpget",
        json!({"url": format!("http://127.0.0.1:{}/steal", other.port)}),
    );
    let denied = host.wait_for_status(denied["id"].as_i64().unwrap(), "failed", WAIT);
    assert!(
        denied["last_error"]
            .as_str()
            .unwrap()
            .contains("http request failed"),
        "{denied:#}"
    );
    assert!(
        denied["log"].as_str().unwrap().contains("denied"),
        "{denied:#}"
    );
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(other.count(), 0, "no connection was made");

    let ws2 = Workspace::with_plugins(&["httpget"]);
    let closed = ws2.start(&[]);
    let task = closed.enqueue_with(json!({"task_type": "httpget", "payload": {"url": format!("http://127.0.0.1:{}/", allowed.port)}, "max_retry": 0}));
    closed.wait_for_status(task["id"].as_i64().unwrap(), "failed", WAIT);
    assert_eq!(allowed.count(), 1, "without a grant nothing goes out");
}
