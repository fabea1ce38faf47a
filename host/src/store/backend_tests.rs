//! What the backends' own tests share (`postgres/tests.rs`, `mysql/tests.rs`): the database
//! servers they run against and their fixtures. `cargo xtask db start` starts the servers and
//! writes their URLs to `target/test-databases/urls.env`. Each test makes a database
//! of its own on the server. Without a URL the tests are skipped, unless the run requires the
//! servers (`SPOOL_TEST_REQUIRE_SERVERS`, or CI), as the store suite's server variants are.

use chrono::Utc;
use sqlx::{Connection, Executor};

use crate::store::Completion;
use crate::store::history::Outcome;
use crate::task::{Status, Task, Transition};

/// The server URL in `variable`, or None (the test skips) when the run does not require it.
pub fn server(variable: &str) -> Option<String> {
    let set = |name: &str| std::env::var(name).is_ok_and(|v| !v.is_empty() && v != "0");
    match std::env::var(variable) {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            let required = set("SPOOL_TEST_REQUIRE_SERVERS") || std::env::var_os("CI").is_some();
            assert!(
                !required,
                "{variable} is not set, and this run needs its server"
            );
            None
        }
    }
}

/// Runs `statement` on the server or database at `url`, over a connection of its own.
pub async fn execute<C>(url: &str, statement: &str)
where
    C: Connection,
    for<'c> &'c mut C: Executor<'c>,
{
    let mut connection = C::connect(url).await.expect("the test server answers");
    connection
        .execute(statement)
        .await
        .unwrap_or_else(|e| panic!("{statement}: {e}"));
    connection.close().await.unwrap();
}

/// A fresh database on the server at `url`: its name.
pub async fn create_database<C>(url: &str) -> String
where
    C: Connection,
    for<'c> &'c mut C: Executor<'c>,
{
    let name = format!("spool_unit_{:016x}", rand::random::<u64>());
    execute::<C>(url, &format!("CREATE DATABASE {name}")).await;
    name
}

/// The completion of `task`'s attempt as done, with these outputs.
pub fn done(task: &Task, result: &str, error: Option<&str>, log: &str) -> Completion {
    Completion {
        id: task.id,
        owner: task.lease_owner.clone().unwrap_or_default(),
        attempt: task.attempts,
        transition: Transition {
            status: Status::Done,
            retry_count: 0,
            next_run_at: None,
            result: Some(result.into()),
            error: error.map(Into::into),
        },
        outcome: Outcome::Done,
        plugin_version: Some("v1".into()),
        log: Some(log.into()),
        cost: None,
        finished_at: Utc::now(),
        record: None,
    }
}
