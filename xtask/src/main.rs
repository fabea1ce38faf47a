//! Build automation for Spool, run as `cargo xtask <command>` from anywhere in the repository.
//!
//! - `build-plugins`: installs the wasm32-wasip2 and wasm32-wasip1 targets if missing, builds
//!   every guest crate in `plugins/` (plain WASI programs also as preview1 modules), and copies
//!   the example handlers (with their manifests) into the plugin folder.
//! - `demo`: builds everything, starts a host on the embedded SQLite default, enqueues sample
//!   tasks with the CLI, shows them finish, and keeps serving until Ctrl-C (`--exit` stops).
//! - `test`: installs the C toolchain's, the database servers' and the browser test's Debian
//!   packages (Chromium, chromedriver) if missing,
//!   builds the plugins, starts throw-away PostgreSQL and MariaDB servers on loopback (fresh
//!   data folders under `target/test-databases`), runs the whole test suite against them (extra
//!   arguments go to cargo test), and stops the servers however the suite ends. The tests build
//!   the handlers in other languages themselves, with `spool plugin build`, which installs their
//!   pinned toolchains into `target/tools`.
//! - `db start|stop [postgres|mariadb]`: the same test database servers by hand. `db start`
//!   leaves them running and writes their URLs to `target/test-databases/urls.env`; stopping and
//!   starting one server keeps its data and port, so its URL stays valid across an outage.
//! - `bench`: builds the plugins, then runs the throughput benchmark in release mode
//!   (`bench --languages`: the per-language handler benchmark). `bench --database URL` runs it
//!   on a PostgreSQL or MySQL/MariaDB server; `--database postgres` or `mariadb` on a
//!   throw-away server started for the run.
//!
//! # Layout
//!
//! - `plugins.rs`: the wasm targets and the guest plugin build.
//! - `demo.rs`: the demo host and its sample tasks.
//! - `apt.rs`: Debian packages, installed when missing.
//! - `bench.rs`: the benchmarks, and the throw-away server of `bench --database postgres`.
//! - `databases.rs`: the test database servers as a whole: where each lives, its port and URL,
//!   start, stop, the `db` command and the servers of a `cargo xtask test` run.
//! - `postgres.rs`, `mariadb.rs`: what differs between the two engines.
//! - `process.rs`: finding, signalling and waiting for server processes; free ports.

mod apt;
mod bench;
mod databases;
mod demo;
mod mariadb;
mod plugins;
mod postgres;
mod process;

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::Command;

const USAGE: &str = "usage: cargo xtask <command>
  build-plugins
  demo [--exit]
  test [cargo test args]
  db start [postgres|mariadb] [--fresh] [--instance NAME]
  db stop [postgres|mariadb] [--instance NAME] [--remove]
  bench [--languages] [--database URL|postgres|mariadb] [bench args]";

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = repo_root();
    match args.first().map(String::as_str) {
        Some("build-plugins") => plugins::build_plugins(&root),
        Some("demo") => demo::demo(&root, args[1..].iter().any(|a| a == "--exit")),
        Some("test") => test(&root, &args[1..]),
        Some("db") => databases::command(&root, &args[1..]),
        Some("bench") => bench::bench(&root, &args[1..]),
        _ => {
            eprintln!("{USAGE}");
            std::process::exit(2);
        }
    }
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the repository")
        .to_path_buf()
}

/// Runs a command, failing with its description when it does not succeed.
fn run(command: &mut Command) -> Result<()> {
    let shown = format!("{command:?}");
    let status = command
        .status()
        .with_context(|| format!("cannot start {shown}"))?;
    if !status.success() {
        bail!("{shown} failed with {status}");
    }
    Ok(())
}

fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

/// The whole suite, against throw-away database servers that stop when it ends.
fn test(root: &Path, extra: &[String]) -> Result<()> {
    // The whole suite (no filter given) starts with the code checks, which also compile the
    // benchmarks: formatting, and clippy with every warning an error.
    if extra.is_empty() {
        hygiene(root)?;
    }
    apt::ensure_c_toolchain()?;
    apt::ensure_browser()?;
    databases::ensure_installed()?;
    plugins::build_plugins(root)?;
    let servers = databases::SuiteServers::start(root)?;
    run(cargo()
        .current_dir(root)
        .args(["test", "--workspace"])
        .args(extra)
        .envs(servers.env()))
}

/// `cargo fmt --check` and `cargo clippy -D warnings` over every target of the workspace.
fn hygiene(root: &Path) -> Result<()> {
    let has = |tool: &str| {
        Command::new("cargo")
            .args([tool, "--version"])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !has("fmt") || !has("clippy") {
        run(Command::new("rustup").args(["component", "add", "rustfmt", "clippy"]))
            .context("formatting and lint checks need rustfmt and clippy; install them with `rustup component add rustfmt clippy`")?;
    }
    run(cargo().current_dir(root).args(["fmt", "--all", "--check"]))
        .context("the code is not formatted: run `cargo fmt --all`")?;
    run(cargo().current_dir(root).args([
        "clippy",
        "--workspace",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]))
    .context("clippy found problems: fix them (the messages are above)")
}
