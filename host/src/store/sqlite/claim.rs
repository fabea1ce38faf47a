//! Claims on SQLite ([`crate::store::Queue::claim`]): one `UPDATE … WHERE id IN (SELECT … LIMIT n)
//! RETURNING` on the writer thread (`writer.rs`), atomic under SQLite's single writer, so two hosts
//! never take the same row; a claimed row that cannot be read is failed with the reason.

use serde_json::json;

use super::SqliteStore;
use super::rows::task_rows;
use super::writer::Claimed;
use crate::store::encoding::millis;
use crate::store::queue::lease_ms;
use crate::store::rows::TaskRow;
use crate::store::{ClaimRequest, StoreError};
use crate::task::Task;
use rusqlite::{Connection, params};

/// The claim: due pending rows of the given types in dispatch order, leased to the owner.
const CLAIM: &str = "UPDATE async_task SET status = 1, attempts = attempts + 1, lease_owner = ?1, \
         lease_expires_at = ?2, attempted_at = ?3, updated_at = ?3, progress = NULL, progress_note = NULL \
     WHERE id IN ( \
         SELECT id FROM async_task INDEXED BY async_task_dispatch \
         WHERE status = 0 AND next_run_at <= ?3 \
           AND task_type IN (SELECT value FROM json_each(?4)) \
         ORDER BY priority DESC, next_run_at, id \
         LIMIT ?5) \
     RETURNING *";

/// A claimed row that cannot be read is failed with the reason, so it does not come back.
pub(super) const FAIL_UNREADABLE: &str = "UPDATE async_task SET status = 3, finished_at = ?2, updated_at = ?2, \
     lease_owner = NULL, lease_expires_at = NULL, last_error = ?3 WHERE id = ?1";

impl SqliteStore {
    pub(super) async fn claim(&self, request: &ClaimRequest) -> Result<Vec<Task>, StoreError> {
        let rows = self.hot.claim(&self.writer, request.clone()).await?;
        let (mut tasks, unreadable) =
            crate::store::split_unreadable(rows.into_iter().map(Task::try_from))?;
        if !unreadable.is_empty() {
            let failed = unreadable
                .into_iter()
                .map(|(id, reason)| {
                    tracing::error!(
                        task_id = id,
                        "failing a claimed task whose row cannot be read: {reason}"
                    );
                    (
                        id,
                        crate::store::unreadable_reason(&StoreError::Corrupt { id, reason }),
                    )
                })
                .collect();
            // The readable tasks are leased to us whatever happens here: return them. If the
            // unreadable ones cannot be failed now, their leases expire and a later claim
            // fails them.
            if let Err(error) = self
                .hot
                .fail_unreadable(&self.writer, failed, millis(request.now))
                .await
            {
                tracing::warn!("could not fail unreadable claimed tasks: {error}");
            }
        }
        tasks.sort_by(|a, b| {
            b.priority
                .cmp(&a.priority)
                .then(a.next_run_at.cmp(&b.next_run_at))
                .then(a.id.cmp(&b.id))
        });
        Ok(tasks)
    }
}

/// Runs on the writer thread.
pub(super) fn write(
    connection: &Connection,
    request: &ClaimRequest,
) -> Result<Claimed, StoreError> {
    let now = millis(request.now);
    // The lease runs from now on the machine's clock, the one every rescue compares with.
    let lease_until = millis(chrono::Utc::now()).saturating_add(lease_ms(request.lease));
    let mut statement = connection.prepare_cached(CLAIM)?;
    task_rows(statement.query(params![
        request.owner,
        lease_until,
        now,
        json!(request.task_types).to_string(),
        request.limit as i64
    ])?)
}

/// Puts back claims that were committed after their caller stopped waiting (a claim cut off
/// at shutdown or by a timeout): the rows go back to pending with the attempt uncounted, as if
/// never claimed. Only rows still leased by that claim (same owner, same attempt) change. Runs
/// on the writer thread, in a transaction of its own.
pub(super) fn undo_undelivered(connection: &Connection, claims: &[TaskRow]) {
    let attempts: Vec<_> = claims
        .iter()
        .map(|row| json!({"task": row.id, "attempt": row.attempts, "owner": row.lease_owner}))
        .collect();
    let undone = connection.execute(UNDO_CLAIM, params![json!(attempts).to_string()]);
    match undone {
        Ok(rows) => tracing::warn!(
            tasks = rows,
            "put back tasks claimed for a caller that stopped waiting (no attempt is counted)"
        ),
        Err(error) => tracing::error!(
            "cannot put back tasks claimed for a caller that stopped waiting ({error}); \
             the rescuer takes them when their lease expires"
        ),
    }
}

const UNDO_CLAIM: &str = "UPDATE async_task NOT INDEXED SET status = 0, attempts = attempts - 1, \
         lease_owner = NULL, lease_expires_at = NULL \
     FROM (SELECT value ->> '$.task' AS id, value ->> '$.attempt' AS attempt, \
                  value ->> '$.owner' AS owner FROM json_each(?1)) AS a \
     WHERE async_task.id = a.id AND async_task.attempts = a.attempt \
       AND async_task.status = 1 AND async_task.lease_owner = a.owner";
