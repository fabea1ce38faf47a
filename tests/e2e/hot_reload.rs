//! The plugin folder while serving: new, replaced, broken and removed plugins, live manifests,
//! and the compiled-code cache.

use serde_json::json;
use std::time::Duration;

use crate::util::{Workspace, artifact, deploy, eventually};

const WAIT: Duration = Duration::from_secs(60);

fn plugin<'a>(plugins: &'a serde_json::Value, task_type: &str) -> Option<&'a serde_json::Value> {
    plugins["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["task_type"] == task_type)
}

#[test]
fn a_dropped_in_plugin_registers_its_type_while_serving() {
    let ws = Workspace::with_plugins(&["noop"]);
    let host = ws.start(&[]);
    let (status, body) = host.post("/tasks", &json!({"task_type": "report"}));
    assert_eq!(status, 422, "{body}");
    deploy(&artifact("report"), &ws.plugin_dir().join("report.wasm"));
    eventually(WAIT, "report to register", || {
        plugin(&host.get("/plugins").1, "report").cloned()
    });
    let task = host.enqueue(
        "report",
        json!({"rows": [{"k": "a", "v": 1}], "group_by": "k", "sum": "v"}),
    );
    host.wait_for_status(task["id"].as_i64().unwrap(), "done", WAIT);
}

#[test]
fn replacing_a_plugin_under_load_fails_no_task() {
    let ws = Workspace::with_plugins(&[]);
    ws.add_plugin("sleepy", "work");
    let host = ws.start(&["--concurrency", "8"]);
    let old_version = plugin(&host.get("/plugins").1, "work").unwrap()["version"]
        .as_str()
        .unwrap()
        .to_string();
    let tasks: Vec<_> = (0..1000)
        .map(|_| json!({"task_type": "work", "payload": {"ms": 20}}))
        .collect();
    let (status, body) = host.post("/tasks/batch", &json!({ "tasks": tasks }));
    assert_eq!(status, 201);
    let ids: Vec<i64> = body["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_i64().unwrap())
        .collect();
    // Swap in another build (noop succeeds on any payload) while the backlog drains.
    deploy(&artifact("noop"), &ws.plugin_dir().join("work.wasm"));
    let new_version = eventually(WAIT, "the new build to serve", || {
        let version = plugin(&host.get("/plugins").1, "work")?["version"]
            .as_str()?
            .to_string();
        (version != old_version).then_some(version)
    });
    for id in &ids {
        let task = host.wait_for_status(*id, "done", WAIT);
        assert!(task["last_error"].is_null(), "{task:#}");
    }
    let (_, failed) = host.get("/tasks?status=failed");
    assert!(
        failed["tasks"].as_array().unwrap().is_empty(),
        "the swap failed tasks: {failed:#}"
    );
    let versions: std::collections::BTreeSet<String> = ids
        .iter()
        .map(|id| {
            host.task(*id)["plugin_version"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert!(
        versions.contains(&new_version),
        "new claims use the new build"
    );
    assert!(
        versions
            .iter()
            .all(|v| v == &old_version || v == &new_version)
    );
    assert!(
        versions.contains(&old_version),
        "tasks started before the swap finished on the old build"
    );
    let late = host.enqueue("work", json!({"ms": 1, "late": true}));
    let late = host.wait_for_status(late["id"].as_i64().unwrap(), "done", WAIT);
    assert_eq!(late["plugin_version"], new_version.as_str());
    assert_eq!(
        late["result"]["late"], true,
        "the new build (an echo) answered"
    );
}

#[test]
fn broken_and_half_copied_files_leave_the_old_version_serving() {
    let ws = Workspace::with_plugins(&["report"]);
    let host = ws.start(&[]);
    let good = plugin(&host.get("/plugins").1, "report").unwrap()["version"].clone();
    let target = ws.plugin_dir().join("report.wasm");
    let payload = json!({"rows": [{"k": "a", "v": 1}], "group_by": "k", "sum": "v"});

    // Half a component, as a slow copy leaves it.
    let whole = std::fs::read(artifact("report")).unwrap();
    std::fs::write(&target, &whole[..whole.len() / 2]).unwrap();
    let error = eventually(WAIT, "the load error", || {
        plugin(&host.get("/plugins").1, "report")?["last_error"]
            .as_str()
            .map(String::from)
    });
    assert!(
        error.contains("not a valid WebAssembly component"),
        "{error}"
    );
    assert_eq!(
        plugin(&host.get("/plugins").1, "report").unwrap()["version"],
        good,
        "still the old build"
    );
    let task = host.enqueue("report", payload.clone());
    host.wait_for_status(task["id"].as_i64().unwrap(), "done", WAIT);

    // Not wasm at all; and a component of the wrong world.
    std::fs::write(&target, b"#!/bin/sh\necho not a plugin\n").unwrap();
    std::thread::sleep(Duration::from_millis(300));
    deploy(&artifact("wrongworld"), &target);
    let error = eventually(WAIT, "the wrong-world error", || {
        let e = plugin(&host.get("/plugins").1, "report")?["last_error"]
            .as_str()?
            .to_string();
        e.contains("handler world").then_some(e)
    });
    assert!(error.contains("does not implement"), "{error}");
    let task = host.enqueue("report", payload.clone());
    host.wait_for_status(task["id"].as_i64().unwrap(), "done", WAIT);
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_spool"))
        .args(["plugins", "--url", &host.url])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&output.stdout);
    assert!(
        table.contains("report") && table.contains("does not implement"),
        "{table}"
    );

    // Completing the copy recovers.
    std::fs::write(&target, &whole).unwrap();
    eventually(WAIT, "recovery", || {
        plugin(&host.get("/plugins").1, "report")?["last_error"]
            .is_null()
            .then_some(())
    });
    assert!(
        host.log().contains("keeps serving"),
        "the log says the old version kept serving"
    );
}

#[test]
fn a_removed_plugin_unregisters_and_its_tasks_wait() {
    let ws = Workspace::with_plugins(&["noop"]);
    let host = ws.start(&[]);
    std::fs::remove_file(ws.plugin_dir().join("noop.wasm")).unwrap();
    eventually(WAIT, "noop to unregister", || {
        plugin(&host.get("/plugins").1, "noop")
            .is_none()
            .then_some(())
    });
    let (status, body) = host.post("/tasks", &json!({"task_type": "noop"}));
    assert_eq!(status, 422, "{body}");
    let (_, plugins) = host.get("/plugins");
    let unloaded = &plugins["unloaded"][0];
    assert_eq!(unloaded["task_type"], "noop");
    assert!(unloaded["removed_at"].is_string(), "{plugins:#}");
    assert!(host.log().contains("pending tasks stay pending"));
    // Tasks already queued (a later run_at here) stay pending while the type is gone ...
    drop(host);
    let host = ws.start(&[]);
    deploy(&artifact("noop"), &ws.plugin_dir().join("noop.wasm"));
    let queued = eventually(WAIT, "noop back", || {
        let (status, body) =
            host.post("/tasks", &json!({"task_type": "noop", "payload": {"x": 1}}));
        (status == 201).then_some(body)
    });
    std::fs::remove_file(ws.plugin_dir().join("noop.wasm")).unwrap();
    let later = host.enqueue_with(json!({"task_type": "noop", "delay": "1s"}));
    host.wait_for_status(queued["id"].as_i64().unwrap(), "done", WAIT);
    host.eventually("noop to unregister again", || {
        plugin(&host.get("/plugins").1, "noop")
            .is_none()
            .then_some(())
    });
    std::thread::sleep(Duration::from_millis(1500));
    let waiting = host.task(later["id"].as_i64().unwrap());
    assert_eq!(waiting["status"], "pending", "not failed: {waiting:#}");
    assert_eq!(host.get("/plugins").1["unloaded"][0]["pending"], 1);
    // ... and run when the plugin returns.
    deploy(&artifact("noop"), &ws.plugin_dir().join("noop.wasm"));
    host.wait_for_status(later["id"].as_i64().unwrap(), "done", WAIT);
}

#[test]
fn manifests_reload_live_and_a_bad_one_keeps_the_previous_policy() {
    let ws = Workspace::with_plugins(&["noop"]);
    let host = ws.start(&[]);
    assert_eq!(
        plugin(&host.get("/plugins").1, "noop").unwrap()["policy"]["max_retry"],
        3
    );
    ws.manifest("noop", "max_retry = 7\npriority = 4\n");
    eventually(WAIT, "the new policy", || {
        (plugin(&host.get("/plugins").1, "noop")?["policy"]["max_retry"] == 7).then_some(())
    });
    let task = host.enqueue("noop", json!({}));
    assert_eq!(
        (task["max_retry"].as_i64(), task["priority"].as_i64()),
        (Some(7), Some(4))
    );
    ws.manifest("noop", "max_retry = \"lots\"\n");
    let error = eventually(WAIT, "the manifest error", || {
        plugin(&host.get("/plugins").1, "noop")?["last_error"]
            .as_str()
            .map(String::from)
    });
    assert!(
        error.contains("max_retry"),
        "the error names the field: {error}"
    );
    assert_eq!(
        plugin(&host.get("/plugins").1, "noop").unwrap()["policy"]["max_retry"],
        7,
        "previous policy stays"
    );
}

#[test]
fn compiled_plugins_are_cached_across_restarts() {
    let ws = Workspace::with_plugins(&["report"]);
    let cache = ws.dir.path().join("cache");
    let flags = ["--cache-dir", cache.to_str().unwrap()];
    let host = ws.start(&flags);
    assert!(host.log().contains("cache=Compiled"), "{}", host.log());
    drop(host);
    let artifacts: Vec<_> = walk(&cache)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "cwasm"))
        .collect();
    assert_eq!(
        artifacts.len(),
        1,
        "one artifact for one build: {artifacts:?}"
    );
    let host = ws.start(&flags);
    assert!(host.log().contains("cache=Hit"), "{}", host.log());
    let task = host.enqueue(
        "report",
        json!({"rows": [{"k": "a", "v": 1}], "group_by": "k", "sum": "v"}),
    );
    host.wait_for_status(task["id"].as_i64().unwrap(), "done", WAIT);
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(walk(&path));
        } else {
            found.push(path);
        }
    }
    found
}
