//! The throw-away PostgreSQL and MariaDB servers the tests run against, as a whole: where each
//! lives, its port and URL, starting and stopping it, the `cargo xtask db` command, and the
//! servers of a `cargo xtask test` run. What differs between the engines is in `postgres.rs`
//! and `mariadb.rs`.
//!
//! Every server is an *instance*: a folder under `target/test-databases` holding its data (in
//! `data`), its configuration, its log and the file `port`. The shared instances, `postgres`
//! and `mariadb`, are the ones the suite's URLs point at; tests that stop a server start
//! private instances (`private/NAME/<engine>`, `--instance NAME`) so their outage never
//! reaches other tests. A server listens on 127.0.0.1 only, on a port picked when its folder is
//! created (below the ephemeral range, never a default port) and kept for its life, so a URL
//! stays valid across `db stop` and `db start`. System-wide instances are never touched: a
//! server's processes are found by its folder (on the command line, or as working folder), not
//! by name or pid file.
//!
//! The URLs carry one login on both engines, `spool` / `spool`: in PostgreSQL a role with
//! CREATEDB that owns the database `spool`; in MariaDB a user with every privilege on every
//! database (and the database `spool`). Settings stay at the engines' defaults (fsync on)
//! except loopback, port, socket and pid file locations, and `max_connections = 200` for tests
//! that run several hosts at once.

use crate::process;
use crate::{apt, mariadb, postgres};
use anyhow::{Context, Result, bail};
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The login and database every server has.
pub const USER: &str = "spool";
pub const PASSWORD: &str = "spool";
pub const DATABASE: &str = "spool";

/// How long a server gets to stop on its own before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(60);

/// The environment variable that tells the tests they must have the servers (a missing URL is
/// then a failure, not a skipped test).
const REQUIRE_VAR: &str = "SPOOL_TEST_REQUIRE_SERVERS";
/// The environment variable with the path of this program, which the tests run as
/// `$SPOOL_TEST_XTASK db stop|start ...` to stop and start servers.
const XTASK_VAR: &str = "SPOOL_TEST_XTASK";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    Postgres,
    Mariadb,
}

impl Engine {
    const ALL: [Engine; 2] = [Engine::Postgres, Engine::Mariadb];

    fn name(self) -> &'static str {
        match self {
            Engine::Postgres => "postgres",
            Engine::Mariadb => "mariadb",
        }
    }

    fn parse(name: &str) -> Option<Engine> {
        match name {
            "postgres" | "postgresql" | "pg" => Some(Engine::Postgres),
            "mariadb" | "mysql" => Some(Engine::Mariadb),
            _ => None,
        }
    }

    /// The environment variable that carries the shared server's URL to the tests.
    fn url_var(self) -> &'static str {
        match self {
            Engine::Postgres => "SPOOL_TEST_POSTGRES_URL",
            Engine::Mariadb => "SPOOL_TEST_MYSQL_URL",
        }
    }

    fn url(self, port: u16) -> String {
        let scheme = match self {
            Engine::Postgres => "postgres",
            Engine::Mariadb => "mysql",
        };
        format!("{scheme}://{USER}:{PASSWORD}@127.0.0.1:{port}/{DATABASE}")
    }

    fn installed(self) -> bool {
        match self {
            Engine::Postgres => postgres::installed(),
            Engine::Mariadb => mariadb::installed(),
        }
    }

    fn packages(self) -> &'static [&'static str] {
        match self {
            Engine::Postgres => postgres::PACKAGES,
            Engine::Mariadb => mariadb::PACKAGES,
        }
    }

    /// Makes a new server in the empty folder and leaves it running.
    fn create(self, dir: &Path, port: u16) -> Result<()> {
        match self {
            Engine::Postgres => postgres::create(dir, port),
            Engine::Mariadb => mariadb::create(dir, port),
        }
    }

    /// Starts the server of an existing folder and waits until its URL answers.
    fn start(self, dir: &Path, port: u16) -> Result<()> {
        match self {
            Engine::Postgres => postgres::start(dir, port),
            Engine::Mariadb => mariadb::start(dir, port),
        }
    }

    /// The argument on the command line of the folder's server process, and only of it.
    fn server_argument(self, dir: &Path) -> String {
        match self {
            Engine::Postgres => postgres::server_argument(dir),
            Engine::Mariadb => mariadb::server_argument(dir),
        }
    }

    /// The signal that shuts the server down cleanly without waiting for its clients.
    fn stop_signal(self) -> &'static str {
        match self {
            Engine::Postgres => postgres::STOP_SIGNAL,
            Engine::Mariadb => mariadb::STOP_SIGNAL,
        }
    }

    /// The signal that ends the server as a crash would, leaving recovery to the next start.
    fn crash_signal(self) -> &'static str {
        match self {
            Engine::Postgres => postgres::CRASH_SIGNAL,
            Engine::Mariadb => mariadb::CRASH_SIGNAL,
        }
    }
}

/// Installs the servers' Debian packages when their programs are missing.
pub fn ensure_installed() -> Result<()> {
    ensure_engines_installed(&Engine::ALL)
}

fn ensure_engines_installed(engines: &[Engine]) -> Result<()> {
    let missing: Vec<&str> = engines
        .iter()
        .filter(|engine| !engine.installed())
        .flat_map(|engine| engine.packages().iter().copied())
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    apt::install(
        &missing,
        "the tests run against PostgreSQL and MariaDB servers",
    )?;
    for engine in engines {
        if !engine.installed() {
            bail!(
                "the {} server's programs are still missing after installing {}",
                engine.name(),
                engine.packages().join(" ")
            );
        }
    }
    Ok(())
}

/// The folder all test servers live in.
fn servers_root(root: &Path) -> PathBuf {
    root.join("target/test-databases")
}

/// The file with the shared servers' URLs, as `KEY=VALUE` lines.
fn urls_file(root: &Path) -> PathBuf {
    servers_root(root).join("urls.env")
}

/// One server: its engine and its folder.
struct Instance {
    engine: Engine,
    dir: PathBuf,
}

impl Instance {
    /// The server the tests' URLs point at.
    fn shared(root: &Path, engine: Engine) -> Instance {
        Instance {
            engine,
            dir: servers_root(root).join(engine.name()),
        }
    }

    /// A server of its own, for a test that stops it.
    fn private(root: &Path, name: &str, engine: Engine) -> Instance {
        Instance {
            engine,
            dir: servers_root(root)
                .join("private")
                .join(name)
                .join(engine.name()),
        }
    }

    /// Every instance whose folder exists: the shared ones and the private ones.
    fn all(root: &Path) -> Vec<Instance> {
        let mut instances: Vec<Instance> = Engine::ALL
            .iter()
            .map(|&engine| Instance::shared(root, engine))
            .collect();
        if let Ok(entries) = fs::read_dir(servers_root(root).join("private")) {
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                for engine in Engine::ALL {
                    instances.push(Instance::private(root, &name, engine));
                }
            }
        }
        instances.retain(|instance| instance.dir.exists());
        instances
    }

    /// The server's port, once its folder is complete (the file `port` is written last).
    fn port(&self) -> Option<u16> {
        fs::read_to_string(self.dir.join("port"))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    fn url(&self) -> Option<String> {
        self.port().map(|port| self.engine.url(port))
    }

    /// Serializes starting and stopping this server across processes (tests run several of
    /// these commands at once); the lock lasts as long as the file is open.
    fn lock(&self) -> Result<File> {
        let path = self.dir.with_extension("lock");
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        let file = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        file.lock()
            .with_context(|| format!("cannot lock {}", path.display()))?;
        Ok(file)
    }

    /// The running server processes of this folder.
    fn processes(&self) -> Vec<u32> {
        process::with_argument(&self.engine.server_argument(&self.dir))
    }

    /// Starts the server and returns its URL: a new one in a new folder on a new port when
    /// `fresh` or when there is none yet, otherwise the folder's own server on its own port.
    fn start(&self, fresh: bool) -> Result<String> {
        let _lock = self.lock()?;
        let engine = self.engine.name();
        let dir = &self.dir;
        match self.port() {
            Some(port) if !fresh => {
                if !self.processes().is_empty() {
                    eprintln!("the {engine} server in {} is running", dir.display());
                } else {
                    // What a killed server left behind goes first.
                    self.stop_locked()?;
                    if !process::port_free(port) {
                        bail!(
                            "cannot start the {engine} server in {}: another process listens \
                             on its port {port} (`cargo xtask db start --fresh` makes a new \
                             server on another port)",
                            dir.display()
                        );
                    }
                    eprintln!(
                        "starting the {engine} server in {} on 127.0.0.1:{port}",
                        dir.display()
                    );
                    if let Err(error) = self.engine.start(dir, port) {
                        let _ = self.stop_locked();
                        return Err(error);
                    }
                }
                Ok(self.engine.url(port))
            }
            _ => {
                // Whatever a previous, interrupted run left in the folder goes first.
                self.stop_locked()?;
                if dir.exists() {
                    fs::remove_dir_all(dir)
                        .with_context(|| format!("cannot remove {}", dir.display()))?;
                }
                fs::create_dir_all(dir)
                    .with_context(|| format!("cannot create {}", dir.display()))?;
                let port = process::free_port()?;
                eprintln!(
                    "creating a {engine} server in {} on 127.0.0.1:{port}",
                    dir.display()
                );
                if let Err(error) = self.engine.create(dir, port) {
                    let _ = self.stop_locked();
                    return Err(error);
                }
                fs::write(dir.join("port"), format!("{port}\n"))?;
                Ok(self.engine.url(port))
            }
        }
    }

    fn stop(&self) -> Result<()> {
        let _lock = self.lock()?;
        self.stop_locked()
    }

    /// Every live process of the server: the server and, with PostgreSQL, its children, also
    /// those a killed server left behind.
    fn all_processes(&self) -> Vec<u32> {
        let mut pids = self.processes();
        let data = self.dir.join("data");
        // A working folder is read as the real path, without links.
        pids.extend(process::working_in(
            &fs::canonicalize(&data).unwrap_or(data),
        ));
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    /// Crashes the server (see [`Engine::crash_signal`]); `start` brings it back with its data.
    fn crash(&self) -> Result<()> {
        let _lock = self.lock()?;
        self.end_locked(self.engine.crash_signal(), "crashing")
    }

    /// Asks the server to shut down, and kills what is left of it after `STOP_TIMEOUT`.
    fn stop_locked(&self) -> Result<()> {
        self.end_locked(self.engine.stop_signal(), "stopping")
    }

    /// Sends the server `signal`, and kills what is left of it after `STOP_TIMEOUT`.
    fn end_locked(&self, signal: &str, doing: &str) -> Result<()> {
        let pids = self.all_processes();
        if pids.is_empty() {
            return Ok(());
        }
        let engine = self.engine.name();
        eprintln!("{doing} the {engine} server in {}", self.dir.display());
        for pid in self.processes() {
            process::signal(pid, signal);
        }
        if process::wait_ended(&pids, STOP_TIMEOUT) {
            return Ok(());
        }
        eprintln!("the {engine} server did not stop within {STOP_TIMEOUT:?}; killing it");
        for &pid in &pids {
            process::signal(pid, "KILL");
        }
        if !process::wait_ended(&pids, Duration::from_secs(10)) {
            bail!(
                "cannot stop the {engine} server in {} (processes {pids:?})",
                self.dir.display()
            );
        }
        Ok(())
    }

    /// Stops the server and deletes its folder.
    fn remove(&self) -> Result<()> {
        let _lock = self.lock()?;
        self.stop_locked()?;
        if self.dir.exists() {
            fs::remove_dir_all(&self.dir)
                .with_context(|| format!("cannot remove {}", self.dir.display()))?;
        }
        Ok(())
    }
}

/// Stops every server under `target/test-databases` and deletes the private ones.
fn stop_everything(root: &Path) -> Result<()> {
    let mut failures = Vec::new();
    for instance in Instance::all(root) {
        if let Err(error) = instance.stop() {
            failures.push(format!("{error:#}"));
        }
    }
    let private = servers_root(root).join("private");
    if failures.is_empty() && private.exists() {
        fs::remove_dir_all(&private)
            .with_context(|| format!("cannot remove {}", private.display()))?;
    }
    let _ = fs::remove_file(urls_file(root));
    if !failures.is_empty() {
        bail!("{}", failures.join("\n"));
    }
    Ok(())
}

/// Writes the shared servers' URLs to `target/test-databases/urls.env`, with this program's
/// path, through which the tests stop and start servers without going through cargo.
fn write_urls(root: &Path) -> Result<PathBuf> {
    let mut text: String = Engine::ALL
        .iter()
        .filter_map(|&engine| {
            let url = Instance::shared(root, engine).url()?;
            Some(format!("{}={url}\n", engine.url_var()))
        })
        .collect();
    if let Ok(xtask) = std::env::current_exe() {
        text.push_str(&format!("{XTASK_VAR}={}\n", xtask.display()));
    }
    let path = urls_file(root);
    fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

/// Starts the instances at once (the two engines initialize in parallel) and returns their
/// URLs in the same order.
fn start_all(instances: &[Instance], fresh: bool) -> Result<Vec<String>> {
    std::thread::scope(|scope| {
        let started: Vec<_> = instances
            .iter()
            .map(|instance| scope.spawn(move || instance.start(fresh)))
            .collect();
        instances
            .iter()
            .zip(started)
            .map(|(instance, handle)| {
                let result = handle.join().expect("starting a server does not panic");
                result.with_context(|| {
                    format!(
                        "cannot start the {} test server in {}",
                        instance.engine.name(),
                        instance.dir.display()
                    )
                })
            })
            .collect()
    })
}

/// The servers of one `cargo xtask test` run: fresh shared servers, stopped (with any private
/// ones the tests left) when this value drops, however the suite ends. A run that was killed
/// leaves its servers running; the next run stops them first.
pub struct SuiteServers {
    root: PathBuf,
    env: Vec<(String, String)>,
    /// Held for the whole run: a second run in the same tree waits instead of replacing this
    /// run's servers under it.
    _lock: File,
}

impl SuiteServers {
    pub fn start(root: &Path) -> Result<SuiteServers> {
        let lock = suite_lock(root)?;
        let mut servers = SuiteServers {
            root: root.to_path_buf(),
            env: Vec::new(),
            _lock: lock,
        };
        stop_everything(root).context("cannot stop the test servers of a previous run")?;
        let instances: Vec<Instance> = Engine::ALL
            .iter()
            .map(|&engine| Instance::shared(root, engine))
            .collect();
        let urls = start_all(&instances, true)
            .context("the end-to-end tests need both database servers")?;
        for (instance, url) in instances.iter().zip(urls) {
            eprintln!("{}={url}", instance.engine.url_var());
            servers.env.push((instance.engine.url_var().into(), url));
        }
        write_urls(root)?;
        let xtask = std::env::current_exe().context("cannot find this program's path")?;
        servers
            .env
            .push((XTASK_VAR.into(), xtask.to_string_lossy().into_owned()));
        servers.env.push((REQUIRE_VAR.into(), "1".into()));
        Ok(servers)
    }

    /// The environment the tests get: the servers' URLs, how to stop and start them, and that
    /// they are required.
    pub fn env(&self) -> impl Iterator<Item = (&str, &str)> {
        self.env.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

impl Drop for SuiteServers {
    fn drop(&mut self) {
        if let Err(error) = stop_everything(&self.root) {
            eprintln!("cannot stop the test database servers: {error:#}");
        }
    }
}

/// The lock one `cargo xtask test` run holds on the test servers.
fn suite_lock(root: &Path) -> Result<File> {
    let dir = servers_root(root);
    fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let path = dir.join("suite.lock");
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    if file.try_lock().is_err() {
        eprintln!(
            "another `cargo xtask test` in this tree is using the test database servers; \
             waiting for it to end"
        );
        file.lock()
            .with_context(|| format!("cannot lock {}", path.display()))?;
    }
    Ok(file)
}

/// `cargo xtask db start|stop|crash [postgres|mariadb] [--instance NAME] [--fresh] [--remove]`.
pub fn command(root: &Path, args: &[String]) -> Result<()> {
    let mut action = None;
    let mut engines = Vec::new();
    let mut instance = None;
    let mut fresh = false;
    let mut remove = false;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "start" | "stop" | "crash" if action.is_none() => action = Some(arg.as_str()),
            "--fresh" => fresh = true,
            "--remove" => remove = true,
            "--instance" => {
                let name = args.next().context("--instance needs a name")?;
                let valid = !name.is_empty()
                    && name.len() <= 64
                    && name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
                if !valid {
                    bail!("an instance name is 1 to 64 letters, digits, `-` or `_`: {name:?}");
                }
                instance = Some(name.as_str());
            }
            other => match Engine::parse(other) {
                Some(engine) if !engines.contains(&engine) => engines.push(engine),
                _ => bail!("unknown argument {other:?}\n{}", crate::USAGE),
            },
        }
    }
    let all = engines.is_empty();
    if all {
        engines = Engine::ALL.to_vec();
    }
    let instances: Vec<Instance> = engines
        .iter()
        .map(|&engine| match instance {
            Some(name) => Instance::private(root, name, engine),
            None => Instance::shared(root, engine),
        })
        .collect();
    match action {
        Some("start") => {
            ensure_engines_installed(&engines)?;
            let urls = start_all(&instances, fresh)?;
            for (instance, url) in instances.iter().zip(urls) {
                println!("{}={url}", instance.engine.url_var());
            }
            if instance.is_none() {
                let path = write_urls(root)?;
                eprintln!("the URLs are in {}", path.display());
            }
            Ok(())
        }
        Some("stop") if all && instance.is_none() => {
            // Every server, including private ones a test run left behind.
            stop_everything(root)?;
            if remove {
                for instance in &instances {
                    instance.remove()?;
                }
            }
            Ok(())
        }
        Some("stop") => {
            for instance in &instances {
                if remove {
                    instance.remove()?;
                } else {
                    instance.stop()?;
                }
            }
            if let Some(name) = instance.filter(|_| remove) {
                // The private instance's folder goes once none of its servers is left.
                let dir = servers_root(root).join("private").join(name);
                let left = Engine::ALL
                    .iter()
                    .any(|&engine| Instance::private(root, name, engine).dir.exists());
                if !left {
                    let _ = fs::remove_dir_all(dir);
                }
            }
            Ok(())
        }
        Some("crash") => {
            for instance in &instances {
                instance.crash()?;
            }
            Ok(())
        }
        _ => bail!("{}", crate::USAGE),
    }
}

/// The folder for a server's Unix socket: the server's own folder, unless the socket's path
/// would be longer than a Unix socket path may be (107 bytes); then a folder in the system's
/// temporary folder, named after the server's folder.
pub fn socket_dir(dir: &Path, socket_name: &str) -> Result<PathBuf> {
    if dir.as_os_str().len() + 1 + socket_name.len() <= 100 {
        return Ok(dir.to_path_buf());
    }
    // FNV-1a: stable across builds, so every command finds the same folder.
    let hash = dir
        .as_os_str()
        .as_encoded_bytes()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
    let sockets = std::env::temp_dir().join(format!("spool-db-{hash:016x}"));
    fs::create_dir_all(&sockets).with_context(|| format!("cannot create {}", sockets.display()))?;
    Ok(sockets)
}
