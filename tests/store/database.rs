//! What other writers and the database itself do to a store: rows inserted by application
//! SQL, rows no task can be read from, hosts that open the same new database at once, and the
//! errors a database gives while it is away or busy. Each test reaches the database through a
//! connection of its own, in that backend's driver, as an application or an administrator
//! would.

use chrono::{Duration as Span, Utc};
use sqlx::{Connection, Executor, MySqlConnection, PgConnection, SqliteConnection};
use std::str::FromStr;
use std::time::Duration;

use crate::Fixture;
use spool::store::archive::ArchiveBatch;
use spool::store::history::Outcome;
use spool::store::{Backend, ClaimRequest, Completion, StoreError};
use spool::task::{NewTask, Status, TaskId, Transition};

/// Runs `statement` on the database at `url` in a connection of its own (autocommitted).
async fn sql_at(backend: Backend, url: &str, statement: &str) -> Result<(), sqlx::Error> {
    match backend {
        Backend::Sqlite => {
            let mut conn = SqliteConnection::connect(url).await?;
            conn.execute(statement).await?;
            conn.close().await
        }
        Backend::Postgres => {
            let mut conn = PgConnection::connect(url).await?;
            conn.execute(statement).await?;
            conn.close().await
        }
        Backend::MySql => {
            let mut conn = MySqlConnection::connect(url).await?;
            conn.execute(statement).await?;
            conn.close().await
        }
    }
}

/// The one integer `query` selects, read through a connection of its own.
async fn integer_at(backend: Backend, url: &str, query: &str) -> i64 {
    let row: (i64,) = match backend {
        Backend::Sqlite => {
            let mut conn = SqliteConnection::connect(url).await.unwrap();
            sqlx::query_as(query).fetch_one(&mut conn).await.unwrap()
        }
        Backend::Postgres => {
            let mut conn = PgConnection::connect(url).await.unwrap();
            sqlx::query_as(query).fetch_one(&mut conn).await.unwrap()
        }
        Backend::MySql => {
            let mut conn = MySqlConnection::connect(url).await.unwrap();
            sqlx::query_as(query).fetch_one(&mut conn).await.unwrap()
        }
    };
    row.0
}

on_every_backend!(database:
    a_plain_sql_insert_is_a_due_task_and_a_payload_that_is_not_json_is_refused,
    a_plain_sql_insert_cannot_take_the_key_of_an_archived_task,
    an_unreadable_claimed_row_is_failed_and_the_others_are_claimed,
    readable_tasks_are_claimed_even_when_an_unreadable_one_cannot_be_failed,
    hosts_opening_the_store_together_migrate_once,
    errors_that_waiting_can_fix_come_back_as_unavailable,
);

fn task(task_type: &str) -> NewTask {
    NewTask {
        task_type: task_type.into(),
        payload: "{}".into(),
        priority: 0,
        max_retry: 3,
        run_at: Utc::now(),
        idempotency_key: None,
        depth: 0,
    }
}

fn claim(task_type: &str) -> ClaimRequest {
    ClaimRequest {
        owner: "me".into(),
        limit: 10,
        task_types: vec![task_type.into()],
        now: Utc::now(),
        lease: Duration::from_secs(60),
    }
}

pub async fn a_plain_sql_insert_is_a_due_task_and_a_payload_that_is_not_json_is_refused(
    fixture: &Fixture,
) {
    let before = Utc::now() - Span::seconds(1);
    sql_at(
        fixture.backend,
        &fixture.url,
        "INSERT INTO async_task (task_type, payload) VALUES ('report', '{\"rows\": [1, 2]}')",
    )
    .await
    .expect("the schema's defaults make a plain insert a task");
    let refused = sql_at(
        fixture.backend,
        &fixture.url,
        "INSERT INTO async_task (task_type, payload) VALUES ('report', 'not json')",
    )
    .await;
    assert!(refused.is_err(), "a payload that is not JSON is refused");

    let claimed = fixture.store.claim(&claim("report")).await.unwrap();
    assert_eq!(claimed.len(), 1, "the inserted row is due at once");
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
    assert!(task.idempotency_key.is_none());
    let after = Utc::now() + Span::seconds(1);
    for time in [task.created_at, task.next_run_at] {
        assert!(before <= time && time <= after, "{time} is now, in UTC");
    }
}

pub async fn a_plain_sql_insert_cannot_take_the_key_of_an_archived_task(fixture: &Fixture) {
    let store = &fixture.store;
    let keyed = NewTask {
        idempotency_key: Some("invoice-7".into()),
        ..task("bill")
    };
    let id = store.enqueue(vec![keyed]).await.unwrap()[0].task.id;
    let claimed = store.claim(&claim("bill")).await.unwrap().remove(0);
    let done = Completion {
        id,
        owner: "me".into(),
        attempt: claimed.attempts,
        transition: Transition {
            status: Status::Done,
            retry_count: 0,
            next_run_at: None,
            result: None,
            error: None,
        },
        outcome: Outcome::Done,
        plugin_version: None,
        log: None,
        cost: None,
        finished_at: Utc::now() - Span::days(2),
        record: None,
    };
    assert_eq!(store.complete(&[done]).await.unwrap(), 1);
    let moved = store
        .archive_batch(&ArchiveBatch {
            statuses: vec![Status::Done],
            finished_before: Utc::now() - Span::days(1),
            limit: 10,
            now: Utc::now(),
        })
        .await
        .unwrap();
    assert_eq!(moved.total(), 1);
    assert!(store.get(id).await.unwrap().is_none(), "archived");

    let insert = |key: &str| {
        format!(
            "INSERT INTO async_task (task_type, payload, idempotency_key) VALUES ('bill', '{{}}', '{key}')"
        )
    };
    let refused = sql_at(fixture.backend, &fixture.url, &insert("invoice-7")).await;
    assert!(
        refused.is_err(),
        "the archived task still holds its key against application SQL"
    );
    assert_eq!(
        integer_at(
            fixture.backend,
            &fixture.url,
            "SELECT COUNT(*) FROM async_task"
        )
        .await,
        0,
        "nothing was inserted"
    );
    sql_at(fixture.backend, &fixture.url, &insert("invoice-8"))
        .await
        .expect("a new key inserts");
    let new = store.task_with_key("bill", "invoice-8").await.unwrap();
    assert!(
        new.is_some_and(|new| new > id),
        "and is recorded with its task"
    );
    assert_eq!(
        store.task_with_key("bill", "invoice-7").await.unwrap(),
        Some(id)
    );
}

/// Makes the database refuse to fail any task, as a broken disk or a lock would.
async fn refuse_failing_tasks(backend: Backend, url: &str) {
    let statements: &[&str] = match backend {
        Backend::Sqlite => &["CREATE TRIGGER refuse_failed BEFORE UPDATE ON async_task \
             WHEN NEW.status = 3 BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"],
        Backend::Postgres => &[
            "CREATE FUNCTION refuse_failed() RETURNS trigger LANGUAGE plpgsql AS \
             $$ BEGIN RAISE EXCEPTION 'refused by the test'; END $$",
            "CREATE TRIGGER refuse_failed BEFORE UPDATE ON async_task FOR EACH ROW \
             WHEN (NEW.status = 3) EXECUTE FUNCTION refuse_failed()",
        ],
        Backend::MySql => &[
            "CREATE TRIGGER refuse_failed BEFORE UPDATE ON async_task FOR EACH ROW \
             BEGIN IF NEW.status = 3 THEN \
             SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'refused by the test'; END IF; END",
        ],
    };
    for statement in statements {
        sql_at(backend, url, statement).await.unwrap();
    }
}

pub async fn readable_tasks_are_claimed_even_when_an_unreadable_one_cannot_be_failed(
    fixture: &Fixture,
) {
    let store = &fixture.store;
    let ids: Vec<TaskId> = store
        .enqueue((0..3).map(|_| task("a")).collect())
        .await
        .unwrap()
        .iter()
        .map(|e| e.task.id)
        .collect();
    let statement = format!(
        "UPDATE async_task SET created_at = 9000000000000000000 WHERE id = {}",
        ids[1]
    );
    sql_at(fixture.backend, &fixture.url, &statement)
        .await
        .unwrap();
    refuse_failing_tasks(fixture.backend, &fixture.url).await;
    let claimed = store.claim(&claim("a")).await.expect("the claim succeeds");
    assert_eq!(
        claimed.iter().map(|t| t.id).collect::<Vec<_>>(),
        [ids[0], ids[2]],
        "the readable tasks come back to the host that leased them"
    );
    for id in [ids[0], ids[2]] {
        assert_eq!(
            store.get(id).await.unwrap().unwrap().status,
            Status::Running
        );
    }
}

pub async fn an_unreadable_claimed_row_is_failed_and_the_others_are_claimed(fixture: &Fixture) {
    let store = &fixture.store;
    let ids: Vec<TaskId> = store
        .enqueue((0..4).map(|_| task("a")).collect())
        .await
        .unwrap()
        .iter()
        .map(|e| e.task.id)
        .collect();
    // Written by other SQL: times no clock can show.
    for (id, column) in [(ids[1], "created_at"), (ids[2], "finished_at")] {
        let statement =
            format!("UPDATE async_task SET {column} = 9000000000000000000 WHERE id = {id}");
        sql_at(fixture.backend, &fixture.url, &statement)
            .await
            .unwrap();
    }
    assert!(
        matches!(store.get(ids[1]).await, Err(StoreError::Corrupt { id, .. }) if id == ids[1]),
        "the row does not read as a task"
    );
    let claimed = store.claim(&claim("a")).await.unwrap();
    assert_eq!(
        claimed.iter().map(|t| t.id).collect::<Vec<_>>(),
        [ids[0], ids[3]],
        "the readable ones, in claim order"
    );
    assert!(
        store.claim(&claim("a")).await.unwrap().is_empty(),
        "the unreadable ones do not come back"
    );
    // Repaired by hand, as the error says, they read as failed, with the reason.
    let now = Utc::now().timestamp_millis();
    let repair = format!(
        "UPDATE async_task SET created_at = {now}, finished_at = {now} WHERE id IN ({}, {})",
        ids[1], ids[2]
    );
    sql_at(fixture.backend, &fixture.url, &repair)
        .await
        .unwrap();
    for id in [ids[1], ids[2]] {
        let task = store.get(id).await.unwrap().unwrap();
        assert_eq!(task.status, Status::Failed);
        let error = task.last_error.unwrap_or_default();
        assert!(
            error.contains(&format!("stored task {id} is unreadable"))
                && error.contains("failed without running"),
            "{error}"
        );
        assert!(task.finished_at.is_some() && task.lease_owner.is_none());
    }
}

pub async fn hosts_opening_the_store_together_migrate_once(fixture: &Fixture) {
    // A database nobody has opened yet.
    let dir = tempfile::tempdir().unwrap();
    let (url, folder) = match fixture.backend {
        Backend::Sqlite => (
            format!("sqlite://{}", dir.path().join("new.db").display()),
            "sqlite",
        ),
        Backend::Postgres => (
            crate::servers::fresh_database(crate::servers::Backend::Postgres),
            "postgres",
        ),
        Backend::MySql => (
            crate::servers::fresh_database(crate::servers::Backend::MySql),
            "mysql",
        ),
    };
    let opening: Vec<_> = (0..4)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move { spool::store::open(&url).await })
        })
        .collect();
    let mut stores = Vec::new();
    for store in opening {
        stores.push(store.await.unwrap().expect("every host opens the store"));
    }
    let applied = integer_at(
        fixture.backend,
        &url,
        "SELECT COUNT(*) FROM _sqlx_migrations WHERE success",
    )
    .await;
    let embedded = std::fs::read_dir(crate::util::repo_root().join("migrations").join(folder))
        .unwrap()
        .filter(|entry| {
            entry
                .as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "sql"))
        })
        .count();
    assert_eq!(applied, embedded as i64, "each migration applied once");
    for store in &stores {
        store.ping().await.unwrap();
    }
    for store in stores {
        store.close().await;
    }
    if fixture.backend != Backend::Sqlite {
        crate::servers::drop_database(&url);
    }
}

pub async fn errors_that_waiting_can_fix_come_back_as_unavailable(fixture: &Fixture) {
    let (url, backend) = (fixture.url.as_str(), fixture.backend);
    match backend {
        Backend::Sqlite => {
            // A writer holding the database's lock: busy, for a caller that does not wait.
            let mut holder = SqliteConnection::connect(url).await.unwrap();
            holder.execute("BEGIN EXCLUSIVE").await.unwrap();
            let options = sqlx::sqlite::SqliteConnectOptions::from_str(url)
                .unwrap()
                .busy_timeout(Duration::ZERO);
            let mut other = SqliteConnection::connect_with(&options).await.unwrap();
            let busy = other.execute("BEGIN IMMEDIATE").await.unwrap_err();
            assert!(
                matches!(StoreError::from(busy), StoreError::Unavailable(_)),
                "a locked database is unavailable"
            );
            holder.execute("ROLLBACK").await.unwrap();
            other.close().await.unwrap();
            holder.close().await.unwrap();
        }
        Backend::Postgres | Backend::MySql => {
            // Refused: a port nobody listens on.
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let scheme = if backend == Backend::Postgres {
                "postgres"
            } else {
                "mysql"
            };
            let refused =
                spool::store::open(&format!("{scheme}://spool:spool@127.0.0.1:{port}/spool"))
                    .await
                    .err()
                    .expect("nothing listens there");
            assert!(refused.is_transient(), "{refused:?}");

            // A deadlock victim.
            let ids: Vec<TaskId> = fixture
                .store
                .enqueue(vec![task("a"), task("a")])
                .await
                .unwrap()
                .iter()
                .map(|e| e.task.id)
                .collect();
            let victim = deadlock(backend, url, ids[0], ids[1]).await;
            assert!(
                matches!(StoreError::from(victim), StoreError::Unavailable(_)),
                "a deadlock victim may try again"
            );

            // Sessions an administrator (or a restarting server) ends, the store's own among
            // them: the ended session's error is unavailable, and the store reconnects.
            let gone = ended_session(backend, url).await;
            assert!(
                matches!(StoreError::from(gone), StoreError::Unavailable(_)),
                "a session the server ended is unavailable"
            );
        }
    }
    fixture.store.ping().await.expect("the store answers again");
    assert!(fixture.store.counts().await.is_ok());
}

/// Two transactions that each lock one of the rows, then wait for the other's: the error of
/// the one the database picks as the victim.
async fn deadlock(backend: Backend, url: &str, first: TaskId, second: TaskId) -> sqlx::Error {
    async fn run<C: Connection>(url: &str, first: TaskId, second: TaskId) -> sqlx::Error
    where
        for<'c> &'c mut C: Executor<'c, Database = C::Database>,
    {
        let lock = |id: TaskId| format!("UPDATE async_task SET priority = 1 WHERE id = {id}");
        let (mut left, mut right) = (
            C::connect(url).await.unwrap(),
            C::connect(url).await.unwrap(),
        );
        left.execute("BEGIN").await.unwrap();
        right.execute("BEGIN").await.unwrap();
        left.execute(lock(first).as_str()).await.unwrap();
        right.execute(lock(second).as_str()).await.unwrap();
        let (a, b) = (lock(second), lock(first));
        let (a, b) = tokio::join!(left.execute(a.as_str()), right.execute(b.as_str()));
        let victim = a
            .err()
            .or(b.err())
            .expect("one of them is the deadlock victim");
        let _ = left.execute("ROLLBACK").await;
        let _ = right.execute("ROLLBACK").await;
        let _ = left.close().await;
        let _ = right.close().await;
        victim
    }
    match backend {
        Backend::Postgres => run::<PgConnection>(url, first, second).await,
        Backend::MySql => run::<MySqlConnection>(url, first, second).await,
        Backend::Sqlite => unreachable!("SQLite has one writer and no deadlocks"),
    }
}

/// Ends every other session on the database (the store's pool included) and returns the
/// error a statement on one of them then gets.
async fn ended_session(backend: Backend, url: &str) -> sqlx::Error {
    match backend {
        Backend::Postgres => {
            let mut victim = PgConnection::connect(url).await.unwrap();
            let mut admin = PgConnection::connect(url).await.unwrap();
            admin
                .execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                     WHERE datname = current_database() AND pid <> pg_backend_pid()",
                )
                .await
                .unwrap();
            let error = victim.execute("SELECT 1").await.unwrap_err();
            admin.close().await.unwrap();
            error
        }
        Backend::MySql => {
            let mut victim = MySqlConnection::connect(url).await.unwrap();
            let mut admin = MySqlConnection::connect(url).await.unwrap();
            let sessions: Vec<(i64,)> = sqlx::query_as(
                "SELECT ID FROM information_schema.PROCESSLIST \
                 WHERE DB = DATABASE() AND ID <> CONNECTION_ID()",
            )
            .fetch_all(&mut admin)
            .await
            .unwrap();
            for (id,) in sessions {
                // A session may end by itself meanwhile.
                let _ = admin.execute(format!("KILL {id}").as_str()).await;
            }
            let error = victim.execute("SELECT 1").await.unwrap_err();
            admin.close().await.unwrap();
            error
        }
        Backend::Sqlite => unreachable!("an SQLite file has no sessions to end"),
    }
}
