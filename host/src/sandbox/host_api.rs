//! The host side of the handler world's `host` interface: what a guest can ask of Spool.

use std::sync::Arc;

use super::bindings::spool::task::host::{Host, Level};
use super::HostState;

/// Severity of a guest's log line, independent of the WIT bindings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogLevel {
    Trace,
    Debug,
    Info,
    Warn,
    Error,
}

/// Where a running attempt's events go; the worker implements it.
pub trait TaskEvents: Send + Sync {
    /// The handler reported progress (`percent` already clamped to 0–100).
    fn progress(&self, task_id: u64, percent: u8, note: String);
}

/// The longest log line or progress note kept; longer ones are cut, so a guest cannot flood
/// the log or the database through a single call.
const MAX_MESSAGE_BYTES: usize = 4096;

/// Identifies the attempt a guest's host calls belong to.
pub(super) struct TaskContext {
    task_id: u64,
    task_type: String,
    events: Arc<dyn TaskEvents>,
}

impl TaskContext {
    pub(super) fn new(task_id: u64, task_type: String, events: Arc<dyn TaskEvents>) -> Self {
        TaskContext { task_id, task_type, events }
    }
}

/// Cuts `text` to at most `MAX_MESSAGE_BYTES` on a character boundary.
fn bounded(mut text: String) -> String {
    if text.len() > MAX_MESSAGE_BYTES {
        let mut end = MAX_MESSAGE_BYTES;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

impl Host for HostState {
    fn log(&mut self, level: Level, message: String) {
        let ctx = &self.events;
        let message = bounded(message);
        let (id, task_type) = (ctx.task_id, ctx.task_type.as_str());
        match level {
            Level::Trace => tracing::trace!(task_id = id, task_type, "{message}"),
            Level::Debug => tracing::debug!(task_id = id, task_type, "{message}"),
            Level::Info => tracing::info!(task_id = id, task_type, "{message}"),
            Level::Warn => tracing::warn!(task_id = id, task_type, "{message}"),
            Level::Error => tracing::error!(task_id = id, task_type, "{message}"),
        }
    }

    fn progress(&mut self, percent: u8, note: String) {
        let ctx = &self.events;
        ctx.events.progress(ctx.task_id, percent.min(100), bounded(note));
    }
}

impl super::bindings::spool::task::types::Host for HostState {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_messages_are_cut_on_a_char_boundary() {
        let long = "é".repeat(MAX_MESSAGE_BYTES);
        let cut = bounded(long);
        assert!(cut.len() <= MAX_MESSAGE_BYTES + '…'.len_utf8());
        assert!(cut.ends_with('…'));
        assert_eq!(bounded("short".into()), "short");
    }
}
