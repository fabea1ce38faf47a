//! The values and rules every Spool crate shares, each defined once.
//!
//! The host (`spool`), the enqueue library an application links (`spool-client`) and the
//! handler toolchain (`spool-toolchain`) must agree on what a task type name is, what an
//! idempotency key may hold, how a size or a span of time is written and which values a
//! task's policy may take. This crate is where each of those rules lives; it depends on
//! nothing, so linking it costs an application nothing.
//!
//! # Layout
//! - [`names`]: the task type name rule and the idempotency key rule (with the prefix
//!   reserved for keys the host makes itself).
//! - [`size`]: sizes in bytes (`64MiB`), parsed and shown.
//! - [`span`]: spans written as a whole number and one unit (`90s`, `5m`, `2d`), the grammar
//!   of the API's `delay` and `wait` and of the CLI's `--since`. Durations in files and flags
//!   are humantime's grammar instead, through the `humantime` crate.
//! - [`json`]: what a JSON payload must be for every database to store it (depth, surrogates).
//! - [`authority`]: `host[:port]` as a `Host` header, an allow list or a listen address gives it.
//! - [`limits`]: the ranges a task's policy takes, the same in spool.toml, a manifest and the API.

pub mod authority;
pub mod json;
pub mod limits;
pub mod names;
pub mod size;
pub mod span;
