//! The PostgreSQL backend: many hosts share one task table in the application's own database.
//!
//! `postgres://` and `postgresql://` URLs open it. Each host keeps a pool of [`POOL_SIZE`]
//! connections (an acquire waits at most [`ACQUIRE_TIMEOUT`]; a connection that died while idle
//! is replaced before use, so a restarted server costs no failed statement). The schema and its
//! times are the ones every backend shares: status codes 0–4 as SMALLINT, times as BIGINT Unix
//! milliseconds (UTC), so nothing depends on the server's time zone or timestamp precision.
//!
//! Migrations (`migrations/postgres/`, embedded) run when a host opens the store, under a
//! PostgreSQL advisory lock: sqlx's migrator (`Migrator::run`, sqlx-core 0.8
//! `migrate/migrator.rs`) calls `lock()` before it even creates its `_sqlx_migrations` table,
//! and the PostgreSQL driver implements `lock()` as `SELECT pg_advisory_lock($1)` with a key
//! derived from the database name (sqlx-postgres 0.8 `migrate.rs`). Hosts starting together
//! therefore migrate one after the other: the first applies what is missing, the others wait,
//! then find nothing left to do. Each migration runs in a transaction with its bookkeeping
//! row. The migrator unlocks only on success, so it runs on a connection of its own that is
//! closed afterwards, which ends the session and with it the lock even when a migration failed.
//! (A host whose migration fails reports it and does not start; the others then migrate.)
//!
//! The modules:
//! - `rows`: the row type and the translation of codes, counters and times;
//! - `enqueue`: batched, idempotent inserts, matched back to their inputs;
//! - `claim`: the claim statement (`FOR UPDATE SKIP LOCKED` on the dispatch index) and claimed
//!   rows that cannot be read;
//! - `attempts`: completions, progress, leases, releases and rescue;
//! - `history`: the attempt history (completions, releases and rescues record theirs in
//!   `attempts`), and the record a cancel of a running task writes;
//! - `control`: selections shared with the listing, bulk retry and discard in batches, paused
//!   task types, counts per type;
//! - `archive`: moving finished tasks to the archive, reading and purging it;
//! - `wake`: LISTEN/NOTIFY, so other hosts' and applications' enqueues wake this host at once;
//! - this file: opening, reads, retry and cancel, the host services' tables, leadership.
//!
//! `docs/databases.md` shows the claim's plan on a million rows.

mod archive;
mod claim;
mod completion;
mod dialect;
mod enqueue;
mod history;
mod rows;
mod running;
mod statistics;
mod tasks;
mod wake;

#[cfg(test)]
mod tests;

use async_trait::async_trait;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::{Connection, PgConnection};
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

use super::{SharedStore, Store, StoreError};

/// Connections per host. The hot path needs few (one claim, one completion batch and the
/// lease keeper at a time); the rest serve the API and handlers' host calls.
pub const POOL_SIZE: u32 = 10;
/// How long a statement waits for a free connection, or for the server to accept one. Short, so
/// that while the server is away an API request answers 503 promptly instead of hanging.
pub const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

/// Opens the store at `url` (`postgres://` or `postgresql://`), applying the migrations.
pub async fn open(url: &str) -> Result<SharedStore, StoreError> {
    Ok(Arc::new(PgStore::connect(url).await?))
}

/// A task store in a PostgreSQL database.
pub struct PgStore {
    pool: PgPool,
    options: PgConnectOptions,
    /// Turns true when the store closes: the wake-up listeners stop.
    stop: watch::Sender<bool>,
    listeners: Mutex<Vec<JoinHandle<()>>>,
    /// Gives a new task table its first statistics ([`statistics`]).
    first_statistics: Arc<statistics::FirstStatistics>,
}

impl PgStore {
    /// Connects to the database at `url` and applies the embedded migrations.
    pub async fn connect(url: &str) -> Result<PgStore, StoreError> {
        // READ COMMITTED whatever the database's default: every statement here relies on it
        // (a claim skips rows others locked, a duplicate key is read in a new snapshot). The
        // space is escaped for the server's parser of startup options. Notices ("relation
        // _sqlx_migrations already exists, skipping" on every start) stay out of the log.
        let mut options = PgConnectOptions::from_str(url)?.options([
            ("default_transaction_isolation", r"read\ committed"),
            ("client_min_messages", "warning"),
        ]);
        if options.get_application_name().is_none() {
            // How Spool's sessions show in pg_stat_activity.
            options = options.application_name("spool");
        }
        // One direct connection first: a server that is down, or refuses the login, fails the
        // open at once with its own error (a pool would retry until its timeout).
        PgConnection::connect_with(&options).await?.close().await?;
        // Migrations on a connection of their own (a pool of one), closed afterwards: that
        // ends the session, releasing the advisory lock however the migration ended.
        let migrator = PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_with(options.clone())
            .await?;
        let migrated = sqlx::migrate!("../migrations/postgres")
            .run(&migrator)
            .await;
        migrator.close().await;
        migrated?;
        let pool = PgPoolOptions::new()
            .max_connections(POOL_SIZE)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_with(options.clone())
            .await?;
        let (stop, _) = watch::channel(false);
        let first_statistics = Arc::new(statistics::FirstStatistics::default());
        first_statistics.at_start(&pool);
        Ok(PgStore {
            pool,
            options,
            stop,
            listeners: Mutex::new(Vec::new()),
            first_statistics,
        })
    }
}

super::queue::queue_by_delegation!(PgStore {
    fn watch_enqueues(&self, wake: Arc<Notify>) -> bool {
        self.listen(wake::CHANNEL, wake);
        true
    }
});

impl PgStore {
    /// Spawns a listener on `channel` that wakes `wake`, stopped by [`Store::close`].
    fn listen(&self, channel: &'static str, wake: Arc<Notify>) {
        let listener = tokio::spawn(wake::listen(
            self.options.clone(),
            channel,
            wake,
            self.stop.subscribe(),
        ));
        self.listeners
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(listener);
    }
}

#[async_trait]
impl Store for PgStore {
    fn watch_deployments(&self, wake: Arc<Notify>) -> bool {
        self.listen(wake::DEPLOY_CHANNEL, wake);
        true
    }

    async fn close(&self) {
        self.stop.send_replace(true);
        let listeners = std::mem::take(
            &mut *self
                .listeners
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        );
        for listener in listeners {
            let _ = listener.await;
        }
        self.pool.close().await;
    }
}
