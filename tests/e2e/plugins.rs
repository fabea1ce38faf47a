//! The plugin folder at start: a broken or foreign file never stops the host; the error is
//! visible and the good plugins serve.

use serde_json::json;
use std::time::Duration;

use crate::util::{Workspace, artifact};

#[test]
fn broken_files_are_reported_and_good_plugins_serve() {
    let ws = Workspace::with_plugins(&["noop"]);
    std::fs::write(ws.plugin_dir().join("garbage.wasm"), b"this is not wasm").unwrap();
    let whole = std::fs::read(artifact("report")).unwrap();
    std::fs::write(
        ws.plugin_dir().join("halfcopied.wasm"),
        &whole[..whole.len() / 2],
    )
    .unwrap();
    std::fs::copy(artifact("wrongworld"), ws.plugin_dir().join("foreign.wasm")).unwrap();
    ws.add_plugin("report", "badmanifest");
    ws.manifest("badmanifest", "max_retries = 3\n");
    std::fs::write(ws.plugin_dir().join("notes.txt"), b"ignored").unwrap();

    let host = ws.start(&[]);
    let (status, health) = host.get("/health");
    assert_eq!(status, 200, "{health}");
    assert_eq!(health["task_types"], json!(["noop"]));
    let errors = &health["plugin_errors"];
    assert!(
        errors["garbage"]
            .as_str()
            .unwrap()
            .contains("not a valid WebAssembly component"),
        "{errors:#}"
    );
    assert!(
        errors["halfcopied"]
            .as_str()
            .unwrap()
            .contains("not a valid WebAssembly component"),
        "{errors:#}"
    );
    assert!(
        errors["foreign"]
            .as_str()
            .unwrap()
            .contains("does not implement the spool:task/handler world"),
        "{errors:#}"
    );
    assert!(
        errors["badmanifest"]
            .as_str()
            .unwrap()
            .contains("max_retries"),
        "{errors:#}"
    );
    assert!(
        host.log().contains("garbage.wasm"),
        "the log names the file"
    );

    let task = host.enqueue("noop", json!({"still": "serving"}));
    host.wait_for_status(
        task["id"].as_i64().unwrap(),
        "done",
        Duration::from_secs(30),
    );
    let (status, body) = host.post("/tasks", &json!({"task_type": "foreign"}));
    assert_eq!(status, 422, "{body}");
}
