//! Spool: a job runner whose queue is a plain database table and whose task handlers are
//! sandboxed WebAssembly components.
//!
//! A web app inserts a row (through `POST /tasks` or the `spool enqueue` CLI); a Spool host
//! claims it, runs the handler for its `task_type` in a fresh sandboxed instance, retries
//! failures with exponential backoff, and parks exhausted tasks as dead letters.
//!
//! # Layout
//! - [`config`]: one validated [`config::Config`] from flags, `SPOOL_*` variables and `spool.toml`.
//! - [`task`]: the task model and its state machine (pure); [`backoff`]: the retry delay policy.
//! - [`enqueue`]: what a valid new task is (shared by the API and follow-up tasks).
//! - [`schedule`]: periodic tasks: `[[schedule]]` entries and the arithmetic of their ticks.
//! - [`store`]: the only place with SQL: the [`store::Store`] trait and its SQLite backend.
//! - [`worker`]: background services: dispatcher, batch completer, lease keeper, rescuer.
//! - [`plugins`]: the plugin folder (loaded at start, watched while serving), per-type
//!   manifests (policy and capabilities), the task type registry.
//! - [`sandbox`]: the only place with wasmtime: compiling and running handler components.
//! - [`api`]: the only place with HTTP: the axum routes, errors, OpenAPI, and the CLI's client.
//! - [`alerts`]: alert rules over dead letters, backlog, plugins and the database; webhook and
//!   e-mail channels; the drill.
//! - [`instruments`]: the metrics `GET /metrics` exports, and the calls that record them.
//! - [`host`]: starts and stops all of the above; [`shutdown`]: the two-stage stop signal.
//! - [`cli`]: the `spool` command line: its arguments, its commands, and what they print.
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
pub mod plugins;
pub mod sandbox;
pub mod schedule;
pub mod shutdown;
pub mod store;
pub mod task;
pub mod worker;

pub use config::Config;
pub use host::{RunningHost, StartError, start};
