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

use rusqlite::{Connection, OpenFlags, params};
use sqlx::SqlitePool;
use std::path::Path;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
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
    /// Runs a closure on the writer's connection (tests: faults and connection settings).
    #[cfg(test)]
    Run {
        work: Work,
        reply: oneshot::Sender<Result<(), StoreError>>,
    },
}

/// Work a test runs on the writer's connection.
#[cfg(test)]
type Work = Box<dyn Fn(&Connection) -> Result<(), StoreError> + Send>;

/// Commands run in one transaction; `done` is told once every answer has been sent.
struct Cycle {
    commands: Vec<Command>,
    done: oneshot::Sender<()>,
}

/// What the thread tells the rest of the host about itself.
#[derive(Default)]
struct Condition {
    /// Why the thread stopped for good, once it has.
    stopped: Option<String>,
    /// How often it panicked and started over on a new connection.
    restarts: u64,
}

/// The handle to the writer thread; the thread ends when this is dropped.
pub struct Writer {
    queued: Mutex<Vec<Command>>,
    cycles: mpsc::Sender<Cycle>,
    condition: Arc<Mutex<Condition>>,
}

/// Opens the writer's connection to the (migrated) database file at `path`; never creates one.
fn connect(path: &Path) -> Result<Connection, StoreError> {
    let connection = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    connection.busy_timeout(BUSY_TIMEOUT)?;
    connection.pragma_update(None, "journal_mode", "wal")?;
    connection.pragma_update(None, "synchronous", "normal")?;
    connection.pragma_update(None, "temp_store", "memory")?;
    connection.pragma_update(None, "cache_size", -65536)?;
    Ok(connection)
}

impl Writer {
    /// Opens a second connection to the database file at `path` (already migrated) and
    /// starts the thread that owns it.
    ///
    /// The thread is supervised from inside: a panic while it runs a cycle rolls the cycle's
    /// transaction back (nothing of it is committed, and every caller in it is told so), and
    /// the thread starts over on a new connection. If that connection cannot be opened, the
    /// thread stops for good and [`Writer::fault`] says why, which `GET /health` reports.
    pub fn start(path: &Path) -> Result<Writer, StoreError> {
        let connection = connect(path)?;
        let (cycles, receiver) = mpsc::channel::<Cycle>();
        let condition = Arc::new(Mutex::new(Condition::default()));
        let watched = condition.clone();
        let path = path.to_path_buf();
        std::thread::Builder::new()
            .name("spool-sqlite-writer".into())
            .spawn(move || serve(connection, &path, &receiver, &watched))
            .map_err(|e| {
                StoreError::Database(format!("cannot start the SQLite writer thread: {e}"))
            })?;
        Ok(Writer {
            queued: Mutex::new(Vec::new()),
            cycles,
            condition,
        })
    }

    /// Why the writer thread stopped for good, if it has: every enqueue, claim and completion
    /// fails until the host is restarted.
    pub fn fault(&self) -> Option<String> {
        self.condition().stopped.clone()
    }

    /// How often the writer thread panicked and started over.
    #[cfg(test)]
    fn restarts(&self) -> u64 {
        self.condition().restarts
    }

    fn condition(&self) -> std::sync::MutexGuard<'_, Condition> {
        self.condition.lock().unwrap_or_else(|p| p.into_inner())
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
    ///
    /// A caller that gives up (its future dropped while it waits for the gate or the answer)
    /// closes its answer channel: the thread then skips its command if it has not run yet, and
    /// undoes a claim nobody received (see [`run_cycle`]).
    async fn submit<T>(
        &self,
        gate: &SqlitePool,
        command: impl FnOnce(oneshot::Sender<Result<T, StoreError>>) -> Command,
    ) -> Result<T, StoreError> {
        if let Some(why) = self.fault() {
            return Err(stopped(&why));
        }
        let (reply, mut answer) = oneshot::channel();
        self.queued
            .lock()
            .expect("writer queue lock")
            .push(command(reply));
        let held = gate.acquire().await?;
        match answer.try_recv() {
            Ok(result) => return result,
            Err(oneshot::error::TryRecvError::Closed) => return Err(self.lost_answer()),
            Err(oneshot::error::TryRecvError::Empty) => {}
        }
        let commands = std::mem::take(&mut *self.queued.lock().expect("writer queue lock"));
        let (done, finished) = oneshot::channel();
        self.cycles
            .send(Cycle { commands, done })
            .map_err(|_| self.lost_answer())?;
        // The gate is held until every answer of the cycle is out, so the next holder finds
        // its own answer if it rode along.
        let _ = finished.await;
        drop(held);
        answer.await.map_err(|_| self.lost_answer())?
    }

    /// The error for a command the thread dropped without answering: it panicked while the
    /// command's transaction was open (and rolled it back), or it stopped.
    fn lost_answer(&self) -> StoreError {
        match self.fault() {
            Some(why) => stopped(&why),
            None => StoreError::Unavailable(
                "the SQLite writer failed while running this write and rolled it back \
                 (the host's log says why); nothing of it was committed, so it is safe to retry"
                    .into(),
            ),
        }
    }
}

fn stopped(why: &str) -> StoreError {
    StoreError::Unavailable(format!(
        "the SQLite writer thread stopped ({why}); restart the host"
    ))
}

/// The thread's loop: runs each cycle, and starts over on a new connection after a panic.
fn serve(
    mut connection: Connection,
    path: &Path,
    receiver: &mpsc::Receiver<Cycle>,
    condition: &Mutex<Condition>,
) {
    let condition = |change: &dyn Fn(&mut Condition)| {
        change(&mut condition.lock().unwrap_or_else(|p| p.into_inner()))
    };
    while let Ok(cycle) = receiver.recv() {
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run_cycle(&connection, cycle.commands)
        }));
        if let Err(panic) = ran {
            let what = panic_text(&panic);
            tracing::error!(
                "the SQLite writer panicked ({what}); its transaction is rolled back and it \
                 starts over on a new connection"
            );
            // Dropping the connection rolls back whatever it had open.
            drop(connection);
            match reconnect(path) {
                Ok(fresh) => connection = fresh,
                Err(error) => {
                    let why = format!(
                        "it panicked ({what}) and could not reopen {}: {error}",
                        path.display()
                    );
                    tracing::error!("the SQLite writer thread stops: {why}");
                    condition(&|c| c.stopped = Some(why.clone()));
                    let _ = cycle.done.send(());
                    return;
                }
            }
            condition(&|c| c.restarts += 1);
        }
        let _ = cycle.done.send(());
    }
}

/// Opens the connection again after a panic, retrying briefly (the file may be busy).
fn reconnect(path: &Path) -> Result<Connection, StoreError> {
    let mut last = None;
    for wait in [0, 100, 500, 2000] {
        std::thread::sleep(std::time::Duration::from_millis(wait));
        match connect(path) {
            Ok(connection) => return Ok(connection),
            Err(error) => last = Some(error),
        }
    }
    Err(last.expect("at least one try"))
}

fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".into())
}

/// Runs one cycle's commands in one transaction and sends each its answer after the commit (or
/// the commit's error).
///
/// Every answer is true of the database afterwards:
/// - a command whose caller is gone before it runs is skipped;
/// - an error after which SQLite rolled the whole transaction back (disk full, I/O error, out
///   of memory) is detected ([`Step::TransactionLost`]): the commands that ran before it are
///   answered that they were rolled back, and the rest start again in a new transaction;
/// - a claim committed after its caller left is undone at once (the tasks go back to pending
///   with the attempt uncounted), so no task loses an attempt to a claim nobody received.
fn run_cycle(connection: &Connection, commands: Vec<Command>) {
    let mut waiting: std::collections::VecDeque<Command> = commands.into();
    while !waiting.is_empty() {
        if let Err(error) = connection.execute_batch("BEGIN IMMEDIATE") {
            let error = StoreError::from(error);
            for command in waiting {
                command.answer_error(error.clone());
            }
            return;
        }
        let mut answers = Vec::with_capacity(waiting.len());
        let mut lost = None;
        while let Some(command) = waiting.pop_front() {
            if command.caller_gone() {
                continue;
            }
            match within_savepoint(connection, |connection| command.run(connection)) {
                Step::Done(outcome) => answers.push((command, outcome)),
                Step::TransactionLost(error) => {
                    command.answer_error(error.clone());
                    lost = Some(error);
                    break;
                }
            }
        }
        if let Some(error) = lost {
            if !connection.is_autocommit() {
                let _ = connection.execute_batch("ROLLBACK");
            }
            let rolled_back = StoreError::Unavailable(format!(
                "the database rolled back the transaction this write was in ({error}); \
                 nothing of it was committed, so it is safe to retry"
            ));
            for (command, _) in answers {
                command.answer_error(rolled_back.clone());
            }
            continue;
        }
        match connection.execute_batch("COMMIT") {
            Ok(()) => {
                let mut undelivered = Vec::new();
                for (command, outcome) in answers {
                    undelivered.extend(command.answer(outcome).into_iter().flatten());
                }
                if !undelivered.is_empty() {
                    super::claim::undo_undelivered(connection, &undelivered);
                }
            }
            Err(error) => {
                if !connection.is_autocommit() {
                    let _ = connection.execute_batch("ROLLBACK");
                }
                let error = StoreError::from(error);
                for (command, _) in answers {
                    command.answer_error(error.clone());
                }
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

/// How a command in a savepoint went: its own result, or the end of the whole transaction.
enum Step {
    Done(Result<Outcome, StoreError>),
    TransactionLost(StoreError),
}

/// Runs `work` in a savepoint: undone alone if it fails, unless SQLite rolled back the whole
/// transaction (it leaves autocommit mode on then), which is told apart.
fn within_savepoint(
    connection: &Connection,
    work: impl FnOnce(&Connection) -> Result<Outcome, StoreError>,
) -> Step {
    if let Err(error) = connection.execute_batch("SAVEPOINT command") {
        return Step::TransactionLost(error.into());
    }
    let outcome = work(connection);
    if connection.is_autocommit() {
        let error = match outcome {
            Err(error) => error,
            Ok(_) => StoreError::Database("the transaction ended during a write".into()),
        };
        return Step::TransactionLost(error);
    }
    if outcome.is_err()
        && let Err(error) = connection.execute_batch("ROLLBACK TO command")
    {
        return Step::TransactionLost(error.into());
    }
    if let Err(error) = connection.execute_batch("RELEASE command") {
        return Step::TransactionLost(error.into());
    }
    Step::Done(outcome)
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
            #[cfg(test)]
            Command::Run { work, .. } => work(connection).map(|()| Outcome::Done),
        }
    }

    /// Whether nobody waits for this command's answer any more.
    fn caller_gone(&self) -> bool {
        match self {
            Command::Enqueue { reply, .. } => reply.is_closed(),
            Command::Claim { reply, .. } => reply.is_closed(),
            Command::Complete { reply, .. } => reply.is_closed(),
            Command::FailUnreadable { reply, .. } => reply.is_closed(),
            #[cfg(test)]
            Command::Run { reply, .. } => reply.is_closed(),
        }
    }

    /// Sends the committed outcome; returns the rows of a claim whose caller was gone.
    fn answer(self, outcome: Result<Outcome, StoreError>) -> Option<Claimed> {
        match (self, outcome) {
            (Command::Enqueue { reply, .. }, Ok(Outcome::Enqueued(enqueued))) => {
                let _ = reply.send(Ok(enqueued));
            }
            (Command::Claim { reply, .. }, Ok(Outcome::Claimed(rows))) => {
                if let Err(Ok(rows)) = reply.send(Ok(rows)) {
                    return Some(rows);
                }
            }
            (Command::Complete { reply, .. }, Ok(Outcome::Completed(changed))) => {
                let _ = reply.send(Ok(changed));
            }
            (Command::FailUnreadable { reply, .. }, Ok(Outcome::Done)) => {
                let _ = reply.send(Ok(()));
            }
            #[cfg(test)]
            (Command::Run { reply, .. }, Ok(Outcome::Done)) => {
                let _ = reply.send(Ok(()));
            }
            (command, Err(error)) => command.answer_error(error),
            (command, Ok(_)) => {
                command.answer_error(StoreError::Database("writer answer mismatch".into()))
            }
        }
        None
    }

    fn answer_error(self, error: StoreError) {
        match self {
            Command::Enqueue { reply, .. } => drop(reply.send(Err(error))),
            Command::Claim { reply, .. } => drop(reply.send(Err(error))),
            Command::Complete { reply, .. } => drop(reply.send(Err(error))),
            Command::FailUnreadable { reply, .. } => drop(reply.send(Err(error))),
            #[cfg(test)]
            Command::Run { reply, .. } => drop(reply.send(Err(error))),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::sqlite::SqliteStore;
    use chrono::Utc;

    async fn store_in(dir: &Path) -> SqliteStore {
        let url = format!("sqlite://{}", dir.join("spool.db").display());
        SqliteStore::open(&url).await.unwrap()
    }

    fn task(key: &str, payload_bytes: usize) -> NewTask {
        NewTask {
            task_type: "t".into(),
            payload: serde_json::json!({ "pad": "x".repeat(payload_bytes) }).to_string(),
            priority: 0,
            max_retry: 0,
            run_at: Utc::now() - chrono::Duration::seconds(1),
            idempotency_key: Some(key.into()),
            depth: 0,
        }
    }

    /// Rows with this idempotency key, read on a connection of its own.
    fn rows_with_key(dir: &Path, key: &str) -> i64 {
        let connection = Connection::open(dir.join("spool.db")).unwrap();
        connection
            .query_row(
                "SELECT count(*) FROM async_task WHERE idempotency_key = ?1",
                [key],
                |row| row.get(0),
            )
            .unwrap()
    }

    /// Queues a command behind the next caller's, as a concurrent caller would.
    fn queue(store: &SqliteStore, command: Command) {
        store.hot.queued.lock().unwrap().push(command);
    }

    async fn run(
        store: &SqliteStore,
        work: impl Fn(&Connection) -> Result<(), StoreError> + Send + 'static,
    ) -> Result<(), StoreError> {
        let work = Box::new(work);
        store
            .hot
            .submit(&store.writer, |reply| Command::Run { work, reply })
            .await
    }

    #[tokio::test]
    async fn a_command_whose_caller_left_before_it_ran_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = store_in(dir.path()).await;
        let (reply, answer) = oneshot::channel();
        queue(
            &store,
            Command::Enqueue {
                tasks: vec![task("gave-up", 10)],
                reply,
            },
        );
        drop(answer);
        store
            .hot
            .enqueue(&store.writer, vec![task("waited", 10)])
            .await
            .unwrap();
        assert_eq!(rows_with_key(dir.path(), "waited"), 1);
        assert_eq!(rows_with_key(dir.path(), "gave-up"), 0, "nobody was told");
    }

    #[tokio::test]
    async fn a_claim_committed_after_its_caller_left_is_put_back_uncounted() {
        let dir = tempfile::tempdir().unwrap();
        let store = store_in(dir.path()).await;
        store
            .hot
            .enqueue(&store.writer, vec![task("claimed", 10)])
            .await
            .unwrap();
        let (reply, answer) = oneshot::channel();
        queue(
            &store,
            Command::Claim {
                request: ClaimRequest {
                    owner: "host-a".into(),
                    limit: 10,
                    task_types: vec!["t".into()],
                    now: Utc::now(),
                    lease: std::time::Duration::from_secs(60),
                },
                reply,
            },
        );
        // The caller gives up after its claim ran, before the commit.
        let answer = Mutex::new(Some(answer));
        run(&store, move |_| {
            answer.lock().unwrap().take();
            Ok(())
        })
        .await
        .unwrap();
        let connection = Connection::open(dir.path().join("spool.db")).unwrap();
        let (status, attempts, owner): (i64, i64, Option<String>) = connection
            .query_row(
                "SELECT status, attempts, lease_owner FROM async_task WHERE idempotency_key = 'claimed'",
                [],
                |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
            )
            .unwrap();
        assert_eq!((status, attempts, owner), (0, 0, None));
    }

    #[tokio::test]
    async fn a_panic_rolls_its_cycle_back_and_the_writer_starts_over() {
        let dir = tempfile::tempdir().unwrap();
        let store = store_in(dir.path()).await;
        let (reply, mut answer) = oneshot::channel();
        queue(
            &store,
            Command::Enqueue {
                tasks: vec![task("before-the-panic", 10)],
                reply,
            },
        );
        let panicked = run(&store, |_| panic!("forced writer panic")).await;
        let error = panicked.unwrap_err();
        assert!(matches!(error, StoreError::Unavailable(_)), "{error:?}");
        assert!(error.to_string().contains("nothing of it was committed"));
        assert!(
            answer.try_recv().is_err(),
            "the queued enqueue got no success"
        );
        assert_eq!(rows_with_key(dir.path(), "before-the-panic"), 0);
        assert_eq!(store.hot.restarts(), 1);
        assert_eq!(store.hot.fault(), None);
        store
            .hot
            .enqueue(&store.writer, vec![task("after", 10)])
            .await
            .unwrap();
        assert_eq!(rows_with_key(dir.path(), "after"), 1);
    }

    #[tokio::test]
    async fn a_writer_that_cannot_start_over_stops_and_says_why() {
        use crate::store::Store;
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        std::fs::create_dir(&home).unwrap();
        let store = store_in(&home).await;
        // The file moves away: open connections keep working, a new one cannot be opened.
        std::fs::rename(&home, dir.path().join("moved")).unwrap();
        assert!(
            run(&store, |_| panic!("forced writer panic"))
                .await
                .is_err()
        );
        let (part, why) = store.failed_part().expect("the writer is reported");
        assert_eq!(part, "sqlite-writer");
        assert!(why.contains("could not reopen"), "{why}");
        let refused = store
            .hot
            .enqueue(&store.writer, vec![task("later", 10)])
            .await
            .unwrap_err();
        assert!(
            refused.to_string().contains("restart the host"),
            "{refused}"
        );
    }

    /// A tmpfs mount of a few megabytes that is unmounted when dropped.
    struct SmallDisk(PathBuf);

    impl SmallDisk {
        /// None when this process may not mount (not root); as root a failure is an error.
        fn mount(at: &Path, size: &str) -> Option<SmallDisk> {
            let root = std::process::Command::new("id")
                .arg("-u")
                .output()
                .map(|out| out.stdout.starts_with(b"0\n"))
                .unwrap_or(false);
            if !root {
                eprintln!("skipping: mounting a small tmpfs needs root");
                return None;
            }
            let mounted = std::process::Command::new("mount")
                .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
                .arg(at)
                .status()
                .expect("mount runs");
            assert!(mounted.success(), "mount a tmpfs at {}", at.display());
            Some(SmallDisk(at.to_path_buf()))
        }
    }

    impl Drop for SmallDisk {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(&self.0)
                .status();
        }
    }

    use std::path::PathBuf;

    #[tokio::test]
    async fn on_a_full_disk_every_answer_is_true_of_the_database() {
        let dir = tempfile::tempdir().unwrap();
        let Some(_disk) = SmallDisk::mount(dir.path(), "3m") else {
            return;
        };
        let store = store_in(dir.path()).await;
        // A small page cache, so a large write spills to the file inside its statement (where
        // SQLite answers SQLITE_FULL by rolling the whole transaction back), not only at commit.
        run(&store, |connection| {
            Ok(connection.pragma_update(None, "cache_size", 16)?)
        })
        .await
        .unwrap();
        let mut answers = Vec::new();
        for (key, tasks) in [
            ("small-before", vec![task("small-before", 100)]),
            (
                "too-large",
                (0..40)
                    .map(|n| task(&format!("too-large-{n}"), 100_000))
                    .collect(),
            ),
            ("small-after", vec![task("small-after", 100)]),
        ] {
            let (reply, answer) = oneshot::channel();
            queue(&store, Command::Enqueue { tasks, reply });
            answers.push((key, answer));
        }
        let last = store
            .hot
            .enqueue(&store.writer, vec![task("last", 100)])
            .await;
        let mut outcomes = vec![("last", last.is_ok())];
        for (key, answer) in answers {
            outcomes.push((key, answer.await.unwrap().is_ok()));
        }
        assert!(
            outcomes.iter().any(|(key, ok)| *key == "too-large" && !ok),
            "the disk filled: {outcomes:?}"
        );
        for (key, ok) in outcomes {
            let probe = if key == "too-large" {
                "too-large-0"
            } else {
                key
            };
            assert_eq!(
                rows_with_key(dir.path(), probe),
                i64::from(ok),
                "{key} was answered {} and the database says otherwise",
                if ok { "ok" } else { "with an error" }
            );
        }
    }
}
