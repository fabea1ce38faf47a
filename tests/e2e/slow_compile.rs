//! A slow compile of one plugin holds up no other change to the plugin folder, and the host
//! says what it is compiling.

use serde_json::{Value, json};
use std::time::{Duration, Instant};

use crate::util::{Workspace, artifact, deploy, eventually};

const WAIT: Duration = Duration::from_secs(120);

/// A core WebAssembly module (a WASI command) with `functions` large functions: the compiler
/// needs seconds for it, every time, because a nonce keeps it out of any cache.
fn slow_to_compile(functions: usize) -> Vec<u8> {
    let nonce = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64;
    let mut wat = String::from("(module\n");
    for f in 0..functions {
        wat += &format!("(func $f{f} (param $x i64) (result i64)\n(local.get $x)\n");
        for i in 0..400 {
            let k = nonce.wrapping_add((f * 400 + i) as i64);
            wat += &format!("(i64.const {k}) (i64.mul) (local.get $x) (i64.xor)\n");
        }
        wat += ")\n";
    }
    wat += "(memory (export \"memory\") 1)\n(func (export \"_start\"))\n)";
    wat::parse_str(&wat).expect("valid text")
}

fn entry<'a>(view: &'a Value, list: &str, task_type: &str) -> Option<&'a Value> {
    view[list]
        .as_array()?
        .iter()
        .find(|p| p["task_type"] == task_type)
}

#[test]
fn other_plugin_changes_do_not_wait_for_a_slow_compile() {
    let ws = Workspace::with_plugins(&["noop"]);
    ws.add_plugin("noop", "retiring");
    ws.manifest("noop", "max_retry = 1\n");
    let cache = tempfile::tempdir().unwrap();
    let host = ws.start(&["--cache-dir", cache.path().to_str().unwrap()]);

    let big = slow_to_compile(1500);
    let started = Instant::now();
    std::fs::write(ws.plugin_dir().join(".big.wasm.tmp"), &big).unwrap();
    std::fs::rename(
        ws.plugin_dir().join(".big.wasm.tmp"),
        ws.plugin_dir().join("big.wasm"),
    )
    .unwrap();
    let since = eventually(WAIT, "big to show as loading", || {
        let view = host.get("/plugins").1;
        entry(&view, "unloaded", "big")?["loading_since"]
            .as_str()
            .map(str::to_string)
    });

    // While it compiles: a new type, a changed manifest and a removal all take effect.
    deploy(&artifact("noop"), &ws.plugin_dir().join("fresh.wasm"));
    ws.manifest("noop", "max_retry = 7\n");
    std::fs::remove_file(ws.plugin_dir().join("retiring.wasm")).unwrap();
    eventually(WAIT, "the other changes to apply", || {
        let view = host.get("/plugins").1;
        let fresh = entry(&view, "plugins", "fresh").is_some();
        let manifest = entry(&view, "plugins", "noop")?["policy"]["max_retry"] == 7;
        let removed = entry(&view, "plugins", "retiring").is_none();
        (fresh && manifest && removed).then_some(())
    });
    let view = host.get("/plugins").1;
    assert_eq!(
        entry(&view, "unloaded", "big").and_then(|b| b["loading_since"].as_str()),
        Some(since.as_str()),
        "the other changes waited for the slow compile ({:?} after it started): make the module bigger if this machine compiles it that fast\n{view:#}",
        started.elapsed()
    );

    eventually(WAIT, "big to load", || {
        let view = host.get("/plugins").1;
        entry(&view, "plugins", "big").map(|b| assert!(b["loading_since"].is_null(), "{b}"))
    });
    let task = host.enqueue("big", json!({}));
    host.wait_for_status(task["id"].as_i64().unwrap(), "done", WAIT);
}
