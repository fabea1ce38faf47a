//! Build automation for Spool, run as `cargo xtask <command>` from anywhere in the repository.
//!
//! - `build-plugins`: installs the wasm32-wasip2 and wasm32-wasip1 targets if missing, builds
//!   every guest crate in `plugins/` (plain WASI programs also as preview1 modules), and copies
//!   the example handlers (with their manifests) into the plugin folder.
//! - `demo`: builds everything, starts a host on the embedded SQLite default, enqueues sample
//!   tasks with the CLI, shows them finish, and keeps serving until Ctrl-C (`--exit` stops).
//! - `test`: installs the C toolchain's Debian packages if missing, builds the plugins, then runs
//!   the whole test suite (extra arguments go to cargo test). The tests build the handlers in
//!   other languages themselves, with `spool plugin build`, which installs their pinned
//!   toolchains into `target/tools`.
//! - `bench`: builds the plugins, then runs the throughput benchmark in release mode
//!   (`bench --languages`: the per-language handler benchmark).

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
/// Debian packages the C handlers build with (clang, its wasm32 runtime, wasi-libc).
const C_PACKAGES: &[&str] = &["clang", "lld", "wasi-libc", "libclang-rt-dev-wasm32"];
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

/// Installs the Debian packages C handlers need when they are missing (the tests build the C
/// example and template). Other languages' toolchains are installed by `spool plugin build`.
fn ensure_c_toolchain() -> Result<()> {
    let installed = |package: &str| {
        Command::new("dpkg-query")
            .args(["-W", "-f=${Status}", package])
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
    };
    if C_PACKAGES.iter().all(|package| installed(package)) {
        return Ok(());
    }
    eprintln!("installing {} with apt-get", C_PACKAGES.join(" "));
    let as_root = |program: &str| {
        let is_root = Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0"));
        let mut command = if is_root { Command::new(program) } else { Command::new("sudo") };
        if !is_root {
            command.arg(program);
        }
        command
    };
    run(as_root("apt-get").args(["update", "-qq"]))?;
    run(as_root("apt-get").args(["install", "-y", "-qq", "--no-install-recommends"]).args(C_PACKAGES).env("DEBIAN_FRONTEND", "noninteractive"))
        .context("C handlers need clang and wasi-libc; install them with `apt-get install clang lld wasi-libc libclang-rt-dev-wasm32`")
}

fn test(root: &Path, extra: &[String]) -> Result<()> {
    ensure_c_toolchain()?;
    build_plugins(root)?;
    run(cargo().current_dir(root).args(["test", "--workspace"]).args(extra))
}

/// `cargo xtask bench` runs the throughput benchmark; `cargo xtask bench --languages` runs the
/// per-language handler benchmark instead (it builds every language's example).
fn bench(root: &Path, extra: &[String]) -> Result<()> {
    build_plugins(root)?;
    let languages = extra.iter().any(|a| a == "--languages");
    let rest: Vec<&String> = extra.iter().filter(|a| *a != "--languages").collect();
    if languages {
        ensure_c_toolchain()?;
    }
    let bench = if languages { "languages" } else { "throughput" };
    run(cargo()
        .current_dir(root)
        .args(["bench", "-p", "spool", "--bench", bench, "--"])
        .args(rest)
        .env("SPOOL_TOOLS_DIR", root.join("target/tools")))
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
