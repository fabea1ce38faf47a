//! The CLI's client commands against a running host.

use std::process::Command;

use crate::util::Workspace;

fn spool(url: &str, args: &[&str]) -> (bool, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_spool"))
        .args(args)
        .env("SPOOL_URL", url)
        .env_remove("SPOOL_API_TOKEN")
        .output()
        .unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn enqueue_wait_status_tasks_cancel_retry() {
    let ws = Workspace::with_plugins(&["notify", "noop"]);
    let host = ws.start(&[]);
    let payload = r#"{"channel":"email","to":"ana@example.com","template":"Hi {{name}}","vars":{"name":"Ana"}}"#;
    let (ok, out, err) = spool(&host.url, &["enqueue", "notify", payload, "--wait"]);
    assert!(ok, "{out}{err}");
    let task: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(task["status"], "done");
    assert_eq!(task["result"]["body"], "Hi Ana");

    let (ok, out, _) = spool(
        &host.url,
        &["enqueue", "noop", "{}", "--delay", "1h", "--priority", "3"],
    );
    assert!(ok);
    let later: serde_json::Value = serde_json::from_str(&out).unwrap();
    let id = later["id"].to_string();
    assert_eq!(later["priority"], 3);
    let (ok, out, _) = spool(&host.url, &["cancel", &id]);
    assert!(ok && out.contains("cancelled"), "{out}");
    let (ok, out, _) = spool(&host.url, &["retry", &id]);
    assert!(ok && out.contains("pending"), "{out}");
    let (ok, out, _) = spool(&host.url, &["status", &id]);
    assert!(ok && out.contains(&format!("\"id\": {id}")), "{out}");
    let (ok, out, _) = spool(&host.url, &["tasks", "--type", "notify"]);
    assert!(
        ok && out.contains("notify") && out.contains("done"),
        "{out}"
    );
    let row = out.lines().find(|line| line.contains("notify")).unwrap();
    let notify_id = task["id"].to_string();
    assert!(
        row.starts_with(&format!("{notify_id:>8}  notify")),
        "the id column is right-aligned under ID: {out}"
    );

    let (ok, _, err) = spool(&host.url, &["enqueue", "invoice", "{}"]);
    assert!(!ok);
    assert!(
        err.contains("unknown_task_type") && err.contains("noop, notify"),
        "{err}"
    );
    let (ok, _, err) = spool(&host.url, &["enqueue", "noop", "{not json"]);
    assert!(!ok && err.contains("not valid JSON"), "{err}");
    let (ok, _, err) = spool("http://127.0.0.1:9", &["status", "1"]);
    assert!(!ok && err.contains("cannot reach"), "{err}");
}

#[test]
fn every_command_has_help() {
    for command in [
        "serve",
        "enqueue",
        "status",
        "tasks",
        "retry",
        "cancel",
        "health",
        "archive",
        "plugins",
        "schedules",
        "plugin new",
        "plugin build",
    ] {
        let mut args: Vec<&str> = command.split(' ').collect();
        args.push("--help");
        let (ok, out, _) = spool("http://127.0.0.1:9", &args);
        assert!(ok && out.contains("Usage"), "{command}: {out}");
    }
}
