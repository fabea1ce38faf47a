//! Spool: a job runner whose queue is a plain database table and whose task handlers are
//! sandboxed WebAssembly components.
//!
//! A web app inserts a row (through `POST /tasks` or the `spool enqueue` CLI); a Spool host
//! claims it, runs the handler for its `task_type` in a fresh sandboxed instance, retries
//! failures with exponential backoff, and parks exhausted tasks as dead letters.
//!
//! # Layers
//! Each module uses only the modules in the layers below its own, so the host reads bottom up
//! and a change to a lower layer never has to look above it (a unit test, `layers.rs`, holds
//! the code to this list). From the bottom:
//! 0. the `spool-rules` crate: the values and rules every Spool crate shares (task type names,
//!    idempotency keys, sizes, spans of time, `host[:port]`, the ranges of a task's policy);
//! 1. pure building blocks: [`backoff`], the retry delay policy; [`shutdown`], the two-stage
//!    stop signal; [`task`], the task model and its state machine (with its backoff); and
//!    [`instruments`], the metrics `GET /metrics` exports and the calls that record them;
//! 2. [`store`]: the only place with SQL: the store contract and its SQLite, PostgreSQL and
//!    MySQL/MariaDB backends;
//! 3. [`sandbox`]: the only place with wasmtime: compiling and running handler components,
//!    and the capabilities an attempt may use; [`schedule`]: periodic tasks, `[[schedule]]`
//!    entries and the arithmetic of their ticks;
//! 4. [`plugins`]: the plugin folder (loaded at start, watched while serving), per-type
//!    manifests and policies over the host's defaults, the task type registry;
//! 5. [`enqueue`]: what a valid new task is (for the API, the CLI and follow-up tasks), and
//!    the group commit of enqueues;
//! 6. [`worker`]: the services that work the queue: the task path every host runs
//!    (`worker::run`) and the leader's upkeep (`worker::upkeep`);
//! 7. [`alerts`]: alert rules over dead letters, backlog, plugins and the database; webhook and
//!    e-mail channels; the drill;
//! 8. [`config`]: one validated [`config::Config`] from flags, `SPOOL_*` variables and
//!    `spool.toml`, made of the settings each layer below defines;
//! 9. [`api`]: the HTTP API: the axum routes, errors, OpenAPI, and the typed client the CLI uses;
//! 10. [`host`]: starts and stops all of the above;
//! 11. [`cli`]: the `spool` command line: its arguments, its commands, and what they print.
//!
//! Building handlers (`spool plugin new`, `spool plugin build`) is not part of this library:
//! it is the `spool-toolchain` crate (`toolchain/`), which [`cli`] uses when built with the
//! default-on `toolchain` feature.

pub mod alerts;
pub mod api;
pub mod backoff;
pub mod cli;
pub mod config;
pub mod enqueue;
pub mod host;
pub mod instruments;
#[cfg(test)]
mod layers;
pub mod plugins;
pub mod sandbox;
pub mod schedule;
pub mod shutdown;
pub mod store;
pub mod task;
pub mod worker;

pub use config::Config;
pub use host::{RunningHost, StartError, start};
