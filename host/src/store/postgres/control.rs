//! Queue control on PostgreSQL: selections (shared with the listing), bulk retry and discard in
//! batches, paused task types, counts per type.
//!
//! A batch is two autocommitted statements: pick ids (a plain read, no locks), then change
//! those still in a state the action applies to. Under READ COMMITTED the UPDATE waits for a
//! row another transaction holds (a claim) and re-checks its state on the committed version,
//! so a task a host claimed meanwhile is left alone.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::{Postgres, QueryBuilder};
use std::collections::BTreeMap;

use super::PgStore;
use super::rows::{millis, status_code, storable, time_from_millis};
use crate::store::control::{
    BatchStep, BulkAction, Control, PausedType, TaskSelection, counts_per_type,
};
use crate::store::{StatusCounts, StoreError};
use crate::task::{Status, TaskId};

/// Appends the selection's conditions, each as ` AND …`, to a query on `async_task`.
pub(super) fn push_selection(query: &mut QueryBuilder<'_, Postgres>, selection: &TaskSelection) {
    if !selection.ids.is_empty() {
        query
            .push(" AND id = ANY(")
            .push_bind(selection.ids.clone())
            .push(")");
    }
    if let Some(task_type) = &selection.task_type {
        query.push(" AND task_type = ").push_bind(task_type.clone());
    }
    if let Some(status) = selection.status {
        query.push(" AND status = ").push_bind(status_code(status));
    }
    if let Some(text) = &selection.error_contains {
        query
            .push(" AND strpos(last_error, ")
            .push_bind(storable(text).into_owned())
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

/// The codes of the states `action` applies to, bound as a `smallint[]`.
fn action_codes(action: BulkAction) -> Vec<i16> {
    Status::ALL
        .into_iter()
        .filter(|s| action.applies_to(*s))
        .map(status_code)
        .collect()
}

#[async_trait]
impl Control for PgStore {
    async fn selection_counts(
        &self,
        selection: &TaskSelection,
    ) -> Result<BTreeMap<String, StatusCounts>, StoreError> {
        let mut query = QueryBuilder::<Postgres>::new(
            "SELECT task_type, status, COUNT(*) FROM async_task WHERE TRUE",
        );
        push_selection(&mut query, selection);
        query.push(" GROUP BY task_type, status");
        let rows: Vec<(String, i16, i64)> = query.build_query_as().fetch_all(&self.pool).await?;
        Ok(counts_per_type(rows.into_iter().map(
            |(task_type, code, n)| (task_type, i64::from(code), n),
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
        let mut pick = QueryBuilder::<Postgres>::new("SELECT id FROM async_task WHERE id > ");
        pick.push_bind(after)
            .push(" AND status = ANY(")
            .push_bind(codes.clone())
            .push(")");
        push_selection(&mut pick, selection);
        pick.push(" ORDER BY id LIMIT ")
            .push_bind(i64::try_from(limit).unwrap_or(i64::MAX));
        let ids: Vec<(i64,)> = pick.build_query_as().fetch_all(&self.pool).await?;
        let ids: Vec<TaskId> = ids.into_iter().map(|(id,)| id).collect();
        let Some(&last_id) = ids.last() else {
            return Ok(BatchStep::default());
        };
        let changed = match action {
            BulkAction::Retry => {
                sqlx::query(
                    "UPDATE async_task SET status = 0, retry_count = 0, next_run_at = $2, \
                         finished_at = NULL, result = NULL, updated_at = $2 \
                     WHERE id = ANY($1) AND status = ANY($3)",
                )
                .bind(&ids)
                .bind(millis(now))
                .bind(&codes)
                .execute(&self.pool)
                .await?
            }
            BulkAction::Discard => {
                sqlx::query(
                    "UPDATE async_task SET \
                         last_error = (CASE WHEN status = 3 THEN $4 ELSE $5 END) || COALESCE(': ' || last_error, ''), \
                         status = 4, finished_at = $2, updated_at = $2, lease_owner = NULL, lease_expires_at = NULL \
                     WHERE id = ANY($1) AND status = ANY($3)",
                )
                .bind(&ids)
                .bind(millis(now))
                .bind(&codes)
                .bind(BulkAction::discard_note(Status::Failed))
                .bind(BulkAction::discard_note(Status::Pending))
                .execute(&self.pool)
                .await?
            }
        }
        .rows_affected();
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
            "INSERT INTO task_type_pause (task_type, paused_at) VALUES ($1, $2) \
             ON CONFLICT (task_type) DO NOTHING",
        )
        .bind(task_type)
        .bind(millis(now))
        .execute(&self.pool)
        .await?;
        let (paused_at,): (i64,) =
            sqlx::query_as("SELECT paused_at FROM task_type_pause WHERE task_type = $1")
                .bind(task_type)
                .fetch_one(&self.pool)
                .await?;
        Ok(PausedType {
            task_type: task_type.to_string(),
            paused_at: time_from_millis(0, paused_at)?,
        })
    }

    async fn resume_type(&self, task_type: &str) -> Result<bool, StoreError> {
        let outcome = sqlx::query("DELETE FROM task_type_pause WHERE task_type = $1")
            .bind(task_type)
            .execute(&self.pool)
            .await?;
        Ok(outcome.rows_affected() > 0)
    }

    async fn paused_types(&self) -> Result<Vec<PausedType>, StoreError> {
        let rows: Vec<(String, i64)> =
            sqlx::query_as("SELECT task_type, paused_at FROM task_type_pause ORDER BY task_type")
                .fetch_all(&self.pool)
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
        let rows: Vec<(String, i16, i64)> = sqlx::query_as(
            "SELECT task_type, status, COUNT(*) FROM async_task GROUP BY task_type, status",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(counts_per_type(rows.into_iter().map(
            |(task_type, code, n)| (task_type, i64::from(code), n),
        )))
    }
}
