//! The archive on SQLite ([`Archive`]): batches move through the single writer, each one
//! transaction of three statements (copy the picked rows into the archive, delete them from the
//! live table), so a claim waits at most for one batch's commit.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::json;

use super::SqliteStore;
use crate::store::StoreError;
use crate::store::archive::{Archive, ArchiveBatch, ArchiveCounts, PURGED_WITH_TASK};
use crate::store::encoding::{millis, status_code};
use crate::task::Status;

/// The columns an archived row copies, in both tables' names.
const COLUMNS: &str = "id, task_type, payload, status, priority, retry_count, max_retry, \
     next_run_at, idempotency_key, lease_owner, lease_expires_at, attempted_at, finished_at, \
     last_error, result, progress, progress_note, plugin_version, created_at, updated_at, log, \
     attempts, snoozes, depth";

fn codes_json(statuses: &[Status]) -> String {
    json!(statuses.iter().map(|s| status_code(*s)).collect::<Vec<_>>()).to_string()
}

#[async_trait]
impl Archive for SqliteStore {
    async fn move_batch(&self, batch: &ArchiveBatch) -> Result<ArchiveCounts, StoreError> {
        let mut tx = self.writer.begin().await?;
        let moved: Vec<(i64, i64)> = sqlx::query_as(&format!(
            "INSERT INTO async_task_archive ({COLUMNS}, archived_at) \
             SELECT {COLUMNS}, ?1 FROM async_task INDEXED BY async_task_finished \
             WHERE status IN (SELECT value FROM json_each(?2)) AND finished_at < ?3 \
             LIMIT ?4 \
             RETURNING id, status"
        ))
        .bind(millis(batch.now))
        .bind(codes_json(&batch.statuses))
        .bind(millis(batch.finished_before))
        .bind(batch.limit as i64)
        .fetch_all(&mut *tx)
        .await?;
        let ids: Vec<i64> = moved.iter().map(|(id, _)| *id).collect();
        if !ids.is_empty() {
            sqlx::query("DELETE FROM async_task WHERE id IN (SELECT value FROM json_each(?1))")
                .bind(json!(ids).to_string())
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(ArchiveCounts::from_codes(
            moved.into_iter().map(|(_, code)| (code, 1)),
        ))
    }

    async fn purge_batch(&self, before: DateTime<Utc>, limit: usize) -> Result<u64, StoreError> {
        let mut tx = self.writer.begin().await?;
        let purged: Vec<(i64,)> = sqlx::query_as(
            "DELETE FROM async_task_archive WHERE id IN ( \
                 SELECT id FROM async_task_archive INDEXED BY async_task_archive_age \
                 WHERE archived_at < ?1 LIMIT ?2) \
             RETURNING id",
        )
        .bind(millis(before))
        .bind(limit as i64)
        .fetch_all(&mut *tx)
        .await?;
        if !purged.is_empty() {
            let ids = json!(purged.iter().map(|(id,)| *id).collect::<Vec<_>>()).to_string();
            for table in PURGED_WITH_TASK {
                sqlx::query(&format!(
                    "DELETE FROM {table} WHERE task_id IN (SELECT value FROM json_each(?1))"
                ))
                .bind(&ids)
                .execute(&mut *tx)
                .await?;
            }
        }
        tx.commit().await?;
        Ok(purged.len() as u64)
    }
}
