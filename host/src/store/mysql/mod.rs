//! The MySQL and MariaDB backend: the queue as a table in the application's own database, shared
//! by any number of hosts. MySQL 8.0.13+ and MariaDB 10.6+ run the same SQL (nothing
//! MariaDB-only; JSON_TABLE needs MySQL 8.0.4 and MariaDB 10.6, expression defaults MySQL 8.0.13).
//!
//! # Sessions
//!
//! URLs are `mysql://USER:PASSWORD@HOST:PORT/DATABASE`, for MariaDB too. A pool of
//! [`POOL_SIZE`] connections serves every caller. Each session runs at READ COMMITTED and in
//! strict SQL mode, with the time zone set to UTC:
//!
//! - READ COMMITTED: the claim is a locking read (`FOR UPDATE SKIP LOCKED`) over the dispatch
//!   index. At InnoDB's default REPEATABLE READ a locking scan also takes gap (next-key) locks
//!   on what it walked past, which block enqueues inserting into those gaps and lead to
//!   deadlocks between claims and inserts; READ COMMITTED locks only the rows a statement takes,
//!   and every statement sees the latest committed rows, which is what a queue wants.
//! - Strict mode: a value that does not fit its column is refused, never silently cut.
//! - UTC: nothing here depends on the session time zone (times are BIGINT Unix milliseconds
//!   computed by the host; the column defaults do not depend on it either), but the driver
//!   assumes UTC for any time value it decodes.
//!
//! # Migrations
//!
//! `migrations/mysql/` is embedded and applied by [`open`] on a connection of its own, closed
//! afterwards, under a named lock (`GET_LOCK`), so hosts starting together take turns: the
//! first applies what is missing, the others then find nothing to do. sqlx's MySQL migrator
//! (`sqlx-mysql` 0.8.6, `migrate.rs`, `fn lock`) takes `SELECT GET_LOCK(?, -1)` itself, which
//! waits without end on MySQL, but MariaDB rejects the timeout -1 (warning 1411, the call
//! returns NULL and takes no lock), so on MariaDB it would not keep two hosts apart; see
//! [`migrate`]. Closing the connection releases every lock however the migration ended. DDL is
//! not transactional on MySQL, so each migration file is written to be safe to run again (see
//! `migrations/mysql/0001_async_task.sql`).
//!
//! # No notifications
//!
//! MySQL has no LISTEN/NOTIFY: [`Queue::watch_enqueues`] keeps its default (`false`). A host
//! still wakes at once for its own enqueues; tasks enqueued by other hosts or by application
//! SQL are seen at the next poll, so their pickup latency is up to the poll interval (1 s by
//! default, `poll_interval`) when the host is idle.
//!
//! # Layout
//!
//! - `rows.rs`: the column list, status codes, times, decoding rows into tasks.
//! - `enqueue.rs`: batched inserts with idempotency keys, and matching inserted ids to inputs.
//! - `claim.rs`: the claim transaction (`FOR UPDATE SKIP LOCKED`), setting unreadable rows aside.
//! - `completion.rs`: completion batches, fenced by lease and attempt.
//! - `running.rs`: the other writes to running tasks, fenced the same way: progress, lease
//!   extension, release, rescue.
//! - `padded.rs`: id lists bound one placeholder per id, padded to a few fixed lengths.
//! - `control.rs`: selections shared with the listing, bulk retry and discard in batches,
//!   paused task types, counts per type.
//! - `tasks.rs`: reading and listing tasks, retry and cancel, counts and backlog views.
//! - `history.rs`: the attempt history: reading it, and recording the attempts that
//!   completions, rescues, releases and cancels end.
//! - `archive.rs`: moving finished tasks to the archive (`SKIP LOCKED` batches), reading and
//!   purging it.
//! - `services.rs`: the effect ledger, key-value store, host-wide values and leadership.
//!
//! Batches travel as one JSON document expanded by `JSON_TABLE` where the statement would
//! otherwise need one placeholder per row: one statement text per operation, so each connection
//! prepares (and the server keeps) a handful of statements instead of one per batch size. The
//! hot path (claims, completions and their attempt records) binds padded lists instead
//! (`padded.rs`): a multi-table `UPDATE` joined to a `JSON_TABLE` stages its rows in a
//! temporary table first, and an `INSERT … SELECT` from one took half as long again as `VALUES`.

mod archive;
mod claim;
mod completion;
mod dialect;
mod enqueue;
mod history;
mod padded;
mod rows;
mod running;
mod tasks;
#[cfg(test)]
mod tests;

use async_trait::async_trait;
use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions};
use sqlx::{ConnectOptions, Connection, Executor};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use super::{SharedStore, Store, StoreError};

pub use claim::ClaimExplanation;

/// Connections per host: enough for the dispatcher, completer, lease keeper, rescuer, enqueues
/// and API reads to run side by side.
pub const POOL_SIZE: u32 = 10;
/// How long a caller waits for a free connection (or a new one) before the database counts as
/// unavailable. Short, so that while the server is away an API request answers 503 promptly.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);
/// What every new session runs (see the module docs).
const SESSION_SETUP: &str = "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED; \
     SET SESSION sql_mode = CONCAT(@@SESSION.sql_mode, ',STRICT_ALL_TABLES')";

/// A task store in a MySQL or MariaDB database.
pub struct MySqlStore {
    pool: MySqlPool,
    /// Most bytes of data one statement carries: half the server's `max_allowed_packet`, so a
    /// batch of large payloads or results is split into statements the server accepts.
    statement_bytes: usize,
}

/// Opens the store at `url`, applying the embedded migrations.
pub async fn open(url: &str) -> Result<SharedStore, StoreError> {
    Ok(Arc::new(MySqlStore::open(url).await?))
}

impl MySqlStore {
    /// Connects to the database `url` names and applies the embedded migrations.
    pub async fn open(url: &str) -> Result<Self, StoreError> {
        let options = MySqlConnectOptions::from_str(url)?
            .timezone(Some("+00:00".to_string()))
            .charset("utf8mb4");
        if options.get_database().is_none() {
            return Err(StoreError::UnsupportedUrl(super::describe_url(url)));
        }
        let mut migrator = options.connect().await?;
        let migrated = migrate(&mut migrator).await;
        let _ = migrator.close().await;
        migrated?;
        let pool = MySqlPoolOptions::new()
            .max_connections(POOL_SIZE)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .after_connect(|connection, _| {
                Box::pin(async move {
                    connection.execute(SESSION_SETUP).await?;
                    Ok(())
                })
            })
            .connect_with(options)
            .await?;
        let (packet,): (u64,) = sqlx::query_as("SELECT @@max_allowed_packet")
            .fetch_one(&pool)
            .await?;
        Ok(MySqlStore {
            pool,
            statement_bytes: usize::try_from(packet / 2).unwrap_or(usize::MAX),
        })
    }
}

/// The name of the lock migrations run under: per database, within MySQL's 64 characters.
const MIGRATION_LOCK: &str = "CONCAT('spool-migrations:', SHA1(DATABASE()))";
/// How long a host waits for another host's migration to finish.
const MIGRATION_WAIT_SECONDS: u32 = 24 * 3600;

/// Applies the embedded migrations under a named lock, so hosts starting together take turns.
///
/// sqlx's own migrator lock is `GET_LOCK(name, -1)`: a wait without end on MySQL, but on
/// MariaDB -1 is an invalid timeout (warning 1411): the call returns NULL at once and takes no
/// lock, and two hosts migrating the same database together would both apply migration 1.
/// The lock here has a timeout both accept.
async fn migrate(connection: &mut sqlx::MySqlConnection) -> Result<(), StoreError> {
    let (locked,): (Option<i64>,) =
        sqlx::query_as(&format!("SELECT GET_LOCK({MIGRATION_LOCK}, ?)"))
            .bind(MIGRATION_WAIT_SECONDS)
            .fetch_one(&mut *connection)
            .await?;
    if locked != Some(1) {
        return Err(StoreError::Migration(format!(
            "another host has been migrating this database for {} hours",
            MIGRATION_WAIT_SECONDS / 3600
        )));
    }
    // `run_direct` takes the connection itself; `run` (through `Acquire`) would make this
    // future unusable in `tokio::spawn` (sqlx's higher-ranked `Acquire` bound).
    let migrated = sqlx::migrate!("../migrations/mysql")
        .run_direct(&mut *connection)
        .await;
    let released = sqlx::query(&format!("SELECT RELEASE_LOCK({MIGRATION_LOCK})"))
        .execute(&mut *connection)
        .await;
    migrated?;
    released?;
    Ok(())
}

/// How often a transaction the server chose as a deadlock victim is run again. InnoDB rolls a
/// victim back whole, so running it again is safe.
const DEADLOCK_RETRIES: usize = 3;

/// An error inside a transaction that [`retry_deadlocks`] may run again: the driver's error is
/// kept as it is until that decision.
enum Failure {
    Sql(sqlx::Error),
    Store(StoreError),
}

impl From<sqlx::Error> for Failure {
    fn from(error: sqlx::Error) -> Self {
        Failure::Sql(error)
    }
}

impl From<StoreError> for Failure {
    fn from(error: StoreError) -> Self {
        Failure::Store(error)
    }
}

impl From<Failure> for StoreError {
    fn from(failure: Failure) -> Self {
        match failure {
            Failure::Sql(error) => error.into(),
            Failure::Store(error) => error,
        }
    }
}

/// Runs `transaction` until it is not a deadlock victim (at most [`DEADLOCK_RETRIES`] more times).
async fn retry_deadlocks<T, F, Fut>(mut transaction: F) -> Result<T, StoreError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, Failure>>,
{
    let mut retries = 0;
    loop {
        match transaction().await {
            Err(Failure::Sql(error))
                if error_number(&error) == Some(ER_LOCK_DEADLOCK) && retries < DEADLOCK_RETRIES =>
            {
                retries += 1;
                tracing::debug!(
                    retries,
                    "a transaction was chosen as a deadlock victim; running it again"
                );
            }
            outcome => return outcome.map_err(StoreError::from),
        }
    }
}

/// MySQL's ER_LOCK_DEADLOCK.
const ER_LOCK_DEADLOCK: u16 = 1213;

/// The server's error number, for a database error.
fn error_number(error: &sqlx::Error) -> Option<u16> {
    match error {
        sqlx::Error::Database(db) => db
            .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
            .map(|e| e.number()),
        _ => None,
    }
}

/// `items` cut into runs of at most `most` items and about `budget` bytes each, by the bytes
/// `size` says an item adds to a statement (an item larger than the budget goes alone).
fn bounded_chunks<T>(
    items: &[T],
    most: usize,
    budget: usize,
    size: impl Fn(&T) -> usize,
) -> Vec<&[T]> {
    let mut chunks = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, item) in items.iter().enumerate() {
        let item_bytes = size(item);
        if i > start && (i - start == most || bytes + item_bytes > budget) {
            chunks.push(&items[start..i]);
            (start, bytes) = (i, 0);
        }
        bytes += item_bytes;
    }
    if start < items.len() {
        chunks.push(&items[start..]);
    }
    chunks
}

/// Joins serialized JSON values into JSON arrays of about `budget` bytes each (a value larger
/// than the budget goes alone).
fn json_arrays(items: impl Iterator<Item = String>, budget: usize) -> Vec<String> {
    let mut arrays = Vec::new();
    let mut current = String::from("[");
    for item in items {
        if current.len() > 1 && current.len() + item.len() + 2 > budget {
            current.push(']');
            arrays.push(std::mem::replace(&mut current, String::from("[")));
        }
        if current.len() > 1 {
            current.push(',');
        }
        current.push_str(&item);
    }
    current.push(']');
    arrays.push(current);
    arrays
}

super::queue::queue_by_delegation!(MySqlStore {
    /// Three times the default. A claim moves its rows out of the pending part of the dispatch
    /// index, and InnoDB keeps the old entries (delete-marked) until its purge threads remove
    /// them, up to a second later under load. Every claim walks from the start of the pending
    /// entries, so it first steps over those its predecessors left: on MariaDB 10.11, 0.7 µs
    /// an entry, and about a fifth of the server's time in a drain at the default 20 ms. That
    /// cost is per claim, not per task, so fewer, larger claims pay it less often.
    fn claim_horizon(&self) -> std::time::Duration {
        3 * crate::store::DEFAULT_CLAIM_HORIZON
    }
});

#[async_trait]
impl Store for MySqlStore {
    async fn close(&self) {
        self.pool.close().await;
    }
}
