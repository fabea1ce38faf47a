//! Real PostgreSQL and MariaDB servers for the end-to-end tests. `cargo xtask test` starts them
//! and passes their URLs as `SPOOL_TEST_POSTGRES_URL` and `SPOOL_TEST_MYSQL_URL`; by hand,
//! `cargo xtask db start` starts them and writes these to `target/test-databases/urls.env`:
//! `env $(cat target/test-databases/urls.env) cargo test -p spool --test e2e`.
//!
//! - `postgres_url()` / `mysql_url()`: the shared server's URL, or `None` when there is none (a
//!   test then returns early). Under `cargo xtask test` (`SPOOL_TEST_REQUIRE_SERVERS=1`) and in
//!   CI (`CI` set) a missing URL fails the test instead, so a broken set-up never passes as
//!   skipped tests.
//! - `fresh_database(backend)`: a new, empty, uniquely named database on the shared server, and
//!   its URL, so tests on one server run in parallel without seeing each other's tables.
//!   `drop_database(url)` removes one when its test is done with it, so a whole run does not
//!   leave hundreds of databases on the server's disk.
//! - `PrivateServer::new(backend)`: a server of the test's own, for a test that stops and starts
//!   its server (an outage), since stopping the shared one fails every test using it meanwhile.
//! - `stop_server(backend)` / `start_server(backend)`: stop and start the shared server itself
//!   (its data and URL stay), only for a test that is alone in its run.
//!
//! Databases get the server's defaults; on MariaDB 10.11 that is the latin1 character set, so a
//! backend declares utf8mb4 on its own tables, as it must on users' servers.

use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sqlx::Connection;

use crate::util::repo_root;

/// How to get servers, for the message when a test needs them and there are none.
const HOW: &str = "run the tests with `cargo xtask test`, or start the servers with \
                   `cargo xtask db start` and run them as \
                   `env $(cat target/test-databases/urls.env) cargo test ...`";

/// The database engines the tests have servers for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Postgres,
    /// MySQL's protocol and SQL, served by MariaDB.
    MySql,
}

impl Backend {
    fn url_var(self) -> &'static str {
        match self {
            Backend::Postgres => "SPOOL_TEST_POSTGRES_URL",
            Backend::MySql => "SPOOL_TEST_MYSQL_URL",
        }
    }

    /// The server's name for `cargo xtask db`.
    fn server(self) -> &'static str {
        match self {
            Backend::Postgres => "postgres",
            Backend::MySql => "mariadb",
        }
    }

    fn of_url(url: &str) -> Backend {
        if url.starts_with("postgres") {
            Backend::Postgres
        } else if url.starts_with("mysql") || url.starts_with("mariadb") {
            Backend::MySql
        } else {
            panic!("not a PostgreSQL or MySQL URL: {url}")
        }
    }
}

/// Whether a missing server fails the test instead of skipping it.
fn servers_required() -> bool {
    let set = |name| std::env::var(name).is_ok_and(|v| !v.is_empty() && v != "0");
    set("SPOOL_TEST_REQUIRE_SERVERS") || std::env::var_os("CI").is_some()
}

/// The shared server's URL (its database `spool`, login `spool` with the right to create
/// databases), or `None` when no server was started for this run.
pub fn url(backend: Backend) -> Option<String> {
    match std::env::var(backend.url_var()) {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                !servers_required(),
                "{} is not set, and this run needs its server: {HOW}",
                backend.url_var()
            );
            None
        }
    }
}

/// The shared PostgreSQL server's URL, or `None` when there is none (see `url`).
pub fn postgres_url() -> Option<String> {
    url(Backend::Postgres)
}

/// The shared MariaDB server's URL, or `None` when there is none (see `url`).
pub fn mysql_url() -> Option<String> {
    url(Backend::MySql)
}

/// A new, empty database on the shared server, and its URL.
pub fn fresh_database(backend: Backend) -> String {
    let server = url(backend).unwrap_or_else(|| {
        panic!("{} is not set: {HOW}", backend.url_var());
    });
    create_database(&server)
}

/// Creates a uniquely named database on the server of `server_url` (connecting to its
/// database) and returns the URL of the new one.
fn create_database(server_url: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let micros = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros();
    // Unique across the tests of this run, parallel runs and earlier runs on the same server.
    let name = format!(
        "spool_test_{}_{}_{micros}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    if let Err(error) = execute(server_url, &format!("CREATE DATABASE {name}")) {
        panic!("cannot create a database on {server_url}: {error}");
    }
    with_database(server_url, &name)
}

/// Drops the database of `url`, one that `fresh_database` made, with any connections still
/// open on it. A database a failed test leaves stays for a look; so does one this cannot drop:
/// the reason goes to stderr and the test goes on, since its own assertions decide its outcome.
#[allow(
    dead_code,
    reason = "the store suite's many databases are dropped; end-to-end tests make few"
)]
pub fn drop_database(url: &str) {
    let name = database_of(url);
    assert!(
        name.starts_with("spool_test_"),
        "drop_database only drops databases fresh_database made, not {name}"
    );
    let dropped = match Backend::of_url(url) {
        // PostgreSQL drops no database a session is connected to: this runs from the cluster's
        // maintenance database, and FORCE ends connections a test left open.
        Backend::Postgres => execute(
            &with_database(url, "postgres"),
            &format!("DROP DATABASE {name} WITH (FORCE)"),
        ),
        Backend::MySql => execute(url, &format!("DROP DATABASE {name}")),
    };
    if let Err(error) = dropped {
        eprintln!("cannot drop the test database {name}: {error}");
    }
}

/// The database a URL names.
fn database_of(url: &str) -> &str {
    let path = url.split_once('?').map_or(url, |(path, _)| path);
    path.rsplit_once('/').expect("a URL with a database").1
}

/// The URL with another database.
fn with_database(url: &str, database: &str) -> String {
    let (rest, query) = match url.split_once('?') {
        Some((rest, query)) => (rest, Some(query)),
        None => (url, None),
    };
    let (server, _) = rest.rsplit_once('/').expect("a URL with a database");
    match query {
        Some(query) => format!("{server}/{database}?{query}"),
        None => format!("{server}/{database}"),
    }
}

/// Runs SQL statements on the database of `url` in a connection of their own.
pub fn execute(url: &str, sql: &str) -> Result<(), String> {
    let backend = Backend::of_url(url);
    let (url, sql) = (url.to_string(), sql.to_string());
    block_on(move || async move {
        let run = async {
            match backend {
                Backend::Postgres => {
                    let mut conn = sqlx::PgConnection::connect(&url).await?;
                    sqlx::raw_sql(&sql).execute(&mut conn).await?;
                    conn.close().await
                }
                Backend::MySql => {
                    let mut conn = sqlx::MySqlConnection::connect(&url).await?;
                    sqlx::raw_sql(&sql).execute(&mut conn).await?;
                    conn.close().await
                }
            }
        };
        match tokio::time::timeout(Duration::from_secs(30), run).await {
            Ok(result) => result.map_err(|e| e.to_string()),
            Err(_) => Err("no answer within 30 s".into()),
        }
    })
}

/// The answer of a `SELECT COUNT(*)` (or any one-integer query) on the database of `url`, a
/// PostgreSQL, MySQL or `sqlite://` URL, read directly rather than through a host.
pub fn count(url: &str, sql: &str) -> i64 {
    let (url, sql) = (url.to_string(), sql.to_string());
    block_on(move || async move {
        let answer = if url.starts_with("sqlite") {
            let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
            sqlx::query_scalar::<_, i64>(&sql)
                .fetch_one(&mut conn)
                .await
        } else if Backend::of_url(&url) == Backend::Postgres {
            let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
            sqlx::query_scalar::<_, i64>(&sql)
                .fetch_one(&mut conn)
                .await
        } else {
            let mut conn = sqlx::MySqlConnection::connect(&url).await.unwrap();
            sqlx::query_scalar::<_, i64>(&sql)
                .fetch_one(&mut conn)
                .await
        };
        answer.unwrap_or_else(|e| panic!("{sql}: {e}"))
    })
}

/// Whether the database of `url` takes a connection.
pub fn connects(url: &str) -> bool {
    execute(url, "SELECT 1").is_ok()
}

/// Runs the future `make` returns on a runtime of its own, on a thread of its own, so this works
/// from plain and from `#[tokio::test]` tests alike.
fn block_on<T, F>(make: impl FnOnce() -> F + Send + 'static) -> T
where
    T: Send + 'static,
    F: Future<Output = T>,
{
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime")
            .block_on(make())
    })
    .join()
    .expect("the database call does not panic")
}

/// Runs `cargo xtask` with the arguments and returns what it printed on stdout, panicking with
/// its error output when it fails.
fn xtask(args: &[&str]) -> String {
    try_xtask(args).unwrap_or_else(|error| panic!("{error}"))
}

/// Runs `cargo xtask` with the arguments: through the program `cargo xtask test` names in
/// `SPOOL_TEST_XTASK`, else through cargo. What it printed on stdout, or why it failed.
fn try_xtask(args: &[&str]) -> Result<String, String> {
    let mut command = match std::env::var_os("SPOOL_TEST_XTASK") {
        Some(program) => Command::new(program),
        None => {
            let mut command =
                Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
            command.args(["run", "--quiet", "--package", "xtask", "--"]);
            command
        }
    };
    let shown = format!("cargo xtask {}", args.join(" "));
    let output = command
        .current_dir(repo_root())
        .args(args)
        .output()
        .map_err(|error| format!("cannot run {shown}: {error}"))?;
    if !output.status.success() {
        return Err(format!(
            "{shown} failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The URL `cargo xtask db start` printed for the backend.
fn printed_url(backend: Backend, stdout: &str) -> String {
    let prefix = format!("{}=", backend.url_var());
    stdout
        .lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("cargo xtask db start printed no {prefix}: {stdout}"))
        .to_string()
}

/// Stops the shared server (a clean, fast shutdown; connections are cut). Every test using it
/// at the time sees the outage, so only a test alone in its run may do this; others use a
/// `PrivateServer`.
#[allow(dead_code, reason = "for outage tests that run alone")]
pub fn stop_server(backend: Backend) {
    xtask(&["db", "stop", backend.server()]);
}

/// Starts the shared server again, with its data, on its port: its URL is valid again.
#[allow(dead_code, reason = "for outage tests that run alone")]
pub fn start_server(backend: Backend) {
    xtask(&["db", "start", backend.server()]);
}

/// A server of one test's own (its own data folder and port), removed when dropped.
pub struct PrivateServer {
    backend: Backend,
    instance: String,
    url: String,
}

impl PrivateServer {
    /// Makes and starts a new server, or returns `None` when this run has no servers (see `url`).
    pub fn new(backend: Backend) -> Option<PrivateServer> {
        url(backend)?;
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let instance = format!(
            "test-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let stdout = xtask(&[
            "db",
            "start",
            backend.server(),
            "--fresh",
            "--instance",
            &instance,
        ]);
        let url = printed_url(backend, &stdout);
        Some(PrivateServer {
            backend,
            instance,
            url,
        })
    }

    /// The URL of the server's database `spool`; it stays the same across `stop` and `start`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A new, empty database on this server, and its URL.
    pub fn fresh_database(&self) -> String {
        create_database(&self.url)
    }

    /// Stops the server (a clean, fast shutdown; connections are cut).
    pub fn stop(&self) {
        xtask(&[
            "db",
            "stop",
            self.backend.server(),
            "--instance",
            &self.instance,
        ]);
    }

    /// Crashes the server: PostgreSQL's immediate shutdown, MariaDB killed with SIGKILL.
    /// `start` brings it back, recovering from its log.
    pub fn crash(&self) {
        xtask(&[
            "db",
            "crash",
            self.backend.server(),
            "--instance",
            &self.instance,
        ]);
    }

    /// Starts the stopped server again, with its data, on its port.
    pub fn start(&self) {
        xtask(&[
            "db",
            "start",
            self.backend.server(),
            "--instance",
            &self.instance,
        ]);
    }
}

impl Drop for PrivateServer {
    fn drop(&mut self) {
        // Never a panic here: this may run while a failed test unwinds.
        let args = [
            "db",
            "stop",
            self.backend.server(),
            "--instance",
            &self.instance,
            "--remove",
        ];
        if let Err(error) = try_xtask(&args) {
            eprintln!("cannot remove the private server: {error}");
        }
    }
}
