//! What each command does: the calls it makes, and which of [`super::render`]'s outputs it
//! prints.
//!
//! - [`tasks`]: enqueue, status, the task listing, retry and discard, pause, resume, cancel.
//! - [`info`]: what a host shows of itself: types, plugins, schedules, health, alerts.
//! - [`host`]: `serve`, and `archive` against the database.
//! - [`plugin`]: `spool plugin new` and `spool plugin build`.
//! - [`deploy`]: `deploy`, `promote`, `rollback`, `undeploy` and `versions`.
//! - [`replay`]: `spool replay`, a recorded attempt run again on this machine.

pub mod deploy;
pub mod host;
pub mod info;
pub mod plugin;
pub mod replay;
pub mod tasks;
