//! The attempt history on PostgreSQL (`async_task_attempt`, see [`crate::store::history`]):
//! recording the attempt a cancel ends. Completions, releases and rescues record theirs in
//! their own statements (`completion.rs`, `running.rs`); reading is portable.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use super::rows::millis;
use crate::store::StoreError;
use crate::store::history::{Outcome, trim_up_to};
use crate::task::TaskId;

/// The attempt a task is running: its number, host and start.
pub(super) struct Running {
    attempt: i64,
    host: Option<String>,
    started_at: Option<i64>,
}

/// Locks task `id` for the rest of the transaction (a claim skips it meanwhile, a completion
/// waits) and returns its running attempt, if it is running.
pub(super) async fn lock_running(
    conn: &mut PgConnection,
    id: TaskId,
) -> Result<Option<Running>, StoreError> {
    let row: Option<(i16, i64, Option<String>, Option<i64>)> = sqlx::query_as(
        "SELECT status, attempts, lease_owner, attempted_at FROM async_task WHERE id = $1 FOR UPDATE",
    )
    .bind(id)
    .fetch_optional(&mut *conn)
    .await?;
    Ok(row
        .filter(|(status, ..)| *status == super::rows::status_code(crate::task::Status::Running))
        .map(|(_, attempt, host, started_at)| Running {
            attempt,
            host,
            started_at,
        }))
}

/// Records [`Outcome::Cancelled`] for the attempt [`lock_running`] found, once the cancel
/// changed the row, and keeps the bound.
pub(super) async fn record_cancel(
    conn: &mut PgConnection,
    id: TaskId,
    running: Running,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO async_task_attempt (task_id, attempt, host, started_at, finished_at, outcome) \
         VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
    )
    .bind(id)
    .bind(running.attempt)
    .bind(&running.host)
    .bind(running.started_at)
    .bind(millis(now))
    .bind(Outcome::Cancelled.code() as i16)
    .execute(&mut *conn)
    .await?;
    if let Some(up_to) = trim_up_to(u32::try_from(running.attempt).unwrap_or(0)) {
        sqlx::query(
            "DELETE FROM async_task_attempt WHERE task_id = $1 AND attempt BETWEEN 2 AND $2",
        )
        .bind(id)
        .bind(i64::from(up_to))
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}
