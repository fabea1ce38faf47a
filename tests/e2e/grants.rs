//! Folder grants stay beneath the grants root: a planted symbolic link never opens, manifests
//! cannot name folders outside the root, types cannot share a folder one of them writes, and
//! the root stays apart from the plugin folder, the compiled-code cache and the database.

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::{Host, Workspace};

/// Enough `..` to climb from any grant to `/` (`..` at `/` stays at `/`).
const UP_TO_ROOT: &str = "../../../../../../../../../../../../../../../../../../../../../..";

fn run(host: &Host, task_type: &str, payload: Value) -> Value {
    let task = host.enqueue(task_type, payload);
    host.wait_final(task["id"].as_i64().unwrap())
}

/// Every file beneath `dir`, recursively.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if entry.file_type().unwrap().is_dir() {
            found.extend(files_under(&path));
        } else {
            found.push(path);
        }
    }
    found.sort();
    found
}

/// The host's view of one loaded task type.
fn loaded(host: &Host, task_type: &str) -> Option<Value> {
    let (_, view) = host.get("/plugins");
    view["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["task_type"] == task_type)
        .cloned()
}

/// The load error of a task type that is not loaded.
fn unloaded_error(host: &Host, task_type: &str) -> String {
    let (_, view) = host.get("/plugins");
    let entry = view["unloaded"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["task_type"] == task_type)
        .cloned();
    let entry = entry.unwrap_or_else(|| panic!("{task_type} should not be loaded: {view:#}"));
    entry["error"].as_str().unwrap_or_default().to_string()
}

#[test]
fn a_planted_symbolic_link_never_opens() {
    let ws = Workspace::with_plugins(&["hostile"]);
    let cache = ws.dir.path().join("cache");
    let grants = ws.grants_dir();
    std::fs::create_dir_all(grants.join("box/inner")).unwrap();
    std::fs::create_dir_all(grants.join("box/out")).unwrap();
    std::fs::write(grants.join("box/inner/note.txt"), "inside the root").unwrap();
    // One type holds a writable grant and two grants inside it: the guest can replace their
    // folders, and the host opens them again on the next attempt.
    ws.manifest(
        "hostile",
        "max_retry = 1\nbackoff_base = \"100ms\"\n\
         [[dirs]]\nhost = \"box\"\nguest = \"/box\"\nwritable = true\n\
         [[dirs]]\nhost = \"box/inner\"\nguest = \"/inner\"\n\
         [[dirs]]\nhost = \"box/out\"\nguest = \"/out\"\nwritable = true\n",
    );
    let host = ws.start(&["--cache-dir", cache.to_str().unwrap()]);

    let read = run(&host, "hostile", json!({"read": "/inner/note.txt"}));
    assert_eq!(read["result"]["content"], "inside the root", "{read:#}");

    // A link from the inner grant's folder to `/`.
    let planted = run(
        &host,
        "hostile",
        json!({"plant": {"link": "/box/inner", "target": UP_TO_ROOT}}),
    );
    assert_eq!(planted["status"], "done", "{planted:#}");
    assert!(
        std::fs::symlink_metadata(grants.join("box/inner"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    let escape = run(&host, "hostile", json!({"read": "/inner/etc/hostname"}));
    assert_eq!(escape["status"], "failed", "{escape:#}");
    assert_eq!(
        escape["attempts"], 2,
        "retried per policy like any failure: {escape:#}"
    );
    let reason = escape["last_error"].as_str().unwrap();
    assert!(
        reason.contains("symbolic link") && reason.contains("box/inner"),
        "{reason}"
    );
    assert_eq!(escape["result"], Value::Null);
    let hostname = std::fs::read_to_string("/etc/hostname").unwrap_or_default();
    if !hostname.trim().is_empty() {
        // What the guest could hand back: its result and its log, per attempt too (the
        // history also names the host, whose id may contain the machine's name).
        let mut guest_output = vec![escape["result"].to_string(), escape["log"].to_string()];
        for attempt in escape["history"].as_array().into_iter().flatten() {
            guest_output.push(attempt["log"].to_string());
        }
        assert!(
            guest_output
                .iter()
                .all(|text| !text.contains(hostname.trim())),
            "nothing outside the root was read: {escape:#}"
        );
    }

    // The operator puts the folder back; then a link from the writable out grant to the cache.
    std::fs::remove_file(grants.join("box/inner")).unwrap();
    std::fs::create_dir(grants.join("box/inner")).unwrap();
    let cached_before = files_under(&cache);
    assert!(
        !cached_before.is_empty(),
        "the cache holds the compiled plugin"
    );
    let planted = run(
        &host,
        "hostile",
        json!({"plant": {"link": "/box/out", "target": "../../cache"}}),
    );
    assert_eq!(planted["status"], "done", "{planted:#}");
    let write = run(
        &host,
        "hostile",
        json!({"write": {"path": "/out/evil.cwasm", "content": "machine code"}}),
    );
    assert_eq!(write["status"], "failed", "{write:#}");
    let reason = write["last_error"].as_str().unwrap();
    assert!(
        reason.contains("symbolic link") && reason.contains("box/out"),
        "{reason}"
    );
    assert_eq!(
        files_under(&cache),
        cached_before,
        "nothing was written into the cache"
    );
    assert!(
        files_under(ws.dir.path())
            .iter()
            .all(|f| f.file_name().unwrap() != "evil.cwasm")
    );
}

#[test]
fn a_grant_overlapping_another_types_writable_grant_is_refused() {
    let ws = Workspace::with_plugins(&["hostile"]);
    ws.add_plugin("readfile", "victim");
    ws.add_plugin("readfile", "viewer");
    ws.add_plugin("readfile", "viewer2");
    let grants = ws.grants_dir();
    std::fs::create_dir_all(grants.join("box/inner")).unwrap();
    std::fs::create_dir_all(grants.join("reference")).unwrap();
    std::fs::write(grants.join("reference/rates.txt"), "1.08").unwrap();
    ws.manifest(
        "hostile",
        "[[dirs]]\nhost = \"box\"\nguest = \"/box\"\nwritable = true\n",
    );
    ws.manifest(
        "victim",
        "[[dirs]]\nhost = \"box/inner\"\nguest = \"/inner\"\n",
    );
    ws.manifest(
        "viewer",
        "[[dirs]]\nhost = \"reference\"\nguest = \"/ref\"\n",
    );
    ws.manifest(
        "viewer2",
        "[[dirs]]\nhost = \"reference\"\nguest = \"/ref\"\n",
    );
    let host = ws.start(&[]);

    // Loaded in name order: `victim`'s grant lies inside the folder `hostile` may write.
    let error = unloaded_error(&host, "victim");
    assert!(
        error.contains("dirs[0].host = \"box/inner\"")
            && error.contains("`hostile`")
            && error.contains("writable"),
        "{error}"
    );
    assert!(loaded(&host, "hostile").is_some());
    // Read-only grants may be shared.
    for viewer in ["viewer", "viewer2"] {
        let read = run(&host, viewer, json!({"path": "/ref/rates.txt"}));
        assert_eq!(read["result"]["content"], "1.08", "{read:#}");
    }

    // The writer plants a link where the refused grant's folder was; with the writer gone,
    // the other type that names that folder still never opens it.
    let planted = run(
        &host,
        "hostile",
        json!({"plant": {"link": "/box/inner", "target": UP_TO_ROOT}}),
    );
    assert_eq!(planted["status"], "done", "{planted:#}");
    std::fs::remove_file(ws.plugin_dir().join("hostile.wasm")).unwrap();
    host.eventually("hostile to be unregistered", || {
        loaded(&host, "hostile").is_none().then_some(())
    });
    ws.manifest(
        "victim",
        "[[dirs]]\nhost = \"box/inner\"\nguest = \"/inner\"\n# reloaded\n",
    );
    let error = host.eventually("victim's reload to fail on the link", || {
        let error = unloaded_error(&host, "victim");
        error.contains("symbolic link").then_some(error)
    });
    assert!(error.contains("dirs[0].host = \"box/inner\""), "{error}");
    assert!(loaded(&host, "victim").is_none());

    // A manifest change that would make a shared folder writable is refused; the previous
    // policy stays.
    ws.manifest(
        "viewer",
        "[[dirs]]\nhost = \"reference\"\nguest = \"/ref\"\nwritable = true\n",
    );
    let viewer = host.eventually("viewer's manifest to be refused", || {
        loaded(&host, "viewer").filter(|v| {
            v["last_error"]
                .as_str()
                .is_some_and(|e| e.contains("`viewer2`"))
        })
    });
    assert_eq!(
        viewer["capabilities"]["dirs"][0]["writable"], false,
        "{viewer:#}"
    );
    let write = run(
        &host,
        "viewer",
        json!({"write": {"path": "/ref/rates.txt", "content": "2"}}),
    );
    assert_eq!(write["status"], "failed", "{write:#}");
    assert_eq!(
        std::fs::read_to_string(grants.join("reference/rates.txt")).unwrap(),
        "1.08"
    );
}

#[test]
fn manifests_naming_folders_outside_the_root_are_refused() {
    let ws = Workspace::with_plugins(&[]);
    ws.add_plugin("readfile", "etc");
    ws.add_plugin("readfile", "up");
    ws.add_plugin("readfile", "reader");
    std::fs::create_dir_all(ws.dir.path().join("x")).unwrap();
    std::fs::create_dir_all(ws.grants_dir().join("data")).unwrap();
    std::fs::write(ws.grants_dir().join("data/in.txt"), "granted").unwrap();
    ws.manifest("etc", "[[dirs]]\nhost = \"/etc\"\nguest = \"/etc\"\n");
    ws.manifest(
        "up",
        "[[dirs]]\nhost = \"../x\"\nguest = \"/x\"\nwritable = true\n",
    );
    ws.manifest("reader", "[[dirs]]\nhost = \"data\"\nguest = \"/data\"\n");
    let host = ws.start(&[]);

    let (_, view) = host.get("/plugins");
    assert_eq!(
        view["grants_root"],
        ws.grants_dir().to_str().unwrap(),
        "beside the plugin folder: {view:#}"
    );
    let etc = unloaded_error(&host, "etc");
    assert!(
        etc.contains("dirs[0].host = \"/etc\": is absolute"),
        "{etc}"
    );
    let up = unloaded_error(&host, "up");
    assert!(
        up.contains("dirs[0].host = \"../x\"") && up.contains("\"..\""),
        "{up}"
    );

    let reader = loaded(&host, "reader").expect("reader loads");
    assert_eq!(
        reader["capabilities"]["dirs"][0]["host"], "data",
        "shown relative to the root: {reader:#}"
    );
    assert_eq!(
        run(&host, "reader", json!({"path": "/data/in.txt"}))["result"]["content"],
        "granted"
    );
    // A live manifest change to an absolute path is refused; the previous grants stay.
    ws.manifest("reader", "[[dirs]]\nhost = \"/etc\"\nguest = \"/data\"\n");
    host.eventually("reader's manifest to be refused", || {
        loaded(&host, "reader").filter(|r| {
            r["last_error"]
                .as_str()
                .is_some_and(|e| e.contains("dirs[0].host = \"/etc\""))
        })
    });
    assert_eq!(
        run(&host, "reader", json!({"path": "/data/in.txt"}))["result"]["content"],
        "granted"
    );
    assert_eq!(
        run(&host, "reader", json!({"path": "/etc/hostname"}))["status"],
        "failed"
    );
}

/// Runs `spool serve` expecting it to refuse to start; returns what it printed.
fn refused(ws: &Workspace, flags: &[&str], env: &[(&str, &Path)]) -> String {
    let mut command = Command::new(env!("CARGO_BIN_EXE_spool"));
    command.args(["serve", "--listen", "127.0.0.1:0"]);
    if !flags.contains(&"--database-url") {
        command.args(["--database-url", &ws.database_url()]);
    }
    if !flags.contains(&"--cache-dir") {
        command
            .arg("--cache-dir")
            .arg(crate::util::repo_root().join("target/spool-test-cache"));
    }
    command
        .arg("--plugins")
        .arg(ws.plugin_dir())
        .args(flags)
        .env_remove("SPOOL_GRANTS_ROOT")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (name, value) in env {
        command.env(name, value);
    }
    let mut child = command.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the host started with {flags:?} {env:?}; it should have refused");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = child.wait_with_output().unwrap();
    assert!(!output.status.success());
    String::from_utf8_lossy(&output.stderr).to_string()
}

#[test]
fn the_grants_root_stays_apart_from_what_the_host_trusts() {
    let ws = Workspace::with_plugins(&["noop"]);
    let path = |p: PathBuf| p.to_str().unwrap().to_string();
    let inside_plugins = ws.plugin_dir().join("data");
    let text = refused(&ws, &["--grants-root", &path(inside_plugins.clone())], &[]);
    assert!(
        text.contains("grants_root") && text.contains("lies inside plugins"),
        "{text}"
    );
    assert!(
        !inside_plugins.exists(),
        "nothing is created where the root may not be"
    );
    let text = refused(
        &ws,
        &["--grants-root", &path(ws.dir.path().to_path_buf())],
        &[],
    );
    assert!(
        text.contains("grants_root") && text.contains("contains plugins"),
        "{text}"
    );
    let text = refused(&ws, &[], &[("SPOOL_GRANTS_ROOT", &ws.plugin_dir())]);
    assert!(text.contains("is the same folder as plugins"), "{text}");
    let cache = path(ws.grants_dir().join("cache"));
    let text = refused(&ws, &["--cache-dir", &cache], &[]);
    assert!(
        text.contains("grants_root") && text.contains("cache_dir"),
        "{text}"
    );
    let database = format!("sqlite://{}", ws.grants_dir().join("q.db").display());
    let text = refused(&ws, &["--database-url", &database], &[]);
    assert!(
        text.contains("grants_root") && text.contains("database_url"),
        "{text}"
    );

    // A root of the operator's choosing is created at start.
    let elsewhere = ws.dir.path().join("srv/grants");
    let host = ws.start(&["--grants-root", &path(elsewhere.clone())]);
    assert!(elsewhere.is_dir());
    assert_eq!(host.get("/plugins").1["grants_root"], path(elsewhere));
}
