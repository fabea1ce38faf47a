//! Tasks written by application SQL, not through the API (docs/sql-enqueue.md): a plain
//! two-column `INSERT` into `async_task` is a due task that a host runs; on PostgreSQL the
//! insert wakes an idle host at once (the host here polls only every minute); a task of a type
//! no host has a plugin for waits pending and shows as "no plugin for type X" in `/health`,
//! `GET /plugins` and `spool plugins`; a payload that is not JSON is refused by the database.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::servers::{self, Backend};
use crate::util::{Host, Workspace};

#[test]
fn an_application_insert_wakes_an_idle_host_at_once_on_postgres() {
    let Some(_) = servers::url(Backend::Postgres) else {
        return;
    };
    let url = servers::fresh_database(Backend::Postgres);
    let ws = Workspace::with_plugins(&["noop"]).on_database(url.clone());
    // Polling once a minute: only the database's notification can make this prompt.
    let host = ws.start(&["--poll-interval", "60s"]);
    std::thread::sleep(Duration::from_millis(500)); // the host is idle, waiting
    let inserted = Instant::now();
    let id = insert(
        &url,
        "INSERT INTO async_task (task_type, payload) VALUES ('noop', '{\"from\": \"sql\"}') RETURNING id",
    );
    let task = host.wait_for_status(id, "done", Duration::from_secs(20));
    let latency = inserted.elapsed();
    assert!(
        latency < Duration::from_secs(10),
        "picked up after {latency:?}, not at the next poll"
    );
    assert_eq!(task["result"]["from"], "sql", "{task:#}");
    assert_rows_without_a_plugin_wait(&host, &url);
    assert!(
        servers::execute(
            &url,
            "INSERT INTO async_task (task_type, payload) VALUES ('noop', 'not json')"
        )
        .is_err()
    );
}

#[test]
fn an_application_insert_is_run_on_mariadb() {
    let Some(_) = servers::url(Backend::MySql) else {
        return;
    };
    let url = servers::fresh_database(Backend::MySql);
    let ws = Workspace::with_plugins(&["noop"]).on_database(url.clone());
    let host = ws.start(&["--poll-interval", "200ms"]);
    servers::execute(
        &url,
        "INSERT INTO async_task (task_type, payload) VALUES ('noop', '{\"from\": \"sql\"}')",
    )
    .unwrap();
    let id = insert(&url, "SELECT MAX(id) FROM async_task");
    let task = host.wait_for_status(id, "done", Duration::from_secs(20));
    assert_eq!(task["result"]["from"], "sql", "{task:#}");
    assert_rows_without_a_plugin_wait(&host, &url);
    assert!(
        servers::execute(
            &url,
            "INSERT INTO async_task (task_type, payload) VALUES ('noop', 'not json')"
        )
        .is_err()
    );
}

#[test]
fn an_application_insert_is_run_on_sqlite() {
    let ws = Workspace::with_plugins(&["noop"]);
    let host = ws.start(&[]);
    let url = ws.database_url();
    let id = insert(
        &url,
        "INSERT INTO async_task (task_type, payload) VALUES ('noop', '{\"from\": \"sql\"}') RETURNING id",
    );
    let task = host.wait_for_status(id, "done", Duration::from_secs(20));
    assert_eq!(task["result"]["from"], "sql", "{task:#}");
    assert_rows_without_a_plugin_wait(&host, &url);
    let refused = insert_result(
        &url,
        "INSERT INTO async_task (task_type, payload) VALUES ('noop', 'not json') RETURNING id",
    );
    assert!(refused.is_err(), "a payload that is not JSON is refused");
}

/// Inserts a task of a type no plugin serves and checks every place that says why it waits.
fn assert_rows_without_a_plugin_wait(host: &Host, url: &str) {
    let sql = "INSERT INTO async_task (task_type, payload) VALUES ('mystery', '{}')";
    if url.starts_with("sqlite") {
        insert(url, &format!("{sql} RETURNING id"));
    } else {
        servers::execute(url, sql).unwrap();
    }
    let reason = "no plugin for type mystery";
    let health = host.eventually("the waiting type in /health", || {
        let health = host.get("/health").1;
        (health["waiting_without_plugin"]["mystery"]["pending"] == 1).then_some(health)
    });
    assert!(
        health["waiting_without_plugin"]["mystery"]["reason"]
            .as_str()
            .unwrap()
            .contains(reason),
        "{health:#}"
    );
    let plugins = host.get("/plugins").1;
    let unloaded = plugins["unloaded"].as_array().unwrap();
    assert!(
        unloaded
            .iter()
            .any(|u| u["task_type"] == "mystery"
                && u["error"].as_str().unwrap_or("").contains(reason)),
        "{plugins:#}"
    );
    let output = Command::new(env!("CARGO_BIN_EXE_spool"))
        .arg("plugins")
        .env("SPOOL_URL", &host.url)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success() && text.contains(reason), "{text}");
    std::thread::sleep(Duration::from_millis(300));
    let still = host.get("/health").1;
    assert_eq!(
        still["waiting_without_plugin"]["mystery"]["pending"], 1,
        "it waits, untouched: {still:#}"
    );
}

fn insert(url: &str, sql: &str) -> i64 {
    insert_result(url, sql).unwrap()
}

/// Runs one statement returning one integer, directly on the database (as an application).
fn insert_result(url: &str, sql: &str) -> Result<i64, sqlx::Error> {
    use sqlx::Connection;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        if url.starts_with("postgres") {
            let mut db = sqlx::PgConnection::connect(url).await?;
            sqlx::query_scalar::<_, i64>(sql).fetch_one(&mut db).await
        } else if url.starts_with("mysql") {
            let mut db = sqlx::MySqlConnection::connect(url).await?;
            sqlx::query_scalar::<_, i64>(sql).fetch_one(&mut db).await
        } else {
            let mut db = sqlx::SqliteConnection::connect(url).await?;
            sqlx::query_scalar::<_, i64>(sql).fetch_one(&mut db).await
        }
    })
}
