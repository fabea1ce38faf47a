//! The claim on a large table: MySQL and MariaDB walk the dispatch index in claim order and read
//! about as many index entries as the claim takes, not the table, and sort nothing. Runs only
//! where the MariaDB/MySQL test server is configured (like the suite's other server variants).

use chrono::Utc;
use serde_json::Value;
use std::time::{Duration, Instant};

use spool::store::mysql::MySqlStore;
use spool::store::queue::Queue;
use spool::store::{Backend, ClaimRequest, Store};

const ROWS: i64 = 1_000_000;
/// Of which pending (due, of the claimed types); the rest are done.
const PENDING: i64 = 200_000;
const LIMIT: usize = 25;

/// Every object in a JSON plan that describes a table access, depth first.
fn tables(plan: &Value) -> Vec<&Value> {
    let mut found = Vec::new();
    match plan {
        Value::Object(map) => {
            for (key, value) in map {
                if key == "table" && value.get("table_name").is_some() {
                    found.push(value);
                }
                found.extend(tables(value));
            }
        }
        Value::Array(items) => items.iter().for_each(|item| found.extend(tables(item))),
        _ => {}
    }
    found
}

/// Whether any node of a JSON plan sorts (MariaDB: a `filesort` node; MySQL: `using_filesort`).
fn sorts(plan: &Value) -> bool {
    match plan {
        Value::Object(map) => map.iter().any(|(key, value)| {
            key == "filesort"
                || (key == "using_filesort" && value == &Value::Bool(true))
                || sorts(value)
        }),
        Value::Array(items) => items.iter().any(sorts),
        _ => false,
    }
}

/// MySQL's `EXPLAIN ANALYZE`: the rows the step reading `index` produced (`actual … rows=N`).
fn analyzed_rows(text: &str, index: &str) -> Option<f64> {
    let line = text.lines().find(|line| line.contains(index))?;
    let actual = &line[line.find("(actual")?..];
    let rows = &actual[actual.find("rows=")? + "rows=".len()..];
    rows.split([' ', ')']).next()?.parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_claim_reads_the_dispatch_index_not_the_table() {
    let Some(fixture) = crate::fresh(Backend::MySql).await else {
        return;
    };
    let started = Instant::now();
    // Application SQL: a million rows, 200,000 of them pending and due, in five priorities and
    // two types; the rest finished. The numbers come from a recursive CTE of 100 rows joined
    // with itself three times (MySQL stops recursion at 1,000 levels by default).
    let pool = sqlx::MySqlPool::connect(&fixture.url).await.unwrap();
    let now = Utc::now().timestamp_millis();
    sqlx::query(
        "INSERT INTO async_task (task_type, payload, status, priority, next_run_at, finished_at) \
         WITH RECURSIVE digits (d) AS (SELECT 0 UNION ALL SELECT d + 1 FROM digits WHERE d < 99), \
              numbers (n) AS (SELECT a.d * 10000 + b.d * 100 + c.d FROM digits a, digits b, digits c) \
         SELECT IF(n % 2 = 0, 'report', 'mail'), JSON_OBJECT('n', n), IF(n < ?, 0, 2), (n * 7919) % 5, \
                ? - 3600000 + (n * 104729) % 3600000, IF(n < ?, NULL, ?) \
         FROM numbers",
    )
    .bind(PENDING)
    .bind(now)
    .bind(PENDING)
    .bind(now)
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query("ANALYZE TABLE async_task")
        .execute(&pool)
        .await
        .unwrap();
    let (rows,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM async_task")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(rows, ROWS);
    let filled = started.elapsed();

    let store = MySqlStore::open(&fixture.url).await.unwrap();
    let request = ClaimRequest {
        owner: "explain".into(),
        limit: LIMIT,
        task_types: vec!["report".into(), "mail".into()],
        now: Utc::now(),
        lease: Duration::from_secs(30),
    };
    let explained = store.explain_claim(&request).await.unwrap();
    println!(
        "{}\n{}",
        explained.version,
        serde_json::to_string_pretty(&explained.json).unwrap()
    );
    if let Some(text) = &explained.analyzed {
        println!("{text}");
    }
    let scans = tables(&explained.json);
    assert_eq!(scans.len(), 1, "one table access");
    let scan = scans[0];
    // The plan names the table by the claim's alias for `async_task`.
    assert_eq!(scan["table_name"], "t");
    assert_eq!(scan["key"], "async_task_dispatch");
    assert!(
        !sorts(&explained.json),
        "the index holds the claim order: nothing is sorted"
    );
    let read = match &explained.analyzed {
        // MariaDB's ANALYZE: rows read per loop, and loops.
        None => scan["r_rows"].as_f64().unwrap() * scan["r_loops"].as_f64().unwrap(),
        Some(text) => analyzed_rows(text, "async_task_dispatch")
            .expect("EXPLAIN ANALYZE names the index scan"),
    };
    assert!(
        read <= (LIMIT + 5) as f64,
        "the claim read {read} index entries for a claim of {LIMIT}"
    );

    // The claim itself, on the same table: in claim order, quickly.
    let mut times = Vec::new();
    for _ in 0..20 {
        let at = Instant::now();
        let claimed = store
            .claim(&ClaimRequest {
                now: Utc::now(),
                ..request.clone()
            })
            .await
            .unwrap();
        times.push(at.elapsed());
        assert_eq!(claimed.len(), LIMIT);
        assert!(
            claimed
                .windows(2)
                .all(|w| (-w[0].priority, w[0].next_run_at, w[0].id)
                    < (-w[1].priority, w[1].next_run_at, w[1].id))
        );
    }
    times.sort();
    println!(
        "filled and analyzed {ROWS} rows in {filled:?}; the claim read {read} index entries; \
         claim of {LIMIT}: median {:?}, max {:?}",
        times[times.len() / 2],
        times[times.len() - 1],
    );
    store.close().await;
    pool.close().await;
    fixture.store.close().await;
    crate::servers::drop_database(&fixture.url);
}

#[test]
fn reads_mysql_explain_analyze() {
    let text = "-> Limit: 25 row(s)  (cost=1.2 rows=25) (actual time=0.05..0.12 rows=25 loops=1)\n    \
                -> Index lookup on async_task using async_task_dispatch (status=0)  (cost=1.2 rows=99000) \
                (actual time=0.04..0.11 rows=27 loops=1)";
    assert_eq!(analyzed_rows(text, "async_task_dispatch"), Some(27.0));
}
