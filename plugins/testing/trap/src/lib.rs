//! `trap` (test handler): panics on purpose, whatever the payload.
//!
//! A panic in a WebAssembly guest aborts, which executes `unreachable`: the instance traps.
//! The message, `boom: handler panicked on purpose`, is written to the guest's stderr first,
//! so the host can show it next to the trap.

use spool_sdk::{Failure, Handler, TaskInfo};

/// The `trap` handler.
struct Trap;

impl Handler for Trap {
    fn handle(_task: TaskInfo, _payload: String) -> Result<String, Failure> {
        panic!("boom: handler panicked on purpose");
    }
}

spool_sdk::export_handler!(Trap);
