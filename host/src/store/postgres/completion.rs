//! Completions on PostgreSQL ([`crate::store::Queue::complete`]): a batch travels as one array
//! per field, unpacked with `UNNEST`, and is one statement. That statement also records the
//! attempts it ends in the attempt history (`async_task_attempt`): the change is a
//! data-modifying `WITH` whose `RETURNING` rows (exactly the rows it changed) feed the
//! history's insert and its trim to the bound (see [`crate::store::history`]).
//!
//! Every write to a running task is fenced like on every backend: it applies only to a row
//! that is still `status = 1` under the same lease owner and the same `attempts` (the claim it
//! came from). PostgreSQL re-checks these conditions on the newest version of a row that a
//! concurrent statement changed, so a completion racing a cancel or a rescue either lands
//! before it or finds the row no longer its own.

use super::PgStore;
use super::rows::{column, millis, status_code, storable};
use crate::store::history::{KEPT_ATTEMPTS, cost_columns};
use crate::store::queue::{completion_assignments, completion_fence};
use crate::store::{Completion, StoreError};

/// Parameters: one array per field, `c(...)` below; `$14` is
/// [`crate::store::history::KEPT_ATTEMPTS`]; `$15` to `$17` the attempts' costs.
const COMPLETE: &str = concat!(
    "WITH done AS ( \
     UPDATE async_task SET ",
    completion_assignments!(),
    " FROM UNNEST($1::bigint[], $2::text[], $3::bigint[], $4::smallint[], $5::bigint[], $6::bigint[], \
                 $7::text[], $8::text[], $9::text[], $10::text[], $11::bigint[], $12::bigint[], \
                 $13::smallint[], $15::bigint[], $16::bigint[], $17::bigint[]) \
          AS c(id, owner, attempt, status, retry_count, next_run_at, result, error, plugin_version, \
               log, finished_at, now, outcome, wall_ms, fuel_used, peak_memory) \
     WHERE ",
    completion_fence!(),
    " RETURNING async_task.id, async_task.attempts AS attempt, c.owner AS host, c.plugin_version, \
               async_task.attempted_at AS started_at, c.now AS finished_at, c.outcome, c.error, c.log, \
               c.wall_ms, c.fuel_used, c.peak_memory), \
 recorded AS (INSERT INTO async_task_attempt \
         (task_id, attempt, host, plugin_version, started_at, finished_at, outcome, error, log, \
          wall_ms, fuel_used, peak_memory) \
     SELECT id, attempt, host, plugin_version, started_at, finished_at, outcome, error, log, \
            wall_ms, fuel_used, peak_memory FROM done \
     ON CONFLICT DO NOTHING), \
 trimmed AS (DELETE FROM async_task_attempt AS a USING done \
     WHERE done.attempt > $14 + 1 AND a.task_id = done.id AND a.attempt BETWEEN 2 AND done.attempt - $14) \
 SELECT COUNT(*) FROM done"
);

impl PgStore {
    pub(super) async fn complete(&self, completions: &[Completion]) -> Result<u64, StoreError> {
        crate::store::records::save_batch_records(self, completions).await;
        // Rows are locked in id order, as a concurrent batch touching the same rows would.
        let mut batch: Vec<&Completion> = completions.iter().collect();
        batch.sort_by_key(|c| c.id);
        let text = |f: fn(&Completion) -> Option<&str>| {
            batch.iter().map(|c| f(c).map(storable)).collect::<Vec<_>>()
        };
        let (changed,): (i64,) = sqlx::query_as(COMPLETE)
            .bind(column(&batch, |c| c.id))
            .bind(column(&batch, |c| c.owner.as_str()))
            .bind(column(&batch, |c| i64::from(c.attempt)))
            .bind(column(&batch, |c| status_code(c.transition.status)))
            .bind(column(&batch, |c| i64::from(c.transition.retry_count)))
            .bind(column(&batch, |c| c.transition.next_run_at.map(millis)))
            .bind(text(|c| c.transition.result.as_deref()))
            .bind(text(|c| c.transition.error.as_deref()))
            .bind(text(|c| c.plugin_version.as_deref()))
            .bind(text(|c| c.log.as_deref()))
            .bind(column(&batch, |c| {
                c.transition
                    .status
                    .is_final()
                    .then(|| millis(c.finished_at))
            }))
            .bind(column(&batch, |c| millis(c.finished_at)))
            .bind(column(&batch, |c| c.outcome.code() as i16))
            .bind(i64::from(KEPT_ATTEMPTS))
            .bind(column(&batch, |c| cost_columns(c.cost.as_ref()).0))
            .bind(column(&batch, |c| cost_columns(c.cost.as_ref()).1))
            .bind(column(&batch, |c| cost_columns(c.cost.as_ref()).2))
            .fetch_one(&self.pool)
            .await?;
        Ok(changed as u64)
    }
}
