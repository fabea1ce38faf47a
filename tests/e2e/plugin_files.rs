//! What the plugin folder loads: regular files only (no FIFO or device, however named), of
//! bounded size, and never a copy that is still being written.

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::util::{Workspace, artifact, deploy, eventually};

const WAIT: Duration = Duration::from_secs(60);

fn mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success());
}

/// The load error `GET /plugins` shows for a task type.
fn load_error(plugins: &Value, task_type: &str) -> Option<String> {
    let loaded = plugins["plugins"]
        .as_array()?
        .iter()
        .find(|p| p["task_type"] == task_type)
        .and_then(|p| p["last_error"].as_str());
    let unloaded = plugins["unloaded"]
        .as_array()?
        .iter()
        .find(|p| p["task_type"] == task_type)
        .and_then(|p| p["error"].as_str());
    loaded.or(unloaded).map(str::to_string)
}

/// The version `GET /plugins` shows for a task type.
fn version(plugins: &Value, task_type: &str) -> Option<String> {
    plugins["plugins"]
        .as_array()?
        .iter()
        .find(|p| p["task_type"] == task_type)
        .and_then(|p| p["version"].as_str())
        .map(str::to_string)
}

fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

#[test]
fn fifos_and_devices_named_like_plugins_hang_neither_start_up_nor_the_watcher() {
    let ws = Workspace::with_plugins(&["noop"]);
    mkfifo(&ws.plugin_dir().join("fifo.wasm"));
    std::os::unix::fs::symlink("/dev/zero", ws.plugin_dir().join("zero.wasm")).unwrap();
    ws.add_plugin("noop", "piped");
    mkfifo(&ws.plugin_dir().join("piped.toml"));
    let host = ws.start(&[]);
    let (_, plugins) = host.get("/plugins");
    for (task_type, says) in [
        ("fifo", "fifo.wasm: not a regular file (a FIFO)"),
        ("zero", "zero.wasm: not a regular file (a character device)"),
        ("piped", "piped.toml: not a regular file (a FIFO)"),
    ] {
        let error = load_error(&plugins, task_type)
            .unwrap_or_else(|| panic!("no error for {task_type}: {plugins:#}"));
        assert!(error.contains(says), "{error}");
    }

    // While serving: a FIFO appears, then a real plugin, which must still be loaded.
    mkfifo(&ws.plugin_dir().join("late.wasm"));
    std::os::unix::fs::symlink("/dev/urandom", ws.plugin_dir().join("noise.wasm")).unwrap();
    deploy(&artifact("noop"), &ws.plugin_dir().join("after.wasm"));
    eventually(WAIT, "the plugin after the FIFO to load", || {
        version(&host.get("/plugins").1, "after")
    });
    let (_, plugins) = host.get("/plugins");
    let error = load_error(&plugins, "late").unwrap_or_default();
    assert!(error.contains("not a regular file (a FIFO)"), "{plugins:#}");
    let error = load_error(&plugins, "noise").unwrap_or_default();
    assert!(error.contains("(a character device)"), "{plugins:#}");
    let task = host.enqueue("after", json!({}));
    host.wait_for_status(task["id"].as_i64().unwrap(), "done", WAIT);
}

#[test]
fn an_oversized_plugin_file_is_refused_with_a_clear_error() {
    let ws = Workspace::with_plugins(&["noop"]);
    std::fs::write(ws.plugin_dir().join("big.wasm"), vec![0u8; 2 << 20]).unwrap();
    ws.add_plugin("noop", "wordy");
    ws.manifest("wordy", &format!("# {}\n", "x".repeat(100 << 10)));
    let host = ws.start(&["--max-plugin-size", "1MiB"]);
    let (_, plugins) = host.get("/plugins");
    let error = load_error(&plugins, "big").unwrap_or_default();
    assert!(
        error.contains(
            "big.wasm: 2097152 bytes, more than the 1048576 bytes a plugin file may have (max_plugin_size)"
        ),
        "{plugins:#}"
    );
    let error = load_error(&plugins, "wordy").unwrap_or_default();
    assert!(
        error.contains("bytes, more than the 65536 bytes a manifest may have"),
        "{plugins:#}"
    );
    // Growing past the cap while serving is refused too; the old version keeps serving.
    let before = version(&plugins, "noop").unwrap();
    std::fs::write(ws.plugin_dir().join("noop.wasm"), vec![0u8; 3 << 20]).unwrap();
    eventually(WAIT, "the oversized replacement to be refused", || {
        load_error(&host.get("/plugins").1, "noop").filter(|e| e.contains("3145728 bytes"))
    });
    assert_eq!(version(&host.get("/plugins").1, "noop"), Some(before));
}

/// A WASI program (a core module with `_start`) followed by a custom section of `pad` bytes:
/// cut before that section, it is still a valid program, just not the same file.
fn program_with_padding(pad: usize) -> (Vec<u8>, Vec<u8>) {
    let program = wat::parse_str("(module (func (export \"_start\")))").unwrap();
    let mut section = Vec::new();
    let name = b"padding";
    let size = 1 + name.len() + pad;
    section.push(0); // a custom section
    let mut rest = size;
    loop {
        let byte = (rest & 0x7f) as u8;
        rest >>= 7;
        if rest == 0 {
            section.push(byte);
            break;
        }
        section.push(byte | 0x80);
    }
    section.push(name.len() as u8);
    section.extend_from_slice(name);
    section.extend(std::iter::repeat_n(0u8, pad));
    (program, section)
}

/// Watches `task_type`'s version for `period`, returning every version seen.
fn versions_during(host: &crate::util::Host, task_type: &str, period: Duration) -> Vec<String> {
    let mut seen = Vec::new();
    let end = Instant::now() + period;
    while Instant::now() < end {
        if let Some(v) = version(&host.get("/plugins").1, task_type)
            && !seen.contains(&v)
        {
            seen.push(v);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    seen
}

#[test]
fn a_copy_still_being_written_never_loads_truncated() {
    let ws = Workspace::with_plugins(&[]);
    ws.add_plugin("noop", "work");
    let (program, padding) = program_with_padding(256 << 10);
    let whole: Vec<u8> = [program.clone(), padding.clone()].concat();
    let (half, all) = (sha256(&program), sha256(&whole));

    // Written in place while serving: half, a pause far past the debounce, the rest.
    let host = ws.start(&[]);
    let old = version(&host.get("/plugins").1, "work").unwrap();
    let mut file = std::fs::File::create(ws.plugin_dir().join("work.wasm")).unwrap();
    file.write_all(&program).unwrap();
    file.flush().unwrap();
    let seen = versions_during(&host, "work", Duration::from_millis(800));
    assert_eq!(
        seen,
        std::slice::from_ref(&old),
        "only the old version served meanwhile"
    );
    file.write_all(&padding).unwrap();
    drop(file);
    eventually(WAIT, "the whole copy to load", || {
        (version(&host.get("/plugins").1, "work")? == all).then_some(())
    });
    let task = host.enqueue("work", json!({}));
    host.wait_for_status(task["id"].as_i64().unwrap(), "done", WAIT);
    drop(host);

    // Half-written when a host starts: not loaded until its writer is done.
    std::fs::remove_file(ws.plugin_dir().join("work.wasm")).unwrap();
    let mut file = std::fs::File::create(ws.plugin_dir().join("late.wasm")).unwrap();
    file.write_all(&program).unwrap();
    file.flush().unwrap();
    let host = ws.start(&[]);
    let (_, plugins) = host.get("/plugins");
    assert_ne!(version(&plugins, "late"), Some(half.clone()), "{plugins:#}");
    let error = load_error(&plugins, "late").unwrap_or_default();
    assert!(error.contains("still being written"), "{plugins:#}");
    let seen = versions_during(&host, "late", Duration::from_millis(300));
    assert!(seen.is_empty(), "{seen:?}");
    file.write_all(&padding).unwrap();
    drop(file);
    eventually(WAIT, "the whole copy to load", || {
        (version(&host.get("/plugins").1, "late")? == all).then_some(())
    });
}
