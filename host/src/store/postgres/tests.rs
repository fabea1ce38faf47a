//! Tests of what only the PostgreSQL backend has: application SQL against the schema,
//! unreadable claimed rows, wake-up notifications, concurrent migrations, lost connections.
//! The behaviour every backend shares is tested by the store suite (`tests/store/`). These run
//! where `SPOOL_TEST_POSTGRES_URL` names a server (`cargo xtask db start`), each in a database
//! of its own, and are skipped elsewhere unless `SPOOL_TEST_REQUIRE_SERVERS` is set.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use sqlx::{Connection, Executor, PgConnection};
use tokio::sync::Notify;

use super::PgStore;
use crate::store::reads::TaskReads;
use crate::store::{ClaimRequest, Completion, ProgressUpdate, Store, StoreError};
use crate::task::{NewTask, Status, Transition};

/// A URL of a new, empty database on the test server, or None when there is no server.
async fn fresh_database() -> Option<String> {
    let Ok(base) = std::env::var("SPOOL_TEST_POSTGRES_URL") else {
        assert!(
            std::env::var_os("SPOOL_TEST_REQUIRE_SERVERS").is_none(),
            "SPOOL_TEST_REQUIRE_SERVERS is set but SPOOL_TEST_POSTGRES_URL is not"
        );
        return None;
    };
    let name = format!("spool_unit_{:016x}", rand::random::<u64>());
    let mut admin = PgConnection::connect(&base)
        .await
        .expect("the test server answers");
    admin
        .execute(format!("CREATE DATABASE {name}").as_str())
        .await
        .unwrap();
    admin.close().await.unwrap();
    let (server, _) = base.rsplit_once('/').expect("a URL with a database");
    Some(format!("{server}/{name}"))
}

/// Application SQL on the database at `url`.
async fn sql(url: &str, statement: &str) {
    let mut conn = PgConnection::connect(url).await.unwrap();
    conn.execute(statement).await.unwrap();
    conn.close().await.unwrap();
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
async fn a_plain_insert_is_a_due_task_and_a_non_json_payload_is_refused() {
    let Some(url) = fresh_database().await else {
        return;
    };
    // An application database defaulting to another isolation level: Spool's sessions still
    // run READ COMMITTED.
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
    sql(
        &url,
        "INSERT INTO async_task (task_type, payload) VALUES ('a', '{\"rows\": [1, 2]}')",
    )
    .await;
    let task = store.claim(&claim(10)).await.unwrap().remove(0);
    assert_eq!(
        (
            task.status,
            task.priority,
            task.retry_count,
            task.max_retry,
            task.attempts
        ),
        (Status::Running, 0, 0, 3, 1)
    );
    assert_eq!(task.payload, serde_json::json!({"rows": [1, 2]}));
    let age = Utc::now() - task.created_at;
    assert!(
        age >= chrono::Duration::zero() && age < chrono::Duration::seconds(60),
        "created now, in ms"
    );
    assert!(task.next_run_at <= Utc::now());

    let mut conn = PgConnection::connect(&url).await.unwrap();
    let refused = conn
        .execute("INSERT INTO async_task (task_type, payload) VALUES ('a', 'not json')")
        .await;
    assert!(
        refused.is_err(),
        "the database refuses a payload that is not JSON"
    );
    let refused = conn
        .execute("INSERT INTO async_task (task_type, payload, status) VALUES ('a', '{}', 7)")
        .await;
    assert!(refused.is_err(), "and a status that is no state");
    conn.close().await.unwrap();
    store.close().await;
}

#[tokio::test]
async fn an_unreadable_claimed_task_fails_without_poisoning_the_claim() {
    let Some(url) = fresh_database().await else {
        return;
    };
    let store = PgStore::connect(&url).await.unwrap();
    let good = store
        .enqueue(vec![NewTask {
            task_type: "a".into(),
            payload: "{}".into(),
            priority: 0,
            max_retry: 3,
            run_at: Utc::now(),
            idempotency_key: None,
        }])
        .await
        .unwrap()
        .remove(0)
        .task;
    // Valid JSON for PostgreSQL, out of range for serde; a counter and a time out of range.
    // Higher priority, so they come first in the claim.
    sql(
        &url,
        "INSERT INTO async_task (task_type, payload, priority) VALUES ('a', '{\"n\": 1e400}', 9); \
         INSERT INTO async_task (task_type, payload, priority, max_retry) VALUES ('a', '{}', 9, 5000000000); \
         INSERT INTO async_task (task_type, payload, priority, created_at) VALUES ('a', '{}', 9, 9000000000000000000)",
    )
    .await;
    let claimed = store.claim(&claim(10)).await.unwrap();
    assert_eq!(
        claimed.iter().map(|t| t.id).collect::<Vec<_>>(),
        [good.id],
        "the readable task is claimed"
    );
    assert!(store.claim(&claim(10)).await.unwrap().is_empty());

    let mut conn = PgConnection::connect(&url).await.unwrap();
    let failed: Vec<(i16, String, Option<i64>, Option<String>)> = sqlx::query_as(
        "SELECT status, last_error, finished_at, lease_owner FROM async_task WHERE id <> $1 ORDER BY id",
    )
    .bind(good.id)
    .fetch_all(&mut conn)
    .await
    .unwrap();
    assert_eq!(failed.len(), 3);
    for (status, error, finished_at, lease_owner) in &failed {
        assert_eq!(*status, 3, "failed: {error}");
        assert!(
            error.contains("is unreadable") && error.contains("failed without running"),
            "{error}"
        );
        assert!(finished_at.is_some() && lease_owner.is_none());
    }
    assert!(failed[0].1.contains("payload"), "{}", failed[0].1);
    assert!(
        failed[1].1.contains("max_retry 5000000000"),
        "{}",
        failed[1].1
    );
    assert!(failed[2].1.contains("timestamp"), "{}", failed[2].1);
    // The running task is unaffected and completes normally.
    let done = Completion {
        id: good.id,
        owner: "me".into(),
        attempt: claimed[0].attempts,
        transition: Transition {
            status: Status::Done,
            retry_count: 0,
            next_run_at: None,
            result: Some("1".into()),
            error: None,
        },
        outcome: crate::store::history::Outcome::Done,
        plugin_version: None,
        log: None,
        finished_at: Utc::now(),
    };
    assert_eq!(store.complete(&[done]).await.unwrap(), 1);
    conn.close().await.unwrap();
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
    // The listener subscribes in the background; application inserts notify it from then on.
    let mut subscribed = false;
    for _ in 0..50 {
        sql(
            &url,
            "INSERT INTO async_task (task_type, payload) VALUES ('a', '{}')",
        )
        .await;
        if tokio::time::timeout(Duration::from_millis(200), wake.notified())
            .await
            .is_ok()
        {
            subscribed = true;
            break;
        }
    }
    assert!(subscribed, "an application's insert wakes the host");

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
    let mut again = false;
    for _ in 0..50 {
        sql(
            &url,
            "INSERT INTO async_task (task_type, payload) VALUES ('a', '{}')",
        )
        .await;
        if tokio::time::timeout(Duration::from_millis(200), wake.notified())
            .await
            .is_ok()
        {
            again = true;
            break;
        }
    }
    assert!(again, "notified again after reconnecting");
    admin.close().await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), store.close())
        .await
        .expect("close stops the listener");
}

#[tokio::test]
async fn hosts_starting_together_migrate_once() {
    let Some(url) = fresh_database().await else {
        return;
    };
    let opening: Vec<_> = (0..4)
        .map(|_| {
            tokio::spawn({
                let url = url.clone();
                async move { PgStore::connect(&url).await }
            })
        })
        .collect();
    let mut stores = Vec::new();
    for store in opening {
        stores.push(store.await.unwrap().expect("every host opens the store"));
    }
    let mut conn = PgConnection::connect(&url).await.unwrap();
    let (applied,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM _sqlx_migrations")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    let embedded = sqlx::migrate!("../migrations/postgres").iter().count() as i64;
    assert_eq!(applied, embedded, "each migration applied exactly once");
    conn.close().await.unwrap();
    for store in stores {
        store.close().await;
    }
}

#[tokio::test]
async fn lost_and_refused_connections_are_unavailable() {
    let Some(url) = fresh_database().await else {
        return;
    };
    // Refused: a port nobody listens on.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let error = PgStore::connect(&format!("postgres://spool:spool@127.0.0.1:{port}/spool"))
        .await
        .err()
        .unwrap();
    assert!(error.is_transient(), "{error:?}");

    // Terminated by an administrator (57P01): transient; the store's pool replaces such
    // connections before use, so the store itself sees no error.
    let store = PgStore::connect(&url).await.unwrap();
    store.ping().await.unwrap();
    let mut victim = PgConnection::connect(&url).await.unwrap();
    let mut admin = PgConnection::connect(&url).await.unwrap();
    sqlx::query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()")
        .execute(&mut admin)
        .await
        .unwrap();
    let error = StoreError::from(victim.execute("SELECT 1").await.unwrap_err());
    assert!(matches!(error, StoreError::Unavailable(_)), "{error:?}");
    store.ping().await.expect("the pool reconnected");
    assert!(store.counts().await.is_ok());
    admin.close().await.unwrap();
    store.close().await;
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
    let done = Completion {
        id: task.id,
        owner: "me".into(),
        attempt: task.attempts,
        transition: Transition {
            status: Status::Done,
            retry_count: 0,
            next_run_at: None,
            result: Some("r\0".into()),
            error: Some("e\0".into()),
        },
        outcome: crate::store::history::Outcome::Done,
        plugin_version: None,
        log: Some("printed \0 binary".into()),
        finished_at: Utc::now(),
    };
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
