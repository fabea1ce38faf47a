//! Claiming: the one statement that leases due tasks to a host, and what happens to a claimed
//! row the task model cannot read.
//!
//! The claim is one round trip: an `UPDATE … WHERE id IN (SELECT … FOR UPDATE SKIP LOCKED)
//! RETURNING …`. The inner SELECT walks the partial dispatch index `async_task_dispatch`
//! (`priority DESC, next_run_at, id WHERE status = 0`) in claim order and stops after `limit`
//! rows; `SKIP LOCKED` passes over rows another host's claim is locking right now instead of
//! waiting for it, so hosts claiming together never block each other and never take the same
//! row. RETURNING gives no order, so the rows are sorted into claim order here.
//!
//! A claimed row that cannot be read back (application SQL wrote a payload serde cannot read,
//! such as `{"n": 1e400}`, or a counter or time out of range) must not poison every later
//! claim by failing it: such a task is failed in the database on the spot, with the reason in
//! `last_error`, and the claim returns the others.

use chrono::Utc;

use super::PgStore;
use super::dialect::db_now_ms;
use super::rows::{TaskRow, column, millis, storable, task_columns};
use crate::store::{ClaimRequest, StoreError};
use crate::task::Task;

/// The claim's inner SELECT: the due pending tasks of the asked types, in claim order.
/// Parameters: $1 now (ms), $2 task types, $3 limit.
macro_rules! claim_candidates {
    () => {
        "SELECT id FROM async_task \
         WHERE status = 0 AND next_run_at <= $1 AND task_type = ANY($2) \
         ORDER BY priority DESC, next_run_at, id \
         LIMIT $3 \
         FOR UPDATE SKIP LOCKED"
    };
}

/// Leases the candidates. Parameters as [`claim_candidates!`], then $4 owner, $5 lease length
/// (ms, from now on the server's clock).
const CLAIM: &str = concat!(
    "UPDATE async_task SET status = 1, attempts = attempts + 1, lease_owner = $4, \
         lease_expires_at = ",
    db_now_ms!(),
    " + $5, attempted_at = $1, updated_at = $1, \
         progress = NULL, progress_note = NULL \
     WHERE id IN (",
    claim_candidates!(),
    ") RETURNING ",
    task_columns!()
);

/// Fails claimed attempts that cannot be read, fenced like a completion (only while still
/// running under this claim). Parameters: $1 owner, $2 ids, $3 attempts, $4 reasons, $5 now.
const FAIL_UNREADABLE: &str = "UPDATE async_task SET status = 3, last_error = u.reason, \
         finished_at = $5, lease_owner = NULL, lease_expires_at = NULL, updated_at = $5 \
     FROM UNNEST($2::bigint[], $3::bigint[], $4::text[]) AS u(id, attempt, reason) \
     WHERE async_task.id = u.id AND async_task.attempts = u.attempt \
       AND async_task.status = 1 AND async_task.lease_owner = $1";

/// A claimed attempt that could not be read, and why.
struct Unreadable {
    id: i64,
    attempt: i64,
    reason: String,
}

impl PgStore {
    pub(super) async fn claim(&self, request: &ClaimRequest) -> Result<Vec<Task>, StoreError> {
        let now = millis(request.now);
        let lease = crate::store::queue::lease_ms(request.lease);
        let limit = i64::try_from(request.limit).unwrap_or(i64::MAX);
        let mut rows: Vec<TaskRow> = sqlx::query_as(CLAIM)
            .bind(now)
            .bind(&request.task_types)
            .bind(limit)
            .bind(&request.owner)
            .bind(lease)
            .fetch_all(&self.pool)
            .await?;
        if rows.len() as i64 == limit {
            self.first_statistics.after_full_claim(&self.pool);
        }
        rows.sort_by(|a, b| {
            b.priority
                .cmp(&a.priority)
                .then(a.next_run_at.cmp(&b.next_run_at))
                .then(a.id.cmp(&b.id))
        });

        let mut tasks = Vec::with_capacity(rows.len());
        let mut unreadable = Vec::new();
        for row in rows {
            let (id, attempt) = (row.id, row.attempts);
            match Task::try_from(row) {
                Ok(task) => tasks.push(task),
                Err(error) => unreadable.push(Unreadable {
                    id,
                    attempt,
                    reason: storable(&crate::store::unreadable_reason(&error)).into_owned(),
                }),
            }
        }
        if !unreadable.is_empty() {
            // The readable tasks are leased to us whatever happens here: return them. If the
            // unreadable ones cannot be failed now, their leases expire and a later claim
            // fails them.
            if let Err(error) = self.fail_unreadable(&request.owner, &unreadable).await {
                tracing::warn!("could not fail unreadable claimed tasks: {error}");
            }
        }
        Ok(tasks)
    }

    async fn fail_unreadable(
        &self,
        owner: &str,
        unreadable: &[Unreadable],
    ) -> Result<(), StoreError> {
        for task in unreadable {
            tracing::warn!(task = task.id, "claimed task failed: {}", task.reason);
        }
        sqlx::query(FAIL_UNREADABLE)
            .bind(owner)
            .bind(column(unreadable, |u| u.id))
            .bind(column(unreadable, |u| u.attempt))
            .bind(column(unreadable, |u| u.reason.as_str()))
            .bind(millis(Utc::now()))
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)` of the claim's inner SELECT, exactly as
    /// [`crate::store::Store::claim`] runs it, for `request`: the plan the database chooses and
    /// what it read. It runs the SELECT (locking the rows until the statement ends) but leases
    /// nothing.
    pub async fn explain_claim(
        &self,
        request: &ClaimRequest,
    ) -> Result<serde_json::Value, StoreError> {
        use sqlx::Row;
        let row = sqlx::query(concat!(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ",
            claim_candidates!()
        ))
        .bind(millis(request.now))
        .bind(&request.task_types)
        .bind(i64::try_from(request.limit).unwrap_or(i64::MAX))
        .fetch_one(&self.pool)
        .await?;
        // The plan comes as a `json` value, whose wire format is its text.
        let text: &str = row.try_get_unchecked(0)?;
        serde_json::from_str(text)
            .map_err(|e| StoreError::Database(format!("unreadable plan: {e}")))
    }
}
