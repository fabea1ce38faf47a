//! Spool's throughput benchmark: `cargo xtask bench` (or `cargo bench -p spool --bench throughput`
//! after `cargo xtask build-plugins`).
//!
//! Every figure is measured in this run on a fresh SQLite file, and printed with a raw
//! baseline measured the same way, so each reads as a ratio to what SQLite and the disk allow
//! on this machine:
//! 1. raw baseline: the store's batched claim + complete cycle, no HTTP, no WebAssembly;
//! 2. batch enqueue through `POST /tasks/batch`;
//! 3. single-request enqueue through `POST /tasks` with 32 concurrent clients (rate, p50, p99);
//! 4. drain: N tasks through the no-op WebAssembly handler, from a full table to all done;
//! 5. idle pickup latency: one task at a time into an idle host, enqueue → handler start;
//! 6. sandbox overhead: instantiate + call of the no-op handler, one attempt after another;
//! 7. plugin swap latency: a new build renamed into the plugin folder → serving (`GET /plugins`);
//! 8. host memory with 1,000 tasks in flight (each sleeping in a host call).
//!
//! Options (after `--`): `--drain N` (default 100000), `--http N` (default 20000),
//! `--batch N` (default 100000), `--pickups N` (default 200), `--quick` (small sizes),
//! `--only drain` (the raw baseline and the drain only, e.g. under a profiler).

use chrono::Utc;
use hdrhistogram::Histogram;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use spool::config::{Config, Settings};
mod common;

use common::EmptyServices;
use spool::sandbox::{RunLimits, Sandbox, SandboxOptions, TaskInfo, TaskServices};
use spool::store::{self, ClaimRequest, Completion, SharedStore};
use spool::task::{NewTask, Status, Transition};

struct Options {
    drain: usize,
    http: usize,
    batch: usize,
    pickups: usize,
}

fn options() -> Options {
    let args: Vec<String> = std::env::args().collect();
    let value = |name: &str, default: usize| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let quick = args.iter().any(|a| a == "--quick");
    let scale = |n: usize| if quick { n / 20 } else { n };
    Options {
        drain: value("--drain", scale(100_000)),
        http: value("--http", scale(20_000)),
        batch: value("--batch", scale(100_000)),
        pickups: value("--pickups", if quick { 50 } else { 200 }),
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

fn new_task(task_type: &str, i: usize) -> NewTask {
    NewTask {
        task_type: task_type.into(),
        payload: format!("{{\"n\":{i}}}"),
        priority: 0,
        max_retry: 3,
        run_at: Utc::now(),
        idempotency_key: None,
    }
}

fn fresh_dir() -> tempfile::TempDir {
    tempfile::tempdir().expect("temp dir")
}

fn db_url(dir: &Path) -> String {
    format!("sqlite://{}", dir.join("bench.db").display())
}

/// Measurement 1: The store's claim + complete cycle in batches, no HTTP or wasm: the ceiling.
async fn raw_baseline(n: usize, batch: usize) -> f64 {
    let dir = fresh_dir();
    let store = store::open(&db_url(dir.path())).await.unwrap();
    for chunk in (0..n).collect::<Vec<_>>().chunks(5000) {
        store
            .enqueue(chunk.iter().map(|i| new_task("noop", *i)).collect())
            .await
            .unwrap();
    }
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
                plugin_version: None,
                log: None,
                finished_at: Utc::now(),
            })
            .collect();
        done += store.complete(&completions).await.unwrap() as usize;
    }
    let rate = n as f64 / started.elapsed().as_secs_f64();
    store.close().await;
    rate
}

/// Starts an in-process host on a fresh database with the no-op plugin.
async fn start_host(dir: &Path, concurrency: Option<usize>) -> spool::RunningHost {
    let plugins = dir.join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    std::fs::copy(noop_wasm(), plugins.join("noop.wasm")).unwrap();
    let settings = Settings {
        database_url: Some(db_url(dir)),
        plugins: Some(plugins),
        cache_dir: Some(dir.join("cache")),
        listen: Some("127.0.0.1:0".parse().unwrap()),
        concurrency,
        ..Settings::default()
    };
    spool::start(Config::from_settings(settings).unwrap())
        .await
        .unwrap()
}

async fn stop(host: spool::RunningHost) {
    host.shutdown().escalate();
    host.stopped()
        .await
        .expect("the benchmark host stops cleanly");
}

/// Measurement 2: `POST /tasks/batch` with 1,000 tasks per request, tasks scheduled far ahead so the
/// dispatcher stays idle and only enqueueing is measured.
async fn batch_enqueue(n: usize) -> f64 {
    let dir = fresh_dir();
    let host = start_host(dir.path(), None).await;
    let client = reqwest::Client::new();
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
    rate
}

/// Measurement 3: `POST /tasks` from 32 concurrent clients (keep-alive connections).
async fn http_enqueue(n: usize, clients: usize) -> (f64, Histogram<u64>) {
    let dir = fresh_dir();
    let host = start_host(dir.path(), None).await;
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
    (rate, all)
}

/// Measurement 4: N due tasks inserted up front, then a host started: time until all are done.
async fn drain(n: usize) -> (f64, usize) {
    let dir = fresh_dir();
    {
        let store: SharedStore = store::open(&db_url(dir.path())).await.unwrap();
        for chunk in (0..n).collect::<Vec<_>>().chunks(5000) {
            store
                .enqueue(chunk.iter().map(|i| new_task("noop", *i)).collect())
                .await
                .unwrap();
        }
        store.close().await;
    }
    let host = start_host(dir.path(), None).await;
    let concurrency = Config::from_settings(Settings::default())
        .unwrap()
        .concurrency;
    let client = reqwest::Client::new();
    let health = format!("http://{}/health", host.addr);
    let started = Instant::now();
    loop {
        let body: Value = client
            .get(&health)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if body["counts"]["done"].as_u64() == Some(n as u64) {
            break;
        }
        assert_eq!(body["counts"]["failed"].as_u64(), Some(0), "{body}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let rate = n as f64 / started.elapsed().as_secs_f64();
    stop(host).await;
    (rate, concurrency)
}

/// Measurement 5: One task at a time into an idle host: created_at → attempted_at, as recorded by the
/// host (millisecond timestamps), and enqueue → done as the client observes it.
async fn idle_pickup(n: usize) -> (Histogram<u64>, Histogram<u64>) {
    let dir = fresh_dir();
    let host = start_host(dir.path(), None).await;
    let client = reqwest::Client::new();
    let base = format!("http://{}", host.addr);
    let mut pickup = Histogram::<u64>::new(3).unwrap();
    let mut round_trip = Histogram::<u64>::new(3).unwrap();
    for i in 0..n {
        tokio::time::sleep(Duration::from_millis(20)).await; // idle between tasks
        let sent = Instant::now();
        let task: Value = client
            .post(format!("{base}/tasks"))
            .json(&json!({"task_type": "noop", "payload": {"i": i}}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let id = task["id"].as_i64().unwrap();
        let done = loop {
            let t: Value = client
                .get(format!("{base}/tasks/{id}"))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            if t["status"] == "done" {
                break t;
            }
        };
        round_trip
            .record(sent.elapsed().as_micros() as u64)
            .unwrap();
        let at = |field: &str| {
            chrono::DateTime::parse_from_rfc3339(done[field].as_str().unwrap()).unwrap()
        };
        let waited = (at("attempted_at") - at("created_at"))
            .num_microseconds()
            .unwrap()
            .max(0) as u64;
        pickup.record(waited).unwrap();
    }
    stop(host).await;
    (pickup, round_trip)
}

/// Measurement 7: Swap latency: alternately rename two builds over `swap.wasm`; time from the rename until
/// `GET /plugins` reports the new version. The first swap to each build compiles it; later
/// ones load it from the compiled-code cache.
async fn swap_latency(swaps: usize) -> (Histogram<u64>, u64) {
    let dir = fresh_dir();
    let host = start_host(dir.path(), None).await;
    let client = reqwest::Client::new();
    let url = format!("http://{}/plugins", host.addr);
    let target = dir.path().join("plugins/swap.wasm");
    let builds = [artifact("report"), artifact("notify")];
    let mut histogram = Histogram::<u64>::new(3).unwrap();
    let mut first_compile = 0;
    for i in 0..swaps {
        let build = &builds[i % 2];
        let bytes = std::fs::read(build).unwrap();
        let version = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&bytes));
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
    (histogram, first_compile)
}

/// Measurement 8: Resident memory of this process (host and load generator) before and with 1,000 tasks
/// running at once, each sleeping in a WASI host call.
async fn memory_in_flight(n: usize) -> (u64, u64) {
    let dir = fresh_dir();
    let plugins = dir.path().join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    std::fs::copy(artifact("sleepy"), plugins.join("sleepy.wasm")).unwrap();
    let settings = Settings {
        database_url: Some(db_url(dir.path())),
        plugins: Some(plugins),
        cache_dir: Some(dir.path().join("cache")),
        listen: Some("127.0.0.1:0".parse().unwrap()),
        concurrency: Some(n),
        ..Settings::default()
    };
    let host = spool::start(Config::from_settings(settings).unwrap())
        .await
        .unwrap();
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
        let body: Value = client
            .get(&health)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        peak = peak.max(rss_kib());
        if body["counts"]["running"].as_u64() == Some(n as u64) {
            tokio::time::sleep(Duration::from_millis(200)).await;
            peak = peak.max(rss_kib());
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop(host).await;
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
    };
    let mut histogram = Histogram::<u64>::new(3).unwrap();
    for i in 0..n + 100 {
        let info = TaskInfo {
            id: i as u64,
            task_type: "noop".into(),
            attempt: 1,
            max_attempts: 1,
            idempotency_key: None,
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

fn main() {
    // Quiet logs: the benchmark prints its own report.
    tracing_subscriber::fmt()
        .with_env_filter("warn,sqlx=error")
        .with_writer(std::io::stderr)
        .init();
    let options = options();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
        println!("# Spool throughput benchmark");
        println!("machine: {cores} cores; SQLite WAL, synchronous=NORMAL; fresh database file per measurement");
        println!("sizes: drain {} tasks, batch enqueue {} tasks, HTTP enqueue {} requests, {} idle pickups\n", options.drain, options.batch, options.http, options.pickups);

        let raw = raw_baseline(options.drain, 100).await;
        println!("raw baseline (store claim 100 + complete 100, no wasm/HTTP): {raw:>9.0} tasks/s  (1.00×)");

        if std::env::args().any(|a| a == "--only") {
            let (drained, concurrency) = drain(options.drain).await;
            println!("drain through the no-op wasm handler (concurrency {concurrency}):  {drained:>9.0} tasks/s  ({:.2}× raw)", drained / raw);
            return;
        }

        let batch = batch_enqueue(options.batch).await;
        println!("batch enqueue (POST /tasks/batch, 1000 per request):       {batch:>9.0} tasks/s  ({:.2}× raw)", batch / raw);

        let (rate, latencies) = http_enqueue(options.http, 32).await;
        println!(
            "HTTP enqueue (POST /tasks, 32 clients):                      {rate:>9.0} req/s    ({:.2}× raw)  p50 {}  p99 {}",
            rate / raw,
            ms(latencies.value_at_quantile(0.5)),
            ms(latencies.value_at_quantile(0.99))
        );

        let (drained, concurrency) = drain(options.drain).await;
        println!("drain through the no-op wasm handler (concurrency {concurrency}):  {drained:>9.0} tasks/s  ({:.2}× raw)", drained / raw);

        let (pickup, round_trip) = idle_pickup(options.pickups).await;
        println!(
            "idle pickup (created_at → attempted_at, ms timestamps):     p50 {}  p99 {}",
            ms(pickup.value_at_quantile(0.5)),
            ms(pickup.value_at_quantile(0.99))
        );
        println!(
            "idle enqueue → done seen by a polling client:               p50 {}  p99 {}",
            ms(round_trip.value_at_quantile(0.5)),
            ms(round_trip.value_at_quantile(0.99))
        );

        let on_demand = sandbox_overhead(2000, SandboxOptions::default()).await;
        println!(
            "sandbox: instantiate + call no-op handler, on-demand:      p50 {:.1} µs  p99 {:.1} µs",
            on_demand.value_at_quantile(0.5) as f64 / 1000.0,
            on_demand.value_at_quantile(0.99) as f64 / 1000.0
        );
        let pooled = sandbox_overhead(2000, SandboxOptions { pool_slots: Some(64), pool_max_memory: 256 << 20 }).await;
        println!(
            "sandbox: instantiate + call no-op handler, pooling:        p50 {:.1} µs  p99 {:.1} µs  ({:.2}× on-demand p50)",
            pooled.value_at_quantile(0.5) as f64 / 1000.0,
            pooled.value_at_quantile(0.99) as f64 / 1000.0,
            pooled.value_at_quantile(0.5) as f64 / on_demand.value_at_quantile(0.5) as f64
        );

        let (swaps, first) = swap_latency(22).await;
        println!(
            "plugin swap (rename → new version serving), cached builds: p50 {}  p99 {}  (first load with compile: {})",
            ms(swaps.value_at_quantile(0.5)),
            ms(swaps.value_at_quantile(0.99)),
            ms(first)
        );

        let (before, peak) = memory_in_flight(1000).await;
        println!(
            "process memory: {} MiB idle host, {} MiB with 1000 tasks in flight ({:.0} KiB per task)",
            before / 1024,
            peak / 1024,
            (peak.saturating_sub(before)) as f64 / 1000.0
        );
    });
}
