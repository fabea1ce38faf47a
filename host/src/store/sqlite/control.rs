//! Queue control on SQLite: selections (shared with the listing), bulk retry and discard in
//! batches, paused task types, counts per type.
//!
//! A batch picks ids through the read pool and changes them through the single writer in one
//! statement, so other writers (the completer, enqueues) get the write lock between batches.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::json;
use sqlx::{QueryBuilder, Sqlite};
use std::collections::BTreeMap;

use super::SqliteStore;
use crate::store::StatusCounts;
use crate::store::StoreError;
use crate::store::control::{
    BatchStep, BulkAction, Control, PausedType, TaskSelection, counts_per_type,
};
use crate::store::encoding::{millis, status_code, time_from_millis};
use crate::task::{Status, TaskId};

/// Appends the selection's conditions, each as ` AND …`, to a query on `async_task`.
pub(super) fn push_selection(query: &mut QueryBuilder<'_, Sqlite>, selection: &TaskSelection) {
    if !selection.ids.is_empty() {
        query
            .push(" AND id IN (SELECT value FROM json_each(")
            .push_bind(json!(selection.ids).to_string())
            .push("))");
    }
    if let Some(task_type) = &selection.task_type {
        query.push(" AND task_type = ").push_bind(task_type.clone());
    }
    if let Some(status) = selection.status {
        query.push(" AND status = ").push_bind(status_code(status));
    }
    if let Some(text) = &selection.error_contains {
        query
            .push(" AND instr(last_error, ")
            .push_bind(text.clone())
            .push(") > 0");
    }
    if let Some(since) = selection.since {
        query
            .push(" AND COALESCE(finished_at, created_at) >= ")
            .push_bind(millis(since));
    }
    if let Some(until) = selection.until {
        query
            .push(" AND COALESCE(finished_at, created_at) < ")
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
impl Control for SqliteStore {
    async fn selection_counts(
        &self,
        selection: &TaskSelection,
    ) -> Result<BTreeMap<String, StatusCounts>, StoreError> {
        let mut query = QueryBuilder::<Sqlite>::new(
            "SELECT task_type, status, COUNT(*) FROM async_task WHERE 1 = 1",
        );
        push_selection(&mut query, selection);
        query.push(" GROUP BY task_type, status");
        let rows: Vec<(String, i64, i64)> = query.build_query_as().fetch_all(&self.reader).await?;
        Ok(counts_per_type(rows))
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
        // One type in one state: a range of the listing index, in id order (pinned: without
        // statistics SQLite may prefer walking every row by id).
        let index = if selection.task_type.is_some() && selection.status.is_some() {
            "INDEXED BY async_task_listing"
        } else {
            ""
        };
        let mut pick =
            QueryBuilder::<Sqlite>::new(format!("SELECT id FROM async_task {index} WHERE id > "));
        pick.push_bind(after);
        pick.push(format!(" AND status IN {codes}"));
        push_selection(&mut pick, selection);
        pick.push(" ORDER BY id LIMIT ").push_bind(limit as i64);
        let ids: Vec<(i64,)> = pick.build_query_as().fetch_all(&self.reader).await?;
        let ids: Vec<TaskId> = ids.into_iter().map(|(id,)| id).collect();
        let Some(&last_id) = ids.last() else {
            return Ok(BatchStep::default());
        };
        let set = match action {
            BulkAction::Retry => {
                "status = 0, retry_count = 0, next_run_at = ?2, finished_at = NULL, result = NULL, \
                 updated_at = ?2"
            }
            // last_error first: it reads the state the task was in.
            BulkAction::Discard => {
                "last_error = CASE WHEN status = 3 THEN ?3 ELSE ?4 END || COALESCE(': ' || last_error, ''), \
                 status = 4, finished_at = ?2, updated_at = ?2, lease_owner = NULL, lease_expires_at = NULL"
            }
        };
        let sql = format!(
            "UPDATE async_task SET {set} \
             WHERE id IN (SELECT value FROM json_each(?1)) AND status IN {codes}"
        );
        let mut update = sqlx::query(&sql)
            .bind(json!(ids).to_string())
            .bind(millis(now));
        if action == BulkAction::Discard {
            update = update
                .bind(BulkAction::discard_note(Status::Failed))
                .bind(BulkAction::discard_note(Status::Pending));
        }
        let changed = update.execute(&self.writer).await?.rows_affected();
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
        sqlx::query(
            "INSERT INTO task_type_pause (task_type, paused_at) VALUES (?, ?) ON CONFLICT DO NOTHING",
        )
        .bind(task_type)
        .bind(millis(now))
        .execute(&self.writer)
        .await?;
        let (paused_at,): (i64,) =
            sqlx::query_as("SELECT paused_at FROM task_type_pause WHERE task_type = ?")
                .bind(task_type)
                .fetch_one(&self.writer)
                .await?;
        Ok(PausedType {
            task_type: task_type.to_string(),
            paused_at: time_from_millis(0, paused_at)?,
        })
    }

    async fn resume_type(&self, task_type: &str) -> Result<bool, StoreError> {
        let outcome = sqlx::query("DELETE FROM task_type_pause WHERE task_type = ?")
            .bind(task_type)
            .execute(&self.writer)
            .await?;
        Ok(outcome.rows_affected() > 0)
    }

    async fn paused_types(&self) -> Result<Vec<PausedType>, StoreError> {
        // Through the writer: a pause committed a moment ago must be seen.
        let rows: Vec<(String, i64)> =
            sqlx::query_as("SELECT task_type, paused_at FROM task_type_pause ORDER BY task_type")
                .fetch_all(&self.writer)
                .await?;
        rows.into_iter()
            .map(|(task_type, at)| {
                Ok(PausedType {
                    task_type,
                    paused_at: time_from_millis(0, at)?,
                })
            })
            .collect()
    }

    async fn counts_by_type(&self) -> Result<BTreeMap<String, StatusCounts>, StoreError> {
        let rows: Vec<(String, i64, i64)> = sqlx::query_as(
            "SELECT task_type, status, COUNT(*) FROM async_task GROUP BY task_type, status",
        )
        .fetch_all(&self.reader)
        .await?;
        Ok(counts_per_type(rows))
    }
}
