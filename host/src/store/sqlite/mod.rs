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
mod dialect;
mod history;
mod writer;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::json;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use std::str::FromStr;
use std::time::Duration;

use super::queue::Queue;
use super::{AttemptId, ClaimRequest, Completion, ProgressUpdate, RescueReport, Store, StoreError};
use crate::task::{Enqueued, NewTask, Status, Task, TaskId};

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
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            .acquire_timeout(BUSY_TIMEOUT * 3)
            .connect_with(options.clone())
            .await?;
        migrate(&writer, options.get_filename()).await?;
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

/// Applies the embedded migrations while holding an exclusive lock on `<database>.migrate-lock`
/// beside the file. Hosts opening a new file at once would otherwise each apply the first
/// migrations (sqlx takes no lock on SQLite) and all but one fail; with the lock, the others
/// wait and then find every migration applied. The lock is a separate file, not the database:
/// SQLite's own POSIX locks on the database are released when any descriptor of the file in
/// the process is closed.
async fn migrate(writer: &SqlitePool, database: &std::path::Path) -> Result<(), StoreError> {
    let mut name = database.as_os_str().to_owned();
    name.push(".migrate-lock");
    let path = std::path::PathBuf::from(name);
    let lock = tokio::task::spawn_blocking(move || -> std::io::Result<std::fs::File> {
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
    })?;
    let applied = sqlx::migrate!("../migrations/sqlite").run(writer).await;
    drop(lock);
    Ok(applied?)
}

use super::encoding::{LEASE_EXPIRED, millis, sql_codes_where as codes_where, status_code};
pub(crate) use super::rows::{TaskRow, into_tasks};

/// Matches the inserted rows of one chunk back to its inputs.
///
/// SQLite assigns increasing ids in VALUES order, so the inserted rows sorted by id are the
/// inputs that did not conflict, in input order. An input with an idempotency key was inserted
/// only if its key came back (and only its first occurrence within the chunk); every other
/// input is a duplicate, returned as `None` here and looked up afterwards.
fn match_inserted(chunk: &[NewTask], mut inserted: Vec<Task>) -> Vec<Option<Task>> {
    inserted.sort_by_key(|task| task.id);
    let mut returned_keys: std::collections::HashSet<(String, String)> = inserted
        .iter()
        .filter_map(|t| t.idempotency_key.clone().map(|k| (t.task_type.clone(), k)))
        .collect();
    let mut rows = inserted.into_iter();
    chunk
        .iter()
        .map(|new| match &new.idempotency_key {
            None => rows.next(),
            Some(key) if returned_keys.remove(&(new.task_type.clone(), key.clone())) => rows.next(),
            Some(_) => None,
        })
        .collect()
}

#[async_trait]
impl Queue for SqliteStore {
    async fn enqueue(&self, tasks: Vec<NewTask>) -> Result<Vec<Enqueued>, StoreError> {
        if tasks.is_empty() {
            return Ok(Vec::new());
        }
        self.hot.enqueue(&self.writer, tasks).await
    }

    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<Task>, StoreError> {
        if request.limit == 0 || request.task_types.is_empty() {
            return Ok(Vec::new());
        }
        let rows = self.hot.claim(&self.writer, request.clone()).await?;
        let (mut tasks, unreadable) =
            super::split_unreadable(rows.into_iter().map(Task::try_from))?;
        if !unreadable.is_empty() {
            let failed = unreadable
                .into_iter()
                .map(|(id, reason)| {
                    tracing::error!(
                        task_id = id,
                        "failing a claimed task whose row cannot be read: {reason}"
                    );
                    (
                        id,
                        super::unreadable_reason(&StoreError::Corrupt { id, reason }),
                    )
                })
                .collect();
            self.hot
                .fail_unreadable(&self.writer, failed, millis(request.now))
                .await?;
        }
        tasks.sort_by(|a, b| {
            b.priority
                .cmp(&a.priority)
                .then(a.next_run_at.cmp(&b.next_run_at))
                .then(a.id.cmp(&b.id))
        });
        Ok(tasks)
    }

    async fn complete(&self, completions: &[Completion]) -> Result<u64, StoreError> {
        if completions.is_empty() {
            return Ok(0);
        }
        self.hot.complete(&self.writer, completions.to_vec()).await
    }

    async fn record_progress(&self, updates: &[ProgressUpdate]) -> Result<(), StoreError> {
        if updates.is_empty() {
            return Ok(());
        }
        let batch: Vec<serde_json::Value> = updates
            .iter()
            .map(|u| json!({"id": u.id, "percent": u.percent, "note": u.note}))
            .collect();
        sqlx::query(
            "UPDATE async_task NOT INDEXED SET progress = p.percent, progress_note = p.note, updated_at = ?2 \
             FROM (SELECT value ->> '$.id' AS id, value ->> '$.percent' AS percent, \
                          value ->> '$.note' AS note FROM json_each(?1)) AS p \
             WHERE async_task.id = p.id AND async_task.status = 1",
        )
        .bind(serde_json::Value::Array(batch).to_string())
        .bind(millis(Utc::now()))
        .execute(&self.writer)
        .await?;
        Ok(())
    }

    async fn extend_leases(
        &self,
        owner: &str,
        attempts: &[AttemptId],
        until: DateTime<Utc>,
    ) -> Result<Vec<AttemptId>, StoreError> {
        if attempts.is_empty() {
            return Ok(Vec::new());
        }
        let rows: Vec<(i64, i64)> = sqlx::query_as(
            "UPDATE async_task NOT INDEXED SET lease_expires_at = ?2 \
             FROM (SELECT value ->> '$.task' AS id, value ->> '$.attempt' AS attempt FROM json_each(?3)) AS a \
             WHERE async_task.id = a.id AND async_task.attempts = a.attempt \
               AND async_task.status = 1 AND async_task.lease_owner = ?1 \
             RETURNING async_task.id, async_task.attempts",
        )
        .bind(owner)
        .bind(millis(until))
        .bind(json!(attempts).to_string())
        .fetch_all(&self.writer)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(task, attempt)| AttemptId {
                task,
                attempt: attempt as u32,
            })
            .collect())
    }

    async fn release(&self, owner: &str, attempts: &[AttemptId]) -> Result<u64, StoreError> {
        if attempts.is_empty() {
            return Ok(0);
        }
        let now = Utc::now();
        let mut tx = self.writer.begin().await?;
        history::record_releases(&mut tx, owner, attempts, now).await?;
        let now = millis(now);
        let outcome = sqlx::query(
            "UPDATE async_task NOT INDEXED SET status = 0, lease_owner = NULL, lease_expires_at = NULL, \
                 next_run_at = ?3, updated_at = ?3 \
             FROM (SELECT value ->> '$.task' AS id, value ->> '$.attempt' AS attempt FROM json_each(?2)) AS a \
             WHERE async_task.id = a.id AND async_task.attempts = a.attempt \
               AND async_task.status = 1 AND async_task.lease_owner = ?1",
        )
        .bind(owner)
        .bind(json!(attempts).to_string())
        .bind(now)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(outcome.rows_affected())
    }

    async fn rescue_expired(&self, now: DateTime<Utc>) -> Result<RescueReport, StoreError> {
        // SET expressions see the row as it was before the update, so `retry_count < max_retry`
        // asks whether the expired attempt had a retry left: then a retry is scheduled.
        let mut tx = self.writer.begin().await?;
        history::record_rescues(&mut tx, now).await?;
        let rescued: Vec<(i64, i64, i64)> = sqlx::query_as(
            "UPDATE async_task INDEXED BY async_task_lease SET \
                 status = CASE WHEN retry_count < max_retry THEN 0 ELSE 3 END, \
                 finished_at = CASE WHEN retry_count < max_retry THEN NULL ELSE ?1 END, \
                 retry_count = CASE WHEN retry_count < max_retry THEN retry_count + 1 ELSE retry_count END, \
                 next_run_at = ?1, last_error = ?2, \
                 lease_owner = NULL, lease_expires_at = NULL, updated_at = ?1 \
             WHERE status = 1 AND lease_expires_at < ?1 \
             RETURNING status, id, attempts",
        )
        .bind(millis(now))
        .bind(LEASE_EXPIRED)
        .fetch_all(&mut *tx)
        .await?;
        let ended: Vec<(TaskId, u32)> = rescued
            .iter()
            .map(|&(_, id, attempt)| (id, u32::try_from(attempt).unwrap_or(0)))
            .collect();
        history::trim(&mut tx, &ended).await?;
        tx.commit().await?;
        let mut report = RescueReport::default();
        for (code, _, _) in rescued {
            if code == status_code(Status::Pending) {
                report.retried += 1;
            } else {
                report.failed += 1;
            }
        }
        Ok(report)
    }

    async fn retry(&self, id: TaskId, now: DateTime<Utc>) -> Result<Task, StoreError> {
        let sql = format!(
            "UPDATE async_task SET status = 0, retry_count = 0, next_run_at = ?2, \
                 finished_at = NULL, result = NULL, updated_at = ?2 \
             WHERE id = ?1 AND status IN {} RETURNING *",
            codes_where(Status::can_retry)
        );
        let row: Option<TaskRow> = sqlx::query_as(&sql)
            .bind(id)
            .bind(millis(now))
            .fetch_optional(&self.writer)
            .await?;
        super::reads::changed_or_conflict(self, id, row, "retry", "failed or cancelled").await
    }

    async fn cancel(&self, id: TaskId, now: DateTime<Utc>) -> Result<Task, StoreError> {
        let sql = format!(
            "UPDATE async_task SET status = 4, finished_at = ?2, lease_owner = NULL, \
                 lease_expires_at = NULL, updated_at = ?2 \
             WHERE id = ?1 AND status IN {} RETURNING *",
            codes_where(Status::can_cancel)
        );
        let mut tx = self.writer.begin().await?;
        history::record_cancel(&mut tx, id, now).await?;
        let row: Option<TaskRow> = sqlx::query_as(&sql)
            .bind(id)
            .bind(millis(now))
            .fetch_optional(&mut *tx)
            .await?;
        tx.commit().await?;
        super::reads::changed_or_conflict(self, id, row, "cancel", "pending or running").await
    }
}

#[async_trait]
impl Store for SqliteStore {
    async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.reader).await?;
        Ok(())
    }

    async fn close(&self) {
        self.reader.close().await;
        self.writer.close().await;
    }
}
