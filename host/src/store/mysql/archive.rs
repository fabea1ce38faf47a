//! The archive on MySQL/MariaDB ([`Archive`]): one short transaction per batch. A locking read
//! walks `async_task_finished` for old finished rows with `FOR UPDATE SKIP LOCKED` (a row being
//! retried, or taken by another host's batch, is skipped, never waited for); the rows it took are
//! copied into `async_task_archive` and deleted from `async_task` by primary key. At READ
//! COMMITTED the read locks only the rows it takes, no gaps, so claims (which read pending rows)
//! and enqueues never wait for a batch.
//!
//! The ids of a batch are written into its statements as a literal list (they are integers the
//! database just returned), so both statements are primary-key lookups on MySQL and MariaDB
//! alike; such statements are not kept prepared.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::MySqlStore;
use super::rows::{millis, status_code};
use crate::store::StoreError;
use crate::store::archive::{Archive, ArchiveBatch, ArchiveCounts, PURGED_WITH_TASK};
use crate::task::Status;

/// The columns an archived row copies, in both tables' names.
const COLUMNS: &str = "id, task_type, payload, status, priority, retry_count, max_retry, \
     next_run_at, idempotency_key, lease_owner, lease_expires_at, attempted_at, finished_at, \
     last_error, result, progress, progress_note, plugin_version, created_at, updated_at, log, \
     attempts, snoozes, depth";

/// `(2, 4)`: the codes of `statuses`, for an `IN`.
fn code_list(statuses: &[Status]) -> String {
    let codes: Vec<String> = statuses
        .iter()
        .map(|s| status_code(*s).to_string())
        .collect();
    format!("({})", codes.join(", "))
}

/// `(1, 2, 3)`: ids for an `IN`.
fn id_list(ids: &[i64]) -> String {
    let ids: Vec<String> = ids.iter().map(i64::to_string).collect();
    format!("({})", ids.join(", "))
}

#[async_trait]
impl Archive for MySqlStore {
    async fn move_batch(&self, batch: &ArchiveBatch) -> Result<ArchiveCounts, StoreError> {
        let mut tx = self.pool.begin().await?;
        let picked: Vec<(i64, i8)> = sqlx::query_as(&format!(
            "SELECT id, status FROM async_task FORCE INDEX (async_task_finished) \
             WHERE status IN {} AND finished_at < ? LIMIT ? FOR UPDATE SKIP LOCKED",
            code_list(&batch.statuses)
        ))
        .bind(millis(batch.finished_before))
        .bind(batch.limit as u64)
        .fetch_all(&mut *tx)
        .await?;
        if picked.is_empty() {
            tx.commit().await?;
            return Ok(ArchiveCounts::default());
        }
        let ids: Vec<i64> = picked.iter().map(|(id, _)| *id).collect();
        let ids = id_list(&ids);
        sqlx::query(&format!(
            "INSERT INTO async_task_archive ({COLUMNS}, archived_at) \
             SELECT {COLUMNS}, ? FROM async_task WHERE id IN {ids}"
        ))
        .bind(millis(batch.now))
        .persistent(false)
        .execute(&mut *tx)
        .await?;
        sqlx::query(&format!("DELETE FROM async_task WHERE id IN {ids}"))
            .persistent(false)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(ArchiveCounts::from_codes(
            picked.into_iter().map(|(_, code)| (i64::from(code), 1)),
        ))
    }

    async fn purge_batch(&self, before: DateTime<Utc>, limit: usize) -> Result<u64, StoreError> {
        let mut tx = self.pool.begin().await?;
        let picked: Vec<(i64,)> = sqlx::query_as(
            "SELECT id FROM async_task_archive FORCE INDEX (async_task_archive_age) \
             WHERE archived_at < ? LIMIT ? FOR UPDATE SKIP LOCKED",
        )
        .bind(millis(before))
        .bind(limit as u64)
        .fetch_all(&mut *tx)
        .await?;
        if picked.is_empty() {
            tx.commit().await?;
            return Ok(0);
        }
        let ids: Vec<i64> = picked.iter().map(|(id,)| *id).collect();
        let list = id_list(&ids);
        sqlx::query(&format!(
            "DELETE FROM async_task_archive WHERE id IN {list}"
        ))
        .persistent(false)
        .execute(&mut *tx)
        .await?;
        for table in PURGED_WITH_TASK {
            sqlx::query(&format!("DELETE FROM {table} WHERE task_id IN {list}"))
                .persistent(false)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(ids.len() as u64)
    }
}
