//! The approval example (examples/approval) end to end on PostgreSQL: its three handlers
//! (Rust, JavaScript, Python) built with `spool plugin build`, a real host on a fresh database,
//! the app and the stand-in mail service as processes. The asynchronous submit answers far
//! faster than the synchronous one, a rolled-back approval leaves no task, and every task
//! finishes with its effect: a report file, each mail delivered once although the mail task
//! was retried, the statistics cache. A second test runs `approval demo` as the README shows.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::servers::{self, Backend};
use crate::util::{Workspace, example_artifact, repo_root};

/// The example's handler projects, under examples/approval/handlers.
const HANDLERS: [&str; 3] = ["report", "mail", "stats"];

/// The stand-in mail service's latency in the first test: each synchronous submit waits for
/// two mails.
const MAIL_DELAY_MS: &str = "1000";

const FINANCE: &str = "finance@example.com";

/// Building the example and compiling its Python and JavaScript components on a cold cache
/// takes minutes on a busy machine.
const WAIT: Duration = Duration::from_secs(300);

fn example() -> PathBuf {
    repo_root().join("examples/approval")
}

/// The `approval` binary (the app, the mail stand-in and the demo), built once per run.
fn approval_binary() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let output = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .current_dir(repo_root())
            .args([
                "build",
                "-p",
                "approval",
                "--message-format=json-render-diagnostics",
            ])
            .stderr(Stdio::inherit())
            .output()
            .expect("cargo runs");
        assert!(output.status.success(), "building the approval app failed");
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == "approval")
            .find_map(|m| m["executable"].as_str().map(PathBuf::from))
            .expect("cargo names the approval executable")
    })
}

/// A handler of the example built with `spool plugin build`. `example_artifact` builds the
/// projects under plugins/ (`..` reaches this example's) one at a time with every other test's,
/// as they share the toolchains folder, and into a folder kept across runs: an unchanged build
/// is not rewritten, so the compiled-code cache keeps its entries.
fn built_handler(name: &str) -> PathBuf {
    example_artifact(&format!("../examples/approval/handlers/{name}"))
}

/// A process of the example that prints `PREFIX URL` once it listens; killed when dropped.
struct Process {
    child: Child,
    url: String,
}

impl Process {
    fn start(args: &[&str], prefix: &str) -> Process {
        let mut child = Command::new(approval_binary())
            .args(args)
            .stdout(Stdio::piped())
            .spawn()
            .expect("the approval binary starts");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let url = loop {
            match lines.next() {
                Some(Ok(line)) => {
                    if let Some(url) = line.strip_prefix(prefix) {
                        break url.to_string();
                    }
                }
                _ => panic!("approval {args:?} exited before listening"),
            }
        };
        std::thread::spawn(move || for _ in lines {});
        Process { child, url }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `host:port` of an `http://host:port/...` URL.
fn authority(url: &str) -> &str {
    let rest = url.trim_start_matches("http://");
    rest.split('/').next().unwrap()
}

/// Copies the built handlers into the workspace's plugin folder with their manifests,
/// pointed at this run's app and mail service, and a 1 s retry delay instead of 30 s.
fn deploy(ws: &Workspace, app: &str, mail: &str) {
    for name in HANDLERS {
        std::fs::copy(
            built_handler(name),
            ws.plugin_dir().join(format!("{name}.wasm")),
        )
        .unwrap();
        let manifest =
            std::fs::read_to_string(example().join(format!("handlers/{name}/{name}.toml")))
                .unwrap();
        assert!(manifest.contains("backoff_base = \"30s\""), "{manifest}");
        let manifest = manifest
            .replace("backoff_base = \"30s\"", "backoff_base = \"1s\"")
            .replace("127.0.0.1:3000", authority(app))
            .replace("127.0.0.1:8025", authority(mail));
        ws.manifest(name, &manifest);
    }
}

fn median(times: &[Duration]) -> Duration {
    let mut sorted = times.to_vec();
    sorted.sort();
    sorted[sorted.len() / 2]
}

/// Runs a query on the database directly; each row as a JSON value (`to_jsonb` of the row).
fn rows(url: &str, sql: &str) -> Vec<Value> {
    use sqlx::Connection;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut db = sqlx::PgConnection::connect(url).await.unwrap();
        let texts: Vec<String> =
            sqlx::query_scalar(&format!("SELECT to_jsonb(r)::text FROM ({sql}) r"))
                .fetch_all(&mut db)
                .await
                .unwrap();
        texts
            .iter()
            .map(|t| serde_json::from_str(t).unwrap())
            .collect()
    })
}

/// POSTs `body` to the app; the time the answer took, its status and its JSON.
fn submit(http: &reqwest::blocking::Client, url: &str, body: &Value) -> (Duration, u16, Value) {
    let started = Instant::now();
    let response = http.post(url).json(body).send().unwrap();
    let status = response.status().as_u16();
    let answer = response.json().unwrap_or(Value::Null);
    (started.elapsed(), status, answer)
}

#[test]
fn approval_example_answers_at_once_and_every_task_finishes_with_its_effect() {
    let Some(database) =
        servers::url(Backend::Postgres).map(|_| servers::fresh_database(Backend::Postgres))
    else {
        return;
    };
    let ws = Workspace::with_plugins(&[]).on_database(database.clone());
    let reports = ws.grants_dir().join("approval-reports");
    std::fs::create_dir_all(&reports).unwrap();

    let mail = Process::start(
        &[
            "mail-stub",
            "--listen",
            "127.0.0.1:0",
            "--delay-ms",
            MAIL_DELAY_MS,
        ],
        "mail service listening on ",
    );
    let app = Process::start(
        &[
            "serve",
            "--database-url",
            &database,
            "--listen",
            "127.0.0.1:0",
            "--mail-url",
            &mail.url,
            "--reports-dir",
            reports.to_str().unwrap(),
        ],
        "approval app listening on ",
    );
    deploy(&ws, &app.url, &mail.url);
    let host = ws.start(&[]);
    let (_, health) = host.get("/health");
    assert_eq!(
        health["task_types"],
        json!(["mail", "report", "stats"]),
        "{health:#}"
    );

    let http = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let approvals = format!("{}/approvals", app.url);
    let approvers = ["dana", "lee"];
    let submission = |id: &str, i: usize, amount: f64| {
        json!({
            "request_id": id,
            "approver": approvers[i % 2],
            "requester": format!("requester{i}@example.com"),
            "amount": amount,
        })
    };

    // The endpoint before Spool: the report, two mails and the cache in the request.
    let mut sync_times = Vec::new();
    let mut submitted = Vec::new(); // (approval id, body)
    for (i, amount) in [1200.0, 310.5, 87.25].into_iter().enumerate() {
        let body = submission(&format!("S-{i}"), i, amount);
        let (took, status, answer) = submit(&http, &format!("{approvals}?sync=1"), &body);
        assert_eq!(status, 201, "{answer:#}");
        assert_eq!(answer["mode"], "sync", "{answer:#}");
        sync_times.push(took);
        submitted.push((answer["approval_id"].as_i64().unwrap(), body));
    }
    assert!(
        host.all_tasks().is_empty(),
        "the synchronous submit enqueues nothing"
    );

    // From now on the mail service refuses the next mail to finance once: the mail task that
    // meets it has sent its first mail and must not send it again when retried.
    let armed = http
        .post(mail.url.replace("/send", "/fail-next"))
        .json(&json!({ "to": FINANCE }))
        .send()
        .unwrap();
    assert!(armed.status().is_success());

    let mut async_times = Vec::new();
    let mut mail_tasks = Vec::new();
    let mut all_tasks = Vec::new();
    let mut expected_cache: HashMap<&str, (i64, i64)> = HashMap::new();
    for (i, amount) in [120.5, 980.0, 45.25, 3100.1, 777.77]
        .into_iter()
        .enumerate()
    {
        let body = submission(&format!("A-{i}"), i, amount);
        let (took, status, answer) = submit(&http, &approvals, &body);
        assert_eq!(status, 201, "{answer:#}");
        assert_eq!(answer["mode"], "async", "{answer:#}");
        async_times.push(took);
        submitted.push((answer["approval_id"].as_i64().unwrap(), body));
        for kind in HANDLERS {
            all_tasks.push(answer["tasks"][kind].as_i64().unwrap());
        }
        mail_tasks.push(answer["tasks"]["mail"].as_i64().unwrap());
        let entry = expected_cache.entry(approvers[i % 2]).or_default();
        entry.0 += 1;
        entry.1 += (amount * 100.0_f64).round() as i64;
    }

    // Timings on a shared machine are noisy: a ratio, not an absolute bound.
    let (sync_median, async_median) = (median(&sync_times), median(&async_times));
    eprintln!("median response: ?sync=1 {sync_median:?}, enqueued {async_median:?}");
    assert!(
        async_median * 5 < sync_median,
        "the enqueueing submit ({async_median:?}) is not far faster than the synchronous one \
         ({sync_median:?}): sync {sync_times:?}, async {async_times:?}"
    );

    // Rollbacks leave no task. A second approval of a request fails at commit (the unique
    // constraint is deferred), after its three enqueues; an amount of 0 fails the table's check.
    let tasks_before = host.all_tasks().len();
    let (_, status, answer) = submit(&http, &approvals, &submission("A-0", 1, 5.0));
    assert_eq!(status, 409, "{answer:#}");
    assert_eq!(answer["error"]["code"], "already_approved", "{answer:#}");
    let (_, status, answer) = submit(&http, &approvals, &submission("A-9", 1, 0.0));
    assert_eq!(status, 422, "{answer:#}");
    assert_eq!(
        host.all_tasks().len(),
        tasks_before,
        "a rolled-back approval left tasks behind"
    );
    let stored = rows(
        &database,
        "SELECT request_id FROM approval WHERE request_id IN ('A-0', 'A-9')",
    );
    assert_eq!(stored, vec![json!({"request_id": "A-0"})]);

    for id in &all_tasks {
        host.wait_for_status(*id, "done", WAIT);
    }

    // Mails: priority 10; one task was retried, and its retry skipped the mail it had sent.
    let mut retried = Vec::new();
    for id in &mail_tasks {
        let task = host.task(*id);
        assert_eq!(task["priority"], 10, "{task:#}");
        if task["attempts"] != 1 {
            retried.push(task);
        }
    }
    assert_eq!(
        retried.len(),
        1,
        "one mail task met the refusal: {retried:#?}"
    );
    let task = &retried[0];
    assert_eq!(task["attempts"], 2, "{task:#}");
    assert_eq!(task["result"]["sent"], json!([FINANCE]), "{task:#}");
    assert_eq!(
        task["result"]["already_sent"].as_array().map(Vec::len),
        Some(1),
        "{task:#}"
    );
    assert!(
        task["log"].as_str().unwrap().contains("already sent"),
        "{task:#}"
    );

    // The mail service got every approval's two mails exactly once, sync and async alike.
    let mails: Value = http
        .get(mail.url.replace("/send", "/mails"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(mails["refused"], 1, "{mails:#}");
    let mut per_key: HashMap<String, usize> = HashMap::new();
    for delivery in mails["deliveries"].as_array().unwrap() {
        *per_key
            .entry(delivery["key"].as_str().unwrap().to_string())
            .or_default() += 1;
    }
    for (id, body) in &submitted {
        for to in [body["requester"].as_str().unwrap(), FINANCE] {
            assert_eq!(
                per_key.get(&format!("mail:{id}:{to}")),
                Some(&1),
                "approval {id}'s mail to {to}: {mails:#}"
            );
        }
    }
    assert_eq!(per_key.len(), 2 * submitted.len(), "{mails:#}");

    // A report file per approval, written by the app (sync) or the handler (async), each over
    // its approver's approvals so far.
    for (id, body) in &submitted {
        let text = std::fs::read_to_string(reports.join(format!("approval-{id}.md")))
            .unwrap_or_else(|e| panic!("no report of approval {id}: {e}"));
        let request = body["request_id"].as_str().unwrap();
        assert!(
            text.starts_with(&format!("# Approval {id}: request {request}\n")),
            "{text}"
        );
    }
    let (last, _) = submitted.last().unwrap();
    let text = std::fs::read_to_string(reports.join(format!("approval-{last}.md"))).unwrap();
    assert!(
        text.contains("## dana's approvals (5)"),
        "two synchronous and three enqueued approvals of dana: {text}"
    );

    // The statistics cache counts each enqueued approval once.
    for (approver, (count, cents)) in &expected_cache {
        let cached = rows(
            &database,
            &format!(
                "SELECT kv_value::jsonb AS v FROM task_kv \
                 WHERE task_type = 'stats' AND kv_key = 'approver:{approver}'"
            ),
        );
        assert_eq!(cached.len(), 1, "{approver}: {cached:?}");
        assert_eq!(
            cached[0]["v"]["approvals"], *count,
            "{approver}: {cached:?}"
        );
        assert_eq!(
            cached[0]["v"]["total_cents"], *cents,
            "{approver}: {cached:?}"
        );
    }
    let all = rows(
        &database,
        "SELECT kv_value::jsonb AS v FROM task_kv WHERE task_type = 'stats' AND kv_key = 'all'",
    );
    assert_eq!(all[0]["v"]["approvals"], 5, "{all:?}");
}

/// `approval demo`, as the example's README runs it, tells the story and finds every effect.
#[test]
fn approval_demo_runs_the_whole_story() {
    let Some(database) =
        servers::url(Backend::Postgres).map(|_| servers::fresh_database(Backend::Postgres))
    else {
        return;
    };
    for name in HANDLERS {
        built_handler(name); // the toolchains and the projects' builds, shared with the test above
    }
    let work = tempfile::tempdir().unwrap();
    let output = Command::new(approval_binary())
        .args(["demo", "--database-url", &database])
        .args(["--approvals", "2", "--mail-delay-ms", "500"])
        .arg("--work-dir")
        .arg(work.path())
        .arg("--spool")
        .arg(env!("CARGO_BIN_EXE_spool"))
        .env("SPOOL_TOOLS_DIR", repo_root().join("target/tools"))
        .env(
            "CARGO_TARGET_DIR",
            repo_root().join("target/spool-test-builds/cargo-target"),
        )
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the demo failed:\n{stdout}\n{stderr}\nhost log:\n{}",
        std::fs::read_to_string(work.path().join("host.log")).unwrap_or_default()
    );
    for line in [
        "409 already_approved; tasks in the table: 6 before, 6 after",
        "ok   reports: 4 of 4",
        "ok   mails: 8 delivered, 4 of 4 approvals got each of their 2 mails exactly once (1 refused",
        "Every task finished with its effect.",
    ] {
        assert!(stdout.contains(line), "no {line:?} in:\n{stdout}");
    }
}
