//! A fresh, empty database per test on the throw-away servers `cargo xtask test` starts (their
//! URLs in `SPOOL_TEST_POSTGRES_URL` and `SPOOL_TEST_MYSQL_URL`), or a temporary SQLite file.
//!
//! Without a server's URL the tests on that server are skipped, unless they are required:
//! in CI (`CI` set) and under `cargo xtask test` (`SPOOL_TEST_REQUIRE_SERVERS=1`) a missing
//! URL fails the test.

use std::sync::atomic::{AtomicU32, Ordering};

/// Which database a test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Sqlite,
    Postgres,
    MySql,
}

/// A fresh database's URL, and what keeps it alive (the SQLite file's folder).
pub struct Fresh {
    pub url: String,
    pub _dir: Option<tempfile::TempDir>,
}

/// A new, empty database of `kind`, or None when that server is not configured (outside CI).
pub async fn fresh(kind: Kind) -> Option<Fresh> {
    let var = match kind {
        Kind::Sqlite => {
            let dir = tempfile::tempdir().expect("a temporary folder");
            let url = format!("sqlite://{}", dir.path().join("app.db").display());
            return Some(Fresh {
                url,
                _dir: Some(dir),
            });
        }
        Kind::Postgres => "SPOOL_TEST_POSTGRES_URL",
        Kind::MySql => "SPOOL_TEST_MYSQL_URL",
    };
    let server = match std::env::var(var) {
        Ok(url) if !url.is_empty() => url,
        _ if servers_required() => {
            panic!(
                "{var} is not set: run the tests with `cargo xtask test`, which starts the database servers"
            )
        }
        _ => {
            eprintln!(
                "skipped: {var} is not set (`cargo xtask test` starts the servers and sets it)"
            );
            return None;
        }
    };
    let name = database_name();
    let statement = format!("CREATE DATABASE {name}");
    match kind {
        Kind::Postgres => {
            let mut admin = connect::<sqlx::Postgres>(&server).await;
            sqlx::query(&statement)
                .execute(&mut admin)
                .await
                .expect("CREATE DATABASE");
        }
        _ => {
            let mut admin = connect::<sqlx::MySql>(&server).await;
            sqlx::query(&statement)
                .execute(&mut admin)
                .await
                .expect("CREATE DATABASE");
        }
    }
    Some(Fresh {
        url: with_database(&server, &name),
        _dir: None,
    })
}

/// Whether a missing server fails the test instead of skipping it: in CI and under `cargo xtask
/// test` (the same rule as the end-to-end tests' `tests/e2e/servers.rs`).
fn servers_required() -> bool {
    let set = |name| std::env::var(name).is_ok_and(|v| !v.is_empty() && v != "0");
    set("SPOOL_TEST_REQUIRE_SERVERS") || std::env::var_os("CI").is_some()
}

async fn connect<DB: sqlx::Database>(url: &str) -> DB::Connection {
    use sqlx::Connection;
    DB::Connection::connect(url)
        .await
        .unwrap_or_else(|e| panic!("connecting to {url}: {e}"))
}

/// A database name no other test (of this run or another) uses.
fn database_name() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!(
        "client_{}_{}_{nanos}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// `url` with its database (the path) replaced by `name`, keeping any query string.
fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let authority_start = base.find("://").map_or(0, |i| i + 3);
    let host_end = base[authority_start..]
        .find('/')
        .map_or(base.len(), |i| authority_start + i);
    let mut out = format!("{}/{name}", &base[..host_end]);
    if let Some(query) = query {
        out.push('?');
        out.push_str(query);
    }
    out
}

#[test]
fn database_names_replace_the_path() {
    assert_eq!(
        with_database("postgres://u:p@127.0.0.1:5/spool", "x"),
        "postgres://u:p@127.0.0.1:5/x"
    );
    assert_eq!(
        with_database("mysql://u:p@h:5/spool?ssl-mode=disabled", "x"),
        "mysql://u:p@h:5/x?ssl-mode=disabled"
    );
    assert_eq!(with_database("postgres://h:5", "x"), "postgres://h:5/x");
}
