//! PostgreSQL: a task table nobody analyzed gets its first statistics from the host once it
//! holds a backlog (host/src/store/postgres/statistics.rs), whether the backlog came through
//! the host's enqueues or an application's own SQL.

use chrono::Utc;
use std::time::{Duration, Instant};

use spool::store::{Backend, ClaimRequest};
use spool::task::NewTask;

fn task(i: usize) -> NewTask {
    NewTask {
        task_type: "report".into(),
        payload: format!("{{\"n\":{i}}}"),
        priority: 0,
        max_retry: 0,
        run_at: Utc::now(),
        idempotency_key: None,
        depth: 0,
    }
}

/// A pool on the fixture's database, with autovacuum kept off the task table so that only
/// the host can analyze it while the test looks.
async fn without_autovacuum(url: &str) -> sqlx::PgPool {
    let pool = sqlx::PgPool::connect(url).await.unwrap();
    sqlx::query("ALTER TABLE async_task SET (autovacuum_enabled = false)")
        .execute(&pool)
        .await
        .unwrap();
    pool
}

/// Whether `async_task` was analyzed, by anyone.
async fn analyzed(pool: &sqlx::PgPool) -> bool {
    let (analyzed,): (bool,) = sqlx::query_as(
        "SELECT last_analyze IS NOT NULL OR last_autoanalyze IS NOT NULL \
         FROM pg_stat_user_tables WHERE relid = 'async_task'::regclass",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    analyzed
}

async fn becomes_analyzed(pool: &sqlx::PgPool, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if analyzed(pool).await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_enqueues_that_make_a_backlog_give_the_table_its_statistics() {
    let Some(fixture) = crate::fresh(Backend::Postgres).await else {
        return;
    };
    let pool = without_autovacuum(&fixture.url).await;
    // Below the backlog: the planner does well enough without statistics.
    fixture
        .store
        .enqueue((0..999).map(task).collect())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!analyzed(&pool).await, "999 rows are no backlog yet");
    fixture.store.enqueue(vec![task(999)]).await.unwrap();
    assert!(
        becomes_analyzed(&pool, Duration::from_secs(10)).await,
        "the 1,000th row made a backlog: the host analyzes"
    );
    pool.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_full_claim_from_rows_inserted_by_sql_gives_the_table_its_statistics() {
    let Some(fixture) = crate::fresh(Backend::Postgres).await else {
        return;
    };
    let pool = without_autovacuum(&fixture.url).await;
    // An application's own INSERT: the host did not see these rows arrive.
    sqlx::query(
        "INSERT INTO async_task (task_type, payload, next_run_at) \
         SELECT 'report', '{}', 0 FROM generate_series(1, 5000)",
    )
    .execute(&pool)
    .await
    .unwrap();
    let claimed = fixture
        .store
        .claim(&ClaimRequest {
            owner: "me".into(),
            limit: 10,
            task_types: vec!["report".into()],
            now: Utc::now(),
            lease: Duration::from_secs(30),
        })
        .await
        .unwrap();
    assert_eq!(claimed.len(), 10);
    assert!(
        becomes_analyzed(&pool, Duration::from_secs(10)).await,
        "a full claim on a never-analyzed backlog makes the host analyze"
    );
    pool.close().await;
}
