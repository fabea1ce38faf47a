//! Enqueue: tasks inserted in input order, many rows per INSERT, with idempotency keys.
//!
//! A task whose (type, key) already exists, was inserted earlier in the same batch, or is being
//! inserted by another host at the same moment, is not inserted; the existing row comes back as
//! a duplicate. Each chunk of the batch goes through these steps in the batch's transaction:
//!
//! 1. Look up the chunk's keys (one statement, the keys as a JSON list joined to the unique
//!    index, and to the keys table for archived tasks). Found rows are the duplicates.
//! 2. Insert the other rows with a plain multi-row INSERT (no `IGNORE`, which would also turn
//!    data errors into warnings; no `ON DUPLICATE KEY UPDATE`, which would hide which rows were
//!    new). If another host committed one of the keys since step 1, or holds it uncommitted and
//!    then commits, the INSERT fails with a duplicate-key error and rolls back alone (InnoDB
//!    undoes the statement, not the transaction); the chunk starts again at step 1, which now
//!    sees that row. If the other host rolls back instead, the INSERT simply succeeds.
//! 3. Find out which id each inserted row got. Auto-increment values of one multi-row INSERT
//!    need not be consecutive (`innodb_autoinc_lock_mode = 2`, the MySQL 8 default, interleaves
//!    concurrent inserts; `auto_increment_increment` spaces them on multi-primary setups), so
//!    the ids are not computed from `LAST_INSERT_ID()`: every inserted row carries a marker in
//!    `lease_owner` (NULL on every pending row otherwise): this call's random token and the
//!    row's input position. Reading `lease_owner` back from `id >= LAST_INSERT_ID()` (the first
//!    id of the statement, the smallest, as values only grow) matches ids to inputs exactly.
//!    The markers are then cleared. They are never committed, so no other session sees them.
//!    A single-row INSERT needs no marker: `LAST_INSERT_ID()` is its id.

use chrono::Utc;
use sqlx::mysql::MySqlRow;
use sqlx::{MySql, MySqlConnection, QueryBuilder};
use std::collections::{HashMap, HashSet};

use super::rows::{self, TASK_COLUMNS, Text, millis, time_from_millis};
use super::{Failure, MySqlStore, retry_deadlocks};
use crate::store::StoreError;
use crate::task::{Enqueued, NewTask, Task};

/// Most rows per INSERT; 9 placeholders a row stays far below MySQL's 65,535 per statement.
const INSERT_CHUNK: usize = 500;
/// What a row costs in a statement besides its payload, type and key, for the size budget.
const ROW_BYTES: usize = 128;
/// How often one chunk may meet another host's insert of the same key before giving up.
const CONFLICT_ROUNDS: usize = 16;

/// A (task type, idempotency key) pair.
type Key = (String, String);

impl MySqlStore {
    pub(super) async fn enqueue(&self, tasks: Vec<NewTask>) -> Result<Vec<Enqueued>, StoreError> {
        retry_deadlocks(|| self.enqueue_once(&tasks)).await
    }

    /// One attempt at the whole batch, in one transaction.
    async fn enqueue_once(&self, tasks: &[NewTask]) -> Result<Vec<Enqueued>, Failure> {
        let now = millis(Utc::now());
        let marker = format!("enqueue-{:032x}:", rand::random::<u128>());
        let mut tx = self.pool.begin().await?;
        // Rows of this batch's keys: found in the table, or inserted by this batch.
        let mut known: HashMap<Key, Task> = HashMap::new();
        let mut results = Vec::with_capacity(tasks.len());
        for chunk in chunks(tasks, self.statement_bytes) {
            let inserted = insert_chunk(&mut tx, chunk, &mut known, now, &marker).await?;
            for (new, row) in chunk.iter().zip(inserted) {
                results.push(match row {
                    Some(task) => Enqueued {
                        task,
                        duplicate: false,
                    },
                    None => {
                        let task = key_of(new)
                            .and_then(|key| known.get(&key))
                            .cloned()
                            .ok_or_else(|| {
                                StoreError::Database(
                                    "an enqueued task was neither inserted nor found".into(),
                                )
                            })?;
                        Enqueued {
                            task,
                            duplicate: true,
                        }
                    }
                });
            }
        }
        tx.commit().await?;
        Ok(results)
    }
}

fn key_of(task: &NewTask) -> Option<Key> {
    task.idempotency_key
        .as_ref()
        .map(|key| (task.task_type.clone(), key.clone()))
}

/// Splits the batch into chunks of at most [`INSERT_CHUNK`] rows and about `budget` bytes.
fn chunks(tasks: &[NewTask], budget: usize) -> Vec<&[NewTask]> {
    super::bounded_chunks(tasks, INSERT_CHUNK, budget, |task| {
        ROW_BYTES
            + task.payload.len()
            + task.task_type.len()
            + task.idempotency_key.as_ref().map_or(0, String::len)
    })
}

/// Inserts what is new in `chunk`; returns, per input, the row it inserted (None: a duplicate,
/// whose row is in `known` afterwards).
async fn insert_chunk(
    tx: &mut MySqlConnection,
    chunk: &[NewTask],
    known: &mut HashMap<Key, Task>,
    now: i64,
    marker: &str,
) -> Result<Vec<Option<Task>>, Failure> {
    for _ in 0..CONFLICT_ROUNDS {
        look_up_keys(tx, chunk, known).await?;
        // Unkeyed inputs, and the first input of each key not stored yet.
        let mut claimed_keys = HashSet::new();
        let inserting: Vec<usize> = (0..chunk.len())
            .filter(|&i| match key_of(&chunk[i]) {
                None => true,
                Some(key) => !known.contains_key(&key) && claimed_keys.insert(key),
            })
            .collect();
        if inserting.is_empty() {
            return Ok(vec![None; chunk.len()]);
        }
        let mut insert = QueryBuilder::<MySql>::new(
            "INSERT INTO async_task (task_type, payload, priority, max_retry, next_run_at, idempotency_key, \
             depth, lease_owner, created_at, updated_at) ",
        );
        // One row needs no marker: LAST_INSERT_ID() is its id.
        let marked = inserting.len() > 1;
        insert.push_values(&inserting, |mut row, &i| {
            let task = &chunk[i];
            row.push_bind(&task.task_type)
                .push_bind(&task.payload)
                .push_bind(task.priority)
                .push_bind(task.max_retry)
                .push_bind(millis(task.run_at))
                .push_bind(task.idempotency_key.as_deref().map(str::as_bytes))
                .push_bind(task.depth)
                .push_bind(marked.then(|| format!("{marker}{i}")))
                .push_bind(now)
                .push_bind(now);
        });
        let first = match insert.build().execute(&mut *tx).await {
            Ok(done) => done.last_insert_id(),
            Err(error) if is_duplicate_key(&error) => continue,
            Err(error) => return Err(error.into()),
        };
        let ids = match marked {
            true => inserted_ids(tx, first, marker, inserting.len()).await?,
            false => vec![(inserting[0], first as i64)],
        };
        let mut inserted = vec![None; chunk.len()];
        for (i, id) in ids {
            let task = new_row(id, &chunk[i], now)?;
            if let Some(key) = key_of(&chunk[i]) {
                known.insert(key, task.clone());
            }
            inserted[i] = Some(task);
        }
        return Ok(inserted);
    }
    Err(StoreError::Database(format!(
        "enqueue kept meeting concurrent inserts of the same idempotency keys ({CONFLICT_ROUNDS} rounds)"
    ))
    .into())
}

/// Reads the rows of the chunk's keys that are not known yet into `known`.
async fn look_up_keys(
    tx: &mut MySqlConnection,
    chunk: &[NewTask],
    known: &mut HashMap<Key, Task>,
) -> Result<(), Failure> {
    let wanted: HashSet<Key> = chunk
        .iter()
        .filter_map(key_of)
        .filter(|key| !known.contains_key(key))
        .collect();
    if wanted.is_empty() {
        return Ok(());
    }
    let list: Vec<serde_json::Value> = wanted
        .iter()
        .map(|(task_type, key)| serde_json::json!({"t": task_type, "k": key}))
        .collect();
    // Live tasks through the unique index; archived ones through the keys table, which keeps
    // a key until its task is purged (both tables name their columns alike).
    let keys = "JSON_TABLE(?, '$[*]' COLUMNS ( \
                 k_type VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.t', \
                 k_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.k')) AS k";
    let list = serde_json::Value::Array(list).to_string();
    let found: Vec<MySqlRow> = sqlx::query(&format!(
        "SELECT {TASK_COLUMNS} FROM {keys} \
         STRAIGHT_JOIN async_task AS t ON t.task_type = k.k_type AND t.idempotency_key = k.k_key \
         UNION ALL \
         SELECT {TASK_COLUMNS} FROM {keys} \
         STRAIGHT_JOIN async_task_key AS r ON r.task_type = k.k_type AND r.idempotency_key = k.k_key \
         STRAIGHT_JOIN async_task_archive AS t ON t.id = r.task_id"
    ))
    .bind(&list)
    .bind(&list)
    .fetch_all(&mut *tx)
    .await?;
    for task in rows::tasks(&found)? {
        if let Some(key) = task.idempotency_key.clone() {
            known.insert((task.task_type.clone(), key), task);
        }
    }
    Ok(())
}

/// The ids of the rows one INSERT wrote, by input position, from their markers; then clears
/// the markers.
async fn inserted_ids(
    tx: &mut MySqlConnection,
    first: u64,
    marker: &str,
    count: usize,
) -> Result<Vec<(usize, i64)>, Failure> {
    let pattern = format!("{marker}%");
    let rows: Vec<(i64, Text)> = sqlx::query_as(
        "SELECT id, lease_owner FROM async_task WHERE id >= ? AND lease_owner LIKE ? ORDER BY id LIMIT ?",
    )
    .bind(first)
    .bind(&pattern)
    .bind(count as u64)
    .fetch_all(&mut *tx)
    .await?;
    let ids: Vec<(usize, i64)> = rows
        .iter()
        .filter_map(|(id, Text(owner))| owner.strip_prefix(marker)?.parse().ok().map(|i| (i, *id)))
        .collect();
    if ids.len() != count {
        return Err(StoreError::Database(format!(
            "inserted {count} tasks but found {} of them again",
            ids.len()
        ))
        .into());
    }
    let (low, high) = (rows[0].0, rows[rows.len() - 1].0);
    sqlx::query(
        "UPDATE async_task SET lease_owner = NULL WHERE id BETWEEN ? AND ? AND lease_owner LIKE ?",
    )
    .bind(low)
    .bind(high)
    .bind(&pattern)
    .execute(&mut *tx)
    .await?;
    Ok(ids)
}

/// The row an INSERT wrote for `new`: the table's defaults plus what the INSERT set.
fn new_row(id: i64, new: &NewTask, now: i64) -> Result<Task, StoreError> {
    let payload = serde_json::from_str(&new.payload).map_err(|e| StoreError::Corrupt {
        id,
        reason: format!("payload is not JSON: {e}"),
    })?;
    let next_run_at = time_from_millis(id, millis(new.run_at))?;
    Ok(Task::enqueued(
        id,
        new,
        payload,
        next_run_at,
        time_from_millis(id, now)?,
    ))
}

/// MySQL's ER_DUP_ENTRY.
fn is_duplicate_key(error: &sqlx::Error) -> bool {
    super::error_number(error) == Some(1062)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sized(payload_bytes: usize) -> NewTask {
        NewTask {
            task_type: "a".into(),
            payload: "x".repeat(payload_bytes),
            priority: 0,
            max_retry: 0,
            run_at: Utc::now(),
            idempotency_key: None,
            depth: 0,
        }
    }

    #[test]
    fn chunks_respect_rows_and_bytes() {
        let many: Vec<NewTask> = (0..1_234).map(|_| sized(10)).collect();
        let sizes: Vec<usize> = chunks(&many, usize::MAX).iter().map(|c| c.len()).collect();
        assert_eq!(sizes, [500, 500, 234]);
        let big: Vec<NewTask> = (0..5).map(|_| sized(1_000)).collect();
        let sizes: Vec<usize> = chunks(&big, 2_500).iter().map(|c| c.len()).collect();
        assert_eq!(sizes, [2, 2, 1], "at most about the budget per statement");
        let huge = vec![sized(10_000)];
        assert_eq!(
            chunks(&huge, 100).len(),
            1,
            "a row larger than the budget goes alone"
        );
    }
}
