//! PostgreSQL test servers: Debian's server programs (the newest version in
//! `/usr/lib/postgresql/*/bin`, else the ones on PATH), a cluster made by `initdb` in the
//! server's folder, whose `postgresql.conf` pins loopback, the server's port and its socket
//! folder, started with `pg_ctl`. PostgreSQL refuses to run as root, so as root its programs run
//! as the `postgres` user (created when missing), who owns the folder.

use crate::databases::{self, DATABASE, PASSWORD, USER};
use crate::process::{self, find_program, is_root, run_captured};
use anyhow::{Context, Result, bail};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Debian's PostgreSQL server, in the version Debian supports (with its client, psql).
pub const PACKAGES: &[&str] = &["postgresql"];

/// Fast shutdown: open connections are ended instead of waited for.
pub const STOP_SIGNAL: &str = "INT";

/// The signal of an immediate shutdown (`pg_ctl stop -m immediate`): every process exits at
/// once without a checkpoint, and the next start recovers from the write-ahead log.
pub const CRASH_SIGNAL: &str = "QUIT";

/// The user PostgreSQL runs as when we are root.
const OS_USER: &str = "postgres";

/// The folder with `initdb`, `pg_ctl` and `postgres`: the newest Debian version, else PATH's.
fn bin_dir() -> Option<PathBuf> {
    let complete = |bin: &Path| bin.join("initdb").is_file() && bin.join("pg_ctl").is_file();
    let newest = fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version: u32 = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            complete(&bin).then_some((version, bin))
        })
        .max_by_key(|(version, _)| *version);
    if let Some((_, bin)) = newest {
        return Some(bin);
    }
    // PATH may hold links to the real programs, which live beside each other.
    let pg_ctl = fs::canonicalize(find_program("pg_ctl")?).ok()?;
    let bin = pg_ctl.parent()?.to_path_buf();
    complete(&bin).then_some(bin)
}

/// A program of the server's version, or PATH's when the version's folder lacks it.
fn program(bin: &Path, name: &str) -> Option<PathBuf> {
    let own = bin.join(name);
    if own.is_file() {
        Some(own)
    } else {
        find_program(name)
    }
}

pub fn installed() -> bool {
    bin_dir().is_some_and(|bin| program(&bin, "psql").is_some())
}

fn programs() -> Result<(PathBuf, PathBuf)> {
    let bin = bin_dir().context("PostgreSQL's initdb and pg_ctl are missing")?;
    let psql = program(&bin, "psql").context("PostgreSQL's psql is missing")?;
    Ok((bin, psql))
}

/// A server program, run as the `postgres` user when we are root.
fn server_command(program: &Path) -> Command {
    if is_root() {
        let mut command = Command::new("runuser");
        command.args(["-u", OS_USER, "--"]).arg(program);
        command
    } else {
        Command::new(program)
    }
}

/// Creates the `postgres` user (as the Debian package does) when it does not exist.
fn ensure_os_user() -> Result<()> {
    let exists = Command::new("id")
        .arg("-u")
        .arg(OS_USER)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !exists {
        eprintln!("creating the system user {OS_USER}: PostgreSQL does not run as root");
        run_captured(Command::new("useradd").args([
            "--system",
            "--user-group",
            "--no-create-home",
            "--home-dir",
            "/nonexistent",
            "--shell",
            "/usr/sbin/nologin",
            OS_USER,
        ]))?;
    }
    Ok(())
}

fn data_dir(dir: &Path) -> PathBuf {
    dir.join("data")
}

/// The postmaster's command line is `postgres -D <data folder>`.
pub fn server_argument(dir: &Path) -> String {
    data_dir(dir).to_string_lossy().into_owned()
}

fn socket_dir(dir: &Path) -> Result<PathBuf> {
    databases::socket_dir(dir, ".s.PGSQL.65535.lock")
}

/// Makes a cluster in the empty folder, starts it, and adds the `spool` role and database.
pub fn create(dir: &Path, port: u16) -> Result<()> {
    let (bin, psql) = programs()?;
    let data = data_dir(dir);
    let sockets = socket_dir(dir)?;
    if is_root() {
        ensure_os_user()?;
        run_captured(
            Command::new("chown")
                .args(["-R", &format!("{OS_USER}:{OS_USER}")])
                .arg(dir)
                .arg(&sockets),
        )?;
        let reachable = server_command(Path::new("test"))
            .arg("-w")
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
        if !reachable {
            bail!(
                "the {OS_USER} user cannot write to {}: PostgreSQL refuses to run as root, so its \
                 folder belongs to {OS_USER}, and every folder above it must let other users \
                 through (chmod o+x)",
                dir.display()
            );
        }
    }
    run_captured(
        server_command(&bin.join("initdb"))
            .current_dir(dir)
            .arg("--pgdata")
            .arg(&data)
            .args([
                "--username=postgres",
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                "--encoding=UTF8",
                "--locale=C",
            ]),
    )
    .context("initdb failed")?;
    let settings = format!(
        "\n# cargo xtask db: a throw-away test server, on loopback only.\n\
         listen_addresses = '127.0.0.1'\n\
         port = {port}\n\
         unix_socket_directories = '{}'\n\
         max_connections = 200\n",
        sockets.display()
    );
    fs::OpenOptions::new()
        .append(true)
        .open(data.join("postgresql.conf"))
        .and_then(|mut file| file.write_all(settings.as_bytes()))
        .context("cannot write postgresql.conf")?;
    launch(dir)?;
    // Local connections as the superuser are trusted; TCP ones need a password.
    run_captured(
        Command::new(&psql)
            .current_dir(dir)
            .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-h"])
            .arg(&sockets)
            .args(["-p", &port.to_string(), "-U", "postgres", "-d", "postgres"])
            .arg("-c")
            .arg(format!(
                "CREATE ROLE {USER} LOGIN CREATEDB PASSWORD '{PASSWORD}'"
            ))
            .arg("-c")
            .arg(format!("CREATE DATABASE {DATABASE} OWNER {USER}")),
    )
    .context("cannot create the spool role and database")?;
    check(&psql, dir, port)
}

/// Starts the folder's cluster and waits until its URL answers.
pub fn start(dir: &Path, port: u16) -> Result<()> {
    let (_, psql) = programs()?;
    // No process of the folder is alive now (the caller made sure), so lock files are stale.
    // A killed server's lock files would stop PostgreSQL when their pid still exists, even as a
    // zombie no one has reaped yet.
    let _ = fs::remove_file(data_dir(dir).join("postmaster.pid"));
    let _ = fs::remove_file(socket_dir(dir)?.join(format!(".s.PGSQL.{port}.lock")));
    launch(dir)?;
    check(&psql, dir, port)
}

/// Starts the folder's cluster and waits until it accepts connections.
fn launch(dir: &Path) -> Result<()> {
    let (bin, _) = programs()?;
    let log = dir.join("server.log");
    // pg_ctl detaches the server into its own session, so it outlives this program and a
    // Ctrl-C in the terminal does not reach it.
    run_captured(
        server_command(&bin.join("pg_ctl"))
            .current_dir(dir)
            .args(["start", "--wait", "--timeout=60", "--silent", "--pgdata"])
            .arg(data_dir(dir))
            .arg("--log")
            .arg(&log),
    )
    .with_context(|| process::log_tail(&log, 20))?;
    Ok(())
}

/// Connects to the URL the tests get, over TCP with the password.
fn check(psql: &Path, dir: &Path, port: u16) -> Result<()> {
    let url = format!("postgres://{USER}:{PASSWORD}@127.0.0.1:{port}/{DATABASE}");
    run_captured(
        Command::new(psql)
            .current_dir(dir)
            .args(["-X", "-q", "-t", "-c", "SELECT 1", &url]),
    )
    .with_context(|| format!("the server does not answer at {url}"))?;
    Ok(())
}
