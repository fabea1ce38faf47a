//! Writes to running tasks, each fenced like every backend's: a row changes only while it is
//! still running under the lease (owner) and the claim (attempt) the write names, so a late or
//! stale write never lands on a newer claim.
//!
//! Batches travel as one JSON array expanded by `JSON_TABLE` and joined to the table by primary
//! key: one statement per batch (more only when the batch is larger than the statement size
//! budget). `STRAIGHT_JOIN` makes the server read the batch first and look each row up by id,
//! whatever its statistics say about the running rows.
//!
//! Completions, rescues and releases record the attempts they end in the attempt history in
//! the same transaction, after a locking read of the rows they change (`history.rs`).
//!
//! Counts come from the affected-rows value. The driver connects with `CLIENT_FOUND_ROWS`, so
//! that value counts the rows matched, not only those whose values changed; every fenced write
//! here changes the rows it matches anyway (the status or the lease time moves).

use chrono::{DateTime, Utc};
use serde_json::{Map, Value, json};

use super::MySqlStore;
use super::history::{self, Ended, RUNNING_COLUMNS, Running};
use super::rows::{millis, status_code};
use crate::store::history::Outcome;
use crate::store::{AttemptId, Completion, ProgressUpdate, RescueReport, StoreError};

use super::super::encoding::LEASE_EXPIRED;

/// Attempts as a JSON table: `[{"task": id, "attempt": n}, …]` (the serde form of [`AttemptId`]).
const ATTEMPTS_TABLE: &str = "JSON_TABLE(?, '$[*]' COLUMNS (c_id BIGINT PATH '$.task', c_attempt BIGINT PATH '$.attempt')) AS c \
     STRAIGHT_JOIN async_task AS t ON t.id = c.c_id AND t.attempts = c.c_attempt";

impl MySqlStore {
    pub(super) async fn complete_batch(
        &self,
        completions: &[Completion],
    ) -> Result<u64, StoreError> {
        if completions.is_empty() {
            return Ok(0);
        }
        let mut changed = 0;
        let mut tx = self.pool.begin().await?;
        // Lock the rows the batch will change, learning when their attempts started, and
        // record those attempts.
        let keys = completions
            .iter()
            .map(|c| json!({"id": c.id, "owner": c.owner, "attempt": c.attempt}).to_string());
        let mut started = std::collections::HashMap::new();
        for batch in super::json_arrays(keys, self.statement_bytes) {
            let rows: Vec<(i64, u32, Option<i64>)> = sqlx::query_as(
                "SELECT t.id, t.attempts, t.attempted_at \
                 FROM JSON_TABLE(?, '$[*]' COLUMNS ( \
                         c_id BIGINT PATH '$.id', \
                         c_owner VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.owner', \
                         c_attempt BIGINT PATH '$.attempt')) AS c \
                 STRAIGHT_JOIN async_task AS t ON t.id = c.c_id \
                 WHERE t.status = 1 AND t.lease_owner = c.c_owner AND t.attempts = c.c_attempt \
                 FOR UPDATE",
            )
            .bind(batch)
            .fetch_all(&mut *tx)
            .await?;
            started.extend(rows.into_iter().map(|(id, n, at)| ((id, n), at)));
        }
        let ended: Vec<Ended> = completions
            .iter()
            .filter_map(|c| {
                let started_at = *started.get(&(c.id, c.attempt))?;
                Some(Ended {
                    task: c.id,
                    attempt: c.attempt,
                    host: Some(&c.owner),
                    plugin_version: c.plugin_version.as_deref(),
                    started_at,
                    finished_at: millis(c.finished_at),
                    outcome: c.outcome,
                    error: c.transition.error.as_deref(),
                    log: c.log.as_deref(),
                })
            })
            .collect();
        history::record(&mut tx, &ended, self.statement_bytes).await?;
        for batch in super::json_arrays(
            completions.iter().map(completion_json),
            self.statement_bytes,
        ) {
            // Absent fields are NULL (JSON_TABLE's default on an empty path): the COALESCEs keep
            // the row's value where the transition has none.
            let outcome = sqlx::query(
                "UPDATE JSON_TABLE(?, '$[*]' COLUMNS ( \
                         c_id BIGINT PATH '$.id', \
                         c_owner VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.owner', \
                         c_attempt BIGINT PATH '$.attempt', \
                         c_status TINYINT PATH '$.status', \
                         c_retry_count BIGINT PATH '$.retry_count', \
                         c_next_run_at BIGINT PATH '$.next_run_at', \
                         c_result LONGTEXT CHARACTER SET utf8mb4 PATH '$.result', \
                         c_error LONGTEXT CHARACTER SET utf8mb4 PATH '$.error', \
                         c_plugin_version VARCHAR(255) CHARACTER SET utf8mb4 PATH '$.plugin_version', \
                         c_log LONGTEXT CHARACTER SET utf8mb4 PATH '$.log', \
                         c_finished_at BIGINT PATH '$.finished_at', \
                         c_now BIGINT PATH '$.now')) AS c \
                 STRAIGHT_JOIN async_task AS t ON t.id = c.c_id \
                 SET t.status = c.c_status, \
                     t.retry_count = c.c_retry_count, \
                     t.next_run_at = COALESCE(c.c_next_run_at, t.next_run_at), \
                     t.result = c.c_result, \
                     t.last_error = CASE WHEN c.c_status = 2 THEN NULL ELSE COALESCE(c.c_error, t.last_error) END, \
                     t.plugin_version = COALESCE(c.c_plugin_version, t.plugin_version), \
                     t.log = c.c_log, \
                     t.finished_at = c.c_finished_at, \
                     t.snoozes = CASE WHEN c.c_status = 0 AND c.c_error IS NULL THEN t.snoozes + 1 ELSE 0 END, \
                     t.lease_owner = NULL, t.lease_expires_at = NULL, \
                     t.updated_at = c.c_now \
                 WHERE t.status = 1 AND t.lease_owner = c.c_owner AND t.attempts = c.c_attempt",
            )
            .bind(batch)
            .execute(&mut *tx)
            .await?;
            changed += outcome.rows_affected();
        }
        tx.commit().await?;
        Ok(changed)
    }

    pub(super) async fn write_progress(
        &self,
        updates: &[ProgressUpdate],
    ) -> Result<(), StoreError> {
        if updates.is_empty() {
            return Ok(());
        }
        let items = updates
            .iter()
            .map(|u| json!({"id": u.id, "percent": u.percent, "note": u.note}).to_string());
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

    pub(super) async fn extend(
        &self,
        owner: &str,
        attempts: &[AttemptId],
        until: DateTime<Utc>,
    ) -> Result<Vec<AttemptId>, StoreError> {
        if attempts.is_empty() {
            return Ok(Vec::new());
        }
        let list = serde_json::to_string(attempts).expect("attempts serialize");
        let mut tx = self.pool.begin().await?;
        sqlx::query(&format!(
            "UPDATE {ATTEMPTS_TABLE} SET t.lease_expires_at = ? WHERE t.status = 1 AND t.lease_owner = ?"
        ))
        .bind(&list)
        .bind(millis(until))
        .bind(owner)
        .execute(&mut *tx)
        .await?;
        // The rows just extended: they are locked by this transaction until it commits, and a
        // row that did not match cannot match now (a claim always moves `attempts` on).
        let extended: Vec<(i64, u32)> = sqlx::query_as(&format!(
            "SELECT t.id, t.attempts FROM {ATTEMPTS_TABLE} WHERE t.status = 1 AND t.lease_owner = ?"
        ))
        .bind(&list)
        .bind(owner)
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(extended
            .into_iter()
            .map(|(task, attempt)| AttemptId { task, attempt })
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

    pub(super) async fn rescue(&self, now: DateTime<Utc>) -> Result<RescueReport, StoreError> {
        // Two statements, one per outcome, so each count is its statement's affected rows and no
        // SET clause reads a column another assignment of the same statement changed (MySQL
        // applies assignments left to right, each seeing the ones before it). Both walk the
        // lease index; a row with retries left is pending again after the first, so the second
        // only meets rows without.
        let now = millis(now);
        let mut tx = self.pool.begin().await?;
        let expired: Vec<Running> = sqlx::query_as(&format!(
            "SELECT {RUNNING_COLUMNS} FROM async_task AS t \
             WHERE t.status = 1 AND t.lease_expires_at < ? FOR UPDATE"
        ))
        .bind(now)
        .fetch_all(&mut *tx)
        .await?;
        let ended: Vec<Ended> = expired
            .iter()
            .map(|r| Ended::without_result(r, now, Outcome::Rescued, Some(LEASE_EXPIRED)))
            .collect();
        history::record(&mut tx, &ended, self.statement_bytes).await?;
        let retried = sqlx::query(
            "UPDATE async_task SET status = 0, retry_count = retry_count + 1, next_run_at = ?, last_error = ?, \
                 lease_owner = NULL, lease_expires_at = NULL, updated_at = ? \
             WHERE status = 1 AND lease_expires_at < ? AND retry_count < max_retry",
        )
        .bind(now)
        .bind(LEASE_EXPIRED)
        .bind(now)
        .bind(now)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        let failed = sqlx::query(
            "UPDATE async_task SET status = 3, finished_at = ?, last_error = ?, \
                 lease_owner = NULL, lease_expires_at = NULL, updated_at = ? \
             WHERE status = 1 AND lease_expires_at < ? AND retry_count >= max_retry",
        )
        .bind(now)
        .bind(LEASE_EXPIRED)
        .bind(now)
        .bind(now)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        tx.commit().await?;
        Ok(RescueReport { retried, failed })
    }
}

/// One completion as a JSON object; fields without a value are left out (NULL in the table).
fn completion_json(c: &Completion) -> String {
    let t = &c.transition;
    let mut item = Map::new();
    let mut put = |name: &str, value: Value| {
        if !value.is_null() {
            item.insert(name.to_string(), value);
        }
    };
    put("id", json!(c.id));
    put("owner", json!(c.owner));
    put("attempt", json!(c.attempt));
    put("status", json!(status_code(t.status)));
    put("retry_count", json!(t.retry_count));
    put("next_run_at", json!(t.next_run_at.map(millis)));
    put("result", json!(t.result));
    put("error", json!(t.error));
    put("plugin_version", json!(c.plugin_version));
    put("log", json!(c.log));
    put(
        "finished_at",
        json!(t.status.is_final().then(|| millis(c.finished_at))),
    );
    put("now", json!(millis(c.finished_at)));
    Value::Object(item).to_string()
}
