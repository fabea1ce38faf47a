//! The embedded SQLite backend: one file, nothing to install or run.
//!
//! Connections run in WAL mode with `synchronous = NORMAL`: a committed transaction survives
//! the process being killed (the property the queue needs: a host killed mid-task loses
//! nothing); only an operating-system crash or power cut can lose the last commits.
//!
//! SQLite allows one writer at a time, so writes go through a pool of exactly one connection
//! (no lock contention, no `SQLITE_BUSY` between our own writers) while reads use a separate
//! pool of several read-only connections that WAL lets run beside the writer. Enqueues, claims
//! and completions, the statements every task passes through, run on a dedicated writer thread
//! with its own connection (`writer.rs`), which writes only while it holds that one pooled
//! connection, so the process still has one writer at a time. Other processes writing the
//! same file are waited for up to the busy timeout.
//!
//! Claims need no `SKIP LOCKED`: a single `UPDATE … WHERE id IN (SELECT … LIMIT n) RETURNING`
//! is atomic under SQLite's single-writer lock, so two hosts can never take the same row.
//!
//! Hot statements pin their access path (`INDEXED BY`, `NOT INDEXED` = by rowid): without
//! table statistics SQLite's planner preferred the listing index for the claim and sorted every
//! pending row of the type on each claim, which cost the claim + complete cycle about 4× on a
//! 100,000-row backlog. The dispatch index already holds the claim order, so the claim reads
//! its first rows and stops.

mod archive;
mod claim;
mod completion;
mod dialect;
mod enqueue;
mod history;
mod rows;
mod running;
mod tasks;
mod writer;

use async_trait::async_trait;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use std::str::FromStr;
use std::time::Duration;

use super::{Store, StoreError};

/// How long a statement waits for another process's write lock before failing.
pub(crate) const BUSY_TIMEOUT: Duration = Duration::from_secs(10);
/// Read connections; WAL lets them read while the single writer writes.
const READ_CONNECTIONS: u32 = 4;

/// A task store in one SQLite file.
pub struct SqliteStore {
    /// The connection for writes (a pool of one); also the gate the writer thread takes.
    writer: SqlitePool,
    reader: SqlitePool,
    /// Enqueues, claims and completions (`writer.rs`).
    hot: writer::Writer,
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `url` (`sqlite://PATH`) and applies the
    /// embedded migrations.
    pub async fn open(url: &str) -> Result<Self, StoreError> {
        let options = SqliteConnectOptions::from_str(url)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(BUSY_TIMEOUT)
            .pragma("temp_store", "memory");
        // Held until the store is open: hosts opening one file at once take turns.
        let _opening = lock_opening(options.get_filename()).await?;
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            .acquire_timeout(BUSY_TIMEOUT * 3)
            .connect_with(options.clone())
            .await?;
        sqlx::migrate!("../migrations/sqlite").run(&writer).await?;
        let hot = writer::Writer::start(options.get_filename())?;
        let reader = SqlitePoolOptions::new()
            .max_connections(READ_CONNECTIONS)
            .acquire_timeout(BUSY_TIMEOUT * 3)
            .connect_with(options.read_only(true))
            .await?;
        Ok(SqliteStore {
            writer,
            reader,
            hot,
        })
    }
}

/// Takes an exclusive lock on `<database>.migrate-lock` beside the file, for the time a store
/// opens: switching the file to WAL and applying the embedded migrations. Hosts opening a new
/// file at once would otherwise race: each would apply the first migrations (sqlx takes no
/// lock on SQLite) and all but one fail, and a connection switching a new file to WAL while
/// another does can be answered "database is locked" without waiting. With the lock, the others
/// wait and then find the file in WAL mode and every migration applied. The lock is a separate
/// file, not the database: SQLite's own POSIX locks on the database are released when any
/// descriptor of the file in the process is closed.
async fn lock_opening(database: &std::path::Path) -> Result<std::fs::File, StoreError> {
    let mut name = database.as_os_str().to_owned();
    name.push(".migrate-lock");
    let path = std::path::PathBuf::from(name);
    tokio::task::spawn_blocking(move || -> std::io::Result<std::fs::File> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)?;
        file.lock()?;
        Ok(file)
    })
    .await
    .map_err(|e| StoreError::Migration(e.to_string()))?
    .map_err(|e| {
        StoreError::Migration(format!(
            "cannot lock the migration lock file beside {}: {e}",
            database.display()
        ))
    })
}

super::queue::queue_by_delegation!(SqliteStore);

#[async_trait]
impl Store for SqliteStore {
    async fn close(&self) {
        self.reader.close().await;
        self.writer.close().await;
    }

    fn failed_part(&self) -> Option<(String, String)> {
        self.hot
            .fault()
            .map(|why| ("sqlite-writer".to_string(), why))
    }
}
