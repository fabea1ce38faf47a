//! Build automation for Spool, run as `cargo xtask <command>` from anywhere in the repository.
//!
//! - `build-plugins`: installs the wasm32-wasip2 and wasm32-wasip1 targets if missing, builds
//!   every guest crate in `plugins/` (plain WASI programs also as preview1 modules), and copies
//!   the example handlers (with their manifests) into the plugin folder.
//! - `demo`: builds the example plugins and the `spool` binary (release profile: the build
//!   `cargo build --release` and the benchmark reuse), starts a host on the embedded SQLite
//!   default, enqueues sample tasks with the CLI, shows them finish, and keeps serving until
//!   Ctrl-C (`--exit` stops).
//! - `test`: checks formatting, clippy, and that tests resolve the host's dependencies with the
//!   same features as its binary (see `workspace-hack/`); installs the C toolchain's, the
//!   database servers' and the browser test's Debian packages (Chromium, chromedriver) if
//!   missing, builds the plugins, starts throw-away PostgreSQL and MariaDB servers on loopback (fresh
//!   data folders under `target/test-databases`), runs the whole test suite against them (extra
//!   arguments go to cargo test), and stops the servers however the suite ends. The tests build
//!   the handlers in other languages themselves, with `spool plugin build`, which installs their
//!   pinned toolchains into `target/tools`. The whole suite first warns when the disk has less
//!   room than the suite writes.
//! - `db start|stop|crash [postgres|mariadb]`: the same test database servers by hand (`crash`
//!   ends one as a crash would, for the chaos run). `db start`
//!   leaves them running and writes their URLs to `target/test-databases/urls.env`; stopping and
//!   starting one server keeps its data and port, so its URL stays valid across an outage.
//! - `chaos`: the full chaos run (tests/e2e/chaos.rs) against throw-away servers: hosts killed
//!   at random and the database servers crashed while tasks with effects run; it checks that
//!   nothing is lost or failed and that every repeated effect fell in the send/record gap, and
//!   prints the figures. Its short version is part of `test`.
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
  db crash [postgres|mariadb] [--instance NAME]
  bench [--languages] [--database URL|postgres|mariadb] [bench args]
  chaos";

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = repo_root();
    match args.first().map(String::as_str) {
        Some("build-plugins") => plugins::build_plugins(&root),
        Some("demo") => demo::demo(&root, args[1..].iter().any(|a| a == "--exit")),
        Some("test") => test(&root, &args[1..]),
        Some("db") => databases::command(&root, &args[1..]),
        Some("bench") => bench::bench(&root, &args[1..]),
        Some("chaos") => chaos(&root),
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

/// A cargo command with the environment of a cargo started from the shell.
///
/// `cargo xtask` runs this program through `cargo run`, which sets the package variables of
/// xtask (`CARGO_PKG_NAME`, `CARGO_MANIFEST_DIR`, …) for it. A child cargo would pass them on
/// to the build scripts that watch them (`ring`'s does), which then count as changed against
/// a build started from the shell: `cargo build --release` after `cargo xtask demo` compiled
/// `ring` and everything above it again.
fn cargo() -> Command {
    let mut command = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(set_by_cargo_run) {
            command.env_remove(name);
        }
    }
    command
}

/// The variables `cargo run` sets for the program it runs (and a build script sees), as
/// opposed to the ones a user sets to configure cargo (`CARGO_HOME`, `CARGO_TARGET_DIR`, …).
fn set_by_cargo_run(name: &str) -> bool {
    name.starts_with("CARGO_PKG_")
        || name.starts_with("CARGO_MANIFEST_")
        || matches!(
            name,
            "CARGO_CRATE_NAME" | "CARGO_BIN_NAME" | "CARGO_PRIMARY_PACKAGE" | "OUT_DIR"
        )
}

/// The full chaos run (tests/e2e/chaos.rs): hosts killed at random and database servers
/// crashed under a load of tasks with effects, on SQLite, PostgreSQL and MariaDB, against
/// throw-away servers; it prints what it saw. Sizes: `SPOOL_CHAOS_TASKS`, `SPOOL_CHAOS_HOSTS`.
fn chaos(root: &Path) -> Result<()> {
    databases::ensure_installed()?;
    plugins::build_plugins(root)?;
    let servers = databases::SuiteServers::start(root)?;
    run(cargo()
        .current_dir(root)
        .args(["test", "-p", "spool", "--test", "e2e", "chaos::full_chaos"])
        .args(["--", "--ignored", "--nocapture"])
        .envs(servers.env()))
}

/// The whole suite, against throw-away database servers that stop when it ends.
fn test(root: &Path, extra: &[String]) -> Result<()> {
    // The whole suite (no filter given) starts with the code checks, which also compile the
    // benchmarks: formatting, and clippy with every warning an error.
    if extra.is_empty() {
        warn_if_disk_is_short(root);
        hygiene(root)?;
    }
    apt::ensure_c_toolchain()?;
    apt::ensure_browser()?;
    apt::ensure_faketime()?;
    databases::ensure_installed()?;
    plugins::build_plugins(root)?;
    let servers = databases::SuiteServers::start(root)?;
    run(cargo()
        .current_dir(root)
        .args(["test", "--workspace"])
        .args(extra)
        .envs(servers.env()))
}

/// What the whole suite adds to the disk of a clean checkout: builds, the handler toolchains
/// under `target/tools`, the test servers' data (about 10 GB measured, with room to spare).
const SUITE_DISK_GB: u64 = 14;

/// Says so up front when the disk has less room than the suite writes: a full disk fails
/// dozens of unrelated tests at once, each with its own symptom.
fn warn_if_disk_is_short(root: &Path) {
    let Ok(output) = Command::new("df").args(["-Pk"]).arg(root).output() else {
        return;
    };
    if let Some(gb) = available_gb(&String::from_utf8_lossy(&output.stdout))
        && gb < SUITE_DISK_GB
    {
        eprintln!(
            "warning: {gb} GB free on the disk of {}; the whole suite writes about \
             {SUITE_DISK_GB} GB. Tests fail with \"No space left on device\" when it runs out: \
             free some space (for example `cargo clean` in other checkouts).",
            root.display()
        );
    }
}

/// The space available in `df -Pk` output (POSIX format: the second line's fourth field, in
/// KiB), in whole GB.
fn available_gb(df_output: &str) -> Option<u64> {
    let kib: u64 = df_output
        .lines()
        .nth(1)?
        .split_whitespace()
        .nth(3)?
        .parse()
        .ok()?;
    Some(kib / (1024 * 1024))
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
    .context("clippy found problems: fix them (the messages are above)")?;
    check_one_feature_set(root)
}

/// Fails when the host's dependencies would be compiled with other features for its tests and
/// benchmarks than for its binary, naming them: each such difference compiles the dependency
/// (and everything above it) a second time. `workspace-hack/Cargo.toml` turns the missing
/// features on for every build.
fn check_one_feature_set(root: &Path) -> Result<()> {
    let tree = |extra: &[&str]| -> Result<String> {
        let output = cargo()
            .current_dir(root)
            .args(["tree", "-p", "spool", "--target", "all", "--prefix", "none"])
            .args(["--format", "{p} {f}"])
            .args(extra)
            .output()
            .context("cannot run cargo tree")?;
        if !output.status.success() {
            bail!(
                "cargo tree failed: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    };
    let built = tree(&["--edges", "no-dev"])?;
    let tested = tree(&[])?;
    let differing = features_that_differ(&built, &tested);
    if differing.is_empty() {
        return Ok(());
    }
    bail!(
        "these dependencies of the host get other features in its tests and benchmarks than in \
         its binary, so they would be compiled twice; add their test features to \
         workspace-hack/Cargo.toml:\n  built: {}",
        differing.join("\n  built: ")
    )
}

/// The `{p} {f}` lines of `built` (package and features, from `cargo tree`) whose package
/// `tested` lists with other features. A package can be compiled more than once in one build
/// (for the target, and for build scripts and proc-macros), so the feature sets of each
/// package are compared as a whole: a test that adds a second set compiles it again too.
fn features_that_differ(built: &str, tested: &str) -> Vec<String> {
    use std::collections::{BTreeMap, BTreeSet};
    let by_package = |text: &str| -> BTreeMap<String, BTreeSet<String>> {
        let mut packages: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for line in text.lines() {
            let line = line.replace(" (*)", "").replace(" (proc-macro)", "");
            let line = line.trim();
            if line.is_empty() {
                continue;
            }
            let (package, features) = match line.split_once(") ") {
                Some((path, features)) => (format!("{path})"), features),
                None => line
                    .split_once(' ')
                    .map_or((line.to_string(), ""), |(name, rest)| {
                        match rest.split_once(' ') {
                            Some((version, features)) => (format!("{name} {version}"), features),
                            None => (line.to_string(), ""),
                        }
                    }),
            };
            packages
                .entry(package)
                .or_default()
                .insert(features.trim().to_string());
        }
        packages
    };
    let tested = by_package(tested);
    by_package(built)
        .into_iter()
        .filter(|(package, features)| tested.get(package) != Some(features))
        .flat_map(|(package, features)| {
            features
                .into_iter()
                .map(move |features| format!("{package} {features}").trim().to_string())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{available_gb, features_that_differ, set_by_cargo_run};

    #[test]
    fn only_what_cargo_run_sets_is_cleared_for_a_child_cargo() {
        for name in [
            "CARGO_PKG_NAME",
            "CARGO_MANIFEST_DIR",
            "CARGO_CRATE_NAME",
            "OUT_DIR",
        ] {
            assert!(set_by_cargo_run(name), "{name}");
        }
        for name in [
            "CARGO_HOME",
            "CARGO_TARGET_DIR",
            "CARGO_BUILD_JOBS",
            "RUSTFLAGS",
            "PATH",
        ] {
            assert!(!set_by_cargo_run(name), "{name}");
        }
    }

    #[test]
    fn a_dependency_with_other_features_in_tests_is_named() {
        let built =
            "spool v0.1.0 (/x/host) default\nsyn v2.0.1 full,derive\nserde v1.0.0 std (*)\n";
        let tested = "spool v0.1.0 (/x/host) default\nsyn v2.0.1 full,derive,fold\nserde v1.0.0 std\nfantoccini v0.22.0 \n";
        assert_eq!(
            features_that_differ(built, tested),
            ["syn v2.0.1 full,derive"]
        );
        assert!(features_that_differ(tested, tested).is_empty());
        // The same features once more, for a second compile (a proc-macro's side, say).
        let tested_twice = "spool v0.1.0 (/x/host) default\nsyn v2.0.1 full,derive\n\
                            serde v1.0.0 std\nserde v1.0.0 default,std\n";
        assert_eq!(
            features_that_differ(built, tested_twice),
            ["serde v1.0.0 std"]
        );
    }

    #[test]
    fn df_output_gives_the_space_available() {
        let output = "Filesystem     1024-blocks     Used Available Capacity Mounted on\n\
                      /dev/vda         264212084 65871144  29414744      70% /\n";
        assert_eq!(available_gb(output), Some(28));
        assert_eq!(
            available_gb("df: /nowhere: No such file or directory\n"),
            None
        );
    }
}
