//! The claim on a large table: PostgreSQL walks the dispatch index in claim order and reads
//! about as many rows as it claims, not the table. Runs only where the PostgreSQL test server
//! is configured (like the suite's other server variants).

use chrono::Utc;
use serde_json::Value;
use std::time::{Duration, Instant};

use spool::store::postgres::PgStore;
use spool::store::queue::Queue;
use spool::store::{Backend, ClaimRequest, Store};

const ROWS: i64 = 1_000_000;
/// Of which pending (due, of the claimed types); the rest are done.
const PENDING: i64 = 200_000;
const LIMIT: usize = 25;

/// Every node of a plan, depth first.
fn nodes(plan: &Value) -> Vec<&Value> {
    let mut all = vec![plan];
    for child in plan["Plans"].as_array().into_iter().flatten() {
        all.extend(nodes(child));
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_claim_reads_the_dispatch_index_not_the_table() {
    let Some(fixture) = crate::fresh(Backend::Postgres).await else {
        return;
    };
    let started = Instant::now();
    // Application SQL: a million rows, 200,000 of them pending and due, in five priorities
    // and two types; the rest finished.
    let pool = sqlx::PgPool::connect(&fixture.url).await.unwrap();
    sqlx::query(
        "INSERT INTO async_task (task_type, payload, status, priority, next_run_at, finished_at) \
         SELECT CASE WHEN n % 2 = 0 THEN 'report' ELSE 'mail' END, \
                json_build_object('n', n), \
                CASE WHEN n <= $2 THEN 0 ELSE 2 END, \
                (n * 7919) % 5, \
                spool_now_ms() - 3600000 + (n * 104729) % 3600000, \
                CASE WHEN n <= $2 THEN NULL ELSE spool_now_ms() END \
         FROM generate_series(1, $1) AS n",
    )
    .bind(ROWS)
    .bind(PENDING)
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query("ANALYZE async_task")
        .execute(&pool)
        .await
        .unwrap();
    let filled = started.elapsed();

    let store = PgStore::connect(&fixture.url).await.unwrap();
    let request = ClaimRequest {
        owner: "explain".into(),
        limit: LIMIT,
        task_types: vec!["report".into(), "mail".into()],
        now: Utc::now(),
        lease: Duration::from_secs(30),
    };
    let explained = store.explain_claim(&request).await.unwrap();
    println!("{}", serde_json::to_string_pretty(&explained).unwrap());
    let top = &explained[0];
    let plan = &top["Plan"];
    let all = nodes(plan);
    let types: Vec<&str> = all
        .iter()
        .map(|n| n["Node Type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        ["Limit", "LockRows", "Index Scan"],
        "no sort, no other scan"
    );
    let scan = all[2];
    assert_eq!(scan["Index Name"], "async_task_dispatch");
    assert_eq!(scan["Actual Loops"], 1);
    let read = scan["Actual Rows"].as_u64().unwrap()
        + scan["Rows Removed by Filter"].as_u64().unwrap_or(0);
    assert!(
        read <= LIMIT as u64 + 5,
        "the scan read {read} rows for a claim of {LIMIT}"
    );
    assert_eq!(plan["Actual Rows"], LIMIT as u64);
    let blocks =
        plan["Shared Hit Blocks"].as_u64().unwrap() + plan["Shared Read Blocks"].as_u64().unwrap();
    assert!(blocks < 200, "the claim touched {blocks} blocks");

    // The claim itself, on the same table: one statement, in claim order.
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
        "filled and analyzed {ROWS} rows in {filled:?}; planned {:.3} ms, executed {:.3} ms; \
         claim of {LIMIT}: median {:?}, max {:?}",
        top["Planning Time"].as_f64().unwrap(),
        top["Execution Time"].as_f64().unwrap(),
        times[times.len() / 2],
        times[times.len() - 1],
    );
    store.close().await;
    pool.close().await;
    fixture.store.close().await;
    crate::servers::drop_database(&fixture.url);
}
