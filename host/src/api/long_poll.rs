//! The long-poll of `GET /tasks/{id}?wait=`: the task is read again whenever the batch
//! completer announces that it finished (on this host), at least every
//! [`RECHECK`](crate::worker::run::finished::RECHECK) (for other hosts' completions), until it is
//! final, the wait ends, or the host begins to stop.

use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast;

use super::AppState;
use super::error::ApiError;
use super::tasks::read_task;
use crate::task::{Task, TaskId};

/// Waits up to `wait` for `task` to become final; returns it as last read. `finished` was
/// subscribed before `task` was read, so no completion in between is missed.
pub async fn until_final(
    state: &AppState,
    mut task: Task,
    wait: Duration,
    mut finished: broadcast::Receiver<Arc<[TaskId]>>,
) -> Result<Task, ApiError> {
    let id = task.id;
    let deadline = tokio::time::Instant::now() + wait;
    let stopping = state.shutdown.reached(crate::shutdown::Stage::Graceful);
    tokio::pin!(stopping);
    let mut woken_by_completer = true;
    while !task.status.is_final() && tokio::time::Instant::now() < deadline {
        let recheck =
            (tokio::time::Instant::now() + crate::worker::run::finished::RECHECK).min(deadline);
        let read_again = tokio::select! {
            () = &mut stopping => break,
            () = tokio::time::sleep_until(recheck) => true,
            batch = finished.recv(), if woken_by_completer => match batch {
                Ok(ids) => ids.contains(&id),
                // Fell behind: whatever was missed may have been this task.
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => true,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                    woken_by_completer = false;
                    false
                }
            },
        };
        if read_again {
            task = read_task(state, id).await?;
        }
    }
    Ok(task)
}
