//! Handlers in every supported language, built from the repository's sources with
//! `spool plugin build` and the pinned toolchains, run end to end through a real host:
//! the examples (host services, retries, permanent failures) and each language's template
//! as `spool plugin new` writes it.

use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;

use crate::util::{Host, Workspace, example_artifact, template_artifact, try_spool_plugin};

/// Compiling a large (Python, JavaScript) component takes a while on a cold cache.
const WAIT: Duration = Duration::from_secs(180);

fn host_with(task_type: &str, wasm: &Path) -> (Workspace, Host) {
    let ws = Workspace::with_plugins(&[]);
    std::fs::copy(wasm, ws.plugin_dir().join(format!("{task_type}.wasm"))).unwrap();
    let host = ws.start(&["--backoff-base", "50ms"]);
    (ws, host)
}

fn run_to(host: &Host, request: Value, status: &str) -> Value {
    let task = host.enqueue_with(request);
    host.wait_for_status(task["id"].as_i64().unwrap(), status, WAIT)
}

/// What a component example must show: its result, numbers from the type's key-value store
/// handed out once per task through the effect ledger (also across a retry), progress, a
/// log line, a retried transient failure and a permanent failure for a bad payload.
struct ComponentExample<'a> {
    task_type: &'a str,
    payload: Value,
    expected: Value,
    number_field: &'a str,
    log_line: &'a str,
    bad_payload: Value,
    bad_payload_error: &'a str,
}

impl ComponentExample<'_> {
    fn check(self, wasm: &Path) {
        let (_ws, host) = host_with(self.task_type, wasm);
        let first = run_to(
            &host,
            json!({"task_type": self.task_type, "payload": self.payload}),
            "done",
        );
        let mut expected = self.expected.clone();
        expected[self.number_field] = json!(1);
        assert_eq!(first["result"], expected, "{first:#}");
        assert_eq!(first["progress"], 100, "{first:#}");
        assert!(
            first["log"].as_str().unwrap().contains(self.log_line),
            "{first:#}"
        );

        let mut flaky = self.payload.clone();
        flaky["fail_until_attempt"] = json!(3);
        let retried = run_to(
            &host,
            json!({"task_type": self.task_type, "payload": flaky, "max_retry": 5}),
            "done",
        );
        assert_eq!(
            retried["attempts"], 3,
            "two transient failures were retried: {retried:#}"
        );
        assert_eq!(
            retried["result"][self.number_field], 2,
            "retries reuse the number the first attempt took: {retried:#}"
        );

        let third = run_to(
            &host,
            json!({"task_type": self.task_type, "payload": self.payload}),
            "done",
        );
        assert_eq!(third["result"][self.number_field], 3, "{third:#}");

        let bad = run_to(
            &host,
            json!({"task_type": self.task_type, "payload": self.bad_payload, "max_retry": 5}),
            "failed",
        );
        assert_eq!(
            bad["attempts"], 1,
            "a bad payload fails permanently: {bad:#}"
        );
        assert!(
            bad["last_error"]
                .as_str()
                .unwrap()
                .contains(self.bad_payload_error),
            "{bad:#}"
        );
    }
}

#[test]
fn python_example_uses_the_host_services() {
    ComponentExample {
        task_type: "invoice",
        payload: json!({"customer": "ACME", "lines": [{"item": "widget", "qty": 3, "price": 2.5}, {"item": "bolt", "qty": 10, "price": 0.1}]}),
        expected: json!({"customer": "ACME", "total": 8.5, "lines": 2}),
        number_field: "invoice_number",
        log_line: "[info] invoicing ACME",
        bad_payload: json!({"customer": "ACME"}),
        bad_payload_error: "not a valid invoice",
    }
    .check(&example_artifact("python/invoice"));
}

#[test]
fn javascript_example_uses_the_host_services() {
    ComponentExample {
        task_type: "receipt",
        payload: json!({"order": "A-17", "items": [{"name": "tea", "qty": 2, "price": 3.5}, {"name": "cake", "qty": 1, "price": 4.25}], "currency": "EUR"}),
        expected: json!({"order": "A-17", "total": 11.25, "currency": "EUR", "items": 2}),
        number_field: "receipt_number",
        log_line: "[info]",
        bad_payload: json!({"order": "A-17", "items": [{"name": "tea", "qty": "two", "price": 3.5}]}),
        bad_payload_error: "qty",
    }
    .check(&example_artifact("javascript/receipt"));
}

#[test]
fn c_example_uses_the_host_services() {
    ComponentExample {
        task_type: "tally",
        payload: json!({"account": "ops", "amounts": [12.5, 3, 4.25]}),
        expected: json!({"account": "ops", "total": 19.75, "count": 3}),
        number_field: "entry_number",
        log_line: "[info]",
        bad_payload: json!({"account": "ops", "amounts": "lots"}),
        bad_payload_error: "amounts",
    }
    .check(&example_artifact("c/tally"));
}

#[test]
fn go_program_runs_through_the_wasi_door() {
    let (_ws, host) = host_with("wordcount", &example_artifact("go/wordcount"));
    let done = run_to(
        &host,
        json!({"task_type": "wordcount", "payload": {"text": "the cat saw the dog\nThe end", "top": 2}}),
        "done",
    );
    assert_eq!(done["result"]["words"], 7, "{done:#}");
    assert_eq!(done["result"]["lines"], 2, "{done:#}");
    assert_eq!(
        done["result"]["top"][0],
        json!({"word": "the", "count": 3}),
        "{done:#}"
    );
    let failed = run_to(
        &host,
        json!({"task_type": "wordcount", "payload": {"fail": "upstream is down"}, "max_retry": 1}),
        "failed",
    );
    assert_eq!(
        failed["attempts"], 2,
        "a failing program is retried per policy: {failed:#}"
    );
    assert!(
        failed["last_error"]
            .as_str()
            .unwrap()
            .contains("upstream is down"),
        "stderr is the reason: {failed:#}"
    );
}

#[test]
fn zig_program_runs_through_the_wasi_door() {
    let (_ws, host) = host_with("rot13", &example_artifact("zig/rot13"));
    let done = run_to(
        &host,
        json!({"task_type": "rot13", "payload": {"text": "Hello, Spool!"}}),
        "done",
    );
    assert_eq!(done["result"], json!({"text": "Uryyb, Fcbby!"}), "{done:#}");
    let failed = run_to(
        &host,
        json!({"task_type": "rot13", "payload": {"txt": 1}, "max_retry": 1}),
        "failed",
    );
    assert_eq!(failed["attempts"], 2, "{failed:#}");
    assert!(
        !failed["last_error"].as_str().unwrap().is_empty(),
        "{failed:#}"
    );
}

/// A project fresh from `spool plugin new --lang LANGUAGE` builds and runs: it measures the
/// text it is given and rejects a payload without one.
fn template_runs(language: &str, is_component: bool) {
    let task_type = format!("starter_{language}");
    let (_ws, host) = host_with(&task_type, &template_artifact(language));
    let done = run_to(
        &host,
        json!({"task_type": task_type, "payload": {"text": "hello"}}),
        "done",
    );
    assert_eq!(done["result"]["length"], 5, "{done:#}");
    let failed = run_to(
        &host,
        json!({"task_type": task_type, "payload": {}, "max_retry": 1}),
        "failed",
    );
    if is_component {
        assert_eq!(done["result"]["task_type"], json!(task_type), "{done:#}");
        assert_eq!(done["result"]["attempt"], 1, "{done:#}");
        assert_eq!(done["progress"], 100, "{done:#}");
        assert!(done["log"].as_str().unwrap().contains("[info]"), "{done:#}");
        assert_eq!(
            failed["attempts"], 1,
            "a component fails a bad payload permanently: {failed:#}"
        );
    } else {
        assert_eq!(
            failed["attempts"], 2,
            "a program's failure is retried per policy: {failed:#}"
        );
    }
    assert!(
        failed["last_error"].as_str().unwrap().contains("text"),
        "the error names the missing field: {failed:#}"
    );
}

#[test]
fn rust_template_builds_and_runs() {
    template_runs("rust", true);
}

#[test]
fn python_template_builds_and_runs() {
    template_runs("python", true);
}

#[test]
fn javascript_template_builds_and_runs() {
    template_runs("javascript", true);
}

#[test]
fn c_template_builds_and_runs() {
    template_runs("c", true);
}

#[test]
fn go_template_builds_and_runs() {
    template_runs("go", false);
}

#[test]
fn zig_template_builds_and_runs() {
    template_runs("zig", false);
}

#[test]
fn plugin_commands_explain_what_is_wrong_and_install_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_str().unwrap();
    let plugins = dir.path().join("plugins");
    let plugins_arg = plugins.to_str().unwrap();

    let (ok, text) = try_spool_plugin(&["new", "--lang", "cobol", "x", "--dir", root]);
    assert!(
        !ok && text.contains("rust, python, javascript, c, go, zig"),
        "{text}"
    );
    let (ok, text) = try_spool_plugin(&["new", "--lang", "c", "bad name", "--dir", root]);
    assert!(!ok && text.contains("cannot be a task type"), "{text}");

    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let (ok, text) =
        try_spool_plugin(&["build", empty.to_str().unwrap(), "--plugins", plugins_arg]);
    assert!(
        !ok && text.contains("spool plugin new"),
        "an empty folder: {text}"
    );

    // A C handler that does not compile: clang's message reaches the user, nothing is installed.
    let (ok, text) = try_spool_plugin(&["new", "--lang", "c", "broken", "--dir", root]);
    assert!(ok, "{text}");
    let source = dir.path().join("broken/broken.c");
    let code = std::fs::read_to_string(&source).unwrap();
    std::fs::write(
        &source,
        code.replace("bool ok = false;", "bool ok = false; int = ;"),
    )
    .unwrap();
    let (ok, text) = try_spool_plugin(&[
        "build",
        dir.path().join("broken").to_str().unwrap(),
        "--plugins",
        plugins_arg,
    ]);
    assert!(!ok, "{text}");
    assert!(
        text.contains("broken.c") && text.contains("error"),
        "clang's diagnostics are shown: {text}"
    );
    assert!(
        !plugins.join("broken.wasm").exists(),
        "a failed build installs nothing"
    );
}

#[test]
fn building_into_a_served_folder_deploys_and_hot_swaps() {
    let ws = Workspace::with_plugins(&[]);
    let host = ws.start(&[]);
    let projects = tempfile::tempdir().unwrap();
    let plugins = ws.plugin_dir();
    crate::util::spool_plugin(&[
        "new",
        "--lang",
        "c",
        "greet",
        "--dir",
        projects.path().to_str().unwrap(),
    ]);
    let project = projects.path().join("greet");
    let build = || {
        crate::util::spool_plugin(&[
            "build",
            project.to_str().unwrap(),
            "--plugins",
            plugins.to_str().unwrap(),
        ])
    };
    let serving_version = || {
        let (_, view) = host.get("/plugins");
        view["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["task_type"] == "greet")
            .map(|p| p["version"].as_str().unwrap().to_string())
    };

    build();
    let first_version = host.eventually("greet is served", serving_version);
    let done = run_to(
        &host,
        json!({"task_type": "greet", "payload": {"text": "hello"}}),
        "done",
    );
    assert_eq!(done["result"]["length"], 5, "{done:#}");

    // Rebuilding without a change leaves the served build alone; so does saving a source
    // again without changing it (the build goes by contents, not modification times).
    build();
    let source = project.join("greet.c");
    std::thread::sleep(Duration::from_millis(20));
    std::fs::write(&source, std::fs::read(&source).unwrap()).unwrap();
    let output = build();
    assert!(output.contains("is up to date"), "{output}");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(serving_version().unwrap(), first_version);

    // A manifest the host would refuse fails the build with the host's message, and nothing
    // reaches the plugin folder.
    let manifest = project.join("greet.toml");
    std::fs::write(&manifest, "max_retyr = 2\n").unwrap();
    let (ok, text) = crate::util::try_spool_plugin(&[
        "build",
        project.to_str().unwrap(),
        "--plugins",
        plugins.to_str().unwrap(),
    ]);
    assert!(
        !ok && text.contains("greet.toml: invalid manifest:"),
        "{text}"
    );
    assert!(text.contains("max_retyr"), "{text}");
    assert!(!plugins.join("greet.toml").exists(), "{text}");
    std::fs::remove_file(&manifest).unwrap();

    // A changed source, rebuilt into the same folder, replaces the build while the host runs.
    let code = std::fs::read_to_string(&source).unwrap();
    // The C source spells the field as an escaped string: \"length\".
    assert!(
        code.contains(r#"\"length\""#),
        "the template writes a length field"
    );
    std::fs::write(&source, code.replace(r#"\"length\""#, r#"\"chars\""#)).unwrap();
    build();
    host.eventually("the new build is served", || {
        serving_version().filter(|v| *v != first_version)
    });
    let done = run_to(
        &host,
        json!({"task_type": "greet", "payload": {"text": "hello"}}),
        "done",
    );
    assert_eq!(done["result"]["chars"], 5, "{done:#}");
    assert_eq!(
        done["plugin_version"].as_str(),
        serving_version().as_deref(),
        "{done:#}"
    );
}

#[test]
fn every_language_is_held_to_the_same_limits() {
    let ws = Workspace::with_plugins(&[]);
    let examples = [
        (
            "c",
            example_artifact("c/tally"),
            json!({"account": "ops", "amounts": [1]}),
        ),
        ("zig", example_artifact("zig/rot13"), json!({"text": "hi"})),
        (
            "go",
            example_artifact("go/wordcount"),
            json!({"text": "hi"}),
        ),
        (
            "js",
            example_artifact("javascript/receipt"),
            json!({"order": "A", "items": []}),
        ),
        (
            "python",
            example_artifact("python/invoice"),
            json!({"customer": "A", "lines": []}),
        ),
    ];
    for (language, wasm, _) in &examples {
        std::fs::copy(wasm, ws.plugin_dir().join(format!("{language}_fuel.wasm"))).unwrap();
        ws.manifest(&format!("{language}_fuel"), "fuel = 100\nmax_retry = 0\n");
    }
    // Go, JavaScript and Python need megabytes of memory just to start their runtimes.
    for (language, wasm, _) in &examples[2..] {
        std::fs::copy(
            wasm,
            ws.plugin_dir().join(format!("{language}_memory.wasm")),
        )
        .unwrap();
        ws.manifest(
            &format!("{language}_memory"),
            "memory = \"2MiB\"\nmax_retry = 0\n",
        );
    }
    let host = ws.start(&[]);
    for (language, _, payload) in &examples {
        let failed = run_to(
            &host,
            json!({"task_type": format!("{language}_fuel"), "payload": payload}),
            "failed",
        );
        assert!(
            failed["last_error"]
                .as_str()
                .unwrap()
                .contains("fuel exhausted"),
            "{language}: {failed:#}"
        );
    }
    for (language, _, payload) in &examples[2..] {
        let failed = run_to(
            &host,
            json!({"task_type": format!("{language}_memory"), "payload": payload}),
            "failed",
        );
        assert!(
            failed["last_error"].as_str().unwrap().contains("memory"),
            "{language}: {failed:#}"
        );
    }
    let (status, health) = host.get("/health");
    assert_eq!(status, 200, "the host keeps serving: {health:#}");
}
