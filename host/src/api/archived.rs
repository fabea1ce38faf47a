//! Archived tasks in the task endpoints: `GET /tasks/{id}` finds a task that moved to the archive
//! (marked `archived: true` with its `archived_at`), and a retry or cancel of one answers 409
//! saying so. Listings (`GET /tasks`) show the live table only. See
//! [`crate::worker::upkeep::archiver`] for when tasks move.

use axum::http::StatusCode;

use super::AppState;
use super::error::ApiError;
use super::tasks::TaskView;
use crate::store::StoreError;
use crate::task::TaskId;

/// The archived task `id` as the API shows it, or 404 when the archive has none either.
pub async fn find(state: &AppState, id: TaskId) -> Result<TaskView, ApiError> {
    match state.store.get_archived(id).await? {
        Some(archived) => {
            let mut view = TaskView::from(archived.task);
            view.archived = true;
            view.archived_at = Some(archived.archived_at);
            Ok(view)
        }
        None => Err(StoreError::NotFound(id).into()),
    }
}

/// The answer to a change (`action`: "retried", "cancelled") of a task the live table does not
/// have: 409 when it is archived, else 404.
pub async fn not_live(state: &AppState, id: TaskId, action: &str) -> ApiError {
    match state.store.get_archived(id).await {
        Ok(Some(archived)) => ApiError::new(
            StatusCode::CONFLICT,
            "conflict",
            format!(
                "task {id} is archived ({}, archived at {}): an archived task cannot be {action}; enqueue a new task with its payload instead",
                archived.task.status,
                archived
                    .archived_at
                    .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
            ),
        ),
        Ok(None) => StoreError::NotFound(id).into(),
        Err(error) => error.into(),
    }
}
