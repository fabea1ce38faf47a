//! `sleepy` (test handler): sleeps for a given time, then succeeds.
//!
//! Used to test what happens to a task that is running when the host shuts down or dies.
//!
//! # Payload
//!
//! ```json
//! {"ms": 1500}
//! ```
//!
//! The handler reports progress 0 before it starts sleeping, then sleeps in ten equal slices
//! (with [`std::thread::sleep`], which waits on a WASI clock), reporting progress after each.
//!
//! # Result
//!
//! ```json
//! {"slept_ms": 1500}
//! ```
//!
//! A payload without a whole, non-negative `ms` fails permanently.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use spool_sdk::{Failure, Handler, TaskInfo, json};

/// The `sleepy` handler.
struct Sleepy;

/// The payload.
#[derive(Deserialize)]
struct Request {
    ms: u64,
}

/// The result.
#[derive(Serialize)]
struct Slept {
    slept_ms: u64,
}

/// How many slices the sleep is cut into, each followed by a progress report.
const SLICES: u64 = 10;

impl Handler for Sleepy {
    fn handle(_task: TaskInfo, payload: String) -> Result<String, Failure> {
        let Request { ms } = json::parse_payload(&payload)?;
        spool_sdk::progress(0, format!("sleeping {ms} ms"));
        let mut slept = 0;
        for slice in 1..=SLICES {
            // Cumulative targets, so the slices add up to exactly `ms`.
            let target = ms / SLICES * slice + ms % SLICES * slice / SLICES;
            std::thread::sleep(Duration::from_millis(target - slept));
            slept = target;
            spool_sdk::progress(
                (slice * 100 / SLICES) as u8,
                format!("slept {slept} of {ms} ms"),
            );
        }
        json::to_result(&Slept { slept_ms: slept })
    }
}

spool_sdk::export_handler!(Sleepy);
