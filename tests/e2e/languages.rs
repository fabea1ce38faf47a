//! Handlers in other languages, built from the repository's sources with pinned toolchains and
//! run end to end through a real host.

use serde_json::json;
use std::time::Duration;

use crate::util::{python_artifact, Workspace};

/// Compiling an 18 MB Python component takes a while on a cold cache.
const WAIT: Duration = Duration::from_secs(120);

#[test]
fn python_handler_uses_the_host_services() {
    let ws = Workspace::with_plugins(&[]);
    std::fs::copy(python_artifact("invoice"), ws.plugin_dir().join("invoice.wasm")).unwrap();
    let host = ws.start(&[]);
    let payload = json!({"customer": "ACME", "lines": [{"item": "widget", "qty": 3, "price": 2.5}, {"item": "bolt", "qty": 10, "price": 0.1}]});
    let first = host.enqueue("invoice", payload.clone());
    let first = host.wait_for_status(first["id"].as_i64().unwrap(), "done", WAIT);
    assert_eq!(first["result"], json!({"invoice_number": 1, "customer": "ACME", "total": 8.5, "lines": 2}), "{first:#}");
    assert_eq!(first["progress"], 100);
    assert!(first["log"].as_str().unwrap().contains("[info] invoicing ACME"), "{first:#}");
    let second = host.enqueue("invoice", payload);
    let second = host.wait_for_status(second["id"].as_i64().unwrap(), "done", WAIT);
    assert_eq!(second["result"]["invoice_number"], 2, "numbers come from the type's key-value store");
    let bad = host.enqueue_with(json!({"task_type": "invoice", "payload": {"customer": "ACME"}, "max_retry": 5}));
    let failed = host.wait_for_status(bad["id"].as_i64().unwrap(), "failed", WAIT);
    assert_eq!(failed["attempts"], 1, "a bad payload fails permanently: {failed:#}");
    assert!(failed["last_error"].as_str().unwrap().contains("not a valid invoice"), "{failed:#}");
}
