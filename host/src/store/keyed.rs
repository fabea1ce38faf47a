//! Finding a task by its idempotency key, live or archived: keys are recorded in
//! `async_task_key` from the task's insert until the purge (the migrations' trigger), so a key
//! holds for as long as its task exists. The scheduler's keys name a schedule and a tick
//! ([`crate::schedule::Schedule::idempotency_key`]), so any host, leading or not, can say which
//! task a tick enqueued. An enqueue answers a key an archived task holds with that task, as a
//! duplicate ([`enqueue_around_archived_keys`]). One implementation in portable SQL serves
//! every backend.

use async_trait::async_trait;
use std::collections::HashMap;
use std::future::Future;

use super::StoreError;
use super::archive::ArchiveReads;
use super::sql::{Arg, Cells, Portable, Via};
use crate::task::{Enqueued, NewTask, Task, TaskId};

/// A (task type, idempotency key) pair.
pub type TypedKey = (String, String);

/// Tasks by idempotency key.
#[async_trait]
pub trait KeyLookup {
    /// The task of `task_type` whose idempotency key is exactly `key`, live or archived.
    async fn task_with_key(&self, task_type: &str, key: &str)
    -> Result<Option<TaskId>, StoreError>;

    /// Of these (type, key) pairs, the ones an archived task holds, with that task.
    async fn archived_with_keys(
        &self,
        keys: &[(&str, &str)],
    ) -> Result<HashMap<TypedKey, Task>, StoreError>;
}

#[async_trait]
impl<S: Portable> KeyLookup for S {
    async fn task_with_key(
        &self,
        task_type: &str,
        key: &str,
    ) -> Result<Option<TaskId>, StoreError> {
        let mut statement = self.statement(
            "SELECT task_id FROM async_task_key WHERE task_type = ? AND idempotency_key = ?",
        );
        statement.bind(Arg::Text(task_type)).bind(Arg::Key(key));
        let row = self.fetch_optional(Via::Reader, &statement).await?;
        row.map(|row| row.int(0)).transpose()
    }

    async fn archived_with_keys(
        &self,
        keys: &[(&str, &str)],
    ) -> Result<HashMap<TypedKey, Task>, StoreError> {
        let mut archived = HashMap::new();
        // Two values a pair, with room to spare under the dialect's limit.
        for chunk in keys.chunks((self.dialect().max_binds() / 2).clamp(1, 500)) {
            let mut statement = self.statement(
                "SELECT k.task_id FROM async_task_key AS k \
                 WHERE NOT EXISTS (SELECT 1 FROM async_task AS t WHERE t.id = k.task_id) AND (",
            );
            for (i, (task_type, key)) in chunk.iter().enumerate() {
                statement
                    .push(if i == 0 { "" } else { " OR " })
                    .push("(k.task_type = ? AND k.idempotency_key = ?)")
                    .bind(Arg::Text(task_type))
                    .bind(Arg::Key(key));
            }
            statement.push(")");
            for row in self.fetch(Via::Reader, &statement).await? {
                let id = row.int(0)?;
                // Purged since the read above: the key is free again, and the insert takes it.
                let Some(found) = self.get_archived(id).await? else {
                    continue;
                };
                if let Some(key) = found.task.idempotency_key.clone() {
                    archived.insert((found.task.task_type.clone(), key), found.task);
                }
            }
        }
        Ok(archived)
    }
}

/// An enqueue in which a task whose key an archived task holds is answered with that task, as
/// a duplicate, and only the others go to `insert` (the backend's enqueue): the live table's
/// unique index no longer knows such a key, and the insert would fail on `async_task_key`.
///
/// The lookup runs before the insert's transaction. A task archived between the two makes the
/// insert fail on `async_task_key` (the backends report it as unavailable, so the caller
/// retries, and the retry finds the archived task here).
pub async fn enqueue_around_archived_keys<S, F, Fut>(
    store: &S,
    tasks: Vec<NewTask>,
    insert: F,
) -> Result<Vec<Enqueued>, StoreError>
where
    S: KeyLookup + ?Sized,
    F: FnOnce(Vec<NewTask>) -> Fut,
    Fut: Future<Output = Result<Vec<Enqueued>, StoreError>>,
{
    let keys: Vec<(&str, &str)> = tasks
        .iter()
        .filter_map(|t| Some((t.task_type.as_str(), t.idempotency_key.as_deref()?)))
        .collect();
    let archived = if keys.is_empty() {
        HashMap::new()
    } else {
        store.archived_with_keys(&keys).await?
    };
    if archived.is_empty() {
        return insert(tasks).await;
    }
    let mut answers: Vec<Option<Enqueued>> = Vec::with_capacity(tasks.len());
    let mut inserting = Vec::new();
    for task in tasks {
        let found = task
            .idempotency_key
            .as_ref()
            .and_then(|key| archived.get(&(task.task_type.clone(), key.clone())));
        match found {
            Some(archived) => answers.push(Some(Enqueued {
                task: archived.clone(),
                duplicate: true,
            })),
            None => {
                answers.push(None);
                inserting.push(task);
            }
        }
    }
    let mut inserted = if inserting.is_empty() {
        Vec::new()
    } else {
        insert(inserting).await?
    }
    .into_iter();
    answers
        .into_iter()
        .map(|answer| {
            answer.or_else(|| inserted.next()).ok_or_else(|| {
                StoreError::Database("the enqueue answered fewer tasks than it was given".into())
            })
        })
        .collect()
}
