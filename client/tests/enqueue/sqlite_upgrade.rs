//! `migrations/sqlite/0004_insert_defaults.sql` rebuilds the task table to give it defaults; a
//! database created before it must come out with the same rows, ids, id sequence and indexes.

use chrono::Utc;
use spool::store::ClaimRequest;
use spool::task::Status;
use sqlx::{Row, SqlitePool};
use std::path::Path;
use std::time::Duration;

const MIGRATIONS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../migrations/sqlite");

/// The indexes on `async_task`, as SQLite stores their definitions.
async fn indexes(pool: &SqlitePool) -> Vec<(String, String)> {
    sqlx::query("SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'async_task' AND sql IS NOT NULL ORDER BY name")
        .fetch_all(pool)
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_from_before_the_defaults_keeps_its_tasks_ids_and_indexes() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("old.db").display());

    // The database as the migrations before 0004 left it.
    let old_migrations = dir.path().join("old-migrations");
    std::fs::create_dir(&old_migrations).unwrap();
    let mut copied = 0;
    for entry in std::fs::read_dir(MIGRATIONS).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.as_str() < "0004" {
            std::fs::copy(&path, old_migrations.join(&name)).unwrap();
            copied += 1;
        }
    }
    assert_eq!(copied, 3, "0001 to 0003");
    let pool = SqlitePool::connect(&format!("{url}?mode=rwc"))
        .await
        .unwrap();
    sqlx::migrate::Migrator::new(Path::new(&old_migrations))
        .await
        .unwrap()
        .run(&pool)
        .await
        .unwrap();
    let now = Utc::now().timestamp_millis();
    for (task_type, key, status) in [
        ("report", Some("k-1"), 0),
        ("report", None, 2),
        ("notify", None, 0),
        ("report", None, 0),
    ] {
        sqlx::query(
            "INSERT INTO async_task (task_type, payload, status, priority, max_retry, next_run_at, idempotency_key, \
             created_at, updated_at, log, attempts) VALUES (?, '{\"n\": 1}', ?, 5, 7, ?, ?, ?, ?, 'printed', 2)",
        )
        .bind(task_type)
        .bind(status)
        .bind(now - 1000)
        .bind(key)
        .bind(now - 5000)
        .bind(now - 4000)
        .execute(&pool)
        .await
        .unwrap();
    }
    // The newest task is gone (archived, say): its id must not come back.
    sqlx::query("DELETE FROM async_task WHERE id = 4")
        .execute(&pool)
        .await
        .unwrap();
    let indexes_before = indexes(&pool).await;
    assert_eq!(indexes_before.len(), 4);
    let plain = sqlx::query("INSERT INTO async_task (task_type, payload) VALUES ('report', '{}')")
        .execute(&pool)
        .await;
    assert!(
        plain.is_err(),
        "before 0004 a plain insert lacks next_run_at"
    );
    pool.close().await;

    // A host of this version opens it and applies 0004.
    let store = spool::store::open(&url)
        .await
        .expect("the host upgrades the database");
    let first = store.get(1).await.unwrap().expect("task 1 kept its id");
    assert_eq!(
        (first.task_type.as_str(), first.idempotency_key.as_deref()),
        ("report", Some("k-1"))
    );
    assert_eq!(
        (
            first.priority,
            first.max_retry,
            first.attempts,
            first.log.as_deref()
        ),
        (5, 7, 2, Some("printed"))
    );
    assert_eq!(first.created_at.timestamp_millis(), now - 5000);
    assert_eq!(store.get(2).await.unwrap().unwrap().status, Status::Done);
    assert!(store.get(4).await.unwrap().is_none());

    let pool = SqlitePool::connect(&url).await.unwrap();
    // Later migrations add indexes of their own; every earlier one is back as it was.
    let indexes_after = indexes(&pool).await;
    for index in &indexes_before {
        assert!(
            indexes_after.contains(index),
            "index {index:?} recreated exactly: {indexes_after:#?}"
        );
    }
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO async_task (task_type, payload) VALUES ('report', '{}') RETURNING id",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(id, 5, "AUTOINCREMENT kept its high-water mark");
    let duplicate = sqlx::query("INSERT INTO async_task (task_type, payload, idempotency_key) VALUES ('report', '{}', 'k-1')")
        .execute(&pool)
        .await;
    assert!(duplicate.is_err(), "the idempotency index still holds");
    let not_json =
        sqlx::query("INSERT INTO async_task (task_type, payload) VALUES ('report', 'nope')")
            .execute(&pool)
            .await;
    assert!(not_json.is_err(), "the payload check still holds");
    pool.close().await;

    let request = ClaimRequest {
        owner: "test-host".into(),
        limit: 10,
        task_types: vec!["report".into()],
        now: Utc::now(),
        lease: Duration::from_secs(60),
    };
    let claimed: Vec<i64> = store
        .claim(&request)
        .await
        .unwrap()
        .iter()
        .map(|t| t.id)
        .collect();
    assert_eq!(claimed, [1, 5], "priority 5 first, then the plain insert");
    store.close().await;
}
