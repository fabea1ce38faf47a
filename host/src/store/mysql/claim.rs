//! The claim: one short transaction that leases up to `limit` due pending tasks.
//!
//! MySQL has no `UPDATE … RETURNING`, so the claim takes two statements in one transaction:
//!
//! 1. `SELECT … FOR UPDATE SKIP LOCKED` walks the dispatch index in claim order (priority
//!    descending, then due time, then id) from the start of the pending rows, checking the due
//!    time and the type in the index entry, locks the first `limit` rows no other transaction
//!    holds and returns their columns. Rows another host is claiming at this moment are
//!    skipped, not waited for, so hosts never take the same task and never queue behind each
//!    other.
//! 2. `UPDATE … WHERE id IN (…)` marks them running under this host's lease and counts the
//!    attempt. The rows are locked since step 1, so nothing changed them in between: the host
//!    applies the same change to the rows it read ([`Task::claimed`]) instead of reading them
//!    back. The ids are bound as fixed-length lists (`padded.rs`), which keeps the update a
//!    primary-key range write with no temporary table.
//!
//! A row that cannot be read (an out-of-range time or a payload other SQL wrote, say) must not
//! come back in every later claim and block the queue: it is failed in the same transaction
//! with a `last_error` saying why, and the other tasks are claimed.

use chrono::{DateTime, Utc};
use sqlx::mysql::{MySqlArguments, MySqlRow};
use sqlx::query::Query;
use sqlx::{MySql, Row};
use std::sync::LazyLock;

use super::MySqlStore;
use super::dialect::DB_NOW_MS;
use super::padded;
use super::rows::{self, TASK_COLUMNS, Text, millis, status_code};
use crate::store::{ClaimRequest, StoreError};
use crate::task::{Status, Task, TaskId};

/// The claim's SELECT for `types` task types, returning the rows' columns; its placeholders
/// are the claim time, the types, and the limit.
///
/// `FORCE INDEX` pins the dispatch index (as SQLite's `INDEXED BY` does): it holds the claim
/// order, so the scan stops after `limit` matches, where the listing index (status, type, id)
/// would have to read and sort every pending row of the types first.
fn claim_select_sql(types: usize) -> String {
    let placeholders = padded::placeholders(types.max(1));
    format!(
        "SELECT {TASK_COLUMNS}, {DB_NOW_MS} AS db_now_ms \
         FROM async_task AS t FORCE INDEX (async_task_dispatch) \
         WHERE status = 0 AND next_run_at <= ? AND task_type IN ({placeholders}) \
         ORDER BY priority DESC, next_run_at, id \
         LIMIT ? FOR UPDATE SKIP LOCKED"
    )
}

/// The claim's UPDATE for each id list length; its placeholders are the lease owner, the lease's
/// end, the claim time (twice), and the ids.
static CLAIM_UPDATES: LazyLock<padded::Texts> = LazyLock::new(|| {
    padded::Texts::new(padded::LONGEST, |n| {
        format!(
            "UPDATE async_task \
             SET status = 1, attempts = attempts + 1, lease_owner = ?, lease_expires_at = ?, \
                 attempted_at = ?, updated_at = ?, progress = NULL, progress_note = NULL \
             WHERE id IN ({})",
            padded::placeholders(n)
        )
    })
});

/// How the server runs the claim's SELECT, as [`MySqlStore::explain_claim`] finds out.
#[derive(Debug, Clone)]
pub struct ClaimExplanation {
    /// `SELECT VERSION()`; MariaDB's contains `MariaDB`.
    pub version: String,
    /// MariaDB: `ANALYZE FORMAT=JSON` (the plan with the rows each step actually read).
    /// MySQL: `EXPLAIN FORMAT=JSON` (the plan with estimates).
    pub json: serde_json::Value,
    /// MySQL only: `EXPLAIN ANALYZE` (the plan as text, with the rows each step actually read).
    pub analyzed: Option<String>,
}

impl MySqlStore {
    /// Runs the claim's SELECT for `request` under the server's analyzer, in a transaction that
    /// is rolled back (the locks it took are released, nothing changes), and returns the plan.
    pub async fn explain_claim(
        &self,
        request: &ClaimRequest,
    ) -> Result<ClaimExplanation, StoreError> {
        let mut tx = self.pool.begin().await?;
        let (Text(version),): (Text,) = sqlx::query_as("SELECT VERSION()")
            .fetch_one(&mut *tx)
            .await?;
        let mariadb = version.contains("MariaDB");
        let select = claim_select_sql(request.task_types.len());
        let explain = format!(
            "{} {select}",
            if mariadb {
                "ANALYZE FORMAT=JSON"
            } else {
                "EXPLAIN FORMAT=JSON"
            }
        );
        let row = bind_claim(&explain, request).fetch_one(&mut *tx).await?;
        let Text(json) = row.try_get(0)?;
        let analyzed = match mariadb {
            true => None,
            false => {
                let analyze = format!("EXPLAIN ANALYZE {select}");
                let row = bind_claim(&analyze, request).fetch_one(&mut *tx).await?;
                Some(row.try_get::<Text, _>(0)?.0)
            }
        };
        tx.rollback().await?;
        let json = serde_json::from_str(&json)
            .map_err(|e| StoreError::Database(format!("the plan is not JSON: {e}")))?;
        Ok(ClaimExplanation {
            version,
            json,
            analyzed,
        })
    }

    pub(super) async fn claim(&self, request: &ClaimRequest) -> Result<Vec<Task>, StoreError> {
        // Times as stored (whole milliseconds), so the tasks returned equal the rows.
        let now = millis(request.now);
        let as_stored = |ms: i64| DateTime::from_timestamp_millis(ms).expect("a time in range");
        let mut tx = self.pool.begin().await?;

        let rows: Vec<MySqlRow> = bind_claim(&claim_select_sql(request.task_types.len()), request)
            .fetch_all(&mut *tx)
            .await?;
        // The lease runs from the SELECT's moment on the server's clock (one value per row).
        let lease_until = match rows.first() {
            Some(row) => row
                .try_get::<i64, _>("db_now_ms")?
                .saturating_add(crate::store::queue::lease_ms(request.lease)),
            None => {
                // Ended here, not left to the drop: a dropped transaction's rollback is only
                // sent with the connection's next statement, and until then the locks its scan
                // took on rows that were not yet due make a claim on another connection skip
                // them.
                tx.rollback().await?;
                return Ok(Vec::new());
            }
        };
        let (at, until) = (as_stored(now), as_stored(lease_until));
        let mut claimed = Vec::with_capacity(rows.len());
        for row in &rows {
            match rows::decode(row)? {
                (_, Ok(task)) => claimed.push(task.claimed(&request.owner, at, until)),
                (id, Err(error)) => {
                    tracing::error!(task = id, "{error}; failing it instead of running it");
                    // Under a savepoint: if the row cannot be failed now, it stays pending (a
                    // later claim tries again) and the readable tasks are claimed all the same.
                    sqlx::query("SAVEPOINT unreadable")
                        .execute(&mut *tx)
                        .await?;
                    let reason = crate::store::unreadable_reason(&error);
                    if let Err(failing) = fail_unreadable(&mut tx, id, &reason).await {
                        tracing::warn!(task = id, "could not fail the unreadable task: {failing}");
                        sqlx::query("ROLLBACK TO SAVEPOINT unreadable")
                            .execute(&mut *tx)
                            .await?;
                    }
                }
            }
        }
        let ids: Vec<TaskId> = claimed.iter().map(|task| task.id).collect();
        for chunk in ids.chunks(padded::LONGEST) {
            let list = padded::ids(chunk);
            let mut update = sqlx::query(CLAIM_UPDATES.get(list.len()))
                .bind(&request.owner)
                .bind(lease_until)
                .bind(now)
                .bind(now);
            for id in list {
                update = update.bind(id);
            }
            update.execute(&mut *tx).await?;
        }
        tx.commit().await?;
        // In claim order: the order the SELECT locked them in.
        Ok(claimed)
    }
}

/// `sql` (the claim's SELECT, perhaps under EXPLAIN) with the request's values bound.
fn bind_claim<'q>(sql: &'q str, request: &'q ClaimRequest) -> Query<'q, MySql, MySqlArguments> {
    let mut query = sqlx::query(sql).bind(millis(request.now));
    for task_type in &request.task_types {
        query = query.bind(task_type);
    }
    query.bind(request.limit as u64)
}

/// Moves a claimed row that cannot be read to failed, saying why.
async fn fail_unreadable(
    tx: &mut sqlx::MySqlConnection,
    id: TaskId,
    reason: &str,
) -> Result<(), StoreError> {
    let now = millis(Utc::now());
    sqlx::query(
        "UPDATE async_task SET status = ?, last_error = ?, finished_at = ?, updated_at = ?, \
             lease_owner = NULL, lease_expires_at = NULL \
         WHERE id = ?",
    )
    .bind(status_code(Status::Failed))
    .bind(reason)
    .bind(now)
    .bind(now)
    .bind(id)
    .execute(&mut *tx)
    .await?;
    Ok(())
}
