//! Drains beside a million old finished rows: does work the table's size could slow down slow
//! the queue down?
//!
//! - `--only archive`: moving those rows to the archive while the drain runs (the archiver off,
//!   then on).
//! - `--only health`: a monitoring client polling the host every 50 ms while the drain runs:
//!   none, `GET /metrics`, then `GET /health` (which must not scan the table per request).
//!
//! Each measurement gets a fresh database holding `--old N` finished tasks (default 1,000,000;
//! done, finished 60 days ago, so past the default `archive_after` of 30 days) and a backlog of
//! `--drain N` due no-op tasks. One host (default settings but `concurrency`) drains the
//! backlog, timed as the main drain is (first claim to nothing pending or running). The report
//! gives the drain rates, their ratios to the first, and how many rows the archiver moved.

use std::time::Duration;

use super::database::{Direct, Fresh, Server};
use super::{fill, load, noop_wasm, start_host_with, stop};

/// How many old finished rows: `--old N`, else 1,000,000 (50,000 with `--quick`).
pub fn old_rows() -> usize {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    args.iter()
        .position(|a| a == "--old")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(if quick { 50_000 } else { 1_000_000 })
}

/// One drain beside old rows.
struct Beside {
    rate: f64,
    seconds: f64,
    /// Rows in the archive when the drain ended.
    archived: i64,
}

/// Inserts `n` done tasks that finished 60 days ago, with one statement per million rows (a
/// cross join of digit tables, the same SQL on every backend but for the payload's type).
async fn fill_old(fresh: &Fresh, server: &Server, n: usize) {
    let sql = fresh.pool().await;
    let long_ago = chrono::Utc::now().timestamp_millis() - 60 * 86_400_000;
    let payload = match server {
        Server::Postgres(_) => "CAST('{}' AS JSON)",
        _ => "'{}'",
    };
    let digits = "(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 \
                  UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 \
                  UNION ALL SELECT 8 UNION ALL SELECT 9)";
    let million = (0..6)
        .map(|i| format!("{digits} AS d{i}"))
        .collect::<Vec<_>>()
        .join(", ");
    let mut left = n;
    while left > 0 {
        let rows = left.min(1_000_000);
        execute(
            &sql,
            &format!(
            "INSERT INTO async_task (task_type, payload, status, priority, retry_count, max_retry, \
                 next_run_at, attempts, finished_at, result, created_at, updated_at) \
             SELECT 'old', {payload}, 2, 0, 0, 3, {long_ago}, 1, {long_ago}, 'true', {long_ago}, {long_ago} \
             FROM {million} LIMIT {rows}"
            ),
        )
        .await;
        left -= rows;
    }
    sql.close().await;
}

/// Runs one statement on the benchmark's own connections.
async fn execute(sql: &Direct, statement: &str) {
    let result = match sql {
        Direct::Sqlite(pool) => sqlx::query(statement).execute(pool).await.map(drop),
        Direct::Postgres(pool) => sqlx::query(statement).execute(pool).await.map(drop),
        Direct::MySql(pool) => sqlx::query(statement).execute(pool).await.map(drop),
    };
    result.unwrap_or_else(|e| panic!("`{statement}` failed: {e}"));
}

/// What runs beside the drain.
#[derive(Clone, Copy)]
enum Alongside {
    Nothing,
    Archiver,
    /// A client polling this path every 50 ms.
    Poller(&'static str),
}

async fn drain_beside(
    server: &Server,
    old: usize,
    n: usize,
    alongside: Alongside,
    concurrency: Option<usize>,
) -> Beside {
    let archiving = matches!(alongside, Alongside::Archiver);
    let fresh = server.fresh().await;
    // The backlog first (this also creates the tables), then the old rows.
    fill(&fresh, n, false).await;
    fill_old(&fresh, server, old).await;
    fresh.analyze().await;
    let noop = std::fs::read(noop_wasm()).unwrap();
    let host = start_host_with(fresh.dir.path(), &fresh.url, &[("noop", &noop)], |s| {
        s.concurrency = concurrency;
        s.archive = Some(archiving);
        s.archive_interval = Some(Duration::from_secs(1));
    })
    .await;
    let poller = match alongside {
        Alongside::Poller(path) => Some(tokio::spawn(poll(format!("http://{}{path}", host.addr)))),
        _ => None,
    };
    let sql = fresh.pool().await;
    while sql.any_unfinished().await {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if let Some(poller) = poller {
        poller.abort();
    }
    let end_ms = chrono::Utc::now().timestamp_micros() as f64 / 1000.0;
    let first_claim = sql
        .int("SELECT MIN(attempted_at) FROM async_task WHERE task_type = 'noop'")
        .await
        .expect("tasks ran");
    let archived = sql
        .int("SELECT COUNT(*) FROM async_task_archive")
        .await
        .unwrap_or(0);
    let not_done = sql
        .int("SELECT COUNT(*) FROM async_task WHERE task_type = 'noop' AND status <> 2")
        .await;
    assert_eq!(not_done, Some(0), "every task of the drain succeeds");
    sql.close().await;
    stop(host).await;
    fresh.remove().await;
    let seconds = (end_ms - first_claim as f64) / 1000.0;
    Beside {
        rate: n as f64 / seconds,
        seconds,
        archived,
    }
}

/// Asks for `url` every 50 ms, as a monitoring probe does, until aborted; every answer is read
/// whole.
async fn poll(url: String) {
    let client = reqwest::Client::new();
    let mut ticker = tokio::time::interval(Duration::from_millis(50));
    loop {
        ticker.tick().await;
        if let Ok(response) = client.get(&url).send().await {
            let _ = response.bytes().await;
        }
    }
}

/// The heading both reports start with.
fn heading(n: usize, old: usize, concurrency: Option<usize>) {
    let concurrency_shown = concurrency.unwrap_or(super::default_concurrency().0);
    println!(
        "drain of {n} no-op tasks beside {old} finished rows 60 days old, one host (concurrency {concurrency_shown}):"
    );
}

/// `--only health`: the drain alone, beside a `/metrics` poller, beside a `/health` poller.
pub async fn report_pollers(server: &Server, n: usize, concurrency: Option<usize>) {
    let old = old_rows();
    heading(n, old, concurrency);
    let alone = drain_beside(server, old, n, Alongside::Nothing, concurrency).await;
    println!(
        "  no poller:         {:>9.0} tasks/s  ({:.1} s)  [load {}]",
        alone.rate,
        alone.seconds,
        load()
    );
    for path in ["/metrics", "/health"] {
        let polled = drain_beside(server, old, n, Alongside::Poller(path), concurrency).await;
        println!(
            "  {path:<8} every 50 ms: {:>9.0} tasks/s  ({:.1} s; {:.2}× no poller)  [load {}]",
            polled.rate,
            polled.seconds,
            polled.rate / alone.rate,
            load()
        );
    }
}

/// `--only archive`: the drain with the archiver off, then on.
pub async fn report(server: &Server, n: usize, concurrency: Option<usize>) {
    let old = old_rows();
    heading(n, old, concurrency);
    let off = drain_beside(server, old, n, Alongside::Nothing, concurrency).await;
    println!(
        "  archiver off: {:>9.0} tasks/s  ({:.1} s)  [load {}]",
        off.rate,
        off.seconds,
        load()
    );
    let on = drain_beside(server, old, n, Alongside::Archiver, concurrency).await;
    println!(
        "  archiver on:  {:>9.0} tasks/s  ({:.1} s; {:.2}× archiver off); it moved {} rows to the archive meanwhile ({:.0} rows/s)  [load {}]",
        on.rate,
        on.seconds,
        on.rate / off.rate,
        on.archived,
        on.archived as f64 / on.seconds,
        load()
    );
}
