//! Enqueues on SQLite ([`crate::store::Queue::enqueue`]): multi-row inserts that skip rows whose
//! idempotency key exists, run on the writer thread (`writer.rs`); a duplicate comes back as the
//! task its key names.

use chrono::Utc;

use super::SqliteStore;
use super::rows::task_rows;
use crate::store::StoreError;
use crate::store::encoding::millis;
use crate::store::rows::TaskRow;
use crate::store::rows::into_tasks;
use crate::task::{Enqueued, NewTask, Task};
use rusqlite::{Connection, ToSql, params, params_from_iter};

/// Rows per multi-row INSERT; 9 bound values a row stays far below SQLite's variable limit.
const INSERT_CHUNK: usize = 500;

/// The existing task an idempotency key names.
const BY_KEY: &str = "SELECT * FROM async_task WHERE task_type = ?1 AND idempotency_key = ?2";

/// An insert of `rows` tasks that skips rows whose idempotency key exists and returns the rows
/// it inserted.
fn insert_sql(rows: usize) -> String {
    let values = vec!["(?, ?, ?, ?, ?, ?, ?, ?, ?)"; rows].join(", ");
    format!(
        "INSERT INTO async_task (task_type, payload, priority, max_retry, next_run_at, \
         idempotency_key, depth, created_at, updated_at) VALUES {values} \
         ON CONFLICT DO NOTHING RETURNING *"
    )
}

impl SqliteStore {
    pub(super) async fn enqueue(&self, tasks: Vec<NewTask>) -> Result<Vec<Enqueued>, StoreError> {
        self.hot.enqueue(&self.writer, tasks).await
    }
}

/// Matches the inserted rows of one chunk back to its inputs.
///
/// SQLite assigns increasing ids in VALUES order, so the inserted rows sorted by id are the
/// inputs that did not conflict, in input order. An input with an idempotency key was inserted
/// only if its key came back (and only its first occurrence within the chunk); every other
/// input is a duplicate, returned as `None` here and looked up afterwards.
fn match_inserted(chunk: &[NewTask], mut inserted: Vec<Task>) -> Vec<Option<Task>> {
    inserted.sort_by_key(|task| task.id);
    let mut returned_keys: std::collections::HashSet<(String, String)> = inserted
        .iter()
        .filter_map(|t| t.idempotency_key.clone().map(|k| (t.task_type.clone(), k)))
        .collect();
    let mut rows = inserted.into_iter();
    chunk
        .iter()
        .map(|new| match &new.idempotency_key {
            None => rows.next(),
            Some(key) if returned_keys.remove(&(new.task_type.clone(), key.clone())) => rows.next(),
            Some(_) => None,
        })
        .collect()
}

/// Runs on the writer thread.
pub(super) fn write(
    connection: &Connection,
    tasks: &[NewTask],
) -> Result<Vec<Enqueued>, StoreError> {
    let now = millis(Utc::now());
    let mut results = Vec::with_capacity(tasks.len());
    for chunk in tasks.chunks(INSERT_CHUNK) {
        let run_at: Vec<i64> = chunk.iter().map(|task| millis(task.run_at)).collect();
        let mut values: Vec<&dyn ToSql> = Vec::with_capacity(chunk.len() * 9);
        for (task, run_at) in chunk.iter().zip(&run_at) {
            values.extend([
                &task.task_type as &dyn ToSql,
                &task.payload,
                &task.priority,
                &task.max_retry,
                run_at,
                &task.idempotency_key,
                &task.depth,
                &now,
                &now,
            ]);
        }
        let rows = task_rows(
            connection
                .prepare_cached(&insert_sql(chunk.len()))?
                .query(params_from_iter(values))?,
        )?;
        for (new, inserted) in chunk.iter().zip(match_inserted(chunk, into_tasks(rows)?)) {
            let enqueued = match inserted {
                Some(task) => Enqueued {
                    task,
                    duplicate: false,
                },
                None => {
                    let row = connection
                        .prepare_cached(BY_KEY)?
                        .query_row(params![new.task_type, new.idempotency_key], |row| {
                            Ok(TaskRow::read(row))
                        })??;
                    Enqueued {
                        task: Task::try_from(row)?,
                        duplicate: true,
                    }
                }
            };
            results.push(enqueued);
        }
    }
    Ok(results)
}
