//! The archive on PostgreSQL ([`Archive`]): one statement per batch. It picks old finished rows
//! through `async_task_finished` with `FOR UPDATE SKIP LOCKED` (a row being retried, or taken by
//! another host's batch, is skipped, never waited for), deletes them from `async_task` and
//! inserts what it deleted into `async_task_archive`, all in one transaction. Claims lock
//! pending rows only, so they never wait for a batch; deleting fires no wake-up trigger.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::PgStore;
use super::rows::{millis, status_code};
use crate::store::StoreError;
use crate::store::archive::{Archive, ArchiveBatch, ArchiveCounts, PURGED_WITH_TASK};
use crate::task::Status;

/// The columns an archived row copies, in both tables' names.
const COLUMNS: &str = "id, task_type, payload, status, priority, retry_count, max_retry, \
     attempts, next_run_at, idempotency_key, lease_owner, lease_expires_at, attempted_at, \
     finished_at, last_error, result, progress, progress_note, plugin_version, log, created_at, \
     updated_at, snoozes, depth";

fn codes(statuses: &[Status]) -> Vec<i16> {
    statuses.iter().map(|s| status_code(*s)).collect()
}

#[async_trait]
impl Archive for PgStore {
    async fn move_batch(&self, batch: &ArchiveBatch) -> Result<ArchiveCounts, StoreError> {
        let moved: Vec<(i16, i64)> = sqlx::query_as(&format!(
            "WITH picked AS ( \
                 SELECT id FROM async_task \
                 WHERE status = ANY($1) AND finished_at < $2 \
                 LIMIT $3 FOR UPDATE SKIP LOCKED), \
             moved AS ( \
                 DELETE FROM async_task AS t USING picked WHERE t.id = picked.id \
                 RETURNING t.*), \
             archived AS ( \
                 INSERT INTO async_task_archive ({COLUMNS}, archived_at) \
                 SELECT {COLUMNS}, $4 FROM moved \
                 RETURNING status) \
             SELECT status, COUNT(*) FROM archived GROUP BY status"
        ))
        .bind(codes(&batch.statuses))
        .bind(millis(batch.finished_before))
        .bind(batch.limit as i64)
        .bind(millis(batch.now))
        .fetch_all(&self.pool)
        .await?;
        Ok(ArchiveCounts::from_codes(
            moved.into_iter().map(|(code, n)| (i64::from(code), n)),
        ))
    }

    async fn purge_batch(&self, before: DateTime<Utc>, limit: usize) -> Result<u64, StoreError> {
        let mut tx = self.pool.begin().await?;
        let purged: Vec<i64> = sqlx::query_scalar(
            "WITH picked AS ( \
                 SELECT id FROM async_task_archive WHERE archived_at < $1 \
                 LIMIT $2 FOR UPDATE SKIP LOCKED) \
             DELETE FROM async_task_archive AS a USING picked WHERE a.id = picked.id \
             RETURNING a.id",
        )
        .bind(millis(before))
        .bind(limit as i64)
        .fetch_all(&mut *tx)
        .await?;
        if !purged.is_empty() {
            for table in PURGED_WITH_TASK {
                sqlx::query(&format!("DELETE FROM {table} WHERE task_id = ANY($1)"))
                    .bind(&purged)
                    .execute(&mut *tx)
                    .await?;
            }
        }
        tx.commit().await?;
        Ok(purged.len() as u64)
    }
}
