//! `cargo xtask bench`: builds the plugins, then runs the throughput benchmark in release mode
//! (`--languages`: the per-language handler benchmark instead).
//!
//! `--database URL` (a `postgres://…` or `mysql://…` URL) runs every measurement on that server,
//! each in a database of its own that the benchmark creates and drops. `--database postgres`
//! and `--database mariadb` start a throw-away server for the run first (`cargo xtask db start
//! <server> --instance bench --fresh`: default settings, fsync on, on a loopback port) and
//! remove it afterwards, however the benchmark ends.

use anyhow::{Context, Result, bail};
use std::path::Path;
use std::process::Command;

use crate::{apt, cargo, plugins, run};

/// The private instance the shortcut starts (`target/test-databases/private/bench`).
const INSTANCE: &str = "bench";

pub fn bench(root: &Path, extra: &[String]) -> Result<()> {
    plugins::build_plugins(root)?;
    let languages = extra.iter().any(|a| a == "--languages");
    let mut rest: Vec<String> = extra
        .iter()
        .filter(|a| *a != "--languages")
        .cloned()
        .collect();
    if languages {
        apt::ensure_c_toolchain()?;
    }
    // Kept until the benchmark ends: dropping it removes the server.
    let mut server = None;
    if let Some(at) = rest.iter().position(|a| a == "--database") {
        let value = rest
            .get(at + 1)
            .context("--database needs a URL, `postgres` or `mariadb`")?;
        if !value.contains(':') {
            let started = ThrowAwayServer::start(value)?;
            rest[at + 1] = started.url.clone();
            server = Some(started);
        }
    }
    let bench = if languages { "languages" } else { "throughput" };
    let result = run(cargo()
        .current_dir(root)
        .args(["bench", "-p", "spool", "--bench", bench, "--"])
        .args(&rest)
        .env("SPOOL_TOOLS_DIR", root.join("target/tools")));
    drop(server);
    result
}

/// A database server of this run's own, removed when dropped.
struct ThrowAwayServer {
    engine: &'static str,
    url: String,
}

impl ThrowAwayServer {
    /// Starts a fresh `postgres` or `mariadb` server through `cargo xtask db start` (this very
    /// program) and reads the URL it prints.
    fn start(name: &str) -> Result<ThrowAwayServer> {
        let engine = match name {
            "postgres" | "postgresql" | "pg" => "postgres",
            "mariadb" | "mysql" => "mariadb",
            other => bail!(
                "--database takes a postgres:// or mysql:// URL, or `postgres` or `mariadb` for a \
                 throw-away server; not {other:?}"
            ),
        };
        let output = xtask()?
            .args(["db", "start", engine, "--instance", INSTANCE, "--fresh"])
            .output()
            .context("cannot run `cargo xtask db start`")?;
        // Whatever happens next, the server goes when this value drops.
        let mut server = ThrowAwayServer {
            engine,
            url: String::new(),
        };
        if !output.status.success() {
            bail!(
                "`cargo xtask db start {engine} --instance {INSTANCE}` failed:\n{}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        let stdout = String::from_utf8_lossy(&output.stdout);
        server.url = stdout
            .lines()
            .find_map(|line| line.split_once('=').map(|(_, url)| url.trim().to_string()))
            .with_context(|| format!("`cargo xtask db start` printed no URL: {stdout}"))?;
        eprintln!(
            "throw-away {engine} server for the benchmark: {}",
            server.url
        );
        Ok(server)
    }
}

impl Drop for ThrowAwayServer {
    fn drop(&mut self) {
        let removed = xtask().and_then(|mut command| {
            run(command.args([
                "db",
                "stop",
                self.engine,
                "--instance",
                INSTANCE,
                "--remove",
            ]))
        });
        if let Err(error) = removed {
            eprintln!(
                "cannot remove the benchmark's {} server ({error:#}); `cargo xtask db stop {} \
                 --instance {INSTANCE} --remove` does",
                self.engine, self.engine
            );
        }
    }
}

/// This program, to run its `db` command.
fn xtask() -> Result<Command> {
    let path = std::env::current_exe().context("cannot find this program's path")?;
    Ok(Command::new(path))
}
