//! Spool's throughput benchmark: `cargo xtask bench` (or `cargo bench -p spool --bench throughput`
//! after `cargo xtask build-plugins`).
//!
//! Every figure is measured in this run on a fresh database, and printed with raw baselines
//! measured the same way, so each reads as a ratio to what the database and the disk allow on
//! this machine:
//! 1. raw baselines: the store's claim + complete cycle (`Store::claim`, `Store::complete`), no
//!    HTTP, no WebAssembly, n tasks per claim: the host's claim size under a backlog, and 100;
//! 2. batch enqueue through `POST /tasks/batch`;
//! 3. single-request enqueue through `POST /tasks` with 32 concurrent clients (rate, p50, p99);
//!    both enqueue benchmarks start after one attempt of the type has finished, so the host
//!    pays the completion estimate a production host pays (`throughput/finish.rs`);
//! 4. drain: N tasks through the no-op WebAssembly handler, from a full table to all done, by
//!    one host, and on a server database by two hosts sharing it (with each host's share); on
//!    PostgreSQL also on a table the planner has no statistics for (a new table before
//!    autovacuum first analyzes it);
//! 5. idle pickup latency: one task at a time into an idle host, enqueue request → handler
//!    start (the `clock` handler reads the clock: `throughput/idle.rs`), and the CPU an idle
//!    host with an empty queue uses; on a server database also across hosts (enqueued through
//!    one host, run by another) and, on PostgreSQL, after an application's own `INSERT`;
//! 6. sandbox overhead: instantiate + call of the no-op handler, one attempt after another, on
//!    demand and with the sandbox options a default host runs with (from `Config`);
//! 7. plugin swap latency: a new build renamed into the plugin folder → serving (`GET /plugins`),
//!    reported as the folder watcher's debounce and the load after it;
//! 8. host memory with 1,000 tasks in flight (each sleeping in a host call).
//!
//! The database is a fresh SQLite file per measurement, or with `--database URL`
//! (`postgres://…`, `mysql://…`) a fresh database per measurement created on that server and
//! dropped afterwards (`throughput/database.rs`); there a table filled for a measurement is
//! analyzed before it starts, as autovacuum analyzes a table in use. Hosts run in the
//! benchmark's own process (HTTP over loopback, real compiled components); two hosts are two
//! independent hosts in it.
//!
//! Options (after `--`): `--database URL`, `--drain N` (default 100000), `--http N` (default
//! 20000), `--batch N` (default 100000), `--pickups N` (default 200), `--quick` (small sizes),
//! `--only drain|two-hosts|never-analyzed|pickup` (the raw baselines and that measurement only,
//! e.g. under a profiler), `--concurrency N` (the drains' hosts' concurrency instead of the
//! default), `--only archive [--old N]` (a drain beside N old finished rows, default 1,000,000,
//! with the archiver off and then on: `throughput/archive.rs`), `--only health [--old N]` (a
//! drain beside N old finished rows while a client polls `/metrics` or `/health` every 50 ms),
//! `--only record` (the drain with the type's `record` mode "none", "failed" and "all",
//! five rounds each in turn: `throughput/record.rs`).

use chrono::{DateTime, Utc};
use hdrhistogram::Histogram;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use spool::config::{Config, Settings};
#[path = "throughput/archive.rs"]
mod archive;
mod common;
#[path = "throughput/database.rs"]
mod database;
#[path = "throughput/finish.rs"]
mod finish;
#[path = "throughput/http.rs"]
mod http;
#[path = "throughput/idle.rs"]
mod idle;
#[path = "throughput/record.rs"]
mod record;

use common::EmptyServices;
use database::{Fresh, Server};
use spool::sandbox::{RunLimits, Sandbox, SandboxOptions, TaskInfo, TaskServices};
use spool::store::{self, ClaimRequest, Completion};
use spool::task::{NewTask, Status, Transition};

struct Options {
    drain: usize,
    http: usize,
    batch: usize,
    pickups: usize,
    database: Option<String>,
    only: Option<String>,
    /// The drains' hosts' concurrency (default: the host's default).
    concurrency: Option<usize>,
}

fn options() -> Options {
    let args: Vec<String> = std::env::args().collect();
    let text = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let value =
        |name: &str, default: usize| text(name).and_then(|v| v.parse().ok()).unwrap_or(default);
    let quick = args.iter().any(|a| a == "--quick");
    let scale = |n: usize| if quick { n / 20 } else { n };
    Options {
        drain: value("--drain", scale(100_000)),
        http: value("--http", scale(20_000)),
        batch: value("--batch", scale(100_000)),
        pickups: value("--pickups", if quick { 50 } else { 200 }),
        database: text("--database"),
        only: text("--only"),
        concurrency: text("--concurrency").and_then(|v| v.parse().ok()),
    }
}

fn artifact(name: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!(
        "../plugins/target/wasm32-wasip2/release/{name}.wasm"
    ));
    assert!(
        path.exists(),
        "{} is missing: run `cargo xtask build-plugins` first",
        path.display()
    );
    path
}

fn noop_wasm() -> PathBuf {
    artifact("noop")
}

/// The component with a custom section naming `tag` appended: it runs exactly like the
/// original, but its content hash, which every completion records as `plugin_version`, tells
/// apart the hosts that ran tasks.
fn tagged(component: &[u8], tag: &str) -> Vec<u8> {
    fn leb128(mut n: usize, out: &mut Vec<u8>) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }
    let name = b"spool-bench-host";
    let mut body = Vec::new();
    leb128(name.len(), &mut body);
    body.extend_from_slice(name);
    body.extend_from_slice(tag.as_bytes());
    let mut out = component.to_vec();
    out.push(0); // custom section
    leb128(body.len(), &mut out);
    out.extend_from_slice(&body);
    out
}

/// A build's version as hosts report it: the SHA-256 of the file.
fn version(bytes: &[u8]) -> String {
    hex::encode(<sha2::Sha256 as sha2::Digest>::digest(bytes))
}

fn new_task(task_type: &str, i: usize) -> NewTask {
    NewTask {
        task_type: task_type.into(),
        payload: format!("{{\"n\":{i}}}"),
        priority: 0,
        max_retry: 3,
        run_at: Utc::now(),
        idempotency_key: None,
        depth: 0,
    }
}

/// The default concurrency (8 × cores) and the largest claim a host makes under a backlog:
/// every slot free plus as many tasks ahead as its ready queue takes at most
/// (`spool::worker::run::ready::MAX_AHEAD`). The drain prints how many it really claimed per
/// statement.
fn default_concurrency() -> (usize, usize) {
    let concurrency = Config::from_settings(Settings::default())
        .unwrap()
        .concurrency;
    (
        concurrency,
        concurrency + spool::worker::run::ready::MAX_AHEAD,
    )
}

/// The load averages (1, 5, 15 minutes), as `uptime` shows them.
fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// Inserts `n` due no-op tasks through the store, 5,000 per call; with `analyzed`, then
/// updates the planner's statistics (server databases).
async fn fill(fresh: &Fresh, n: usize, analyzed: bool) {
    let store = store::open(&fresh.url).await.unwrap();
    for chunk in (0..n).collect::<Vec<_>>().chunks(5000) {
        store
            .enqueue(chunk.iter().map(|i| new_task("noop", *i)).collect())
            .await
            .unwrap();
    }
    store.close().await;
    if analyzed {
        fresh.analyze().await;
    }
}

/// Measurement 1: The store's claim + complete cycle, `batch` tasks per claim, no HTTP or wasm:
/// the ceiling, on a table of `n` due tasks (analyzed).
async fn raw_baseline(server: &Server, n: usize, batch: usize) -> f64 {
    let fresh = server.fresh().await;
    fill(&fresh, n, true).await;
    let store = store::open(&fresh.url).await.unwrap();
    let started = Instant::now();
    let mut done = 0;
    while done < n {
        let request = ClaimRequest {
            owner: "bench".into(),
            limit: batch,
            task_types: vec!["noop".into()],
            now: Utc::now(),
            lease: Duration::from_secs(60),
        };
        let claimed = store.claim(&request).await.unwrap();
        let completions: Vec<Completion> = claimed
            .iter()
            .map(|task| Completion {
                id: task.id,
                owner: "bench".into(),
                attempt: task.attempts,
                transition: Transition {
                    status: Status::Done,
                    retry_count: 0,
                    next_run_at: None,
                    result: Some(task.payload.to_string()),
                    error: None,
                },
                outcome: store::history::Outcome::Done,
                plugin_version: None,
                log: None,
                // What a real attempt records, so the baseline writes the same columns.
                cost: Some(spool::task::AttemptCost {
                    wall_ms: 1,
                    fuel_used: Some(100_000),
                    peak_memory: 1 << 20,
                }),
                finished_at: Utc::now(),
                record: None,
            })
            .collect();
        done += store.complete(&completions).await.unwrap() as usize;
    }
    let rate = n as f64 / started.elapsed().as_secs_f64();
    store.close().await;
    drop(store);
    fresh.remove().await;
    rate
}

/// Starts an in-process host on `url` with these plugins (task type, component) in a plugin
/// folder under `dir`; `tune` adjusts its settings.
async fn start_host_with(
    dir: &Path,
    url: &str,
    plugins: &[(&str, &[u8])],
    tune: impl FnOnce(&mut Settings),
) -> spool::RunningHost {
    let folder = dir.join("plugins");
    std::fs::create_dir_all(&folder).unwrap();
    for (task_type, component) in plugins {
        std::fs::write(folder.join(format!("{task_type}.wasm")), component).unwrap();
    }
    let mut settings = Settings {
        database_url: Some(url.to_string()),
        plugins: Some(folder),
        cache_dir: Some(dir.join("cache")),
        listen: Some("127.0.0.1:0".parse().unwrap()),
        ..Settings::default()
    };
    tune(&mut settings);
    spool::start(Config::from_settings(settings).unwrap())
        .await
        .unwrap()
}

/// Starts an in-process host on the measurement's database with the no-op plugin.
async fn start_host(fresh: &Fresh, concurrency: Option<usize>) -> spool::RunningHost {
    let noop = std::fs::read(noop_wasm()).unwrap();
    start_host_with(fresh.dir.path(), &fresh.url, &[("noop", &noop)], |s| {
        s.concurrency = concurrency
    })
    .await
}

async fn stop(host: spool::RunningHost) {
    host.shutdown().escalate();
    host.stopped()
        .await
        .expect("the benchmark host stops cleanly");
}

/// Stops at once: running attempts are interrupted and handed back.
async fn stop_now(host: spool::RunningHost) {
    host.shutdown().escalate();
    host.shutdown().escalate();
    host.stopped()
        .await
        .expect("the benchmark host stops cleanly");
}

/// Measurement 2: `POST /tasks/batch` with 1,000 tasks per request, tasks scheduled far ahead so the
/// dispatcher stays idle and only enqueueing is measured.
async fn batch_enqueue(server: &Server, n: usize) -> f64 {
    let fresh = server.fresh().await;
    let host = start_host(&fresh, None).await;
    let client = reqwest::Client::new();
    finish::warm_up(&client, &format!("http://{}", host.addr), "noop").await;
    let url = format!("http://{}/tasks/batch", host.addr);
    let started = Instant::now();
    let mut sent = 0;
    while sent < n {
        let size = 1000.min(n - sent);
        let tasks: Vec<Value> = (0..size)
            .map(|i| json!({"task_type": "noop", "payload": {"n": sent + i}, "delay": "1h"}))
            .collect();
        let response = client
            .post(&url)
            .json(&json!({"tasks": tasks}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 201);
        sent += size;
    }
    let rate = n as f64 / started.elapsed().as_secs_f64();
    stop(host).await;
    fresh.remove().await;
    rate
}

/// Measurement 3: `POST /tasks` from 32 concurrent clients (keep-alive connections).
async fn http_enqueue(server: &Server, n: usize, clients: usize) -> (f64, Histogram<u64>) {
    let fresh = server.fresh().await;
    let host = start_host(&fresh, None).await;
    finish::warm_up(
        &reqwest::Client::new(),
        &format!("http://{}", host.addr),
        "noop",
    )
    .await;
    let url = format!("http://{}/tasks", host.addr);
    let per_client = n / clients;
    let started = Instant::now();
    let mut workers = Vec::new();
    for c in 0..clients {
        let url = url.clone();
        workers.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            let mut latencies = Histogram::<u64>::new(3).unwrap();
            for i in 0..per_client {
                let body = json!({"task_type": "noop", "payload": {"c": c, "i": i}, "delay": "1h"});
                let sent = Instant::now();
                let response = client.post(&url).json(&body).send().await.unwrap();
                assert_eq!(response.status().as_u16(), 201);
                latencies.record(sent.elapsed().as_micros() as u64).unwrap();
            }
            latencies
        }));
    }
    let mut all = Histogram::<u64>::new(3).unwrap();
    for worker in workers {
        all.add(worker.await.unwrap()).unwrap();
    }
    let rate = (per_client * clients) as f64 / started.elapsed().as_secs_f64();
    stop(host).await;
    fresh.remove().await;
    (rate, all)
}

/// What a drain measured.
struct Drained {
    rate: f64,
    /// Tasks each host ran.
    per_host: Vec<u64>,
    /// Claim statements, told apart by host and claim time (`attempted_at`, whole
    /// milliseconds: two claims of one host within the same millisecond count as one).
    claims: u64,
}

/// Measurement 4: N due tasks inserted up front, then `hosts` hosts (1 or 2, started together,
/// default settings but `concurrency`) drain them. Timed from the first claim (the earliest
/// `attempted_at`) until the hosts' in-process counter of finished attempts reaches N and then
/// no task is pending or running (`throughput/finish.rs`), so the last completions' commits
/// count and the hosts' start-up does not. Each host runs its own tagged build of the
/// no-op handler, so the completed rows say which host ran them.
async fn drain(
    server: &Server,
    n: usize,
    hosts: usize,
    concurrency: Option<usize>,
    analyzed: bool,
    manifest: Option<&str>,
) -> Drained {
    let fresh = server.fresh().await;
    fill(&fresh, n, analyzed).await;
    let noop = std::fs::read(noop_wasm()).unwrap();
    let builds: Vec<Vec<u8>> = (0..hosts)
        .map(|i| tagged(&noop, &format!("host-{i}")))
        .collect();
    let start = |i: usize| {
        let dir = fresh.dir.path().join(format!("host-{i}"));
        let (url, build) = (fresh.url.clone(), builds[i].clone());
        if let Some(manifest) = manifest {
            std::fs::create_dir_all(dir.join("plugins")).unwrap();
            std::fs::write(dir.join("plugins").join("noop.toml"), manifest).unwrap();
        }
        async move {
            start_host_with(&dir, &url, &[("noop", &build)], |s| {
                s.concurrency = concurrency
            })
            .await
        }
    };
    let before = finish::finished();
    let running = match hosts {
        1 => vec![start(0).await],
        2 => {
            let (a, b) = tokio::join!(start(0), start(1));
            vec![a, b]
        }
        _ => unimplemented!("one or two hosts"),
    };
    let sql = fresh.pool().await;
    finish::until_drained(&sql, before + n as u64).await;
    let end_ms = Utc::now().timestamp_micros() as f64 / 1000.0;
    let first_claim = sql
        .int("SELECT MIN(attempted_at) FROM async_task")
        .await
        .expect("tasks ran");
    let not_done = sql
        .int("SELECT COUNT(*) FROM async_task WHERE status <> 2")
        .await;
    assert_eq!(not_done, Some(0), "every task of the drain succeeds");
    let mut per_host = Vec::new();
    for build in &builds {
        let ran = sql
            .int(&format!(
                "SELECT COUNT(*) FROM async_task WHERE plugin_version = '{}'",
                version(build)
            ))
            .await;
        per_host.push(ran.unwrap_or(0) as u64);
    }
    let claims = sql
        .int(
            "SELECT COUNT(*) FROM \
             (SELECT DISTINCT plugin_version, attempted_at FROM async_task) AS claims",
        )
        .await
        .unwrap_or(0) as u64;
    sql.close().await;
    for host in running {
        stop(host).await;
    }
    fresh.remove().await;
    Drained {
        rate: n as f64 / ((end_ms - first_claim as f64) / 1000.0),
        per_host,
        claims,
    }
}

/// Idle pickups across hosts, in microseconds.
struct Pickups {
    /// The enqueue request sent → the claim's time as the claiming host records it
    /// (`attempted_at`, taken as the claim statement starts; whole milliseconds).
    to_claim: Histogram<u64>,
    /// The enqueue request sent → the benchmark, reading the row, sees the task running or
    /// done: the claim has committed.
    to_seen: Histogram<u64>,
    /// Tasks each host ran (the enqueuing host first).
    per_host: [u64; 2],
}

impl Pickups {
    fn new() -> Pickups {
        Pickups {
            to_claim: Histogram::new(3).unwrap(),
            to_seen: Histogram::new(3).unwrap(),
            per_host: [0; 2],
        }
    }

    /// Follows task `id`, enqueued at `sent` (wall clock and instant), until it is done, and
    /// records the sample; `versions` are the two hosts' builds. It asks the database directly
    /// (one indexed read on the benchmark's own connection) every 0.2 ms, to disturb the hosts
    /// on this small machine as little as a close look allows.
    async fn follow(
        &mut self,
        sql: &database::Direct,
        id: i64,
        sent: (DateTime<Utc>, Instant),
        versions: &[String; 2],
    ) {
        let mut seen = None;
        loop {
            let status = sql
                .int(&format!("SELECT status FROM async_task WHERE id = {id}"))
                .await;
            if status != Some(0) && seen.is_none() {
                seen = Some(sent.1.elapsed());
            }
            if status == Some(2) {
                break;
            }
            assert!(matches!(status, Some(0 | 1)), "task {id} is {status:?}");
            tokio::task::block_in_place(|| std::thread::sleep(Duration::from_micros(200)));
        }
        let attempted = sql
            .int(&format!(
                "SELECT attempted_at FROM async_task WHERE id = {id}"
            ))
            .await
            .expect("claimed");
        let claimed = (attempted * 1000 - sent.0.timestamp_micros()).max(0) as u64;
        self.to_claim.record(claimed).unwrap();
        self.to_seen
            .record(seen.unwrap().as_micros() as u64)
            .unwrap();
        for (host, build) in versions.iter().enumerate() {
            let ran = sql
                .int(&format!(
                    "SELECT COUNT(*) FROM async_task WHERE id = {id} AND plugin_version = '{build}'"
                ))
                .await;
            self.per_host[host] += ran.unwrap_or(0) as u64;
        }
    }
}

/// The hosts' default poll interval.
fn poll_interval() -> Duration {
    Config::from_settings(Settings::default())
        .unwrap()
        .poll_interval
}

/// Measurement 5b: Idle pickup across hosts. Host A takes each enqueue (`POST /tasks` on its API)
/// but cannot run it: its one slot is busy with a long-sleeping task. Host B, idle, runs it,
/// woken by the database (PostgreSQL: the insert's NOTIFY) or by its poll interval (MySQL).
async fn pickup_across_hosts(server: &Server, n: usize) -> Pickups {
    let fresh = server.fresh().await;
    let noop = std::fs::read(noop_wasm()).unwrap();
    let sleepy = std::fs::read(artifact("sleepy")).unwrap();
    let builds = [tagged(&noop, "host-a"), tagged(&noop, "host-b")];
    let a = start_host_with(
        &fresh.dir.path().join("a"),
        &fresh.url,
        &[("noop", &builds[0]), ("sleepy", &sleepy)],
        |s| {
            s.concurrency = Some(1);
            s.timeout = Some(Duration::from_secs(3600));
        },
    )
    .await;
    let b = start_host_with(
        &fresh.dir.path().join("b"),
        &fresh.url,
        &[("noop", &builds[1])],
        |_| {},
    )
    .await;
    let client = reqwest::Client::new();
    let api = format!("http://{}", a.addr);
    let busy = http::enqueue(&client, &api, "sleepy", json!({"ms": 3_000_000})).await;
    loop {
        let task = http::get_json(&client, &format!("{api}/tasks/{busy}")).await;
        if task["status"] == "running" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let versions = [version(&builds[0]), version(&builds[1])];
    let sql = fresh.pool().await;
    let mut pickups = Pickups::new();
    for i in 0..n {
        // Idle between tasks. A host that only polls would otherwise be met at the same phase
        // of its poll interval every time: a random pause spreads the enqueues over it.
        let idle = if server.notifies() {
            Duration::from_millis(20)
        } else {
            Duration::from_millis(20) + poll_interval().mul_f64(rand::random::<f64>())
        };
        tokio::time::sleep(idle).await;
        let sent = (Utc::now(), Instant::now());
        let id = http::enqueue(&client, &api, "noop", json!({"i": i})).await;
        pickups.follow(&sql, id, sent, &versions).await;
    }
    sql.close().await;
    stop_now(a).await;
    stop(b).await;
    fresh.remove().await;
    pickups
}

/// Measurement 5c (PostgreSQL): The application inserts each task with its own SQL (a plain
/// `INSERT INTO async_task (task_type, payload)`, autocommitted); two idle hosts, both woken by
/// the insert's NOTIFY, race for it.
async fn pickup_after_sql_insert(server: &Server, n: usize) -> Pickups {
    let fresh = server.fresh().await;
    let noop = std::fs::read(noop_wasm()).unwrap();
    let builds = [tagged(&noop, "host-a"), tagged(&noop, "host-b")];
    let start = |i: usize| {
        let dir = fresh.dir.path().join(format!("host-{i}"));
        let (url, build) = (fresh.url.clone(), builds[i].clone());
        async move { start_host_with(&dir, &url, &[("noop", &build)], |_| {}).await }
    };
    let (a, b) = tokio::join!(start(0), start(1));
    let sql = fresh.pool().await;
    let versions = [version(&builds[0]), version(&builds[1])];
    let mut pickups = Pickups::new();
    for i in 0..n {
        tokio::time::sleep(Duration::from_millis(20)).await; // idle between tasks
        let sent = (Utc::now(), Instant::now());
        let id = sql
            .int(&format!(
                "INSERT INTO async_task (task_type, payload) VALUES ('noop', '{{\"i\": {i}}}') RETURNING id"
            ))
            .await
            .expect("an id");
        pickups.follow(&sql, id, sent, &versions).await;
    }
    sql.close().await;
    stop(a).await;
    stop(b).await;
    fresh.remove().await;
    pickups
}

/// Measurement 7: Swap latency: alternately rename two builds over `swap.wasm`; time from the rename until
/// `GET /plugins` reports the new version. The first swap to each build compiles it; later
/// ones load it from the compiled-code cache.
async fn swap_latency(server: &Server, swaps: usize) -> (Histogram<u64>, u64) {
    let fresh = server.fresh().await;
    let dir = &fresh.dir;
    let host = start_host(&fresh, None).await;
    let client = reqwest::Client::new();
    let url = format!("http://{}/plugins", host.addr);
    let target = dir.path().join("plugins/swap.wasm");
    let builds = [artifact("report"), artifact("notify")];
    let mut histogram = Histogram::<u64>::new(3).unwrap();
    let mut first_compile = 0;
    for i in 0..swaps {
        let build = &builds[i % 2];
        let bytes = std::fs::read(build).unwrap();
        let version = version(&bytes);
        let staging = dir.path().join("plugins/swap.staging");
        std::fs::write(&staging, &bytes).unwrap();
        let renamed = Instant::now();
        std::fs::rename(&staging, &target).unwrap();
        loop {
            let view: Value = client.get(&url).send().await.unwrap().json().await.unwrap();
            let serving = view["plugins"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["task_type"] == "swap" && p["version"] == version.as_str());
            if serving {
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let micros = renamed.elapsed().as_micros() as u64;
        if i < 2 {
            first_compile = first_compile.max(micros);
        } else {
            histogram.record(micros).unwrap();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop(host).await;
    fresh.remove().await;
    (histogram, first_compile)
}

/// Measurement 8: Resident memory of this process (host and load generator) before and with 1,000 tasks
/// running at once, each sleeping in a WASI host call.
async fn memory_in_flight(server: &Server, n: usize) -> (u64, u64) {
    let fresh = server.fresh().await;
    let sleepy = std::fs::read(artifact("sleepy")).unwrap();
    let host = start_host_with(fresh.dir.path(), &fresh.url, &[("sleepy", &sleepy)], |s| {
        s.concurrency = Some(n)
    })
    .await;
    let client = reqwest::Client::new();
    let before = rss_kib();
    let tasks: Vec<Value> = (0..n)
        .map(|_| json!({"task_type": "sleepy", "payload": {"ms": 4000}}))
        .collect();
    let response = client
        .post(format!("http://{}/tasks/batch", host.addr))
        .json(&json!({"tasks": tasks}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 201);
    let health = format!("http://{}/health", host.addr);
    let mut peak = before;
    loop {
        let body = http::get_json(&client, &health).await;
        peak = peak.max(rss_kib());
        if body["counts"]["running"].as_u64() == Some(n as u64) {
            tokio::time::sleep(Duration::from_millis(200)).await;
            peak = peak.max(rss_kib());
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop(host).await;
    fresh.remove().await;
    (before, peak)
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Measurement 6: Instantiate + call of the no-op handler, sequentially.
async fn sandbox_overhead(n: usize, options: SandboxOptions) -> Histogram<u64> {
    let sandbox = Sandbox::with_options(options).unwrap();
    let (handler, _) = sandbox
        .compile(&std::fs::read(noop_wasm()).unwrap(), "bench", None)
        .unwrap();
    let events: Arc<dyn TaskServices> = Arc::new(EmptyServices);
    let limits = RunLimits {
        fuel: 1_000_000_000,
        timeout: Duration::from_secs(10),
        memory_bytes: 64 << 20,
        max_result_bytes: 1 << 20,
        log_bytes: 64 << 10,
        capabilities: Default::default(),
        tape: None,
    };
    let mut histogram = Histogram::<u64>::new(3).unwrap();
    for i in 0..n + 100 {
        let info = TaskInfo {
            id: i as u64,
            task_type: "noop".into(),
            attempt: 1,
            max_attempts: 1,
            idempotency_key: None,
            depth: 0,
        };
        let started = Instant::now();
        let attempt = sandbox
            .run(&handler, info, "{\"n\":1}", &limits, events.clone())
            .await;
        let elapsed = started.elapsed().as_nanos() as u64;
        assert!(
            matches!(attempt.outcome, spool::task::AttemptOutcome::Succeeded(_)),
            "{attempt:?}"
        );
        if i >= 100 {
            histogram.record(elapsed).unwrap(); // the first 100 warm up
        }
    }
    histogram
}

fn ms(micros: u64) -> String {
    format!("{:.2} ms", micros as f64 / 1000.0)
}

fn quantiles(histogram: &Histogram<u64>) -> String {
    format!(
        "p50 {}  p95 {}  p99 {}",
        ms(histogram.value_at_quantile(0.5)),
        ms(histogram.value_at_quantile(0.95)),
        ms(histogram.value_at_quantile(0.99))
    )
}

/// Each host's share: `n (p %)`.
fn split(per_host: &[u64]) -> String {
    let total = per_host.iter().sum::<u64>().max(1) as f64;
    per_host
        .iter()
        .map(|&n| format!("{n} ({:.0} %)", n as f64 * 100.0 / total))
        .collect::<Vec<_>>()
        .join(" / ")
}

/// The raw baselines of a run: at the host's claim size and at 100 tasks per claim.
struct Raw {
    claim_size: usize,
    at_claim_size: f64,
    at_100: f64,
}

impl Raw {
    async fn measure(server: &Server, n: usize) -> Raw {
        let (_, claim_size) = default_concurrency();
        let at_claim_size = raw_baseline(server, n, claim_size).await;
        let at_100 = raw_baseline(server, n, 100).await;
        println!(
            "raw baseline (store claim {claim_size} + complete {claim_size}, no wasm/HTTP):     {at_claim_size:>9.0} tasks/s  ({:.2}× raw 100)",
            at_claim_size / at_100
        );
        println!(
            "raw baseline (store claim 100 + complete 100, no wasm/HTTP): {at_100:>9.0} tasks/s  (1.00×)  [load {}]",
            load()
        );
        Raw {
            claim_size,
            at_claim_size,
            at_100,
        }
    }

    /// A throughput as ratios to both baselines.
    fn ratios(&self, rate: f64) -> String {
        format!(
            "{:.2}× raw {}, {:.2}× raw 100",
            rate / self.at_claim_size,
            self.claim_size,
            rate / self.at_100
        )
    }
}

/// Which drain to run and print.
#[derive(Clone, Copy, PartialEq)]
enum DrainKind {
    OneHost,
    TwoHosts,
    /// One host on a table the planner has no statistics for yet.
    NeverAnalyzed,
}

async fn report_drain(
    server: &Server,
    raw: &Raw,
    n: usize,
    kind: DrainKind,
    concurrency: Option<usize>,
) {
    let hosts = if kind == DrainKind::TwoHosts { 2 } else { 1 };
    let drained = drain(
        server,
        n,
        hosts,
        concurrency,
        kind != DrainKind::NeverAnalyzed,
        None,
    )
    .await;
    let concurrency = concurrency.unwrap_or(default_concurrency().0);
    let claims = format!(
        "{} claims, {:.1} tasks each",
        drained.claims,
        n as f64 / drained.claims.max(1) as f64
    );
    let what = match kind {
        DrainKind::OneHost => {
            format!("drain through the no-op wasm handler, one host (concurrency {concurrency}):")
        }
        DrainKind::TwoHosts => format!(
            "drain, two hosts on one database (concurrency {concurrency} each), split {}:",
            split(&drained.per_host)
        ),
        DrainKind::NeverAnalyzed => format!(
            "drain, one host, on a table never analyzed (as autovacuum has not yet; concurrency {concurrency}):"
        ),
    };
    println!(
        "{what} {:>9.0} tasks/s  ({})  {claims}  [load {}]",
        drained.rate,
        raw.ratios(drained.rate),
        load()
    );
    if kind == DrainKind::OneHost {
        // The host's claims adapt to its finish rate: the like-with-like baseline is the
        // store's cycle at the size the drain actually claimed, measured right after it.
        let mean = (n as f64 / drained.claims.max(1) as f64).round().max(1.0) as usize;
        let at_mean = raw_baseline(server, n, mean).await;
        println!(
            "raw baseline at the drain's mean claim (store claim {mean} + complete {mean}): {at_mean:>9.0} tasks/s; the drain is {:.2}× it",
            drained.rate / at_mean
        );
    }
}

async fn report_pickups_across_hosts(server: &Server, n: usize) {
    if server.is_sqlite() {
        println!("idle pickup across hosts: n/a (SQLite serves one host)");
        return;
    }
    // Without notifications host B finds each task at its next poll (1 s by default): fewer samples.
    let (n, woken_by) = if server.notifies() {
        (n, "LISTEN/NOTIFY".to_string())
    } else {
        (
            (n / 10).max(10),
            format!(
                "its poll ({:?}; enqueued at random points of it)",
                poll_interval()
            ),
        )
    };
    let across = pickup_across_hosts(server, n).await;
    println!(
        "idle pickup across hosts, {n} tasks enqueued through host A's API (A busy), run by idle host B woken by {woken_by}:"
    );
    println!(
        "  request → claim starts (B's attempted_at, whole ms): {}",
        quantiles(&across.to_claim)
    );
    println!(
        "  request → claim committed (row read as running): {}  ran on A / B: {}  [load {}]",
        quantiles(&across.to_seen),
        split(&across.per_host),
        load()
    );
    if server.notifies() {
        let inserted = pickup_after_sql_insert(server, n).await;
        println!(
            "idle pickup after an application's own INSERT ({n} tasks), two idle hosts woken by LISTEN/NOTIFY:"
        );
        println!(
            "  INSERT → claim starts (attempted_at, whole ms): {}",
            quantiles(&inserted.to_claim)
        );
        println!(
            "  INSERT → claim committed (row read as running): {}  ran on A / B: {}",
            quantiles(&inserted.to_seen),
            split(&inserted.per_host)
        );
    }
}

fn main() {
    // Quiet logs: the benchmark prints its own report.
    tracing_subscriber::fmt()
        .with_env_filter("warn,sqlx=error")
        .with_writer(std::io::stderr)
        .init();
    let options = options();
    let server = Server::from_url(options.database.as_deref());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
        println!("# Spool throughput benchmark on {}", server.name());
        println!("machine: {cores} cores; load average {} (1, 5, 15 min)", load());
        println!("database: {}", server.describe().await);
        println!("sizes: drain {} tasks, batch enqueue {} tasks, HTTP enqueue {} requests, {} idle pickups\n", options.drain, options.batch, options.http, options.pickups);

        match options.only.as_deref() {
            None => {}
            Some("archive") => {
                archive::report(&server, options.drain, options.concurrency).await;
                return;
            }
            Some("health") => {
                archive::report_pollers(&server, options.drain, options.concurrency).await;
                return;
            }
            Some("record") => {
                record::report(&server, options.drain, options.concurrency).await;
                return;
            }
            Some("pickup") => {
                report_pickups_across_hosts(&server, options.pickups).await;
                return;
            }
            Some(only @ ("drain" | "two-hosts" | "never-analyzed")) => {
                let kind = match only {
                    "drain" => DrainKind::OneHost,
                    "two-hosts" => DrainKind::TwoHosts,
                    _ => DrainKind::NeverAnalyzed,
                };
                let raw = Raw::measure(&server, options.drain).await;
                report_drain(&server, &raw, options.drain, kind, options.concurrency).await;
                return;
            }
            Some(other) => panic!("--only takes drain, two-hosts, never-analyzed, pickup, archive, health or record, not {other}"),
        }

        let raw = Raw::measure(&server, options.drain).await;

        let batch = batch_enqueue(&server, options.batch).await;
        println!("batch enqueue (POST /tasks/batch, 1000 per request):       {batch:>9.0} tasks/s  ({:.2}× raw 100)", batch / raw.at_100);

        let (rate, latencies) = http_enqueue(&server, options.http, 32).await;
        println!(
            "HTTP enqueue (POST /tasks, 32 clients):                      {rate:>9.0} req/s    ({:.2}× raw 100)  p50 {}  p99 {}",
            rate / raw.at_100,
            ms(latencies.value_at_quantile(0.5)),
            ms(latencies.value_at_quantile(0.99))
        );

        report_drain(&server, &raw, options.drain, DrainKind::OneHost, options.concurrency).await;
        if server.is_sqlite() {
            println!("drain, two hosts on one database: n/a (SQLite serves one host)");
        } else {
            report_drain(&server, &raw, options.drain, DrainKind::TwoHosts, options.concurrency).await;
        }
        if server.notifies() {
            // PostgreSQL plans the claim from statistics, which a new table lacks until
            // autovacuum first analyzes it.
            report_drain(&server, &raw, options.drain, DrainKind::NeverAnalyzed, options.concurrency).await;
        }

        let pickup = idle::pickup(&server, options.pickups).await;
        println!(
            "idle pickup (enqueue request sent → handler start):         {}",
            quantiles(&pickup.to_start)
        );
        println!(
            "idle enqueue → done seen by a client waiting (?wait=):      {}  [load {}]",
            quantiles(&pickup.to_done),
            load()
        );
        let window = Duration::from_secs(if options.pickups < 200 { 3 } else { 10 });
        let idle_cpu = idle::cpu(&server, window).await;
        println!(
            "idle host, empty queue: {:.2} % of one core over {window:?} (this whole process)",
            idle_cpu * 100.0
        );
        report_pickups_across_hosts(&server, options.pickups).await;

        let on_demand = sandbox_overhead(2000, SandboxOptions::default()).await;
        println!(
            "sandbox: instantiate + call no-op handler, on-demand:      p50 {:.1} µs  p99 {:.1} µs",
            on_demand.value_at_quantile(0.5) as f64 / 1000.0,
            on_demand.value_at_quantile(0.99) as f64 / 1000.0
        );
        let pooled = sandbox_overhead(2000, common::host_sandbox_options()).await;
        println!(
            "sandbox: instantiate + call no-op handler, as a host (pooling): p50 {:.1} µs  p99 {:.1} µs  ({:.2}× on-demand p50)",
            pooled.value_at_quantile(0.5) as f64 / 1000.0,
            pooled.value_at_quantile(0.99) as f64 / 1000.0,
            pooled.value_at_quantile(0.5) as f64 / on_demand.value_at_quantile(0.5) as f64
        );

        let (swaps, first) = swap_latency(&server, 22).await;
        let debounce = spool::plugins::watcher::DEFAULT_DEBOUNCE;
        println!(
            "plugin swap (rename → new version serving), cached builds: p50 {}  p99 {}  = debounce {debounce:?} + load p50 {}  p99 {}  (first load with compile: {})",
            ms(swaps.value_at_quantile(0.5)),
            ms(swaps.value_at_quantile(0.99)),
            ms(swaps.value_at_quantile(0.5).saturating_sub(debounce.as_micros() as u64)),
            ms(swaps.value_at_quantile(0.99).saturating_sub(debounce.as_micros() as u64)),
            ms(first)
        );

        let (before, peak) = memory_in_flight(&server, 1000).await;
        println!(
            "process memory: {} MiB idle host, {} MiB with 1000 tasks in flight ({:.0} KiB per task)",
            before / 1024,
            peak / 1024,
            (peak.saturating_sub(before)) as f64 / 1000.0
        );
        println!("\nload average at the end: {}", load());
    });
}
