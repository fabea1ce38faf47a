//! Build automation for Spool, run as `cargo xtask <command>` from anywhere in the repository.
//!
//! - `build-plugins`: installs the wasm32-wasip2 and wasm32-wasip1 targets if missing, builds
//!   every guest crate in `plugins/` (plain WASI programs also as preview1 modules), and copies
//!   the example handlers (with their manifests) into the plugin folder.
//! - `demo`: builds everything, starts a host on the embedded SQLite default, enqueues sample
//!   tasks with the CLI, shows them finish, and keeps serving until Ctrl-C (`--exit` stops).
//! - `test`: builds the plugins, then runs the whole test suite (extra arguments go to cargo test).
//! - `bench`: builds the plugins, then runs the throughput benchmark in release mode.

use anyhow::{bail, Context, Result};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The WebAssembly target handler components are built for.
const WASM_TARGET: &str = "wasm32-wasip2";
/// The target of plain WASI preview1 programs (the second door).
const WASIP1_TARGET: &str = "wasm32-wasip1";
/// Guest crates that are plain WASI programs, also built as preview1 core modules.
const COMMANDS: &[&str] = &["shout"];
/// The pinned componentize-py (from PyPI) that turns Python handlers into components.
const COMPONENTIZE_PY: &str = "componentize-py==0.25.1";
/// Example handlers copied into the plugin folder for the demo; test-only handlers stay in
/// the build output where the tests find them.
const EXAMPLES: &[&str] = &["report", "notify", "flaky"];

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = repo_root();
    match args.first().map(String::as_str) {
        Some("build-plugins") => build_plugins(&root),
        Some("demo") => demo(&root, args[1..].iter().any(|a| a == "--exit")),
        Some("test") => test(&root, &args[1..]),
        Some("bench") => bench(&root, &args[1..]),
        _ => {
            eprintln!("usage: cargo xtask <build-plugins | demo [--exit] | test [cargo test args] | bench [bench args]>");
            std::process::exit(2);
        }
    }
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask lives in the repository").to_path_buf()
}

/// Runs a command, failing with its description when it does not succeed.
fn run(command: &mut Command) -> Result<()> {
    let shown = format!("{command:?}");
    let status = command.status().with_context(|| format!("cannot start {shown}"))?;
    if !status.success() {
        bail!("{shown} failed with {status}");
    }
    Ok(())
}

fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

/// Installs a target's standard library through rustup when it is missing.
fn ensure_target(target: &str) -> Result<()> {
    let sysroot = Command::new("rustc").args(["--print", "sysroot"]).output().context("cannot run rustc")?;
    let sysroot = PathBuf::from(String::from_utf8_lossy(&sysroot.stdout).trim());
    if sysroot.join("lib/rustlib").join(target).exists() {
        return Ok(());
    }
    eprintln!("installing the {target} target with rustup");
    run(Command::new("rustup").args(["target", "add", target]))
        .with_context(|| format!("the {target} target is missing and rustup could not add it; install it with `rustup target add {target}`"))
}

/// Builds every guest crate and copies the examples into the plugin folder.
fn build_plugins(root: &Path) -> Result<()> {
    ensure_target(WASM_TARGET)?;
    ensure_target(WASIP1_TARGET)?;
    let plugins = root.join("plugins");
    run(cargo()
        .current_dir(&plugins)
        .args(["build", "--release", "--target", WASM_TARGET])
        .env_remove("CARGO_TARGET_DIR"))?;
    for command in COMMANDS {
        run(cargo()
            .current_dir(&plugins)
            .args(["build", "--release", "--target", WASIP1_TARGET, "-p", command])
            .env_remove("CARGO_TARGET_DIR"))?;
    }
    build_python_handlers(root)?;
    let built = plugins.join("target").join(WASM_TARGET).join("release");
    for name in EXAMPLES {
        let wasm = built.join(format!("{name}.wasm"));
        copy_if_changed(&wasm, &plugins.join(format!("{name}.wasm")))?;
        let manifest = plugins.join("rust").join(name).join(format!("{name}.toml"));
        if manifest.exists() {
            copy_if_changed(&manifest, &plugins.join(format!("{name}.toml")))?;
        }
    }
    eprintln!("example plugins are in {}", plugins.display());
    Ok(())
}

/// Builds every `plugins/python/NAME/app.py` into `plugins/target/python/NAME.wasm` with the
/// pinned componentize-py, installed into a virtual environment under `target/` on first use.
/// A component is rebuilt only when its sources are newer than it.
fn build_python_handlers(root: &Path) -> Result<()> {
    let sources = root.join("plugins/python");
    let mut handlers: Vec<PathBuf> = std::fs::read_dir(&sources)
        .with_context(|| format!("cannot read {}", sources.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|dir| dir.join("app.py").exists())
        .collect();
    handlers.sort();
    if handlers.is_empty() {
        return Ok(());
    }
    let venv = root.join("target/tools/python");
    let componentize = venv.join("bin/componentize-py");
    if !componentize.exists() {
        eprintln!("installing {COMPONENTIZE_PY} into {}", venv.display());
        run(Command::new("python3").arg("-m").arg("venv").arg(&venv))
            .context("python3 with the venv module is needed to build Python handlers (Debian: apt-get install python3-venv)")?;
        run(Command::new(venv.join("bin/pip")).args(["install", "--quiet", COMPONENTIZE_PY]))?;
    }
    let out = root.join("plugins/target/python");
    std::fs::create_dir_all(&out)?;
    for dir in handlers {
        let name = dir.file_name().and_then(|n| n.to_str()).context("handler folder name")?.to_string();
        let wasm = out.join(format!("{name}.wasm"));
        if is_newer_than_sources(&wasm, &dir)? {
            continue;
        }
        eprintln!("building Python handler {name} with {COMPONENTIZE_PY}");
        run(Command::new(&componentize)
            .arg("-d")
            .arg(root.join("wit"))
            .args(["-w", "handler", "componentize", "app", "-p"])
            .arg(&dir)
            .arg("-o")
            .arg(&wasm))?;
    }
    Ok(())
}

/// Whether `output` exists and is newer than every file in `sources` and the WIT.
fn is_newer_than_sources(output: &Path, sources: &Path) -> Result<bool> {
    let Ok(built) = std::fs::metadata(output).and_then(|m| m.modified()) else {
        return Ok(false);
    };
    let wit = sources.join("../../../wit/handler.wit");
    let mut inputs: Vec<PathBuf> = std::fs::read_dir(sources)?.filter_map(|e| e.ok().map(|e| e.path())).collect();
    inputs.push(wit);
    Ok(inputs.iter().all(|input| std::fs::metadata(input).and_then(|m| m.modified()).map(|t| t <= built).unwrap_or(false)))
}

/// Copies only when the content differs, so an unchanged plugin keeps its file untouched.
fn copy_if_changed(from: &Path, to: &Path) -> Result<()> {
    let bytes = std::fs::read(from).with_context(|| format!("cannot read {}", from.display()))?;
    if std::fs::read(to).ok().as_deref() != Some(&bytes[..]) {
        // Written under a temporary name and renamed, so a reader never sees half a file.
        let partial = to.with_extension("partial");
        std::fs::write(&partial, &bytes).with_context(|| format!("cannot write {}", partial.display()))?;
        std::fs::rename(&partial, to)?;
    }
    Ok(())
}

fn test(root: &Path, extra: &[String]) -> Result<()> {
    build_plugins(root)?;
    run(cargo().current_dir(root).args(["test", "--workspace"]).args(extra))
}

fn bench(root: &Path, extra: &[String]) -> Result<()> {
    build_plugins(root)?;
    run(cargo().current_dir(root).args(["bench", "-p", "spool", "--bench", "throughput", "--"]).args(extra))
}

/// Stops the demo host when the demo ends, however it ends.
struct HostProcess(Child);

impl Drop for HostProcess {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.0.id().to_string()]).status();
        let _ = self.0.wait();
    }
}

fn demo(root: &Path, exit: bool) -> Result<()> {
    build_plugins(root)?;
    run(cargo().current_dir(root).args(["build", "-p", "spool"]))?;
    let spool = root.join("target/debug/spool");
    let mut child = Command::new(&spool)
        .current_dir(root)
        .args(["serve", "--listen", "127.0.0.1:8787"])
        .stdout(Stdio::piped())
        .spawn()
        .context("cannot start the spool host")?;
    let stdout = child.stdout.take().expect("piped stdout");
    let host = HostProcess(child);
    let mut lines = BufReader::new(stdout).lines();
    let url = loop {
        match lines.next() {
            Some(Ok(line)) => {
                if let Some(url) = line.strip_prefix("spool listening on ") {
                    break url.to_string();
                }
            }
            _ => bail!("the host stopped before it was ready; see its log above"),
        }
    };
    let samples: &[(&str, &str)] = &[
        ("notify", r#"{"channel":"email","to":"ana@example.com","subject":"Approval {{id}}","template":"Hello {{name}}, approval {{id}} is {{status}}.","vars":{"name":"Ana","id":"A-1042","status":"approved"}}"#),
        ("report", r#"{"title":"Approvals by region","group_by":"region","sum":"amount","rows":[{"region":"north","amount":120.5},{"region":"south","amount":80},{"region":"north","amount":42},{"region":"east","amount":310.25}]}"#),
        ("flaky", r#"{"fail_until_attempt":2}"#),
    ];
    let started = Instant::now();
    for (task_type, payload) in samples {
        eprintln!("\n$ spool enqueue {task_type} '{payload}' --wait");
        run(Command::new(&spool).args(["enqueue", task_type, payload, "--wait", "--url", &url]))?;
    }
    eprintln!("\n$ spool tasks");
    run(Command::new(&spool).args(["tasks", "--url", &url]))?;
    eprintln!("\nall sample tasks finished in {:.1?}", started.elapsed());
    if exit {
        drop(host);
        return Ok(());
    }
    eprintln!("\nSpool is serving at {url} (API description: {url}/openapi.json). Try:\n  target/debug/spool enqueue report '{{\"rows\":[{{\"k\":\"a\",\"v\":1}}],\"group_by\":\"k\",\"sum\":\"v\"}}' --wait\nCtrl-C stops it.");
    // Keep the host in the foreground; its own Ctrl-C handling drains and stops it.
    for line in lines.map_while(Result::ok) {
        println!("{line}");
    }
    let mut host = host;
    let _ = host.0.wait();
    std::mem::forget(host);
    std::thread::sleep(Duration::from_millis(10));
    Ok(())
}
