//! `spin` (test handler): busy-loops forever and never returns.
//!
//! Used to test that the host stops a runaway handler (by fuel or by deadline). The loop
//! passes its counter through [`core::hint::black_box`] on every turn, so the optimizer can
//! neither remove it nor fold it into a single wait. The payload is ignored.

use core::hint::black_box;

use spool_sdk::{Failure, Handler, TaskInfo};

/// The `spin` handler.
struct Spin;

impl Handler for Spin {
    fn handle(_task: TaskInfo, _payload: String) -> Result<String, Failure> {
        let mut turns: u64 = 0;
        loop {
            turns = black_box(turns.wrapping_add(1));
        }
    }
}

spool_sdk::export_handler!(Spin);
