//! `enqueue` against real databases, checked through the host's own store: what an application
//! commits is exactly one due task that `spool::store` claims, what it rolls back is nothing,
//! and an idempotency key makes a retried transaction enqueue once.
//!
//! Each test runs on SQLite (a temporary file), PostgreSQL and MariaDB/MySQL (a fresh database
//! on the servers `cargo xtask test` starts; see `databases.rs` for when those are skipped).

mod databases;
mod sqlite_upgrade;

use chrono::Utc;
use spool::store::{ClaimRequest, SharedStore};
use spool::task::{Status, Task as StoredTask};
use std::time::Duration;

use databases::Kind;

/// An application's database with Spool's table in it: the application's own pool, and the
/// host's store on the same database.
pub struct App<DB: sqlx::Database> {
    pub pool: sqlx::Pool<DB>,
    pub store: SharedStore,
    _fresh: databases::Fresh,
}

impl<DB: sqlx::Database> App<DB> {
    /// A fresh database of `kind`, migrated by the host (as `spool serve` does on start), with
    /// the application's table `approval` beside `async_task`.
    pub async fn fresh(kind: Kind) -> Option<App<DB>> {
        let fresh = databases::fresh(kind).await?;
        let store = spool::store::open(&fresh.url)
            .await
            .unwrap_or_else(|e| panic!("the host opens {}: {e}", fresh.url));
        let pool = sqlx::pool::PoolOptions::<DB>::new()
            .max_connections(4)
            .connect(&fresh.url)
            .await
            .unwrap_or_else(|e| panic!("the application connects to {}: {e}", fresh.url));
        Some(App {
            pool,
            store,
            _fresh: fresh,
        })
    }

    /// A fresh database the host has never opened (no task table), and a pool on it.
    pub async fn without_spool(kind: Kind) -> Option<(sqlx::Pool<DB>, databases::Fresh)> {
        let fresh = databases::fresh(kind).await?;
        // SQLite: create the file, as the application's own migrations would.
        let url = if kind == Kind::Sqlite {
            format!("{}?mode=rwc", fresh.url)
        } else {
            fresh.url.clone()
        };
        let pool = sqlx::Pool::<DB>::connect(&url)
            .await
            .unwrap_or_else(|e| panic!("connecting to {url}: {e}"));
        Some((pool, fresh))
    }

    /// What a host that runs `types` claims now.
    pub async fn claim(&self, types: &[&str]) -> Vec<StoredTask> {
        self.claim_at(types, Utc::now()).await
    }

    pub async fn claim_at(&self, types: &[&str], now: chrono::DateTime<Utc>) -> Vec<StoredTask> {
        let request = ClaimRequest {
            owner: "test-host".into(),
            limit: 10,
            task_types: types.iter().map(|t| t.to_string()).collect(),
            now,
            lease: Duration::from_secs(60),
        };
        self.store.claim(&request).await.expect("the host claims")
    }

    /// How many tasks the host sees, in any state.
    pub async fn tasks(&self) -> u64 {
        let counts = self.store.counts().await.expect("the host counts");
        counts.pending + counts.running + counts.done + counts.failed + counts.cancelled
    }
}

/// The application's business table, the same statement on every database.
const CREATE_APPROVAL: &str =
    "CREATE TABLE approval (id BIGINT PRIMARY KEY, state VARCHAR(20) NOT NULL)";

/// The task the approval flow enqueues.
fn report(approval_id: i64) -> spool_client::Task {
    spool_client::Task::new(
        "report",
        &serde_json::json!({"approval_id": approval_id, "rows": [1, 2, 3]}),
    )
}

/// Generates the suite for one database: `$db` the sqlx database, `$kind` where to get one.
macro_rules! suite {
    ($module:ident, $db:ty, $kind:expr) => {
        mod $module {
            use super::*;
            use spool_client::{enqueue, Error, Task};

            type Db = $db;

            async fn app() -> Option<App<Db>> {
                let app = App::<Db>::fresh($kind).await?;
                sqlx::query(CREATE_APPROVAL).execute(&app.pool).await.expect("the business table");
                Some(app)
            }

            async fn approvals(app: &App<Db>) -> i64 {
                sqlx::query_scalar("SELECT COUNT(*) FROM approval").fetch_one(&app.pool).await.unwrap()
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_rollback_leaves_no_task() {
                let Some(app) = app().await else { return };
                let mut tx = app.pool.begin().await.unwrap();
                sqlx::query("INSERT INTO approval (id, state) VALUES (1042, 'approved')").execute(&mut *tx).await.unwrap();
                let enqueued = enqueue(&mut tx, &report(1042).idempotency_key("approval-1042")).await.unwrap();
                assert!(!enqueued.duplicate);
                tx.rollback().await.unwrap();

                assert_eq!(approvals(&app).await, 0);
                assert_eq!(app.tasks().await, 0, "the task went with the business row");
                assert!(app.claim(&["report"]).await.is_empty());
                assert!(app.store.get(enqueued.id).await.unwrap().is_none());
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_commit_leaves_one_due_task_the_host_claims() {
                let Some(app) = app().await else { return };
                let before = Utc::now() - chrono::Duration::seconds(1);
                let mut tx = app.pool.begin().await.unwrap();
                sqlx::query("INSERT INTO approval (id, state) VALUES (1042, 'approved')").execute(&mut *tx).await.unwrap();
                let task = report(1042).idempotency_key("approval-1042").priority(7).max_retry(5);
                let enqueued = enqueue(&mut tx, &task).await.unwrap();
                tx.commit().await.unwrap();

                assert_eq!(approvals(&app).await, 1);
                let counts = app.store.counts().await.unwrap();
                assert_eq!((counts.pending, app.tasks().await), (1, 1));
                let claimed = app.claim(&["report"]).await;
                assert_eq!(claimed.len(), 1, "exactly one task, due now");
                let stored = &claimed[0];
                assert_eq!(stored.id, enqueued.id);
                assert_eq!(stored.task_type, "report");
                assert_eq!(stored.payload, serde_json::json!({"approval_id": 1042, "rows": [1, 2, 3]}));
                assert_eq!((stored.priority, stored.max_retry, stored.retry_count), (7, 5, 0));
                assert_eq!(stored.idempotency_key.as_deref(), Some("approval-1042"));
                assert_eq!((stored.status, stored.attempts), (Status::Running, 1));
                assert!(stored.created_at >= before && stored.created_at <= Utc::now());
                assert!(stored.next_run_at <= Utc::now());
                assert!(app.claim(&["report"]).await.is_empty(), "and only one");
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn the_same_key_in_a_retried_transaction_is_one_task() {
                let Some(app) = app().await else { return };
                // The application's first attempt commits; it does not learn so (say, the
                // connection drops on COMMIT's answer) and runs the transaction again.
                let mut first = app.pool.begin().await.unwrap();
                sqlx::query("INSERT INTO approval (id, state) VALUES (1042, 'approved')").execute(&mut *first).await.unwrap();
                let created = enqueue(&mut first, &report(1042).idempotency_key("approval-1042")).await.unwrap();
                first.commit().await.unwrap();
                assert!(!created.duplicate);

                let mut retry = app.pool.begin().await.unwrap();
                let again = enqueue(&mut retry, &report(9999).idempotency_key("approval-1042")).await.unwrap();
                assert_eq!(again, spool_client::Enqueued { id: created.id, duplicate: true });
                // Within one transaction too.
                let fresh = enqueue(&mut retry, &report(1043).idempotency_key("approval-1043")).await.unwrap();
                let twice = enqueue(&mut retry, &report(1043).idempotency_key("approval-1043")).await.unwrap();
                assert_eq!((fresh.duplicate, twice), (false, spool_client::Enqueued { id: fresh.id, duplicate: true }));
                // Keys are per task type.
                let other_type = enqueue(&mut retry, &Task::new("notify", &1).idempotency_key("approval-1042")).await.unwrap();
                assert!(!other_type.duplicate && other_type.id != created.id);
                retry.commit().await.unwrap();

                assert_eq!(app.tasks().await, 3);
                let kept = app.store.get(created.id).await.unwrap().unwrap();
                assert_eq!(kept.payload["approval_id"], 1042, "the duplicate left the first task alone");
                let claimed: Vec<i64> = app.claim(&["report"]).await.iter().map(|t| t.id).collect();
                assert_eq!(claimed.len(), 2);
                assert!(claimed.contains(&created.id) && claimed.contains(&fresh.id));
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn the_key_of_an_archived_task_still_answers_with_that_task() {
                let Some(app) = app().await else { return };
                let mut conn = app.pool.acquire().await.unwrap();
                let created = enqueue(&mut *conn, &report(7).idempotency_key("invoice-7")).await.unwrap();
                let claimed = app.claim(&["report"]).await.remove(0);
                app.store.cancel(claimed.id, Utc::now() - chrono::Duration::days(2)).await.unwrap();
                let moved = app.store.archive_batch(&spool::store::archive::ArchiveBatch {
                    statuses: vec![Status::Cancelled],
                    finished_before: Utc::now() - chrono::Duration::days(1),
                    limit: 10,
                    now: Utc::now(),
                }).await.unwrap();
                assert_eq!((moved.total(), app.tasks().await), (1, 0), "archived");
                let again = enqueue(&mut *conn, &report(7).idempotency_key("invoice-7")).await.unwrap();
                assert_eq!(again, spool_client::Enqueued { id: created.id, duplicate: true });
                assert_eq!(app.tasks().await, 0, "nothing runs twice");
                let refused = enqueue(&mut *conn, &report(7).idempotency_key("spool:schedule:x")).await;
                assert!(matches!(refused, Err(spool_client::Error::ReservedIdempotencyKey(_))));
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_concurrent_transaction_with_the_same_key_waits_and_gets_the_first_task() {
                let Some(app) = app().await else { return };
                let mut first = app.pool.begin().await.unwrap();
                let created = enqueue(&mut first, &report(1).idempotency_key("approval-1")).await.unwrap();
                let pool = app.pool.clone();
                let second = tokio::spawn(async move {
                    let mut tx = pool.begin().await.unwrap();
                    let enqueued = enqueue(&mut tx, &report(2).idempotency_key("approval-1")).await;
                    tx.commit().await.unwrap();
                    enqueued
                });
                // Give the second transaction time to reach the key (the outcome below is
                // required whether or not it did): it must wait for the first to finish.
                tokio::time::sleep(Duration::from_millis(300)).await;
                assert!(!second.is_finished(), "the second insert waits for the first transaction");
                first.commit().await.unwrap();
                let again = second.await.unwrap().expect("the second transaction enqueues");
                assert_eq!(again, spool_client::Enqueued { id: created.id, duplicate: true });
                assert_eq!(app.tasks().await, 1);
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_plain_insert_of_type_and_payload_is_a_claimable_task() {
                let Some(app) = app().await else { return };
                let before = Utc::now() - chrono::Duration::seconds(2);
                let mut tx = app.pool.begin().await.unwrap();
                sqlx::query("INSERT INTO approval (id, state) VALUES (1042, 'approved')").execute(&mut *tx).await.unwrap();
                sqlx::query("INSERT INTO async_task (task_type, payload) VALUES ('report', '{\"approval_id\": 1042}')")
                    .execute(&mut *tx)
                    .await
                    .unwrap();
                tx.commit().await.unwrap();

                let claimed = app.claim(&["report"]).await;
                assert_eq!(claimed.len(), 1, "due at once");
                let stored = &claimed[0];
                assert_eq!(stored.payload, serde_json::json!({"approval_id": 1042}));
                assert_eq!((stored.priority, stored.max_retry, stored.retry_count, stored.attempts), (0, 3, 0, 1));
                assert_eq!(stored.idempotency_key, None);
                let after = Utc::now() + chrono::Duration::seconds(2);
                for time in [stored.next_run_at, stored.created_at] {
                    assert!(time >= before && time <= after, "{time} is the database's now");
                }
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_delayed_task_waits_and_a_past_run_at_is_due() {
                let Some(app) = app().await else { return };
                let mut tx = app.pool.begin().await.unwrap();
                let later = enqueue(&mut tx, &report(1).delay(Duration::from_secs(3600))).await.unwrap();
                let past = enqueue(&mut tx, &report(2).run_at(Utc::now() - chrono::Duration::days(1))).await.unwrap();
                tx.commit().await.unwrap();

                let now: Vec<i64> = app.claim(&["report"]).await.iter().map(|t| t.id).collect();
                assert_eq!(now, [past.id]);
                let in_an_hour = app.claim_at(&["report"], Utc::now() + chrono::Duration::seconds(3601)).await;
                assert_eq!(in_an_hour.iter().map(|t| t.id).collect::<Vec<_>>(), [later.id]);
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_pool_enqueues_on_its_own_from_any_task() {
                let Some(app) = app().await else { return };
                let pool = app.pool.clone();
                // The future is Send: it runs on another tokio task.
                let enqueued = tokio::spawn(async move { enqueue(&pool, &report(1)).await }).await.unwrap().unwrap();
                let mut conn = app.pool.acquire().await.unwrap();
                let second = enqueue(&mut *conn, &report(2)).await.unwrap();
                drop(conn);
                let claimed: Vec<i64> = app.claim(&["report"]).await.iter().map(|t| t.id).collect();
                assert_eq!(claimed, [enqueued.id, second.id]);
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_broken_task_is_refused_before_any_statement() {
                let Some(app) = app().await else { return };
                let mut tx = app.pool.begin().await.unwrap();
                let refused = enqueue(&mut tx, &Task::new("report.wasm", &1)).await.unwrap_err();
                assert!(matches!(refused, Error::BadTaskType(_)), "{refused}");
                let refused = enqueue(&mut tx, &Task::from_json("report", "{not json")).await.unwrap_err();
                assert!(matches!(refused, Error::PayloadNotJson(_)), "{refused}");
                // The transaction is untouched (on PostgreSQL a failed statement would abort it).
                enqueue(&mut tx, &report(1)).await.unwrap();
                tx.commit().await.unwrap();
                assert_eq!(app.claim(&["report"]).await.len(), 1);
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_database_without_the_task_table_says_how_to_get_it() {
                let Some((pool, _fresh)) = App::<Db>::without_spool($kind).await else { return };
                let error = enqueue(&pool, &report(1)).await.unwrap_err();
                assert!(matches!(error, Error::NoTaskTable(_)), "{error:?}");
                assert!(error.to_string().contains("spool serve"), "{error}");
            }
        }
    };
}

suite!(sqlite, sqlx::Sqlite, Kind::Sqlite);
suite!(postgres, sqlx::Postgres, Kind::Postgres);
suite!(mysql, sqlx::MySql, Kind::MySql);
