//! Completions on SQLite ([`crate::store::Queue::complete`]): a batch is one JSON array applied by
//! one statement on the writer thread (`writer.rs`), after one more that records the attempts it
//! ends in the attempt history.

use serde_json::json;

use super::SqliteStore;
use super::history::{COLUMNS_WITH_COST as HISTORY_COLUMNS, TRIM as HISTORY_TRIM};
use crate::store::encoding::{millis, status_code};
use crate::store::history::{cost_columns, trim_up_to};
use crate::store::queue::{completion_assignments, completion_fence};
use crate::store::{Completion, StoreError, records};
use rusqlite::{Connection, params};
use std::sync::LazyLock;

/// A completion batch, one JSON array, applied to the rows still running under the
/// completion's owner and claim (a late completion of a rescued or cancelled task is fenced
/// off). Each element is decoded once (`jsonb`), not once per field.
const COMPLETE: &str = concat!(
    "WITH batch AS MATERIALIZED (SELECT jsonb(value) AS v FROM json_each(?1)) \
     UPDATE async_task NOT INDEXED SET ",
    completion_assignments!(),
    " FROM (SELECT v ->> '$.id' AS id, v ->> '$.owner' AS owner, \
                  v ->> '$.attempt' AS attempt, v ->> '$.status' AS status, \
                  v ->> '$.retry_count' AS retry_count, \
                  v ->> '$.next_run_at' AS next_run_at, v ->> '$.result' AS result, \
                  v ->> '$.error' AS error, v ->> '$.plugin_version' AS plugin_version, v ->> '$.log' AS log, \
                  v ->> '$.finished_at' AS finished_at, v ->> '$.now' AS now \
           FROM batch) AS c \
     WHERE ",
    completion_fence!()
);

/// The attempt records of a completion batch, for the attempts that will apply. Runs before
/// [`COMPLETE`], while the rows still show the claims being ended. Spelled once, not per batch.
static RECORD_COMPLETIONS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH batch AS MATERIALIZED (SELECT jsonb(value) AS v FROM json_each(?1)) \
         {HISTORY_COLUMNS} \
         SELECT t.id, t.attempts, c.owner, c.plugin_version, t.attempted_at, c.now, c.outcome, c.error, c.log, \
                c.wall_ms, c.fuel_used, c.peak_memory \
         FROM (SELECT v ->> '$.id' AS id, v ->> '$.owner' AS owner, \
                      v ->> '$.attempt' AS attempt, v ->> '$.outcome' AS outcome, \
                      v ->> '$.error' AS error, v ->> '$.plugin_version' AS plugin_version, \
                      v ->> '$.log' AS log, v ->> '$.now' AS now, v ->> '$.wall_ms' AS wall_ms, \
                      v ->> '$.fuel_used' AS fuel_used, v ->> '$.peak_memory' AS peak_memory \
               FROM batch) AS c \
         CROSS JOIN async_task AS t NOT INDEXED ON t.id = c.id \
         WHERE t.status = 1 AND t.lease_owner = c.owner AND t.attempts = c.attempt \
         ON CONFLICT DO NOTHING"
    )
});

/// An attempt record's insert ([`crate::store::records`]), spelled for SQLite once.
static SAVE_RECORD: LazyLock<String> =
    LazyLock::new(|| records::save_sql(&super::dialect::SqliteDialect, 1));

/// The batch's attempt records for `spool replay`, in the batch's transaction and in a
/// savepoint of their own: records the database refuses are logged and undone, and the
/// completions apply all the same.
fn keep_attempt_records(connection: &Connection, completions: &[Completion]) {
    if completions.iter().all(|c| c.record.is_none()) {
        return;
    }
    let now = millis(chrono::Utc::now());
    let write = || -> rusqlite::Result<()> {
        connection.execute_batch("SAVEPOINT records")?;
        let mut save = connection.prepare_cached(&SAVE_RECORD)?;
        let mut trim = connection.prepare_cached(records::TRIM)?;
        for c in completions {
            let Some(record) = &c.record else { continue };
            let bytes = i64::try_from(record.json.len()).unwrap_or(i64::MAX);
            save.execute(params![
                c.id,
                c.attempt,
                record.build,
                record.json,
                bytes,
                record.truncated,
                now
            ])?;
            if let Some(up_to) = trim_up_to(c.attempt) {
                trim.execute(params![c.id, up_to])?;
            }
        }
        connection.execute_batch("RELEASE records")
    };
    if let Err(error) = write() {
        if !connection.is_autocommit() {
            let _ = connection.execute_batch("ROLLBACK TO records; RELEASE records");
        }
        tracing::warn!("attempt records were not kept: {error}");
    }
}

impl SqliteStore {
    pub(super) async fn complete(&self, completions: &[Completion]) -> Result<u64, StoreError> {
        self.hot.complete(&self.writer, completions.to_vec()).await
    }
}

/// Runs on the writer thread.
pub(super) fn write(
    connection: &Connection,
    completions: &[Completion],
) -> Result<u64, StoreError> {
    // The attempts' records first, while their rows still show the claims being ended. Only
    // what the record needs: the result (often the largest text) stays out.
    let records: Vec<serde_json::Value> = completions
        .iter()
        .map(|c| {
            let (wall_ms, fuel_used, peak_memory) = cost_columns(c.cost.as_ref());
            json!({
                "id": c.id,
                "owner": c.owner,
                "attempt": c.attempt,
                "outcome": c.outcome.code(),
                "wall_ms": wall_ms,
                "fuel_used": fuel_used,
                "peak_memory": peak_memory,
                "error": c.transition.error,
                "plugin_version": c.plugin_version,
                "log": c.log,
                "now": millis(c.finished_at),
            })
        })
        .collect();
    connection
        .prepare_cached(&RECORD_COMPLETIONS)?
        .execute([serde_json::Value::Array(records).to_string()])?;
    keep_attempt_records(connection, completions);
    let mut trim = connection.prepare_cached(HISTORY_TRIM)?;
    for c in completions {
        if let Some(up_to) = trim_up_to(c.attempt) {
            trim.execute(params![c.id, i64::from(up_to)])?;
        }
    }
    let batch: Vec<serde_json::Value> = completions
        .iter()
        .map(|c| {
            let t = &c.transition;
            json!({
                "id": c.id,
                "owner": c.owner,
                "attempt": c.attempt,
                "status": status_code(t.status),
                "retry_count": t.retry_count,
                "next_run_at": t.next_run_at.map(millis),
                "result": t.result,
                "error": t.error,
                "plugin_version": c.plugin_version,
                "log": c.log,
                "finished_at": t.status.is_final().then(|| millis(c.finished_at)),
                "now": millis(c.finished_at),
            })
        })
        .collect();
    let changed = connection
        .prepare_cached(COMPLETE)?
        .execute([serde_json::Value::Array(batch).to_string()])?;
    Ok(changed as u64)
}
