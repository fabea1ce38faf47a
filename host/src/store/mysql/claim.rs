//! The claim: one short transaction that leases up to `limit` due pending tasks.
//!
//! MySQL has no `UPDATE … RETURNING`, so the claim takes three statements in one transaction:
//!
//! 1. `SELECT id … FOR UPDATE SKIP LOCKED` walks the dispatch index in claim order (priority
//!    descending, then due time, then id) from the start of the pending rows, checking the due
//!    time and the type in the index entry, and locks the first `limit` rows no other
//!    transaction holds. Rows another host is claiming at this moment are skipped, not waited
//!    for, so hosts never take the same task and never queue behind each other.
//! 2. `UPDATE` marks them running under this host's lease and counts the attempt.
//! 3. `SELECT` reads them back.
//!
//! A row that cannot be read back (an out-of-range time or a payload other SQL wrote, say) must
//! not come back in every later claim and block the queue: it is failed in the same transaction
//! with a `last_error` saying why, and the other tasks are returned.

use chrono::Utc;
use sqlx::mysql::{MySqlArguments, MySqlRow};
use sqlx::query::QueryAs;
use sqlx::{FromRow, MySql};
use std::collections::HashMap;

use super::MySqlStore;
use super::rows::{self, TASK_COLUMNS, Text, millis, status_code};
use crate::store::{ClaimRequest, StoreError};
use crate::task::{Status, Task, TaskId};

/// The claim's SELECT for `types` task types; its placeholders are the claim time, the types,
/// and the limit.
///
/// `FORCE INDEX` pins the dispatch index (as SQLite's `INDEXED BY` does): it holds the claim
/// order, so the scan stops after `limit` matches, where the listing index (status, type, id)
/// would have to read and sort every pending row of the types first.
fn claim_select_sql(types: usize) -> String {
    let placeholders = vec!["?"; types.max(1)].join(", ");
    format!(
        "SELECT id FROM async_task FORCE INDEX (async_task_dispatch) \
         WHERE status = 0 AND next_run_at <= ? AND task_type IN ({placeholders}) \
         ORDER BY priority DESC, next_run_at, id \
         LIMIT ? FOR UPDATE SKIP LOCKED"
    )
}

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
        let (Text(json),): (Text,) = bind_claim(&explain, request).fetch_one(&mut *tx).await?;
        let analyzed = match mariadb {
            true => None,
            false => {
                let analyze = format!("EXPLAIN ANALYZE {select}");
                let (Text(text),): (Text,) =
                    bind_claim(&analyze, request).fetch_one(&mut *tx).await?;
                Some(text)
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

    pub(super) async fn claim_batch(
        &self,
        request: &ClaimRequest,
    ) -> Result<Vec<Task>, StoreError> {
        if request.limit == 0 || request.task_types.is_empty() {
            return Ok(Vec::new());
        }
        let now = millis(request.now);
        let lease_until = millis(request.now + crate::task::chrono_duration(request.lease));
        let mut tx = self.pool.begin().await?;

        let select = claim_select_sql(request.task_types.len());
        let ids: Vec<TaskId> = bind_claim::<(TaskId,)>(&select, request)
            .fetch_all(&mut *tx)
            .await?
            .into_iter()
            .map(|(id,)| id)
            .collect();
        if ids.is_empty() {
            tx.commit().await?;
            return Ok(Vec::new());
        }
        let id_list = serde_json::to_string(&ids).expect("ids serialize");

        sqlx::query(
            "UPDATE JSON_TABLE(?, '$[*]' COLUMNS (c_id BIGINT PATH '$')) AS c \
             STRAIGHT_JOIN async_task AS t ON t.id = c.c_id \
             SET t.status = 1, t.attempts = t.attempts + 1, t.lease_owner = ?, t.lease_expires_at = ?, \
                 t.attempted_at = ?, t.updated_at = ?, t.progress = NULL, t.progress_note = NULL",
        )
        .bind(&id_list)
        .bind(&request.owner)
        .bind(lease_until)
        .bind(now)
        .bind(now)
        .execute(&mut *tx)
        .await?;

        let rows: Vec<MySqlRow> = sqlx::query(&format!(
            "SELECT {TASK_COLUMNS} FROM JSON_TABLE(?, '$[*]' COLUMNS (c_id BIGINT PATH '$')) AS c \
             STRAIGHT_JOIN async_task AS t ON t.id = c.c_id"
        ))
        .bind(&id_list)
        .fetch_all(&mut *tx)
        .await?;
        let mut claimed: HashMap<TaskId, Task> = HashMap::with_capacity(rows.len());
        for row in &rows {
            match rows::decode(row)? {
                (_, Ok(task)) => {
                    claimed.insert(task.id, task);
                }
                (id, Err(error)) => {
                    tracing::error!(task = id, "{error}; failing it instead of running it");
                    fail_unreadable(&mut tx, id, &error.to_string()).await?;
                }
            }
        }
        tx.commit().await?;
        // In claim order: the order the SELECT locked them in.
        Ok(ids.iter().filter_map(|id| claimed.remove(id)).collect())
    }
}

/// `sql` (the claim's SELECT, perhaps under EXPLAIN) with the request's values bound.
fn bind_claim<'q, O>(
    sql: &'q str,
    request: &'q ClaimRequest,
) -> QueryAs<'q, MySql, O, MySqlArguments>
where
    O: for<'r> FromRow<'r, MySqlRow>,
{
    let mut query = sqlx::query_as(sql).bind(millis(request.now));
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
    .bind(format!("{reason}; failed without running"))
    .bind(now)
    .bind(now)
    .bind(id)
    .execute(&mut *tx)
    .await?;
    Ok(())
}
