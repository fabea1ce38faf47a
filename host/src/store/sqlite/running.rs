//! Writes to running tasks other than completions (`completion.rs`) on SQLite: progress, lease
//! extensions, releases and the rescue of expired leases. Each is fenced like every backend's:
//! a row changes only while it still runs under the lease owner and claim the write names.
//! Releases and rescues record the attempts they end in the same transaction (`history.rs`).

use chrono::Utc;
use serde_json::json;

use super::SqliteStore;
use super::history;
use crate::store::encoding::{LEASE_EXPIRED, millis, status_code};
use crate::store::{AttemptId, ProgressUpdate, RescueReport, StoreError};
use crate::task::{Status, TaskId};

impl SqliteStore {
    pub(super) async fn record_progress(
        &self,
        updates: &[ProgressUpdate],
    ) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE async_task NOT INDEXED SET progress = p.percent, progress_note = p.note, updated_at = ?2 \
             FROM (SELECT value ->> '$.id' AS id, value ->> '$.percent' AS percent, \
                          value ->> '$.note' AS note FROM json_each(?1)) AS p \
             WHERE async_task.id = p.id AND async_task.status = 1",
        )
        .bind(json!(updates).to_string())
        .bind(millis(Utc::now()))
        .execute(&self.writer)
        .await?;
        Ok(())
    }

    pub(super) async fn extend_leases(
        &self,
        owner: &str,
        attempts: &[AttemptId],
        lease_ms: i64,
    ) -> Result<Vec<AttemptId>, StoreError> {
        let rows: Vec<(i64, i64)> = sqlx::query_as(
            "UPDATE async_task NOT INDEXED SET lease_expires_at = ?2 \
             FROM (SELECT value ->> '$.task' AS id, value ->> '$.attempt' AS attempt FROM json_each(?3)) AS a \
             WHERE async_task.id = a.id AND async_task.attempts = a.attempt \
               AND async_task.status = 1 AND async_task.lease_owner = ?1 \
             RETURNING async_task.id, async_task.attempts",
        )
        .bind(owner)
        .bind(millis(Utc::now()).saturating_add(lease_ms))
        .bind(json!(attempts).to_string())
        .fetch_all(&self.writer)
        .await?;
        Ok(AttemptId::from_rows(rows))
    }

    pub(super) async fn release(
        &self,
        owner: &str,
        attempts: &[AttemptId],
    ) -> Result<u64, StoreError> {
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

    pub(super) async fn rescue_expired(&self) -> Result<RescueReport, StoreError> {
        // Every host of one SQLite file shares the machine's clock: the database's clock.
        let now = Utc::now();
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
}
