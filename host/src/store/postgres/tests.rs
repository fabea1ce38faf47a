//! Tests of what only the PostgreSQL backend has: the isolation level of its sessions,
//! wake-up notifications, texts that cannot hold NUL.
//! The behaviour every backend shares is tested by the store suite (`tests/store/`). These run
//! where `SPOOL_TEST_POSTGRES_URL` names a server (`cargo xtask db start`), each in a database
//! of its own, and are skipped elsewhere unless `SPOOL_TEST_REQUIRE_SERVERS` is set.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use sqlx::{Connection, PgConnection};
use tokio::sync::Notify;

use super::PgStore;
use crate::store::backend_tests;
use crate::store::queue::Queue;
use crate::store::reads::TaskReads;
use crate::store::{ClaimRequest, ProgressUpdate, Store};

/// A URL of a new, empty database on the test server, or None when there is no server.
async fn fresh_database() -> Option<String> {
    let base = backend_tests::server("SPOOL_TEST_POSTGRES_URL")?;
    let name = backend_tests::create_database::<PgConnection>(&base).await;
    let (server, _) = base.rsplit_once('/').expect("a URL with a database");
    Some(format!("{server}/{name}"))
}

/// Application SQL on the database at `url`.
async fn sql(url: &str, statement: &str) {
    backend_tests::execute::<PgConnection>(url, statement).await;
}

/// Inserts tasks from application SQL until `wake` is notified (the listener subscribes in
/// the background); whether it was.
async fn insert_until_woken(url: &str, wake: &Notify) -> bool {
    for _ in 0..50 {
        sql(
            url,
            "INSERT INTO async_task (task_type, payload) VALUES ('a', '{}')",
        )
        .await;
        if tokio::time::timeout(Duration::from_millis(200), wake.notified())
            .await
            .is_ok()
        {
            return true;
        }
    }
    false
}

fn claim(limit: usize) -> ClaimRequest {
    ClaimRequest {
        owner: "me".into(),
        limit,
        task_types: vec!["a".into()],
        now: Utc::now(),
        lease: Duration::from_secs(30),
    }
}

async fn woken(wake: &Notify) -> bool {
    tokio::time::timeout(Duration::from_secs(5), wake.notified())
        .await
        .is_ok()
}

#[tokio::test]
async fn sessions_run_read_committed_whatever_the_database_default() {
    let Some(url) = fresh_database().await else {
        return;
    };
    // An application database defaulting to another isolation level: Spool's sessions still
    // run READ COMMITTED, which its claims and upserts are written for.
    sql(
        &url,
        "DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET default_transaction_isolation = %L', \
               current_database(), 'repeatable read'); END $$",
    )
    .await;
    let store = PgStore::connect(&url).await.unwrap();
    let (isolation,): (String,) = sqlx::query_as("SHOW transaction_isolation")
        .fetch_one(&store.pool)
        .await
        .unwrap();
    assert_eq!(isolation, "read committed");
    store.close().await;
}
#[tokio::test]
async fn inserts_and_requeues_wake_the_listener_which_survives_a_lost_connection() {
    let Some(url) = fresh_database().await else {
        return;
    };
    let store = PgStore::connect(&url).await.unwrap();
    let wake = Arc::new(Notify::new());
    assert!(store.watch_enqueues(wake.clone()));
    assert!(
        insert_until_woken(&url, &wake).await,
        "an application's insert wakes the host"
    );

    // A requeue by an API retry wakes it too.
    let task = store.claim(&claim(1)).await.unwrap().remove(0);
    store.cancel(task.id, Utc::now()).await.unwrap();
    while tokio::time::timeout(Duration::from_millis(300), wake.notified())
        .await
        .is_ok()
    {}
    store.retry(task.id, Utc::now()).await.unwrap();
    assert!(woken(&wake).await, "a retried task wakes the host");

    // The server drops the listener's connection: it reconnects, wakes once (notifications may
    // have been missed) and is notified again afterwards.
    let mut admin = PgConnection::connect(&url).await.unwrap();
    let terminated: Vec<(bool,)> = sqlx::query_as(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE datname = current_database() AND query ILIKE 'LISTEN%'",
    )
    .fetch_all(&mut admin)
    .await
    .unwrap();
    assert_eq!(terminated, [(true,)], "one listener connection");
    assert!(woken(&wake).await, "woken after reconnecting");
    assert!(
        insert_until_woken(&url, &wake).await,
        "notified again after reconnecting"
    );
    admin.close().await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), store.close())
        .await
        .expect("close stops the listener");
}

#[tokio::test]
async fn handler_output_with_nul_characters_does_not_block_completions() {
    let Some(url) = fresh_database().await else {
        return;
    };
    let store = PgStore::connect(&url).await.unwrap();
    sql(
        &url,
        "INSERT INTO async_task (task_type, payload) VALUES ('a', '\"\\u0000\"')",
    )
    .await;
    let task = store.claim(&claim(1)).await.unwrap().remove(0);
    assert_eq!(
        task.payload,
        serde_json::json!("\u{0}"),
        "an escaped NUL in JSON is fine"
    );
    store
        .record_progress(&[ProgressUpdate {
            id: task.id,
            percent: 5,
            note: "x\0".into(),
        }])
        .await
        .unwrap();
    let done = backend_tests::done(&task, "r\0", Some("e\0"), "printed \0 binary");
    assert_eq!(store.complete(&[done]).await.unwrap(), 1);
    let stored = store.get(task.id).await.unwrap().unwrap();
    assert_eq!(stored.result.as_deref(), Some("r\u{FFFD}"));
    assert_eq!(stored.last_error, None, "cleared: the task is done");
    assert_eq!(stored.log.as_deref(), Some("printed \u{FFFD} binary"));
    use crate::store::history::AttemptHistory;
    let record = store.attempt_history(task.id).await.unwrap().remove(0);
    assert_eq!(record.error.as_deref(), Some("e\u{FFFD}"));
    assert_eq!(record.log.as_deref(), Some("printed \u{FFFD} binary"));
    assert_eq!(stored.progress_note.as_deref(), Some("x\u{FFFD}"));
    store.close().await;
}
