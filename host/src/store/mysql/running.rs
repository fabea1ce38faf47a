//! Writes to running tasks other than completions (`completion.rs`): progress, lease extension,
//! release, rescue. Each is fenced like every backend's: a row changes only while it is still
//! running under the lease (owner) and the claim (attempt) the write names, so a late or stale
//! write never lands on a newer claim.
//!
//! Batches travel as one JSON array expanded by `JSON_TABLE` and joined to the table by primary
//! key: one statement per batch (more only when the batch is larger than the statement size
//! budget). `STRAIGHT_JOIN` makes the server read the batch first and look each row up by id,
//! whatever its statistics say about the running rows.
//!
//! Rescues and releases record the attempts they end in the attempt history in
//! the same transaction, after a locking read of the rows they change (`history.rs`).
//!
//! Counts come from the affected-rows value. The driver connects with `CLIENT_FOUND_ROWS`, so
//! that value counts the rows matched, not only those whose values changed; every fenced write
//! here changes the rows it matches anyway (the status or the lease time moves).

use chrono::Utc;
use serde_json::json;

use super::MySqlStore;
use super::dialect::DB_NOW_MS;
use super::history::{self, Ended, RUNNING_COLUMNS, Running};
use super::rows::millis;
use crate::store::history::Outcome;
use crate::store::{AttemptId, ProgressUpdate, RescueReport, StoreError};

use super::super::encoding::LEASE_EXPIRED;

/// Attempts as a JSON table: `[{"task": id, "attempt": n}, …]` (the serde form of [`AttemptId`]).
const ATTEMPTS_TABLE: &str = "JSON_TABLE(?, '$[*]' COLUMNS (c_id BIGINT PATH '$.task', c_attempt BIGINT PATH '$.attempt')) AS c \
     STRAIGHT_JOIN async_task AS t ON t.id = c.c_id AND t.attempts = c.c_attempt";

impl MySqlStore {
    pub(super) async fn record_progress(
        &self,
        updates: &[ProgressUpdate],
    ) -> Result<(), StoreError> {
        let items = updates.iter().map(|u| json!(u).to_string());
        let mut tx = self.pool.begin().await?;
        for batch in super::json_arrays(items, self.statement_bytes) {
            sqlx::query(
                "UPDATE JSON_TABLE(?, '$[*]' COLUMNS ( \
                         c_id BIGINT PATH '$.id', \
                         c_percent TINYINT PATH '$.percent', \
                         c_note TEXT CHARACTER SET utf8mb4 PATH '$.note')) AS c \
                 STRAIGHT_JOIN async_task AS t ON t.id = c.c_id \
                 SET t.progress = c.c_percent, t.progress_note = c.c_note, t.updated_at = ? \
                 WHERE t.status = 1",
            )
            .bind(batch)
            .bind(millis(Utc::now()))
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    pub(super) async fn extend_leases(
        &self,
        owner: &str,
        attempts: &[AttemptId],
        lease_ms: i64,
    ) -> Result<Vec<AttemptId>, StoreError> {
        let list = serde_json::to_string(attempts).expect("attempts serialize");
        let mut tx = self.pool.begin().await?;
        sqlx::query(&format!(
            "UPDATE {ATTEMPTS_TABLE} SET t.lease_expires_at = {DB_NOW_MS} + ? \
             WHERE t.status = 1 AND t.lease_owner = ?"
        ))
        .bind(&list)
        .bind(lease_ms)
        .bind(owner)
        .execute(&mut *tx)
        .await?;
        // The rows just extended: they are locked by this transaction until it commits, and a
        // row that did not match cannot match now (a claim always moves `attempts` on).
        let extended: Vec<(i64, i64)> = sqlx::query_as(&format!(
            "SELECT t.id, CAST(t.attempts AS SIGNED) FROM {ATTEMPTS_TABLE} WHERE t.status = 1 AND t.lease_owner = ?"
        ))
        .bind(&list)
        .bind(owner)
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(AttemptId::from_rows(extended))
    }

    pub(super) async fn release(
        &self,
        owner: &str,
        attempts: &[AttemptId],
    ) -> Result<u64, StoreError> {
        let now = millis(Utc::now());
        let list = serde_json::to_string(attempts).expect("attempts serialize");
        let mut tx = self.pool.begin().await?;
        let running: Vec<Running> = sqlx::query_as(&format!(
            "SELECT {RUNNING_COLUMNS} FROM {ATTEMPTS_TABLE} WHERE t.status = 1 AND t.lease_owner = ? FOR UPDATE"
        ))
        .bind(&list)
        .bind(owner)
        .fetch_all(&mut *tx)
        .await?;
        let outcome = sqlx::query(&format!(
            "UPDATE {ATTEMPTS_TABLE} \
             SET t.status = 0, t.lease_owner = NULL, t.lease_expires_at = NULL, t.next_run_at = ?, t.updated_at = ? \
             WHERE t.status = 1 AND t.lease_owner = ?"
        ))
        .bind(&list)
        .bind(now)
        .bind(now)
        .bind(owner)
        .execute(&mut *tx)
        .await?;
        let ended: Vec<Ended> = running
            .iter()
            .map(|r| Ended::without_result(r, now, Outcome::Released, None))
            .collect();
        history::record(&mut tx, &ended, self.statement_bytes).await?;
        tx.commit().await?;
        Ok(outcome.rows_affected())
    }

    pub(super) async fn rescue_expired(&self) -> Result<RescueReport, StoreError> {
        // Two statements, one per outcome, so each count is its statement's affected rows and no
        // SET clause reads a column another assignment of the same statement changed (MySQL
        // applies assignments left to right, each seeing the ones before it). Both walk the
        // lease index; a row with retries left is pending again after the first, so the second
        // only meets rows without.
        //
        // Expired by the server's clock, read once so that the attempts recorded and the rows
        // changed are the same; the times written are this host's, as every write's.
        let now = millis(Utc::now());
        let mut tx = self.pool.begin().await?;
        let (server_now,): (i64,) = sqlx::query_as(&format!("SELECT {DB_NOW_MS}"))
            .fetch_one(&mut *tx)
            .await?;
        let expired: Vec<Running> = sqlx::query_as(&format!(
            "SELECT {RUNNING_COLUMNS} FROM async_task AS t \
             WHERE t.status = 1 AND t.lease_expires_at < ? FOR UPDATE"
        ))
        .bind(server_now)
        .fetch_all(&mut *tx)
        .await?;
        let ended: Vec<Ended> = expired
            .iter()
            .map(|r| Ended::without_result(r, now, Outcome::Rescued, Some(LEASE_EXPIRED)))
            .collect();
        history::record(&mut tx, &ended, self.statement_bytes).await?;
        // Retried (pending again, the attempt counted), then failed (no retries left).
        let mut ended = [0; 2];
        for (count, (assignments, retries)) in ended.iter_mut().zip([
            (
                "status = 0, retry_count = retry_count + 1, next_run_at = ?",
                "<",
            ),
            ("status = 3, finished_at = ?", ">="),
        ]) {
            *count = sqlx::query(&format!(
                "UPDATE async_task SET {assignments}, last_error = ?, \
                     lease_owner = NULL, lease_expires_at = NULL, updated_at = ? \
                 WHERE status = 1 AND lease_expires_at < ? AND retry_count {retries} max_retry"
            ))
            .bind(now)
            .bind(LEASE_EXPIRED)
            .bind(now)
            .bind(server_now)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        }
        let [retried, failed] = ended;
        tx.commit().await?;
        Ok(RescueReport { retried, failed })
    }
}
