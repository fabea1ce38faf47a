//! What a task's error says when the handler's own code fails, in every language: handlers
//! built with `spool plugin build` that raise, throw, fail an assertion, panic or overflow
//! their stack, and handlers that return the wrong type or are named wrongly. The error names
//! the exception's type and message (and where it happened), never suggests `RUST_BACKTRACE`
//! and never shows the JavaScript engine's abort notice. `spool replay` runs each failed attempt
//! again from its record to the same error.

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::util::{
    Host, Workspace, builds_root, built_once, example_artifact, spool_plugin, try_spool_plugin,
};

/// Compiling a large (Python, JavaScript) component takes a while on a cold cache.
const WAIT: Duration = Duration::from_secs(180);

/// A project fresh from `spool plugin new --lang LANGUAGE`, named `name`, with `edits`
/// (text, replacement) applied to its `file`.
fn template_project(language: &str, name: &str, file: &str, edits: &[(&str, &str)]) -> PathBuf {
    let projects = builds_root().join("guest-errors");
    let project = projects.join(name);
    let _ = std::fs::remove_dir_all(&project);
    std::fs::create_dir_all(&projects).unwrap();
    spool_plugin(&[
        "new",
        "--lang",
        language,
        name,
        "--dir",
        projects.to_str().unwrap(),
    ]);
    let path = project.join(file);
    let mut code = std::fs::read_to_string(&path).unwrap();
    for (text, replacement) in edits {
        assert!(
            code.contains(text),
            "{file} of the {language} template has {text:?}"
        );
        code = code.replacen(text, replacement, 1);
    }
    std::fs::write(&path, code).unwrap();
    project
}

/// Builds `project` (once per test run) and returns its component.
fn built(key: &str, project: impl FnOnce() -> PathBuf) -> PathBuf {
    built_once(key, |out| {
        let project = project();
        spool_plugin(&[
            "build",
            project.to_str().unwrap(),
            "--plugins",
            out.to_str().unwrap(),
        ]);
        let name = project.file_name().unwrap().to_str().unwrap();
        out.join(format!("{name}.wasm"))
    })
}

fn host_with(plugins: &[(&str, &Path)]) -> (Workspace, Host) {
    let ws = Workspace::with_plugins(&[]);
    for (task_type, wasm) in plugins {
        std::fs::copy(wasm, ws.plugin_dir().join(format!("{task_type}.wasm"))).unwrap();
    }
    let host = ws.start(&[]);
    (ws, host)
}

/// Runs a task without retries until it failed; returns it.
fn failed(host: &Host, task_type: &str, payload: Value) -> Value {
    let task =
        host.enqueue_with(json!({"task_type": task_type, "payload": payload, "max_retry": 0}));
    host.wait_for_status(task["id"].as_i64().unwrap(), "failed", WAIT)
}

/// The task's error (and its last attempt's, when the task shows its attempts) contains
/// every one of `expected` and none of the runtimes' noise; returns the error.
fn explained(task: &Value, expected: &[&str]) -> String {
    let error = task["last_error"].as_str().unwrap_or_default().to_string();
    for text in expected {
        assert!(error.contains(text), "{text:?} is missing: {task:#}");
    }
    for noise in ["RUST_BACKTRACE", "mozalloc_abort", "initializer.js"] {
        assert!(!error.contains(noise), "{noise} in the error: {error}");
    }
    if let Some(attempt) = task["history"].as_array().and_then(|h| h.last()) {
        let attempt_error = attempt["error"].as_str().unwrap_or_default();
        assert!(
            attempt_error.contains(expected[0]),
            "the attempt's error: {attempt:#}"
        );
    }
    error
}

/// `spool replay` of the failed task's attempt (kept by the default `record = "failed"`) runs
/// it again on this machine to the very same error, `expected` included.
fn replays_to_the_same_error(host: &Host, task: &Value, expected: &str) {
    let (ok, output) = host.cli(&["replay", &task["id"].to_string()], &[]);
    assert!(!ok, "a failed attempt replays to a failure: {output}");
    assert!(
        output.contains("reproduced: the recorded attempt ended the same way"),
        "{output}"
    );
    assert!(
        output.contains(expected),
        "{expected:?} is missing: {output}"
    );
}

/// The Python template with a handler that raises in a function it calls, or returns a dict.
fn python_handler() -> PathBuf {
    built("guest-errors/python", || {
        template_project(
            "python",
            "py_errors",
            "app.py",
            &[
                (
                    "class WitWorld(WitWorld):",
                    "def check_balance(balance):\n    if balance < 0:\n        raise ValueError(\"the ledger is corrupt: negative balance\")\n\n\nclass WitWorld(WitWorld):",
                ),
                (
                    "        # Do the work here.\n",
                    "        # Do the work here.\n        mode = json.loads(payload).get(\"mode\")\n        if mode == \"raise\":\n            check_balance(-1)\n        if mode == \"dict\":\n            return {\"length\": len(text)}\n",
                ),
            ],
        )
    })
}

#[test]
fn python_errors_name_the_exception_and_what_to_change() {
    let wasm = python_handler();
    let (_ws, host) = host_with(&[("py_errors", &wasm)]);

    let raised = failed(&host, "py_errors", json!({"text": "hi", "mode": "raise"}));
    let error = explained(
        &raised,
        &[
            "ValueError: the ledger is corrupt: negative balance",
            "app.py",
            "in check_balance",
        ],
    );
    assert!(error.starts_with("uncaught Python exception"), "{error}");
    replays_to_the_same_error(
        &host,
        &raised,
        "ValueError: the ledger is corrupt: negative balance",
    );

    let dict = failed(&host, "py_errors", json!({"text": "hi", "mode": "dict"}));
    explained(
        &dict,
        &["handle returned a dict", "return json.dumps(result)"],
    );
    assert_eq!(
        dict["attempts"], 1,
        "a wrong result type fails at once: {dict:#}"
    );

    // A handler class with another name is refused when it is built, saying what to rename.
    let project = template_project(
        "python",
        "py_misnamed",
        "app.py",
        &[("class WitWorld(WitWorld):", "class Handler(WitWorld):")],
    );
    let out = tempfile::tempdir().unwrap();
    let (ok, text) = try_spool_plugin(&[
        "build",
        project.to_str().unwrap(),
        "--plugins",
        out.path().to_str().unwrap(),
    ]);
    assert!(!ok, "{text}");
    assert!(
        text.contains("the handler class must be named WitWorld (app.py defines `Handler`)"),
        "{text}"
    );
}

#[test]
fn javascript_errors_name_the_error_and_where_it_was_thrown() {
    let wasm = built("guest-errors/javascript", || {
        template_project(
            "javascript",
            "js_errors",
            "app.js",
            &[
                (
                    "  // Do the work here.",
                    "  if (request.mode === 'throw') checkBalance(-1);\n  if (request.mode === 'object') return { length: text.length };\n  // Do the work here.",
                ),
                (
                    "/** What a value is,",
                    "function checkBalance(balance) {\n  if (balance < 0) throw new TypeError('the ledger is corrupt: negative balance');\n}\n\n/** What a value is,",
                ),
            ],
        )
    });
    let (_ws, host) = host_with(&[("js_errors", &wasm)]);

    let thrown = failed(&host, "js_errors", json!({"text": "hi", "mode": "throw"}));
    explained(
        &thrown,
        &[
            "TypeError: the ledger is corrupt: negative balance",
            "checkBalance@app.js",
        ],
    );
    replays_to_the_same_error(
        &host,
        &thrown,
        "TypeError: the ledger is corrupt: negative balance",
    );

    let object = failed(&host, "js_errors", json!({"text": "hi", "mode": "object"}));
    explained(
        &object,
        &["handle returned an object", "return JSON.stringify(result)"],
    );
    assert_eq!(object["attempts"], 1, "{object:#}");
}

#[test]
fn c_assertions_and_stack_overflows_say_what_happened() {
    let wasm = example_artifact("testing/guest-errors/c_crash");
    let (_ws, host) = host_with(&[("c_crash", &wasm)]);

    let asserted = failed(&host, "c_crash", json!({"mode": "assert"}));
    explained(
        &asserted,
        &["Assertion failed: balance >= 0 && \"the ledger balance must not be negative\""],
    );
    replays_to_the_same_error(&host, &asserted, "Assertion failed: balance >= 0");

    let overflowed = failed(&host, "c_crash", json!({"mode": "recurse"}));
    explained(
        &overflowed,
        &[
            "out of bounds memory access",
            "often a stack overflow inside the handler: raise its stack size or reduce recursion",
        ],
    );
}

#[test]
fn go_and_zig_panics_show_their_message() {
    let go = example_artifact("testing/guest-errors/go_panic");
    let zig = example_artifact("testing/guest-errors/zig_panic");
    let (_ws, host) = host_with(&[("go_panic", &go), ("zig_panic", &zig)]);

    let go_failed = failed(&host, "go_panic", json!({}));
    let error = explained(
        &go_failed,
        &[
            "panic: the ledger is corrupt: negative balance",
            "main.checkBalance",
        ],
    );
    assert!(
        error.starts_with("the program exited with status 2: panic:"),
        "{error}"
    );
    // WASI programs replay too: their stdin is the recorded payload.
    replays_to_the_same_error(&host, &go_failed, "main.checkBalance");

    let zig_failed = failed(&host, "zig_panic", json!({}));
    let error = explained(
        &zig_failed,
        &["panic: the ledger is corrupt: negative balance"],
    );
    assert!(!error.contains("stack tracing is disabled"), "{error}");
    replays_to_the_same_error(
        &host,
        &zig_failed,
        "panic: the ledger is corrupt: negative balance",
    );
}
