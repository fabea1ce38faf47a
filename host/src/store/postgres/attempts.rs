//! Writes to running attempts: completions, progress, lease extensions, releases and the rescue
//! of expired leases. Batches travel as one array per field, unpacked with `UNNEST`, so each
//! batch is one statement.
//!
//! Completions, releases and rescues record the attempts they end in the attempt history
//! (`async_task_attempt`) in that same statement: the change is a data-modifying `WITH` whose
//! `RETURNING` rows (exactly the rows it changed) feed the history's insert and its trim to
//! the bound (see [`crate::store::history`]).
//!
//! Every write to a running task is fenced like on every backend: it applies only to a row
//! that is still `status = 1` under the same lease owner and the same `attempts` (the claim it
//! came from). PostgreSQL re-checks these conditions on the newest version of a row that a
//! concurrent statement changed, so a completion racing a cancel or a rescue either lands
//! before it or finds the row no longer its own.

use chrono::{DateTime, Utc};

use super::PgStore;
use super::rows::{millis, status_code, storable};
use crate::store::history::{KEPT_ATTEMPTS, Outcome};
use crate::store::{AttemptId, Completion, ProgressUpdate, RescueReport, StoreError};
use crate::task::Status;

use super::super::encoding::LEASE_EXPIRED;

/// Parameters: one array per field, `c(...)` below; `$14` is
/// [`crate::store::history::KEPT_ATTEMPTS`].
const COMPLETE: &str = "WITH done AS ( \
     UPDATE async_task SET \
         status = c.status, \
         retry_count = c.retry_count, \
         next_run_at = COALESCE(c.next_run_at, async_task.next_run_at), \
         result = c.result, \
         last_error = CASE WHEN c.status = 2 THEN NULL ELSE COALESCE(c.error, async_task.last_error) END, \
         plugin_version = COALESCE(c.plugin_version, async_task.plugin_version), \
         log = c.log, \
         finished_at = c.finished_at, \
         snoozes = CASE WHEN c.status = 0 AND c.error IS NULL THEN async_task.snoozes + 1 ELSE 0 END, \
         lease_owner = NULL, lease_expires_at = NULL, \
         updated_at = c.now \
     FROM UNNEST($1::bigint[], $2::text[], $3::bigint[], $4::smallint[], $5::bigint[], $6::bigint[], \
                 $7::text[], $8::text[], $9::text[], $10::text[], $11::bigint[], $12::bigint[], \
                 $13::smallint[]) \
          AS c(id, owner, attempt, status, retry_count, next_run_at, result, error, plugin_version, \
               log, finished_at, now, outcome) \
     WHERE async_task.id = c.id AND async_task.status = 1 \
       AND async_task.lease_owner = c.owner AND async_task.attempts = c.attempt \
     RETURNING async_task.id, async_task.attempts AS attempt, c.owner AS host, c.plugin_version, \
               async_task.attempted_at AS started_at, c.now AS finished_at, c.outcome, c.error, c.log), \
 recorded AS (INSERT INTO async_task_attempt \
         (task_id, attempt, host, plugin_version, started_at, finished_at, outcome, error, log) \
     SELECT id, attempt, host, plugin_version, started_at, finished_at, outcome, error, log FROM done \
     ON CONFLICT DO NOTHING), \
 trimmed AS (DELETE FROM async_task_attempt AS a USING done \
     WHERE done.attempt > $14 + 1 AND a.task_id = done.id AND a.attempt BETWEEN 2 AND done.attempt - $14) \
 SELECT COUNT(*) FROM done";

impl PgStore {
    pub(super) async fn complete_attempts(
        &self,
        completions: &[Completion],
    ) -> Result<u64, StoreError> {
        if completions.is_empty() {
            return Ok(0);
        }
        // Rows are locked in id order, as a concurrent batch touching the same rows would.
        let mut batch: Vec<&Completion> = completions.iter().collect();
        batch.sort_by_key(|c| c.id);
        let text = |f: fn(&Completion) -> Option<&str>| {
            batch.iter().map(|c| f(c).map(storable)).collect::<Vec<_>>()
        };
        let (changed,): (i64,) = sqlx::query_as(COMPLETE)
            .bind(batch.iter().map(|c| c.id).collect::<Vec<_>>())
            .bind(batch.iter().map(|c| c.owner.as_str()).collect::<Vec<_>>())
            .bind(
                batch
                    .iter()
                    .map(|c| i64::from(c.attempt))
                    .collect::<Vec<_>>(),
            )
            .bind(
                batch
                    .iter()
                    .map(|c| status_code(c.transition.status))
                    .collect::<Vec<_>>(),
            )
            .bind(
                batch
                    .iter()
                    .map(|c| i64::from(c.transition.retry_count))
                    .collect::<Vec<_>>(),
            )
            .bind(
                batch
                    .iter()
                    .map(|c| c.transition.next_run_at.map(millis))
                    .collect::<Vec<_>>(),
            )
            .bind(text(|c| c.transition.result.as_deref()))
            .bind(text(|c| c.transition.error.as_deref()))
            .bind(text(|c| c.plugin_version.as_deref()))
            .bind(text(|c| c.log.as_deref()))
            .bind(
                batch
                    .iter()
                    .map(|c| {
                        c.transition
                            .status
                            .is_final()
                            .then(|| millis(c.finished_at))
                    })
                    .collect::<Vec<_>>(),
            )
            .bind(
                batch
                    .iter()
                    .map(|c| millis(c.finished_at))
                    .collect::<Vec<_>>(),
            )
            .bind(
                batch
                    .iter()
                    .map(|c| c.outcome.code() as i16)
                    .collect::<Vec<_>>(),
            )
            .bind(i64::from(KEPT_ATTEMPTS))
            .fetch_one(&self.pool)
            .await?;
        Ok(changed as u64)
    }

    pub(super) async fn record_progress_of(
        &self,
        updates: &[ProgressUpdate],
    ) -> Result<(), StoreError> {
        if updates.is_empty() {
            return Ok(());
        }
        sqlx::query(
            "UPDATE async_task SET progress = p.percent, progress_note = p.note, updated_at = $4 \
             FROM UNNEST($1::bigint[], $2::smallint[], $3::text[]) AS p(id, percent, note) \
             WHERE async_task.id = p.id AND async_task.status = 1",
        )
        .bind(updates.iter().map(|u| u.id).collect::<Vec<_>>())
        .bind(
            updates
                .iter()
                .map(|u| i16::from(u.percent))
                .collect::<Vec<_>>(),
        )
        .bind(
            updates
                .iter()
                .map(|u| storable(&u.note))
                .collect::<Vec<_>>(),
        )
        .bind(millis(Utc::now()))
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    pub(super) async fn extend(
        &self,
        owner: &str,
        attempts: &[AttemptId],
        until: DateTime<Utc>,
    ) -> Result<Vec<AttemptId>, StoreError> {
        if attempts.is_empty() {
            return Ok(Vec::new());
        }
        let rows: Vec<(i64, i64)> = sqlx::query_as(
            "UPDATE async_task SET lease_expires_at = $2 \
             FROM UNNEST($3::bigint[], $4::bigint[]) AS a(id, attempt) \
             WHERE async_task.id = a.id AND async_task.attempts = a.attempt \
               AND async_task.status = 1 AND async_task.lease_owner = $1 \
             RETURNING async_task.id, async_task.attempts",
        )
        .bind(owner)
        .bind(millis(until))
        .bind(attempts.iter().map(|a| a.task).collect::<Vec<_>>())
        .bind(
            attempts
                .iter()
                .map(|a| i64::from(a.attempt))
                .collect::<Vec<_>>(),
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .filter_map(|(task, attempt)| {
                Some(AttemptId {
                    task,
                    attempt: u32::try_from(attempt).ok()?,
                })
            })
            .collect())
    }

    pub(super) async fn release_attempts(
        &self,
        owner: &str,
        attempts: &[AttemptId],
    ) -> Result<u64, StoreError> {
        if attempts.is_empty() {
            return Ok(0);
        }
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
        .bind(attempts.iter().map(|a| a.task).collect::<Vec<_>>())
        .bind(
            attempts
                .iter()
                .map(|a| i64::from(a.attempt))
                .collect::<Vec<_>>(),
        )
        .bind(millis(Utc::now()))
        .bind(Outcome::Released.code() as i16)
        .bind(i64::from(KEPT_ATTEMPTS))
        .fetch_one(&self.pool)
        .await?;
        Ok(released as u64)
    }

    pub(super) async fn rescue(&self, now: DateTime<Utc>) -> Result<RescueReport, StoreError> {
        // SET expressions see the row as it was before the update, so `retry_count < max_retry`
        // asks whether the expired attempt had a retry left: then a retry is scheduled. SKIP
        // LOCKED: a row a completion is writing right now is that completion's; the next pass
        // sees how it ended. The locked rows, as they were, are the attempts' records.
        let statuses: Vec<(i16,)> = sqlx::query_as(
            "WITH expired AS ( \
                 SELECT id, attempts, lease_owner, attempted_at FROM async_task \
                 WHERE status = 1 AND lease_expires_at < $1 FOR UPDATE SKIP LOCKED), \
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
             SELECT status FROM rescued",
        )
        .bind(millis(now))
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
