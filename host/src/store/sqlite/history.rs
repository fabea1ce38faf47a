//! The attempt history on SQLite (`async_task_attempt`, see [`crate::store::history`]).
//!
//! The writers here run inside the transaction of the change they record, on the single
//! writer connection, *before* that change: each selects the attempts it records from the
//! task rows as they still are (running, under the lease and claim being ended), and SQLite's
//! one writer guarantees the change that follows sees the same rows. A batch is one
//! `INSERT … SELECT` over a JSON array, so a completion batch costs one statement more, not
//! one per task.

use chrono::{DateTime, Utc};
use serde_json::json;
use sqlx::SqliteConnection;

use crate::store::encoding::{LEASE_EXPIRED, millis};
use crate::store::history::{Outcome, trim_up_to};
use crate::store::{AttemptId, StoreError};
use crate::task::TaskId;

/// The columns every insert below fills, in this order (the cost columns, which only a
/// completion fills, stay empty otherwise).
pub(super) const COLUMNS: &str = "INSERT INTO async_task_attempt \
     (task_id, attempt, host, plugin_version, started_at, finished_at, outcome, error, log) ";

/// [`COLUMNS`] with the cost columns, for completions.
pub(super) const COLUMNS_WITH_COST: &str = "INSERT INTO async_task_attempt \
     (task_id, attempt, host, plugin_version, started_at, finished_at, outcome, error, log, \
      wall_ms, fuel_used, peak_memory) ";

/// Records [`Outcome::Rescued`] for every running task whose lease expired before `now`. Run
/// before the rescue's update, with the same `now`.
pub(super) async fn record_rescues(
    conn: &mut SqliteConnection,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    sqlx::query(&format!(
        "{COLUMNS} \
         SELECT id, attempts, lease_owner, NULL, attempted_at, ?1, ?2, ?3, NULL \
         FROM async_task INDEXED BY async_task_lease \
         WHERE status = 1 AND lease_expires_at < ?1 \
         ON CONFLICT DO NOTHING"
    ))
    .bind(millis(now))
    .bind(Outcome::Rescued.code())
    .bind(LEASE_EXPIRED)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Records [`Outcome::Cancelled`] for the running attempt of task `id`, if it is running. Run
/// before the cancel's update.
pub(super) async fn record_cancel(
    conn: &mut SqliteConnection,
    id: TaskId,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    let recorded: Option<(i64,)> = sqlx::query_as(&format!(
        "{COLUMNS} \
         SELECT id, attempts, lease_owner, NULL, attempted_at, ?2, ?3, NULL, NULL \
         FROM async_task WHERE id = ?1 AND status = 1 \
         ON CONFLICT DO NOTHING RETURNING attempt"
    ))
    .bind(id)
    .bind(millis(now))
    .bind(Outcome::Cancelled.code())
    .fetch_optional(&mut *conn)
    .await?;
    match recorded {
        Some((attempt,)) => trim(conn, &[(id, u32::try_from(attempt).unwrap_or(0))]).await,
        None => Ok(()),
    }
}

/// Records [`Outcome::Released`] for the attempts being handed back that are still running
/// under `owner`. Run before the release's update.
pub(super) async fn record_releases(
    conn: &mut SqliteConnection,
    owner: &str,
    attempts: &[AttemptId],
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    sqlx::query(&format!(
        "{COLUMNS} \
         SELECT t.id, t.attempts, t.lease_owner, NULL, t.attempted_at, ?3, ?4, NULL, NULL \
         FROM (SELECT value ->> '$.task' AS id, value ->> '$.attempt' AS attempt FROM json_each(?2)) AS a \
         CROSS JOIN async_task AS t NOT INDEXED ON t.id = a.id \
         WHERE t.attempts = a.attempt AND t.status = 1 AND t.lease_owner = ?1 \
         ON CONFLICT DO NOTHING"
    ))
    .bind(owner)
    .bind(json!(attempts).to_string())
    .bind(millis(now))
    .bind(Outcome::Released.code())
    .execute(&mut *conn)
    .await?;
    let ended: Vec<(TaskId, u32)> = attempts.iter().map(|a| (a.task, a.attempt)).collect();
    trim(conn, &ended).await
}

/// Drops the records between an attempt's first and its last kept ones.
pub(super) const TRIM: &str =
    "DELETE FROM async_task_attempt WHERE task_id = ?1 AND attempt BETWEEN 2 AND ?2";

/// Keeps the bound after these attempts were recorded: deletes each task's records from 2 up
/// to the attempt minus [`crate::store::history::KEPT_ATTEMPTS`]. Nothing runs for attempts
/// within the bound.
pub(super) async fn trim(
    conn: &mut SqliteConnection,
    attempts: &[(TaskId, u32)],
) -> Result<(), StoreError> {
    for &(id, attempt) in attempts {
        if let Some(up_to) = trim_up_to(attempt) {
            sqlx::query(TRIM)
                .bind(id)
                .bind(i64::from(up_to))
                .execute(&mut *conn)
                .await?;
        }
    }
    Ok(())
}
