//! The SQLite writer thread: enqueues, claims and completions, the statements every task passes
//! through, run synchronously on one connection owned by one thread.
//!
//! Through sqlx every statement is a message to sqlx's worker thread and every row it returns
//! another message back, decoded on the async side: a claim of 200 rows spent most of its time
//! handing rows between threads, not in SQLite (and an enqueue of 1,000 tasks, whose insert
//! returns every row, likewise). Here an enqueue, a claim or a completion batch is one message
//! to the thread and one answer, with the rows decoded on the thread.
//!
//! The thread also commits together what is waiting together: each caller queues its command,
//! then takes the *write gate* (the store's sqlx writer connection, a pool of one, so this
//! thread and the store's other writes take turns instead of meeting SQLite's busy handler).
//! Whoever holds the gate sends every queued command to the thread as one *cycle*: one
//! transaction, each command in its own savepoint (a failing one is undone alone), one commit.
//! A completion batch and the dispatcher's next claim thus share a commit. Callers whose command
//! rode along in another's cycle find their answer ready when they get the gate, and let go.
//!
//! rusqlite is the SQLite binding most Rust projects build on; this crate pins the version that
//! links the same bundled SQLite (`libsqlite3-sys`) as sqlx, so both connections run one library.

use chrono::Utc;
use rusqlite::{Connection, Row, ToSql, params, params_from_iter};
use serde_json::json;
use sqlx::SqlitePool;
use std::path::Path;
use std::sync::mpsc;
use std::sync::{LazyLock, Mutex};
use tokio::sync::oneshot;

use super::history::{COLUMNS as HISTORY_COLUMNS, TRIM as HISTORY_TRIM};
use super::{BUSY_TIMEOUT, TaskRow, into_tasks, match_inserted};
use crate::store::encoding::{millis, status_code};
use crate::store::history::trim_up_to;
use crate::store::{ClaimRequest, Completion, StoreError};
use crate::task::{Enqueued, NewTask, Task};

/// Rows per multi-row INSERT; 8 bound values a row stays far below SQLite's variable limit.
const INSERT_CHUNK: usize = 500;

/// The existing task an idempotency key names.
const BY_KEY: &str = "SELECT * FROM async_task WHERE task_type = ?1 AND idempotency_key = ?2";

/// An insert of `rows` tasks that skips rows whose idempotency key exists and returns the rows
/// it inserted.
fn insert_sql(rows: usize) -> String {
    let values = vec!["(?, ?, ?, ?, ?, ?, ?, ?)"; rows].join(", ");
    format!(
        "INSERT INTO async_task (task_type, payload, priority, max_retry, next_run_at, \
         idempotency_key, created_at, updated_at) VALUES {values} \
         ON CONFLICT DO NOTHING RETURNING *"
    )
}

/// The claim: due pending rows of the given types in dispatch order, leased to the owner.
const CLAIM: &str = "UPDATE async_task SET status = 1, attempts = attempts + 1, lease_owner = ?1, \
         lease_expires_at = ?2, attempted_at = ?3, updated_at = ?3, progress = NULL, progress_note = NULL \
     WHERE id IN ( \
         SELECT id FROM async_task INDEXED BY async_task_dispatch \
         WHERE status = 0 AND next_run_at <= ?3 \
           AND task_type IN (SELECT value FROM json_each(?4)) \
         ORDER BY priority DESC, next_run_at, id \
         LIMIT ?5) \
     RETURNING *";

/// A claimed row that cannot be read is failed with the reason, so it does not come back.
const FAIL_UNREADABLE: &str = "UPDATE async_task SET status = 3, finished_at = ?2, updated_at = ?2, \
     lease_owner = NULL, lease_expires_at = NULL, last_error = ?3 WHERE id = ?1";

/// A completion batch, one JSON array, applied to the rows still running under the
/// completion's owner and claim (a late completion of a rescued or cancelled task is fenced
/// off). Each element is decoded once (`jsonb`), not once per field.
const COMPLETE: &str = "WITH batch AS MATERIALIZED (SELECT jsonb(value) AS v FROM json_each(?1)) \
     UPDATE async_task NOT INDEXED SET \
         status = c.status, \
         retry_count = c.retry_count, \
         next_run_at = COALESCE(c.next_run_at, async_task.next_run_at), \
         result = c.result, \
         last_error = CASE WHEN c.status = 2 THEN NULL ELSE COALESCE(c.error, async_task.last_error) END, \
         plugin_version = COALESCE(c.plugin_version, async_task.plugin_version), \
         log = c.log, \
         finished_at = c.finished_at, \
         snoozes = CASE WHEN c.status = 0 AND c.error IS NULL THEN async_task.snoozes + 1 ELSE 0 END, \
         lease_owner = NULL, lease_expires_at = NULL, \
         updated_at = c.now \
     FROM (SELECT v ->> '$.id' AS id, v ->> '$.owner' AS owner, \
                  v ->> '$.attempt' AS attempt, v ->> '$.status' AS status, \
                  v ->> '$.retry_count' AS retry_count, \
                  v ->> '$.next_run_at' AS next_run_at, v ->> '$.result' AS result, \
                  v ->> '$.error' AS error, v ->> '$.plugin_version' AS plugin_version, v ->> '$.log' AS log, \
                  v ->> '$.finished_at' AS finished_at, v ->> '$.now' AS now \
           FROM batch) AS c \
     WHERE async_task.id = c.id AND async_task.status = 1 \
       AND async_task.lease_owner = c.owner AND async_task.attempts = c.attempt";

/// The attempt records of a completion batch, for the attempts that will apply. Runs before
/// [`COMPLETE`], while the rows still show the claims being ended. Spelled once, not per batch.
static RECORD_COMPLETIONS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH batch AS MATERIALIZED (SELECT jsonb(value) AS v FROM json_each(?1)) \
         {HISTORY_COLUMNS} \
         SELECT t.id, t.attempts, c.owner, c.plugin_version, t.attempted_at, c.now, c.outcome, c.error, c.log \
         FROM (SELECT v ->> '$.id' AS id, v ->> '$.owner' AS owner, \
                      v ->> '$.attempt' AS attempt, v ->> '$.outcome' AS outcome, \
                      v ->> '$.error' AS error, v ->> '$.plugin_version' AS plugin_version, \
                      v ->> '$.log' AS log, v ->> '$.now' AS now \
               FROM batch) AS c \
         CROSS JOIN async_task AS t NOT INDEXED ON t.id = c.id \
         WHERE t.status = 1 AND t.lease_owner = c.owner AND t.attempts = c.attempt \
         ON CONFLICT DO NOTHING"
    )
});

/// What a claim brings back: rows as stored (the caller reads them into tasks and fails the
/// unreadable ones through [`Writer::fail_unreadable`]).
pub type Claimed = Vec<TaskRow>;

/// One thing for the thread to do, with where its answer goes.
enum Command {
    Enqueue {
        tasks: Vec<NewTask>,
        reply: oneshot::Sender<Result<Vec<Enqueued>, StoreError>>,
    },
    Claim {
        request: ClaimRequest,
        reply: oneshot::Sender<Result<Claimed, StoreError>>,
    },
    Complete {
        completions: Vec<Completion>,
        reply: oneshot::Sender<Result<u64, StoreError>>,
    },
    FailUnreadable {
        failed: Vec<(i64, String)>,
        now: i64,
        reply: oneshot::Sender<Result<(), StoreError>>,
    },
}

/// Commands run in one transaction; `done` is told once every answer has been sent.
struct Cycle {
    commands: Vec<Command>,
    done: oneshot::Sender<()>,
}

/// The handle to the writer thread; the thread ends when this is dropped.
pub struct Writer {
    queued: Mutex<Vec<Command>>,
    cycles: mpsc::Sender<Cycle>,
}

impl Writer {
    /// Opens a second connection to the database file at `path` (already migrated) and
    /// starts the thread that owns it.
    pub fn start(path: &Path) -> Result<Writer, StoreError> {
        let connection = Connection::open(path)?;
        connection.busy_timeout(BUSY_TIMEOUT)?;
        connection.pragma_update(None, "journal_mode", "wal")?;
        connection.pragma_update(None, "synchronous", "normal")?;
        connection.pragma_update(None, "temp_store", "memory")?;
        connection.pragma_update(None, "cache_size", -65536)?;
        let (cycles, receiver) = mpsc::channel::<Cycle>();
        std::thread::Builder::new()
            .name("spool-sqlite-writer".into())
            .spawn(move || {
                while let Ok(cycle) = receiver.recv() {
                    run_cycle(&connection, cycle.commands);
                    let _ = cycle.done.send(());
                }
            })
            .map_err(|e| {
                StoreError::Database(format!("cannot start the SQLite writer thread: {e}"))
            })?;
        Ok(Writer {
            queued: Mutex::new(Vec::new()),
            cycles,
        })
    }

    /// Inserts tasks; one with an idempotency key that exists comes back as that task, marked
    /// a duplicate. Answers in input order.
    pub async fn enqueue(
        &self,
        gate: &SqlitePool,
        tasks: Vec<NewTask>,
    ) -> Result<Vec<Enqueued>, StoreError> {
        self.submit(gate, |reply| Command::Enqueue { tasks, reply })
            .await
    }

    /// Claims rows as [`CLAIM`] says.
    pub async fn claim(
        &self,
        gate: &SqlitePool,
        request: ClaimRequest,
    ) -> Result<Claimed, StoreError> {
        self.submit(gate, |reply| Command::Claim { request, reply })
            .await
    }

    /// Applies a completion batch and records its attempts; returns the rows changed.
    pub async fn complete(
        &self,
        gate: &SqlitePool,
        completions: Vec<Completion>,
    ) -> Result<u64, StoreError> {
        self.submit(gate, |reply| Command::Complete { completions, reply })
            .await
    }

    /// Fails claimed rows that could not be read, each with its reason.
    pub async fn fail_unreadable(
        &self,
        gate: &SqlitePool,
        failed: Vec<(i64, String)>,
        now: i64,
    ) -> Result<(), StoreError> {
        self.submit(gate, |reply| Command::FailUnreadable { failed, now, reply })
            .await
    }

    /// Queues a command, takes the write gate, and runs a cycle unless an earlier holder's
    /// cycle already answered it.
    async fn submit<T>(
        &self,
        gate: &SqlitePool,
        command: impl FnOnce(oneshot::Sender<Result<T, StoreError>>) -> Command,
    ) -> Result<T, StoreError> {
        let (reply, mut answer) = oneshot::channel();
        self.queued
            .lock()
            .expect("writer queue lock")
            .push(command(reply));
        let held = gate.acquire().await?;
        match answer.try_recv() {
            Ok(result) => return result,
            Err(oneshot::error::TryRecvError::Closed) => return Err(stopped()),
            Err(oneshot::error::TryRecvError::Empty) => {}
        }
        let commands = std::mem::take(&mut *self.queued.lock().expect("writer queue lock"));
        let (done, finished) = oneshot::channel();
        self.cycles
            .send(Cycle { commands, done })
            .map_err(|_| stopped())?;
        // The gate is held until every answer of the cycle is out, so the next holder finds
        // its own answer if it rode along.
        let _ = finished.await;
        drop(held);
        answer.await.map_err(|_| stopped())?
    }
}

fn stopped() -> StoreError {
    StoreError::Unavailable("the SQLite writer thread stopped".into())
}

/// Runs one cycle's commands in one transaction and sends each its answer after the commit (or
/// the commit's error).
fn run_cycle(connection: &Connection, commands: Vec<Command>) {
    if let Err(error) = connection.execute_batch("BEGIN IMMEDIATE") {
        let error = StoreError::from(error);
        for command in commands {
            command.answer_error(error.clone());
        }
        return;
    }
    let mut answers = Vec::with_capacity(commands.len());
    for command in commands {
        let outcome = within_savepoint(connection, |connection| command.run(connection));
        answers.push((command, outcome));
    }
    match connection.execute_batch("COMMIT") {
        Ok(()) => {
            for (command, outcome) in answers {
                command.answer(outcome);
            }
        }
        Err(error) => {
            let _ = connection.execute_batch("ROLLBACK");
            let error = StoreError::from(error);
            for (command, _) in answers {
                command.answer_error(error.clone());
            }
        }
    }
}

/// What a command produced, before it is sent.
enum Outcome {
    Enqueued(Vec<Enqueued>),
    Claimed(Claimed),
    Completed(u64),
    Done,
}

/// Runs `work` in a savepoint: undone alone if it fails.
fn within_savepoint(
    connection: &Connection,
    work: impl FnOnce(&Connection) -> Result<Outcome, StoreError>,
) -> Result<Outcome, StoreError> {
    connection.execute_batch("SAVEPOINT command")?;
    let outcome = work(connection);
    if outcome.is_err() {
        connection.execute_batch("ROLLBACK TO command")?;
    }
    connection.execute_batch("RELEASE command")?;
    outcome
}

impl Command {
    fn run(&self, connection: &Connection) -> Result<Outcome, StoreError> {
        match self {
            Command::Enqueue { tasks, .. } => enqueue(connection, tasks).map(Outcome::Enqueued),
            Command::Claim { request, .. } => claim(connection, request).map(Outcome::Claimed),
            Command::Complete { completions, .. } => {
                complete(connection, completions).map(Outcome::Completed)
            }
            Command::FailUnreadable { failed, now, .. } => {
                let mut statement = connection.prepare_cached(FAIL_UNREADABLE)?;
                for (id, reason) in failed {
                    statement.execute(params![id, now, reason])?;
                }
                Ok(Outcome::Done)
            }
        }
    }

    fn answer(self, outcome: Result<Outcome, StoreError>) {
        match (self, outcome) {
            (Command::Enqueue { reply, .. }, Ok(Outcome::Enqueued(enqueued))) => {
                let _ = reply.send(Ok(enqueued));
            }
            (Command::Claim { reply, .. }, Ok(Outcome::Claimed(rows))) => {
                let _ = reply.send(Ok(rows));
            }
            (Command::Complete { reply, .. }, Ok(Outcome::Completed(changed))) => {
                let _ = reply.send(Ok(changed));
            }
            (Command::FailUnreadable { reply, .. }, Ok(Outcome::Done)) => {
                let _ = reply.send(Ok(()));
            }
            (command, Err(error)) => command.answer_error(error),
            (command, Ok(_)) => {
                command.answer_error(StoreError::Database("writer answer mismatch".into()))
            }
        }
    }

    fn answer_error(self, error: StoreError) {
        match self {
            Command::Enqueue { reply, .. } => drop(reply.send(Err(error))),
            Command::Claim { reply, .. } => drop(reply.send(Err(error))),
            Command::Complete { reply, .. } => drop(reply.send(Err(error))),
            Command::FailUnreadable { reply, .. } => drop(reply.send(Err(error))),
        }
    }
}

fn enqueue(connection: &Connection, tasks: &[NewTask]) -> Result<Vec<Enqueued>, StoreError> {
    let now = millis(Utc::now());
    let mut results = Vec::with_capacity(tasks.len());
    for chunk in tasks.chunks(INSERT_CHUNK) {
        let run_at: Vec<i64> = chunk.iter().map(|task| millis(task.run_at)).collect();
        let mut values: Vec<&dyn ToSql> = Vec::with_capacity(chunk.len() * 8);
        for (task, run_at) in chunk.iter().zip(&run_at) {
            values.extend([
                &task.task_type as &dyn ToSql,
                &task.payload,
                &task.priority,
                &task.max_retry,
                run_at,
                &task.idempotency_key,
                &now,
                &now,
            ]);
        }
        let rows = connection
            .prepare_cached(&insert_sql(chunk.len()))?
            .query_map(params_from_iter(values), task_row)?
            .collect::<Result<Vec<_>, _>>()?;
        for (new, inserted) in chunk.iter().zip(match_inserted(chunk, into_tasks(rows)?)) {
            let enqueued = match inserted {
                Some(task) => Enqueued {
                    task,
                    duplicate: false,
                },
                None => {
                    let row = connection
                        .prepare_cached(BY_KEY)?
                        .query_row(params![new.task_type, new.idempotency_key], task_row)?;
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

fn claim(connection: &Connection, request: &ClaimRequest) -> Result<Claimed, StoreError> {
    let now = millis(request.now);
    let lease_until = millis(request.now + crate::task::chrono_duration(request.lease));
    let mut statement = connection.prepare_cached(CLAIM)?;
    let rows = statement.query_map(
        params![
            request.owner,
            lease_until,
            now,
            json!(request.task_types).to_string(),
            request.limit as i64
        ],
        task_row,
    )?;
    Ok(rows.collect::<Result<Vec<_>, _>>()?)
}

fn complete(connection: &Connection, completions: &[Completion]) -> Result<u64, StoreError> {
    // The attempts' records first, while their rows still show the claims being ended. Only
    // what the record needs: the result (often the largest text) stays out.
    let records: Vec<serde_json::Value> = completions
        .iter()
        .map(|c| {
            json!({
                "id": c.id,
                "owner": c.owner,
                "attempt": c.attempt,
                "outcome": c.outcome.code(),
                "error": c.transition.error,
                "plugin_version": c.plugin_version,
                "log": c.log,
                "now": millis(c.finished_at),
            })
        })
        .collect();
    connection
        .prepare_cached(&RECORD_COMPLETIONS)?
        .execute([serde_json::Value::Array(records).to_string()])?;
    let mut trim = connection.prepare_cached(HISTORY_TRIM)?;
    for c in completions {
        if let Some(up_to) = trim_up_to(c.attempt) {
            trim.execute(params![c.id, i64::from(up_to)])?;
        }
    }
    let batch: Vec<serde_json::Value> = completions
        .iter()
        .map(|c| {
            let t = &c.transition;
            json!({
                "id": c.id,
                "owner": c.owner,
                "attempt": c.attempt,
                "status": status_code(t.status),
                "retry_count": t.retry_count,
                "next_run_at": t.next_run_at.map(millis),
                "result": t.result,
                "error": t.error,
                "plugin_version": c.plugin_version,
                "log": c.log,
                "finished_at": t.status.is_final().then(|| millis(c.finished_at)),
                "now": millis(c.finished_at),
            })
        })
        .collect();
    let changed = connection
        .prepare_cached(COMPLETE)?
        .execute([serde_json::Value::Array(batch).to_string()])?;
    Ok(changed as u64)
}

/// A returned `async_task` row, read by column name.
fn task_row(row: &Row<'_>) -> rusqlite::Result<TaskRow> {
    Ok(TaskRow {
        id: row.get("id")?,
        task_type: row.get("task_type")?,
        payload: row.get("payload")?,
        status: row.get("status")?,
        priority: row.get("priority")?,
        retry_count: row.get("retry_count")?,
        max_retry: row.get("max_retry")?,
        attempts: row.get("attempts")?,
        next_run_at: row.get("next_run_at")?,
        idempotency_key: row.get("idempotency_key")?,
        lease_owner: row.get("lease_owner")?,
        lease_expires_at: row.get("lease_expires_at")?,
        attempted_at: row.get("attempted_at")?,
        finished_at: row.get("finished_at")?,
        last_error: row.get("last_error")?,
        result: row.get("result")?,
        progress: row.get("progress")?,
        progress_note: row.get("progress_note")?,
        plugin_version: row.get("plugin_version")?,
        log: row.get("log")?,
        created_at: row.get("created_at")?,
        updated_at: row.get("updated_at")?,
    })
}

impl From<rusqlite::Error> for StoreError {
    fn from(error: rusqlite::Error) -> Self {
        use rusqlite::ErrorCode::{DatabaseBusy, DatabaseLocked};
        match error.sqlite_error_code() {
            Some(DatabaseBusy | DatabaseLocked) => StoreError::Unavailable(error.to_string()),
            _ => StoreError::Database(error.to_string()),
        }
    }
}
