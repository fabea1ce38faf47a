//! Tests of what only this backend does, against the server `SPOOL_TEST_MYSQL_URL` names
//! (`cargo xtask db start` writes it to `target/test-databases/urls.env`); each test makes a
//! database of its own there. Skipped when the variable is not set, unless the run requires the
//! servers (`SPOOL_TEST_REQUIRE_SERVERS`, or CI), as the store suite's server variants are.

use super::*;
use crate::store::backend_tests;
use crate::store::reads::TaskReads;
use crate::store::services::HostServices;
use crate::store::{ClaimRequest, Completion, StatusCounts};
use crate::task::Status;
use crate::task::{NewTask, TaskId};
use chrono::Duration as Span;
use chrono::{DateTime, Utc};
use sqlx::{Connection, MySqlConnection};
use std::collections::HashMap;

/// A fresh, empty database on the test server.
struct Database {
    url: String,
    name: String,
    server: String,
}

impl Database {
    async fn fresh() -> Option<Database> {
        let server = backend_tests::server("SPOOL_TEST_MYSQL_URL")?;
        let name = backend_tests::create_database::<MySqlConnection>(&server).await;
        Some(Database {
            url: with_database(&server, &name),
            name,
            server,
        })
    }

    async fn open(&self) -> MySqlStore {
        MySqlStore::open(&self.url).await.unwrap()
    }

    /// A plain connection, as an application has.
    async fn connect(&self) -> MySqlConnection {
        MySqlConnection::connect(&self.url).await.unwrap()
    }

    async fn drop(self) {
        let statement = format!("DROP DATABASE {}", self.name);
        backend_tests::execute::<MySqlConnection>(&self.server, &statement).await;
    }
}

/// `url` naming database `name` instead of its own.
fn with_database(url: &str, name: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap();
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let query = path
        .split_once('?')
        .map(|(_, query)| format!("?{query}"))
        .unwrap_or_default();
    format!("{scheme}://{authority}/{name}{query}")
}

fn task(task_type: &str, run_at: DateTime<Utc>) -> NewTask {
    NewTask {
        task_type: task_type.into(),
        payload: "{}".into(),
        priority: 0,
        max_retry: 1,
        run_at,
        idempotency_key: None,
        depth: 0,
    }
}

fn keyed(key: &str) -> NewTask {
    NewTask {
        idempotency_key: Some(key.into()),
        ..task("a", Utc::now())
    }
}

fn claim(types: &[&str], limit: usize) -> ClaimRequest {
    ClaimRequest {
        owner: "me".into(),
        limit,
        task_types: types.iter().map(|t| t.to_string()).collect(),
        now: Utc::now(),
        lease: Duration::from_secs(30),
    }
}

#[tokio::test]
async fn a_plain_insert_from_application_sql_is_a_due_task_in_any_session_time_zone() {
    let Some(db) = Database::fresh().await else {
        return;
    };
    let store = db.open().await;
    let mut app = db.connect().await;
    app.execute("SET time_zone = '+05:30'").await.unwrap();
    let before = Utc::now() - Span::seconds(1);
    app.execute(
        "INSERT INTO async_task (task_type, payload) VALUES ('report', '{\"rows\": [1, 2]}')",
    )
    .await
    .unwrap();
    let refused = app
        .execute("INSERT INTO async_task (task_type, payload) VALUES ('report', 'not json')")
        .await;
    assert!(refused.is_err(), "a payload that is not JSON is refused");
    let claimed = store.claim(&claim(&["report"], 10)).await.unwrap();
    assert_eq!(claimed.len(), 1);
    let task = &claimed[0];
    assert_eq!(task.payload, serde_json::json!({"rows": [1, 2]}));
    assert_eq!(
        (
            task.priority,
            task.retry_count,
            task.max_retry,
            task.attempts
        ),
        (0, 0, 3, 1)
    );
    let after = Utc::now() + Span::seconds(1);
    for time in [task.next_run_at, task.created_at] {
        assert!(
            before <= time && time <= after,
            "{time} is now in UTC, whatever the session's zone"
        );
    }
    store.close().await;
    db.drop().await;
}

#[tokio::test]
async fn an_enqueue_with_a_payload_that_is_not_json_writes_nothing() {
    let Some(db) = Database::fresh().await else {
        return;
    };
    let store = db.open().await;
    let bad = NewTask {
        payload: "{nope".into(),
        ..task("a", Utc::now())
    };
    assert!(
        store
            .enqueue(vec![task("a", Utc::now()), bad])
            .await
            .is_err()
    );
    assert_eq!(
        store.counts().await.unwrap(),
        StatusCounts::default(),
        "all or nothing"
    );
    store.close().await;
    db.drop().await;
}

#[tokio::test]
async fn keys_compare_byte_for_byte() {
    let Some(db) = Database::fresh().await else {
        return;
    };
    let store = db.open().await;
    // Case, trailing spaces and accents all make different keys (as on SQLite); the longest
    // key the host accepts (255 characters of 4 bytes each) fits.
    let longest = "🎉".repeat(spool_rules::names::MAX_IDEMPOTENCY_KEY);
    let keys = ["k", "k ", "K", "é", "e\u{301}", longest.as_str()];
    let first = store
        .enqueue(keys.iter().map(|k| keyed(k)).collect())
        .await
        .unwrap();
    assert!(first.iter().all(|e| !e.duplicate));
    let again = store
        .enqueue(keys.iter().map(|k| keyed(k)).collect())
        .await
        .unwrap();
    assert!(again.iter().all(|e| e.duplicate));
    assert_eq!(
        again.iter().map(|e| e.task.id).collect::<Vec<_>>(),
        first.iter().map(|e| e.task.id).collect::<Vec<_>>()
    );
    for (i, key) in keys.iter().enumerate() {
        store.kv_set("a", key, &i.to_string()).await.unwrap();
    }
    for (i, key) in keys.iter().enumerate() {
        assert_eq!(store.kv_get("a", key).await.unwrap(), Some(i.to_string()));
    }
    store.record_effect("a", "k", 1).await.unwrap();
    assert!(
        !store.effect_done("a", "k ").await.unwrap() && !store.effect_done("a", "K").await.unwrap()
    );
    store.close().await;
    db.drop().await;
}

#[tokio::test]
async fn batches_larger_than_a_statement_are_split_and_keep_their_order() {
    let Some(db) = Database::fresh().await else {
        return;
    };
    let mut store = db.open().await;
    let normal_budget = store.statement_bytes;
    store.statement_bytes = 4096;
    let payload = serde_json::json!({"fill": "x".repeat(1000)}).to_string();
    let tasks: Vec<NewTask> = (0..60)
        .map(|i| NewTask {
            payload: payload.clone(),
            priority: i,
            idempotency_key: (i % 4 == 0).then(|| format!("key-{}", i % 12)),
            ..task("a", Utc::now())
        })
        .collect();
    let enqueued = store.enqueue(tasks).await.unwrap();
    for (i, e) in enqueued.iter().enumerate() {
        let first = if i % 4 == 0 { i % 12 } else { i };
        assert_eq!(
            (e.duplicate, e.task.priority),
            (first != i, first as i32),
            "input {i}"
        );
    }
    let new: Vec<TaskId> = enqueued
        .iter()
        .filter(|e| !e.duplicate)
        .map(|e| e.task.id)
        .collect();
    assert!(
        new.windows(2).all(|w| w[0] < w[1]),
        "ids increase in input order"
    );
    let claimed = store.claim(&claim(&["a"], 100)).await.unwrap();
    assert_eq!(claimed.len(), new.len());
    let completions: Vec<Completion> = claimed
        .iter()
        .map(|t| {
            backend_tests::done(
                t,
                &format!("{}-{}", t.id, "r".repeat(2000)),
                None,
                &"l\n".repeat(500),
            )
        })
        .collect();
    assert_eq!(
        store.complete(&completions).await.unwrap(),
        claimed.len() as u64,
        "every statement counted"
    );
    let finished = store.get(claimed[7].id).await.unwrap().unwrap();
    assert_eq!(
        (finished.status, finished.result),
        (Status::Done, completions[7].transition.result.clone())
    );
    // One large result in the normal budget.
    store.statement_bytes = normal_budget;
    store.enqueue(vec![task("b", Utc::now())]).await.unwrap();
    let big = store.claim(&claim(&["b"], 1)).await.unwrap().remove(0);
    let result = "✓".repeat(400_000);
    assert_eq!(
        store
            .complete(&[backend_tests::done(
                &big,
                &result,
                None,
                &"x".repeat(70_000)
            )])
            .await
            .unwrap(),
        1
    );
    let stored = store.get(big.id).await.unwrap().unwrap();
    assert_eq!(
        (stored.result.as_deref(), stored.log.map(|l| l.len())),
        (Some(result.as_str()), Some(70_000))
    );
    store.close().await;
    db.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hosts_racing_with_the_same_keys_make_one_task_per_key() {
    let Some(db) = Database::fresh().await else {
        return;
    };
    let mut hosts = Vec::new();
    for host in 0..4u64 {
        let store = db.open().await;
        hosts.push(tokio::spawn(async move {
            // Each host sends the same 120 keys in its own order, in batches of 30.
            let mut keys: Vec<u64> = (0..120).collect();
            keys.sort_by_key(|k| (k * (2 * host + 1) * 7919) % 120);
            let mut answers = Vec::new();
            for batch in keys.chunks(30) {
                let tasks = batch.iter().map(|k| keyed(&format!("race-{k}"))).collect();
                answers.extend(store.enqueue(tasks).await.unwrap());
            }
            store.close().await;
            answers
        }));
    }
    let mut by_key: HashMap<String, Vec<(TaskId, bool)>> = HashMap::new();
    for host in hosts {
        for answer in host.await.unwrap() {
            by_key
                .entry(answer.task.idempotency_key.clone().unwrap())
                .or_default()
                .push((answer.task.id, answer.duplicate));
        }
    }
    assert_eq!(by_key.len(), 120);
    for (key, answers) in &by_key {
        assert!(
            answers.iter().all(|(id, _)| *id == answers[0].0),
            "{key}: one task"
        );
        assert_eq!(
            answers.iter().filter(|(_, duplicate)| !duplicate).count(),
            1,
            "{key}: inserted once"
        );
    }
    let store = db.open().await;
    assert_eq!(store.counts().await.unwrap().pending, 120);
    store.close().await;
    db.drop().await;
}

#[test]
fn urls_name_another_database() {
    assert_eq!(
        with_database("mysql://u:p@h:1/old?ssl-mode=disabled", "new"),
        "mysql://u:p@h:1/new?ssl-mode=disabled"
    );
}

#[test]
fn json_arrays_stay_within_the_budget() {
    let items = (0..10).map(|i| format!("{{\"n\":{i}}}"));
    let arrays = json_arrays(items, 20);
    assert!(arrays.iter().all(|a| a.len() <= 20));
    let all: Vec<serde_json::Value> = arrays
        .iter()
        .flat_map(|a| serde_json::from_str::<Vec<serde_json::Value>>(a).unwrap())
        .collect();
    assert_eq!(all.len(), 10);
    assert_eq!(
        json_arrays(std::iter::once("[1,2,3]".to_string()), 2),
        ["[[1,2,3]]"],
        "a large item goes alone"
    );
}
