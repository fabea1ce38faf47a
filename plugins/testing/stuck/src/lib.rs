//! `stuck` (test handler): sleeps forever, blocked in a host call.
//!
//! Used to test the host's wall-clock timeout. Unlike `spin`, it burns no fuel: it waits in
//! [`std::thread::sleep`] (a WASI clock pollable, an hour at a time) and never returns, so
//! only a deadline that interrupts host calls stops it. The payload is ignored.

use std::time::Duration;

use spool_sdk::{Failure, Handler, TaskInfo};

/// The `stuck` handler.
struct Stuck;

impl Handler for Stuck {
    fn handle(_task: TaskInfo, _payload: String) -> Result<String, Failure> {
        loop {
            std::thread::sleep(Duration::from_secs(3600));
        }
    }
}

spool_sdk::export_handler!(Stuck);
