//! Writes to running tasks other than completions (`completion.rs`) on PostgreSQL: progress,
//! lease extensions, releases and the rescue of expired leases, each one statement over arrays
//! unpacked with `UNNEST`, fenced like completions (the row is still running under the lease
//! owner and claim the write names). Releases and rescues record the attempts they end in the
//! attempt history in that same statement.

use chrono::Utc;

use super::PgStore;
use super::dialect::db_now_ms;
use super::rows::{column, millis, status_code, storable};
use crate::store::history::{KEPT_ATTEMPTS, Outcome};
use crate::store::{AttemptId, ProgressUpdate, RescueReport, StoreError};
use crate::task::Status;

use super::super::encoding::LEASE_EXPIRED;

impl PgStore {
    pub(super) async fn record_progress(
        &self,
        updates: &[ProgressUpdate],
    ) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE async_task SET progress = p.percent, progress_note = p.note, updated_at = $4 \
             FROM UNNEST($1::bigint[], $2::smallint[], $3::text[]) AS p(id, percent, note) \
             WHERE async_task.id = p.id AND async_task.status = 1",
        )
        .bind(column(updates, |u| u.id))
        .bind(column(updates, |u| i16::from(u.percent)))
        .bind(column(updates, |u| storable(&u.note)))
        .bind(millis(Utc::now()))
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    pub(super) async fn extend_leases(
        &self,
        owner: &str,
        attempts: &[AttemptId],
        lease_ms: i64,
    ) -> Result<Vec<AttemptId>, StoreError> {
        let rows: Vec<(i64, i64)> = sqlx::query_as(concat!(
            "UPDATE async_task SET lease_expires_at = ",
            db_now_ms!(),
            " + $2 \
             FROM UNNEST($3::bigint[], $4::bigint[]) AS a(id, attempt) \
             WHERE async_task.id = a.id AND async_task.attempts = a.attempt \
               AND async_task.status = 1 AND async_task.lease_owner = $1 \
             RETURNING async_task.id, async_task.attempts"
        ))
        .bind(owner)
        .bind(lease_ms)
        .bind(column(attempts, |a| a.task))
        .bind(column(attempts, |a| i64::from(a.attempt)))
        .fetch_all(&self.pool)
        .await?;
        Ok(AttemptId::from_rows(rows))
    }

    pub(super) async fn release(
        &self,
        owner: &str,
        attempts: &[AttemptId],
    ) -> Result<u64, StoreError> {
        let (released,): (i64,) = sqlx::query_as(
            "WITH released AS ( \
                 UPDATE async_task SET status = 0, lease_owner = NULL, lease_expires_at = NULL, \
                     next_run_at = $4, updated_at = $4 \
                 FROM UNNEST($2::bigint[], $3::bigint[]) AS a(id, attempt) \
                 WHERE async_task.id = a.id AND async_task.attempts = a.attempt \
                   AND async_task.status = 1 AND async_task.lease_owner = $1 \
                 RETURNING async_task.id, async_task.attempts AS attempt, async_task.attempted_at), \
             recorded AS (INSERT INTO async_task_attempt \
                     (task_id, attempt, host, started_at, finished_at, outcome) \
                 SELECT id, attempt, $1, attempted_at, $4, $5 FROM released \
                 ON CONFLICT DO NOTHING), \
             trimmed AS (DELETE FROM async_task_attempt AS h USING released \
                 WHERE released.attempt > $6 + 1 AND h.task_id = released.id \
                   AND h.attempt BETWEEN 2 AND released.attempt - $6) \
             SELECT COUNT(*) FROM released",
        )
        .bind(owner)
        .bind(column(attempts, |a| a.task))
        .bind(column(attempts, |a| i64::from(a.attempt)))
        .bind(millis(Utc::now()))
        .bind(Outcome::Released.code() as i16)
        .bind(i64::from(KEPT_ATTEMPTS))
        .fetch_one(&self.pool)
        .await?;
        Ok(released as u64)
    }

    pub(super) async fn rescue_expired(&self) -> Result<RescueReport, StoreError> {
        // Expired by the server's clock; the times written are this host's, as every write's.
        // SET expressions see the row as it was before the update, so `retry_count < max_retry`
        // asks whether the expired attempt had a retry left: then a retry is scheduled. SKIP
        // LOCKED: a row a completion is writing right now is that completion's; the next pass
        // sees how it ended. The locked rows, as they were, are the attempts' records.
        let statuses: Vec<(i16,)> = sqlx::query_as(concat!(
            "WITH expired AS ( \
                 SELECT id, attempts, lease_owner, attempted_at FROM async_task \
                 WHERE status = 1 AND lease_expires_at < ",
            db_now_ms!(),
            " FOR UPDATE SKIP LOCKED), \
             rescued AS ( \
                 UPDATE async_task SET \
                     status = CASE WHEN retry_count < max_retry THEN 0 ELSE 3 END, \
                     finished_at = CASE WHEN retry_count < max_retry THEN NULL ELSE $1 END, \
                     retry_count = CASE WHEN retry_count < max_retry THEN retry_count + 1 ELSE retry_count END, \
                     next_run_at = $1, last_error = $2, \
                     lease_owner = NULL, lease_expires_at = NULL, updated_at = $1 \
                 FROM expired WHERE async_task.id = expired.id \
                 RETURNING async_task.status), \
             recorded AS (INSERT INTO async_task_attempt \
                     (task_id, attempt, host, started_at, finished_at, outcome, error) \
                 SELECT id, attempts, lease_owner, attempted_at, $1, $3, $2 FROM expired \
                 ON CONFLICT DO NOTHING), \
             trimmed AS (DELETE FROM async_task_attempt AS h USING expired \
                 WHERE expired.attempts > $4 + 1 AND h.task_id = expired.id \
                   AND h.attempt BETWEEN 2 AND expired.attempts - $4) \
             SELECT status FROM rescued"
        ))
        .bind(millis(Utc::now()))
        .bind(LEASE_EXPIRED)
        .bind(Outcome::Rescued.code() as i16)
        .bind(i64::from(KEPT_ATTEMPTS))
        .fetch_all(&self.pool)
        .await?;
        let mut report = RescueReport::default();
        for (code,) in statuses {
            if code == status_code(Status::Pending) {
                report.retried += 1;
            } else {
                report.failed += 1;
            }
        }
        Ok(report)
    }
}
