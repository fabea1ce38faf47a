//! Writing to the host's log.
//!
//! Each function writes one line at its level; the host tags it with the task's id and type.
//! They take anything string-like, so both `log::info("started")` and
//! `log::warn(format!("skipped {n} rows"))` work.

use crate::host::{self, Level};

/// Writes `message` to the host's log at `level`.
pub fn log(level: Level, message: impl AsRef<str>) {
    host::log(level, message.as_ref());
}

/// Writes a line at trace level: fine detail, usually filtered out.
pub fn trace(message: impl AsRef<str>) {
    log(Level::Trace, message);
}

/// Writes a line at debug level: detail useful while developing a handler.
pub fn debug(message: impl AsRef<str>) {
    log(Level::Debug, message);
}

/// Writes a line at info level: what the handler did.
pub fn info(message: impl AsRef<str>) {
    log(Level::Info, message);
}

/// Writes a line at warn level: something odd that did not stop the handler.
pub fn warn(message: impl AsRef<str>) {
    log(Level::Warn, message);
}

/// Writes a line at error level: something that went wrong.
pub fn error(message: impl AsRef<str>) {
    log(Level::Error, message);
}
