//! Enqueue Spool tasks from a Rust application, inside the application's own database
//! transaction.
//!
//! Spool's queue is a table, `async_task`, in the database the application already has. A
//! Spool host claims its rows and runs the WebAssembly handler for each row's `task_type`.
//! This crate writes those rows with sqlx 0.8, on SQLite, PostgreSQL or MySQL/MariaDB, in the
//! same transaction as the business row that asked for the work: the approval and its
//! "send the report" task commit together or not at all. No task for a rolled-back approval,
//! no approval without its task, and no network call to a queue in between.
//!
//! ```no_run
//! use spool_client::{enqueue, Task};
//!
//! #[derive(serde::Serialize)]
//! struct ReportRequest { approval_id: i64 }
//!
//! # async fn approve(pool: &sqlx::PgPool, approval_id: i64) -> Result<(), Box<dyn std::error::Error>> {
//! let mut tx = pool.begin().await?;
//! sqlx::query("UPDATE approval SET state = 'approved' WHERE id = $1")
//!     .bind(approval_id)
//!     .execute(&mut *tx)
//!     .await?;
//! let report = Task::new("report", &ReportRequest { approval_id })
//!     .idempotency_key(format!("approval-{approval_id}-report"));
//! let enqueued = enqueue(&mut tx, &report).await?;
//! tx.commit().await?; // the approval and its task, together
//! println!("task {} (already there: {})", enqueued.id, enqueued.duplicate);
//! # Ok(()) }
//! ```
//!
//! # What it does
//!
//! [`enqueue`] checks the [`Task`] the way the host's `POST /tasks` does (task type name,
//! payload is JSON and within the size limit, idempotency key length) and reports a broken
//! one as an [`Error`] whose message says what to do, before anything is written. Then it runs
//! one `INSERT` on the connection it was given: a transaction (`&mut tx`), a connection
//! (`&mut conn`), or a pool (`&pool`, which commits at once). It never commits or rolls back
//! the caller's transaction.
//!
//! What the task does not set, the table's defaults decide, as for a plain SQL insert: due now,
//! priority 0, `max_retry` 3. (A task enqueued through the host's API takes `priority` and
//! `max_retry` from the task type's manifest instead; rows written with SQL carry their own.)
//! Times come from the application's clock.
//!
//! # Idempotency keys
//!
//! With [`Task::idempotency_key`], at most one task exists per task type and key. An
//! application that retries a whole transaction (after a deadlock, a timeout, a lost
//! connection) enqueues again with the same key: the second insert writes nothing and
//! [`Enqueued`] carries the first task's id with `duplicate: true`. Derive the key from the
//! business row (`approval-1042-report`), not from the attempt.
//!
//! # Databases
//!
//! One function, [`enqueue`], generic over the sqlx database behind the connection; the
//! statements for each are in [`Database`]'s implementations. Cargo features `sqlite`,
//! `postgres` and `mysql` (all on by default) select the drivers: an application on
//! PostgreSQL only depends on `spool-client = { …, default-features = false, features =
//! ["postgres"] }`. The crate brings no sqlx runtime or TLS feature; the application's sqlx
//! does. The `async_task` table is created by the Spool host's migrations: start the host on
//! the database once before the application enqueues.
//!
//! The SQL contract this crate implements (the columns, their defaults, what the host does with
//! rows it did not write, and the statements for applications in other languages) is
//! `docs/sql-enqueue.md` in the Spool repository.
//!
//! # Layout
//! - [`Task`]: the builder; [`Task::check`] runs the checks early.
//! - [`enqueue`] and [`Enqueued`]; [`Database`]: the statements per database.
//! - [`Error`]: why a task was not enqueued.
//! - [`rules`]: the checks, mirroring the host's.

#[cfg(not(any(feature = "sqlite", feature = "postgres", feature = "mysql")))]
compile_error!(
    "spool-client writes to a database: enable at least one of its features `sqlite`, `postgres`, `mysql`"
);

mod backend;
mod error;
pub mod rules;
mod task;

pub use backend::Database;
pub use error::Error;
pub use task::Task;

use std::future::Future;
use std::time::SystemTime;

/// What [`enqueue`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Enqueued {
    /// The task's id (the `async_task` row id): `spool status ID`, `GET /tasks/ID`.
    pub id: i64,
    /// True when a task with the same type and idempotency key already existed: nothing was
    /// inserted, that task was left as it is, and `id` is its id.
    pub duplicate: bool,
}

/// Inserts `task` into `async_task` on `conn`: inside the caller's transaction when given one
/// (`&mut tx`), else on a connection (`&mut conn`) or a pool (`&pool`, committed at once).
///
/// The task becomes visible to Spool hosts when the transaction commits, and disappears with
/// it if it rolls back. Checks the task first (see [`Task::check`]); on an error from the
/// database the statement failed and nothing was enqueued.
///
/// The returned future is `Send`, so `enqueue` works inside spawned tasks and web handlers.
/// (It is written as a function returning `impl Future + Send` rather than an `async fn`: the
/// compiler proves `Send` here once, for every connection type, instead of at each call, where
/// it cannot for a borrowed transaction.)
#[allow(clippy::manual_async_fn)] // on purpose: see above
pub fn enqueue<'a, A>(
    conn: A,
    task: &'a Task,
) -> impl Future<Output = Result<Enqueued, Error>> + Send + 'a
where
    A: sqlx::Acquire<'a> + Send + 'a,
    A::Database: Database,
{
    async move {
        let row = task.row(SystemTime::now())?;
        let mut conn = conn.acquire().await?;
        <A::Database as Database>::insert(&mut conn, &row).await
    }
}
