//! `clock` (test handler): reports when it started, by the wall clock.
//!
//! The first thing the handler does is read WASI's wall clock (the host's system clock, as
//! [`std::time::SystemTime`] reads it in a wasip2 guest), so a benchmark that notes the time it
//! sent an enqueue request can measure enqueue request → handler start. Any payload succeeds.
//!
//! # Result
//!
//! ```json
//! {"started_us": 1764612345678901}
//! ```
//!
//! (microseconds since the Unix epoch).

use std::time::{SystemTime, UNIX_EPOCH};

use spool_sdk::{Failure, Handler, TaskInfo};

/// The `clock` handler.
struct Clock;

impl Handler for Clock {
    fn handle(_task: TaskInfo, _payload: String) -> Result<String, Failure> {
        let started = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_micros())
            .unwrap_or(0);
        Ok(format!("{{\"started_us\":{started}}}"))
    }
}

spool_sdk::export_handler!(Clock);
