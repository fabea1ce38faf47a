//! Batched enqueue: one INSERT per chunk of up to [`CHUNK`] tasks, idempotency keys deduplicated
//! by the database.
//!
//! Each chunk travels as one array per column, unpacked with `UNNEST … WITH ORDINALITY`, and is
//! inserted with `ON CONFLICT … DO NOTHING`. A task whose (type, key) is already stored, or
//! appears earlier in the batch, or is being inserted by another host at the same moment (the
//! insert waits for that transaction and then does nothing) is not inserted; its stored row
//! comes back marked `duplicate`.
//!
//! Matching the inserted rows back to the inputs cannot rely on the order of RETURNING, which
//! PostgreSQL does not define. So the statement draws each input's id from the table's
//! sequence itself, in input order, before inserting: input and row are then joined by id, and
//! the statement returns each inserted row with its input's position. Every input whose row did
//! not come back is a duplicate and is read by its key afterwards. Ids still increase in input
//! order, as they do on every backend.

use std::collections::HashMap;

use chrono::Utc;

use super::PgStore;
use super::rows::{TaskRow, column, millis, task_columns};
use crate::store::StoreError;
use crate::task::{Enqueued, NewTask, Task};

/// Tasks per INSERT: bounds the size of one statement's arrays (payloads may be large).
pub(super) const CHUNK: usize = 1_000;

/// Inserts one chunk. Parameters: one array per column ($1 task types, $2 payloads, $3
/// priorities, $4 max retries, $5 due times, $6 idempotency keys, $7 depths), $8 now. Returns the inserted
/// rows, each with `ord`, its input's 1-based position.
const INSERT: &str = concat!(
    "WITH input AS MATERIALIZED ( \
         SELECT i.*, nextval('async_task_id_seq') AS new_id \
         FROM UNNEST($1::text[], $2::text[], $3::integer[], $4::bigint[], $5::bigint[], $6::text[], \
                     $7::integer[]) \
              WITH ORDINALITY AS i(task_type, payload, priority, max_retry, next_run_at, idempotency_key, \
                                   depth, ord) \
     ), inserted AS ( \
         INSERT INTO async_task (id, task_type, payload, priority, max_retry, next_run_at, \
                                 idempotency_key, depth, created_at, updated_at) \
         OVERRIDING SYSTEM VALUE \
         SELECT new_id, task_type, payload::json, priority, max_retry, next_run_at, \
                idempotency_key, depth, $8, $8 \
         FROM input ORDER BY ord \
         ON CONFLICT (task_type, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING \
         RETURNING ",
    task_columns!(),
    " ) SELECT input.ord, inserted.* FROM inserted JOIN input ON input.new_id = inserted.id"
);

/// The stored rows of the duplicates' keys. Parameters: $1 task types, $2 keys.
const DUPLICATES: &str = concat!(
    "SELECT ",
    task_columns!(),
    " FROM async_task \
     WHERE (task_type, idempotency_key) IN (SELECT * FROM UNNEST($1::text[], $2::text[]))"
);

/// An inserted row and the 1-based position of its input in the chunk.
#[derive(sqlx::FromRow)]
struct InsertedRow {
    ord: i64,
    #[sqlx(flatten)]
    row: TaskRow,
}

impl PgStore {
    pub(super) async fn enqueue(&self, tasks: Vec<NewTask>) -> Result<Vec<Enqueued>, StoreError> {
        let now = millis(Utc::now());
        let mut results = Vec::with_capacity(tasks.len());
        if tasks.len() <= CHUNK {
            // One statement is atomic by itself: no transaction needed.
            let mut conn = self.pool.acquire().await?;
            results.extend(enqueue_chunk(&mut conn, &tasks, now).await?);
        } else {
            // All or nothing: every chunk in one transaction.
            let mut tx = self.pool.begin().await?;
            for chunk in tasks.chunks(CHUNK) {
                results.extend(enqueue_chunk(&mut tx, chunk, now).await?);
            }
            tx.commit().await?;
        }
        let inserted = results.iter().filter(|r| !r.duplicate).count();
        self.first_statistics.after_enqueue(&self.pool, inserted);
        Ok(results)
    }
}

/// Inserts one chunk and answers for each of its tasks, in input order.
async fn enqueue_chunk(
    conn: &mut sqlx::PgConnection,
    chunk: &[NewTask],
    now: i64,
) -> Result<Vec<Enqueued>, StoreError> {
    let inserted: Vec<InsertedRow> = sqlx::query_as(INSERT)
        .bind(column(chunk, |t| t.task_type.as_str()))
        .bind(column(chunk, |t| t.payload.as_str()))
        .bind(column(chunk, |t| t.priority))
        .bind(column(chunk, |t| i64::from(t.max_retry)))
        .bind(column(chunk, |t| millis(t.run_at)))
        .bind(column(chunk, |t| t.idempotency_key.as_deref()))
        .bind(column(chunk, |t| t.depth.min(i32::MAX as u32) as i32))
        .bind(now)
        .fetch_all(&mut *conn)
        .await?;
    let mut answers: Vec<Option<Enqueued>> = vec![None; chunk.len()];
    for InsertedRow { ord, row } in inserted {
        let slot = usize::try_from(ord - 1)
            .ok()
            .and_then(|i| answers.get_mut(i))
            .ok_or_else(|| {
                StoreError::Database(format!("enqueue returned an unknown position {ord}"))
            })?;
        *slot = Some(Enqueued {
            task: row.try_into()?,
            duplicate: false,
        });
    }

    // The rest conflicted on their idempotency key: answer with the stored rows.
    let missing: Vec<(&str, &str)> = chunk
        .iter()
        .zip(&answers)
        .filter(|(_, answer)| answer.is_none())
        .map(|(new, _)| match &new.idempotency_key {
            Some(key) => Ok((new.task_type.as_str(), key.as_str())),
            None => Err(StoreError::Database(format!(
                "a {} task without a key was not inserted",
                new.task_type
            ))),
        })
        .collect::<Result<_, _>>()?;
    if !missing.is_empty() {
        let rows: Vec<TaskRow> = sqlx::query_as(DUPLICATES)
            .bind(column(&missing, |(t, _)| *t))
            .bind(column(&missing, |(_, k)| *k))
            .fetch_all(&mut *conn)
            .await?;
        let mut stored: HashMap<(String, String), Task> = HashMap::with_capacity(rows.len());
        for row in rows {
            let task = Task::try_from(row)?;
            if let Some(key) = task.idempotency_key.clone() {
                stored.insert((task.task_type.clone(), key), task);
            }
        }
        for (new, answer) in chunk.iter().zip(answers.iter_mut()) {
            if answer.is_some() {
                continue;
            }
            let key = (
                new.task_type.clone(),
                new.idempotency_key.clone().unwrap_or_default(),
            );
            let task = stored.get(&key).cloned().ok_or_else(|| {
                StoreError::Database(format!(
                    "the {} task with idempotency key {:?} conflicted but is not stored",
                    key.0, key.1
                ))
            })?;
            *answer = Some(Enqueued {
                task,
                duplicate: true,
            });
        }
    }
    Ok(answers
        .into_iter()
        .map(|answer| answer.expect("every input answered"))
        .collect())
}
