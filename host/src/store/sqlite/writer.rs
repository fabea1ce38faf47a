//! The SQLite writer thread: enqueues, claims and completions, the statements every task passes
//! through, run synchronously on one connection owned by one thread (their statements are in
//! `enqueue.rs`, `claim.rs` and `completion.rs`).
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

use rusqlite::{Connection, params};
use sqlx::SqlitePool;
use std::path::Path;
use std::sync::Mutex;
use std::sync::mpsc;
use tokio::sync::oneshot;

use super::BUSY_TIMEOUT;
use crate::store::rows::TaskRow;
use crate::store::{ClaimRequest, Completion, StoreError};
use crate::task::{Enqueued, NewTask};

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

    /// Claims rows as [`super::claim::write`] does.
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
            Command::Enqueue { tasks, .. } => {
                super::enqueue::write(connection, tasks).map(Outcome::Enqueued)
            }
            Command::Claim { request, .. } => {
                super::claim::write(connection, request).map(Outcome::Claimed)
            }
            Command::Complete { completions, .. } => {
                super::completion::write(connection, completions).map(Outcome::Completed)
            }
            Command::FailUnreadable { failed, now, .. } => {
                let mut statement = connection.prepare_cached(super::claim::FAIL_UNREADABLE)?;
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

impl From<rusqlite::Error> for StoreError {
    fn from(error: rusqlite::Error) -> Self {
        use rusqlite::ErrorCode::{DatabaseBusy, DatabaseLocked};
        let message = error.to_string();
        if crate::store::key_archived_meanwhile(&message) {
            return crate::store::key_archived_error(&message);
        }
        match error.sqlite_error_code() {
            Some(DatabaseBusy | DatabaseLocked) => StoreError::Unavailable(error.to_string()),
            _ => StoreError::Database(error.to_string()),
        }
    }
}
