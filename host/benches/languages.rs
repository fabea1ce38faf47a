//! Handler cost per language: `cargo xtask bench --languages` (or
//! `cargo bench -p spool --bench languages` after `cargo xtask build-plugins`).
//!
//! Each language's example handler is built from the repository with `spool plugin build`'s
//! code (the pinned toolchains are installed into `target/tools` on first use), then measured
//! in a sandbox configured as a host configures it:
//! - build time with the toolchain already installed (Rust crates are built by cargo beforehand);
//! - size of the `.wasm`;
//! - cold load: compiling it with Cranelift, as a host does the first time it sees a build;
//! - cached load: loading the compiled code from the compiled-code cache (every later load);
//! - per task: one attempt (fresh instance + `handle` call with the example's payload), p50
//!   and p99 over many attempts, also as a ratio to the Rust no-op handler measured in the
//!   same run.
//!
//! Options (after `--`): `--tasks N` attempts per language (default 200), `--only NAME[,NAME]`.

use hdrhistogram::Histogram;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;

use common::EmptyServices;
use spool::sandbox::{RunLimits, Sandbox, TaskInfo, TaskServices};
use spool::task::AttemptOutcome;
use spool_toolchain::BuildRequest;

/// A handler to measure: where it comes from and a payload it succeeds on.
struct Subject {
    name: &'static str,
    language: &'static str,
    source: Source,
    payload: &'static str,
}

enum Source {
    /// A crate of the plugins workspace, built by `cargo xtask build-plugins`.
    Crate,
    /// A project folder under `plugins/`, built here.
    Project(&'static str),
}

const SUBJECTS: &[Subject] = &[
    Subject {
        name: "noop",
        language: "Rust (no-op baseline)",
        source: Source::Crate,
        payload: r#"{"n":1}"#,
    },
    Subject {
        name: "report",
        language: "Rust",
        source: Source::Crate,
        payload: r#"{"group_by":"k","sum":"v","rows":[{"k":"a","v":1},{"k":"b","v":2},{"k":"a","v":3}]}"#,
    },
    Subject {
        name: "tally",
        language: "C",
        source: Source::Project("c/tally"),
        payload: r#"{"account":"ops","amounts":[12.5,3,4.25]}"#,
    },
    Subject {
        name: "rot13",
        language: "Zig (WASI program)",
        source: Source::Project("zig/rot13"),
        payload: r#"{"text":"Hello, Spool!"}"#,
    },
    Subject {
        name: "wordcount",
        language: "Go (WASI program)",
        source: Source::Project("go/wordcount"),
        payload: r#"{"text":"the cat saw the dog\nthe end","top":2}"#,
    },
    Subject {
        name: "receipt",
        language: "JavaScript",
        source: Source::Project("javascript/receipt"),
        payload: r#"{"order":"A-17","items":[{"name":"tea","qty":2,"price":3.5}],"currency":"EUR"}"#,
    },
    Subject {
        name: "invoice",
        language: "Python",
        source: Source::Project("python/invoice"),
        payload: r#"{"customer":"ACME","lines":[{"item":"widget","qty":3,"price":2.5}]}"#,
    },
];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn wasm_of(subject: &Subject, out: &Path) -> (PathBuf, Option<Duration>) {
    match subject.source {
        Source::Crate => {
            let path = repo().join(format!(
                "plugins/target/wasm32-wasip2/release/{}.wasm",
                subject.name
            ));
            assert!(
                path.exists(),
                "{} is missing: run `cargo xtask build-plugins` first",
                path.display()
            );
            (path, None)
        }
        Source::Project(project) => {
            // Remove the previous build so the figure is a real build (with the toolchain
            // and its caches already installed), not an up-to-date check.
            let _ = std::fs::remove_file(
                repo()
                    .join("plugins")
                    .join(project)
                    .join(format!("target/spool/{}.wasm", subject.name)),
            );
            let request = BuildRequest {
                project: repo().join("plugins").join(project),
                language: None,
                name: None,
                plugins: out.to_path_buf(),
                tools: std::env::var_os("SPOOL_TOOLS_DIR")
                    .map(PathBuf::from)
                    .unwrap_or_else(|| repo().join("target/tools")),
                check_manifest: |text| spool::plugins::Manifest::parse(text).map(drop),
            };
            let built = spool_toolchain::build(&request).unwrap_or_else(|e| {
                panic!("building {project} failed: {:#}", anyhow::Error::from(e))
            });
            (built.wasm, Some(built.elapsed))
        }
    }
}

struct Figures {
    size: u64,
    build: Option<Duration>,
    compile: Duration,
    cached: Duration,
    per_task: Histogram<u64>,
}

async fn measure(
    sandbox: &Sandbox,
    subject: &Subject,
    wasm: &Path,
    tasks: usize,
    cache_root: &Path,
) -> Figures {
    let bytes = std::fs::read(wasm).unwrap();
    let version = format!("{}-{}", subject.name, bytes.len());
    let compile_started = Instant::now();
    let compiled = sandbox.compile(&bytes, &version, None);
    let compile = compile_started.elapsed();
    let (handler, _) = compiled.unwrap_or_else(|e| panic!("{} does not load: {e}", subject.name));
    // Fill the cache once, then time the loads that find it there.
    let cache = sandbox.artifact_cache(cache_root, spool::sandbox::CacheKey::ephemeral());
    sandbox.compile(&bytes, &version, Some(&cache)).unwrap();
    let mut cached = Duration::MAX;
    for _ in 0..5 {
        let started = Instant::now();
        sandbox.compile(&bytes, &version, Some(&cache)).unwrap();
        cached = cached.min(started.elapsed());
    }

    let services: Arc<dyn TaskServices> = Arc::new(EmptyServices);
    let limits = RunLimits {
        fuel: 10_000_000_000,
        timeout: Duration::from_secs(30),
        memory_bytes: 256 << 20,
        max_result_bytes: 1 << 20,
        log_bytes: 64 << 10,
        capabilities: Default::default(),
        tape: None,
    };
    let mut per_task = Histogram::<u64>::new(3).unwrap();
    let warm_up = 10;
    for i in 0..tasks + warm_up {
        let info = TaskInfo {
            id: i as u64 + 1,
            task_type: subject.name.into(),
            attempt: 1,
            max_attempts: 1,
            idempotency_key: None,
            depth: 0,
        };
        let started = Instant::now();
        let attempt = sandbox
            .run(&handler, info, subject.payload, &limits, services.clone())
            .await;
        let elapsed = started.elapsed().as_nanos() as u64;
        assert!(
            matches!(attempt.outcome, AttemptOutcome::Succeeded(_)),
            "{}: {attempt:?}",
            subject.name
        );
        if i >= warm_up {
            per_task.record(elapsed).unwrap();
        }
    }
    Figures {
        size: bytes.len() as u64,
        build: None,
        compile,
        cached,
        per_task,
    }
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter("warn")
        .with_writer(std::io::stderr)
        .init();
    let args: Vec<String> = std::env::args().collect();
    let value = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let tasks: usize = value("--tasks").and_then(|v| v.parse().ok()).unwrap_or(200);
    let only: Option<Vec<String>> =
        value("--only").map(|v| v.split(',').map(str::to_string).collect());
    let scratch = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    // The sandbox a host with default settings runs with (pooling allocator on).
    let sandbox = Sandbox::with_options(common::host_sandbox_options()).unwrap();
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    println!("# Spool handler cost per language");
    println!(
        "machine: {cores} cores; release build; pooling allocator; {tasks} attempts per handler after 10 warm-up attempts\n"
    );
    println!(
        "| handler | language | build | size | cold load (compile) | cached load | per task p50 | per task p99 | p50 vs no-op |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let mut baseline: Option<f64> = None;
    for subject in SUBJECTS {
        if let Some(only) = &only
            && subject.name != "noop"
            && !only.iter().any(|o| o == subject.name)
        {
            continue;
        }
        let (wasm, build) = wasm_of(subject, &scratch.path().join("plugins"));
        let mut figures = runtime.block_on(measure(
            &sandbox,
            subject,
            &wasm,
            tasks,
            &scratch.path().join("cache"),
        ));
        figures.build = build;
        let p50 = figures.per_task.value_at_quantile(0.5) as f64 / 1000.0;
        let baseline_p50 = *baseline.get_or_insert(p50);
        println!(
            "| {} | {} | {} | {:.2} MB | {:.0} ms | {:.1} ms | {:.0} µs | {:.0} µs | {:.1}× |",
            subject.name,
            subject.language,
            figures
                .build
                .map(|b| format!("{:.1} s", b.as_secs_f64()))
                .unwrap_or_else(|| "(cargo)".into()),
            figures.size as f64 / 1e6,
            figures.compile.as_secs_f64() * 1000.0,
            figures.cached.as_secs_f64() * 1000.0,
            p50,
            figures.per_task.value_at_quantile(0.99) as f64 / 1000.0,
            p50 / baseline_p50
        );
    }
}
