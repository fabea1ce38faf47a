//! The API keeps its own contract under Schemathesis, a property-based fuzzer driven by the
//! OpenAPI description (from PyPI, pinned, installed on first use into
//! `target/tools/schemathesis`): every check, every phase including the stateful one (which
//! follows the description's links from a created task to reading, retrying and cancelling
//! it), against a real host with a token and tasks in every state. Zero failures.

use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::{Workspace, artifact, repo_root};

const SCHEMATHESIS: &str = "schemathesis==4.32.5";
/// Test cases per operation and phase: enough to cover every field's edges, small enough for
/// the whole run to take about a minute.
const MAX_EXAMPLES: &str = "200";
/// The run is stopped and the test failed past this.
const TIME_LIMIT: Duration = Duration::from_secs(300);

/// Negative data (requests the description rules out) must be refused with one of these:
/// Schemathesis's defaults, plus 413, which this API gives a batch over `max_batch`. A deploy
/// form that fits the description may still carry bytes that are no handler build, which no
/// schema can rule out: 422 `invalid_plugin` is a valid answer to it, and that most fuzzed
/// forms get it is no mismatch between the description and the API (no warning for it).
const CONFIG: &str = r#"
[checks.negative_data_rejection]
expected-statuses = ["400", "401", "403", "404", "405", "406", "409", "413", "415", "422", "428", "429", "5xx"]

[[operations]]
include-path = "/plugins/{name}/deploy"
checks.positive_data_acceptance.expected-statuses = ["2xx", "3xx", "401", "403", "404", "409", "422", "429", "5xx"]
warnings = false

[[operations]]
include-path-regex = "^/plugins/\\{name\\}/(promote|rollback|versions)$"
parameters = { name = "fuzzed" }

# A deployment is removed once; every later removal of it is a 404, as it should be. The host's
# folder has a file for the type, which serves it once its deployment is gone.
[[operations]]
include-path = "/plugins/{name}/deployment"
parameters = { name = "removable" }
warnings = false

# The failed task's first attempt keeps a record (the default `record = "failed"`); a fuzzed
# task id almost never has one, so the record route is given that attempt.
[[operations]]
include-path = "/tasks/{id}/records/{attempt}"
parameters = { id = FAILED_TASK, attempt = 1 }
"#;

/// The `st` command of a virtual environment holding exactly [`SCHEMATHESIS`], made on first
/// use (as `spool plugin build` installs componentize-py).
fn schemathesis() -> PathBuf {
    static INSTALL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = INSTALL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let venv = repo_root().join("target/tools/schemathesis");
    let stamp = venv.join("spool-installed.txt");
    let st = venv.join("bin/st");
    if std::fs::read_to_string(&stamp).is_ok_and(|installed| installed.trim() == SCHEMATHESIS)
        && st.exists()
    {
        return st;
    }
    eprintln!("installing {SCHEMATHESIS} into {}", venv.display());
    std::fs::create_dir_all(venv.parent().unwrap()).unwrap();
    let run = |command: &mut Command, what: &str| {
        let status = command.status().unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(status.success(), "{what} failed");
    };
    run(
        Command::new("python3").args(["-m", "venv"]).arg(&venv),
        "python3 -m venv (Debian: apt-get install python3-venv)",
    );
    run(
        Command::new(venv.join("bin/pip")).args([
            "install",
            "--quiet",
            "--disable-pip-version-check",
            SCHEMATHESIS,
        ]),
        "pip install schemathesis",
    );
    std::fs::write(&stamp, SCHEMATHESIS).unwrap();
    st
}

#[test]
fn api_contract_holds_under_schemathesis() {
    let st = schemathesis();
    let ws = Workspace::with_plugins(&["noop", "report", "sleepy", "trap"]);
    // Deployed below and removed by the fuzzer: the folder's file keeps the type served, so
    // the task types the description lists stay true.
    ws.add_plugin("noop", "removable");
    let host = ws.start(&[
        "--api-token",
        "w-token",
        "--read-token",
        "r-token",
        "--max-batch",
        "100",
        // Long-polls on the tasks that never finish end within a second.
        "--max-wait",
        "1s",
    ]);
    let post = |body: serde_json::Value| -> i64 {
        let response = host
            .http
            .post(format!("{}/tasks", host.url))
            .bearer_auth("w-token")
            .json(&body)
            .send()
            .unwrap();
        assert_eq!(response.status().as_u16(), 201);
        response.json::<serde_json::Value>().unwrap()["id"]
            .as_i64()
            .unwrap()
    };
    let read = |id: i64| -> serde_json::Value {
        host.http
            .get(format!("{}/tasks/{id}", host.url))
            .bearer_auth("r-token")
            .send()
            .unwrap()
            .json()
            .unwrap()
    };
    // Deployed types for the deployment routes to find.
    for name in ["fuzzed", "removable"] {
        let form = reqwest::blocking::multipart::Form::new().part(
            "component",
            reqwest::blocking::multipart::Part::bytes(std::fs::read(artifact("noop")).unwrap()),
        );
        let response = host
            .http
            .post(format!("{}/plugins/{name}/deploy", host.url))
            .bearer_auth("w-token")
            .multipart(form)
            .send()
            .unwrap();
        assert_eq!(response.status().as_u16(), 201);
    }
    // Tasks in every state for the fuzzer to find: done, failed, running, pending, cancelled.
    let done = post(json!({"task_type": "noop", "payload": {"n": 1}}));
    let failed = post(json!({"task_type": "trap", "max_retry": 0}));
    let running = post(json!({"task_type": "sleepy", "payload": {"ms": 600_000}}));
    post(json!({"task_type": "noop", "delay": "1h", "idempotency_key": "later"}));
    let cancelled = post(json!({"task_type": "noop", "delay": "1h"}));
    let response = host
        .http
        .post(format!("{}/tasks/{cancelled}/cancel", host.url))
        .bearer_auth("w-token")
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    for (id, status) in [(done, "done"), (failed, "failed"), (running, "running")] {
        host.eventually(&format!("task {id} {status}"), || {
            (read(id)["status"] == status).then_some(())
        });
    }

    let work = tempfile::tempdir().unwrap();
    let config = work.path().join("schemathesis.toml");
    std::fs::write(&config, CONFIG.replace("FAILED_TASK", &failed.to_string())).unwrap();
    let output = run_within(
        Command::new(&st)
            .current_dir(work.path())
            .arg("--config-file")
            .arg(&config)
            .args(["--no-color", "run", &format!("{}/openapi.json", host.url)])
            .args([
                "--checks",
                "all",
                "--phases",
                "examples,coverage,fuzzing,stateful",
            ])
            .args([
                "--max-examples",
                MAX_EXAMPLES,
                "--generation-database",
                "none",
                "--request-timeout",
                "30",
            ])
            // One worker: Python 3.11's parser can fail (SystemError) under Hypothesis in threads.
            .args(["--workers", "1"])
            .args(["--header", "Authorization: Bearer w-token"]),
        work.path(),
    );
    let summary = output
        .text
        .rsplit_once("SUMMARY")
        .map_or(output.text.as_str(), |(_, tail)| tail);
    eprintln!("Schemathesis {SCHEMATHESIS} against {}:{summary}", host.url);
    assert!(
        output.succeeded,
        "Schemathesis found contract failures:\n{}\nhost log:\n{}",
        output.text,
        host.log()
    );
    assert!(summary.contains("No issues found"), "{}", output.text);
    assert!(
        !host.log().lines().any(|line| line.starts_with("thread '")),
        "the host panicked:\n{}",
        host.log()
    );
}

struct Output {
    succeeded: bool,
    text: String,
}

/// Runs a command with its output in a file, killing it past [`TIME_LIMIT`].
fn run_within(command: &mut Command, dir: &Path) -> Output {
    let log = dir.join("schemathesis.log");
    let file = std::fs::File::create(&log).unwrap();
    let mut child = command
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if started.elapsed() > TIME_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    match status {
        Some(status) => Output {
            succeeded: status.success(),
            text,
        },
        None => Output {
            succeeded: false,
            text: format!("stopped after {TIME_LIMIT:?}:\n{text}"),
        },
    }
}
