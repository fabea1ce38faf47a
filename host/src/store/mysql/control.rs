//! Queue control on MySQL/MariaDB: selections (shared with the listing), bulk retry and discard
//! in batches, paused task types, counts per type.
//!
//! A batch is two autocommitted statements: pick ids (a plain, non-locking read), then change
//! those still in a state the action applies to. At READ COMMITTED InnoDB's UPDATE waits for a
//! row a claim holds and evaluates the condition on the latest committed version, so a task a
//! host claimed meanwhile is left alone. Note the order of the discard's assignments: MySQL
//! assigns left to right, and later assignments see earlier ones, so `last_error` (which reads
//! the state the task was in) comes before `status`.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::{MySql, QueryBuilder};
use std::collections::BTreeMap;

use super::MySqlStore;
use super::rows::{Text, millis, status_code, time_from_millis};
use crate::store::control::{
    BatchStep, BulkAction, Control, PausedType, TaskSelection, counts_per_type,
};
use crate::store::{StatusCounts, StoreError};
use crate::task::{Status, TaskId};

/// Appends the selection's conditions, each as ` AND …`, to a query on `async_task AS t`.
pub(super) fn push_selection(query: &mut QueryBuilder<'_, MySql>, selection: &TaskSelection) {
    if !selection.ids.is_empty() {
        query.push(" AND t.id IN (");
        let mut ids = query.separated(", ");
        for id in &selection.ids {
            ids.push_bind(*id);
        }
        query.push(")");
    }
    if let Some(task_type) = &selection.task_type {
        query
            .push(" AND t.task_type = ")
            .push_bind(task_type.clone());
    }
    if let Some(status) = selection.status {
        query
            .push(" AND t.status = ")
            .push_bind(status_code(status));
    }
    if let Some(text) = &selection.error_contains {
        // The column's collation (utf8mb4_bin) decides: case-sensitive, as on every backend.
        query
            .push(" AND LOCATE(")
            .push_bind(text.clone())
            .push(", t.last_error) > 0");
    }
    if let Some(since) = selection.since {
        query
            .push(" AND COALESCE(t.finished_at, t.created_at) >= ")
            .push_bind(millis(since));
    }
    if let Some(until) = selection.until {
        query
            .push(" AND COALESCE(t.finished_at, t.created_at) < ")
            .push_bind(millis(until));
    }
}

/// The codes of the states `action` applies to, as an SQL list.
fn action_codes(action: BulkAction) -> String {
    let codes: Vec<String> = Status::ALL
        .into_iter()
        .filter(|s| action.applies_to(*s))
        .map(|s| status_code(s).to_string())
        .collect();
    format!("({})", codes.join(", "))
}

#[async_trait]
impl Control for MySqlStore {
    async fn selection_counts(
        &self,
        selection: &TaskSelection,
    ) -> Result<BTreeMap<String, StatusCounts>, StoreError> {
        let mut query = QueryBuilder::<MySql>::new(
            "SELECT t.task_type, t.status, COUNT(*) FROM async_task AS t WHERE 1 = 1",
        );
        push_selection(&mut query, selection);
        query.push(" GROUP BY t.task_type, t.status");
        let rows: Vec<(Text, i8, i64)> = query.build_query_as().fetch_all(&self.pool).await?;
        Ok(counts_per_type(rows.into_iter().map(
            |(task_type, code, n)| (task_type.0, i64::from(code), n),
        )))
    }

    async fn bulk_step(
        &self,
        action: BulkAction,
        selection: &TaskSelection,
        after: TaskId,
        limit: usize,
        now: DateTime<Utc>,
    ) -> Result<BatchStep, StoreError> {
        let codes = action_codes(action);
        let mut pick = QueryBuilder::<MySql>::new("SELECT t.id FROM async_task AS t WHERE t.id > ");
        pick.push_bind(after)
            .push(format!(" AND t.status IN {codes}"));
        push_selection(&mut pick, selection);
        pick.push(" ORDER BY t.id LIMIT ").push_bind(limit as u64);
        let ids: Vec<(i64,)> = pick.build_query_as().fetch_all(&self.pool).await?;
        let ids: Vec<TaskId> = ids.into_iter().map(|(id,)| id).collect();
        let Some(&last_id) = ids.last() else {
            return Ok(BatchStep::default());
        };
        let mut update = QueryBuilder::<MySql>::new("UPDATE async_task SET ");
        match action {
            BulkAction::Retry => {
                update
                    .push("status = 0, retry_count = 0, next_run_at = ")
                    .push_bind(millis(now))
                    .push(", finished_at = NULL, result = NULL, updated_at = ")
                    .push_bind(millis(now));
            }
            BulkAction::Discard => {
                update
                    .push("last_error = CONCAT(CASE WHEN status = 3 THEN ")
                    .push_bind(BulkAction::discard_note(Status::Failed))
                    .push(" ELSE ")
                    .push_bind(BulkAction::discard_note(Status::Pending))
                    .push(
                        " END, COALESCE(CONCAT(': ', last_error), '')), status = 4, finished_at = ",
                    )
                    .push_bind(millis(now))
                    .push(", updated_at = ")
                    .push_bind(millis(now))
                    .push(", lease_owner = NULL, lease_expires_at = NULL");
            }
        }
        update.push(" WHERE id IN (");
        let mut listed = update.separated(", ");
        for id in &ids {
            listed.push_bind(*id);
        }
        update.push(format!(") AND status IN {codes}"));
        let changed = update.build().execute(&self.pool).await?.rows_affected();
        Ok(BatchStep {
            picked: ids.len(),
            last_id: Some(last_id),
            changed,
        })
    }

    async fn pause_type(
        &self,
        task_type: &str,
        now: DateTime<Utc>,
    ) -> Result<PausedType, StoreError> {
        // A no-op update on a duplicate: the first pause's time stays.
        sqlx::query(
            "INSERT INTO task_type_pause (task_type, paused_at) VALUES (?, ?) \
             ON DUPLICATE KEY UPDATE paused_at = paused_at",
        )
        .bind(task_type)
        .bind(millis(now))
        .execute(&self.pool)
        .await?;
        let (paused_at,): (i64,) =
            sqlx::query_as("SELECT paused_at FROM task_type_pause WHERE task_type = ?")
                .bind(task_type)
                .fetch_one(&self.pool)
                .await?;
        Ok(PausedType {
            task_type: task_type.to_string(),
            paused_at: time_from_millis(0, paused_at)?,
        })
    }

    async fn resume_type(&self, task_type: &str) -> Result<bool, StoreError> {
        let outcome = sqlx::query("DELETE FROM task_type_pause WHERE task_type = ?")
            .bind(task_type)
            .execute(&self.pool)
            .await?;
        Ok(outcome.rows_affected() > 0)
    }

    async fn paused_types(&self) -> Result<Vec<PausedType>, StoreError> {
        let rows: Vec<(Text, i64)> =
            sqlx::query_as("SELECT task_type, paused_at FROM task_type_pause ORDER BY task_type")
                .fetch_all(&self.pool)
                .await?;
        rows.into_iter()
            .map(|(task_type, at)| {
                Ok(PausedType {
                    task_type: task_type.0,
                    paused_at: time_from_millis(0, at)?,
                })
            })
            .collect()
    }

    async fn counts_by_type(&self) -> Result<BTreeMap<String, StatusCounts>, StoreError> {
        let rows: Vec<(Text, i8, i64)> = sqlx::query_as(
            "SELECT task_type, status, COUNT(*) FROM async_task GROUP BY task_type, status",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(counts_per_type(rows.into_iter().map(
            |(task_type, code, n)| (task_type.0, i64::from(code), n),
        )))
    }
}
