//! MariaDB test servers: Debian's `mariadbd`, `mariadb-install-db` and `mariadb` client (the
//! packages with the programs only, not the one that runs a system-wide service), a data
//! folder made by `mariadb-install-db`, and a `my.cnf` in the server's folder that pins
//! loopback, the port, and the socket, pid file, log and temporary files inside the folder, and
//! is the only configuration the server reads. The server runs detached; as root it runs as
//! root (`user = root`).

use crate::databases::{self, DATABASE, PASSWORD, USER};
use crate::process::{self, find_program, is_root, run_captured};
use anyhow::{Context, Result, bail};
use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The server with `mariadb-install-db`, and the client with `my_print_defaults`, which
/// `mariadb-install-db` needs.
pub const PACKAGES: &[&str] = &["mariadb-server-core", "mariadb-client-core"];

/// A clean shutdown.
pub const STOP_SIGNAL: &str = "TERM";

/// A crash: the server is killed, and the next start recovers from its redo log.
pub const CRASH_SIGNAL: &str = "KILL";

/// How long a starting server gets to answer.
const START_TIMEOUT: Duration = Duration::from_secs(90);

fn first_program(names: &[&str]) -> Option<PathBuf> {
    names.iter().find_map(|name| find_program(name))
}

fn server() -> Option<PathBuf> {
    first_program(&["mariadbd", "mysqld"])
}

fn install_db() -> Option<PathBuf> {
    first_program(&["mariadb-install-db", "mysql_install_db"])
}

fn client() -> Option<PathBuf> {
    first_program(&["mariadb", "mysql"])
}

pub fn installed() -> bool {
    server().is_some()
        && install_db().is_some()
        && client().is_some()
        && find_program("my_print_defaults").is_some()
}

fn config_file(dir: &Path) -> PathBuf {
    dir.join("my.cnf")
}

/// The server's command line starts with `--defaults-file=<its my.cnf>`.
pub fn server_argument(dir: &Path) -> String {
    format!("--defaults-file={}", config_file(dir).display())
}

/// Makes a data folder in the empty folder, starts the server, and adds the `spool` user and
/// database.
pub fn create(dir: &Path, port: u16) -> Result<()> {
    let install_db = install_db().context("mariadb-install-db is missing")?;
    let sockets = databases::socket_dir(dir, "mariadbd.sock")?;
    let mut config = format!(
        "# cargo xtask db: a throw-away test server, on loopback only.\n\
         [mysqld]\n\
         datadir = {data}\n\
         socket = {socket}\n\
         pid-file = {dir}/mariadbd.pid\n\
         log-error = {dir}/server.log\n\
         tmpdir = {dir}/tmp\n\
         port = {port}\n\
         bind-address = 127.0.0.1\n\
         skip-name-resolve\n\
         max_connections = 200\n",
        data = dir.join("data").display(),
        socket = sockets.join("mariadbd.sock").display(),
        dir = dir.display(),
    );
    if is_root() {
        config.push_str("user = root\n");
    }
    fs::write(config_file(dir), config).context("cannot write my.cnf")?;
    fs::create_dir_all(dir.join("tmp")).context("cannot create the server's tmpdir")?;
    let mut command = Command::new(install_db);
    command
        .current_dir(dir)
        .arg(format!("--defaults-file={}", config_file(dir).display()))
        .arg("--skip-test-db");
    if is_root() {
        command.arg("--user=root");
    }
    run_captured(&mut command).with_context(|| {
        format!(
            "mariadb-install-db failed; {}",
            process::log_tail(&dir.join("server.log"), 20)
        )
    })?;
    // Run once by the server as it starts, before it accepts connections.
    let init = dir.join("init.sql");
    fs::write(
        &init,
        format!(
            "CREATE USER IF NOT EXISTS '{USER}'@'%' IDENTIFIED BY '{PASSWORD}';\n\
             GRANT ALL PRIVILEGES ON *.* TO '{USER}'@'%' WITH GRANT OPTION;\n\
             CREATE DATABASE IF NOT EXISTS {DATABASE};\n"
        ),
    )?;
    start_server(dir, port, Some(&init))
}

/// Starts the folder's server and waits until its URL answers.
pub fn start(dir: &Path, port: u16) -> Result<()> {
    start_server(dir, port, None)
}

fn start_server(dir: &Path, port: u16, init: Option<&Path>) -> Result<()> {
    let server = server().context("mariadbd is missing")?;
    let client = client().context("the mariadb client is missing")?;
    // Through a shell that leaves it in the background, so the server outlives this program
    // and is no child of it (a test that stops it does not leave a zombie here), in a process
    // group of its own that a Ctrl-C in the terminal does not reach.
    let mut command = Command::new("sh");
    command
        .current_dir(dir)
        .args(["-c", "\"$@\" </dev/null >/dev/null 2>&1 &", "sh"])
        .arg(server)
        .arg(server_argument(dir));
    if let Some(init) = init {
        command.arg(format!("--init-file={}", init.display()));
    }
    run_captured(command.process_group(0))?;
    let log = dir.join("server.log");
    let started = Instant::now();
    loop {
        let answer = check(&client, port);
        if answer.is_ok() {
            return Ok(());
        }
        if process::with_argument(&server_argument(dir)).is_empty() {
            bail!(
                "mariadbd stopped while starting; {}",
                process::log_tail(&log, 20)
            );
        }
        if started.elapsed() > START_TIMEOUT {
            return answer.with_context(|| {
                format!(
                    "mariadbd does not answer after {START_TIMEOUT:?}; {}",
                    process::log_tail(&log, 20)
                )
            });
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Connects to the URL the tests get, over TCP with the password.
fn check(client: &Path, port: u16) -> Result<()> {
    run_captured(
        Command::new(client)
            .arg("--no-defaults")
            .args(["--protocol=TCP", "--host=127.0.0.1", "--connect-timeout=5"])
            .arg(format!("--port={port}"))
            .arg(format!("--user={USER}"))
            .arg(format!("--password={PASSWORD}"))
            .args(["--batch", "--execute=SELECT 1", DATABASE]),
    )
    .map(drop)
}
