//! The second door: plain WASI programs (payload on stdin, result on stdout, exit status),
//! both as a component exporting wasi:cli/run and as a preview1 core module with `_start`.

use serde_json::json;
use std::time::Duration;

use crate::util::{Workspace, artifact, preview1_artifact};

const WAIT: Duration = Duration::from_secs(60);

#[test]
fn wasi_programs_run_as_handlers_through_both_doors() {
    let ws = Workspace::with_plugins(&[]);
    std::fs::copy(artifact("shout"), ws.plugin_dir().join("shout_p2.wasm")).unwrap();
    std::fs::copy(
        preview1_artifact("shout"),
        ws.plugin_dir().join("shout_p1.wasm"),
    )
    .unwrap();
    for task_type in ["shout_p1", "shout_p2"] {
        ws.manifest(task_type, "max_retry = 1\nbackoff_base = \"50ms\"\n");
    }
    let host = ws.start(&[]);
    let (_, plugins) = host.get("/plugins");
    let kinds: Vec<&str> = plugins["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["wasi-preview1", "wasi-command"],
        "both load, each through its door: {plugins:#}"
    );
    for task_type in ["shout_p1", "shout_p2"] {
        let ok = host.enqueue(task_type, json!({"text": "approval 42 is ready"}));
        let done = host.wait_for_status(ok["id"].as_i64().unwrap(), "done", WAIT);
        assert_eq!(
            done["result"],
            json!({"shout": "APPROVAL 42 IS READY"}),
            "{task_type}: {done:#}"
        );
        // A program is measured as a handler is: fuel and peak memory are on record.
        let cost = &done["history"][0]["cost"];
        assert!(
            cost["fuel_used"].as_u64().unwrap() > 0,
            "{task_type}: {done:#}"
        );
        assert!(
            cost["peak_memory"].as_u64().unwrap() >= 65536,
            "at least one wasm page: {task_type}: {done:#}"
        );

        let refused = host.enqueue(
            task_type,
            json!({"text": "x", "fail": "mail server is down"}),
        );
        let failed = host.wait_for_status(refused["id"].as_i64().unwrap(), "failed", WAIT);
        let error = failed["last_error"].as_str().unwrap();
        // A preview1 module reports its exit code; WASI 0.2's wasi:cli/run only success or failure.
        let status = if task_type == "shout_p1" {
            "exited with status 3"
        } else {
            "exited with status 1"
        };
        assert!(
            error.contains(status) && error.contains("mail server is down"),
            "{task_type}: {error}"
        );
        assert_eq!(
            (&failed["attempts"], &failed["retry_count"]),
            (&json!(2), &json!(1)),
            "a non-zero exit is retried per policy: {failed:#}"
        );
    }
}
