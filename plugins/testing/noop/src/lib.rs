//! `noop` (test handler): returns its payload unchanged as the result.
//!
//! The cheapest handler there is — no parsing, no host calls — so that tests and benchmarks
//! measure the host's own cost per task. Any payload succeeds; the result is the same text.

use spool_sdk::{Failure, Handler, TaskInfo};

/// The `noop` handler.
struct Noop;

impl Handler for Noop {
    fn handle(_task: TaskInfo, payload: String) -> Result<String, Failure> {
        Ok(payload)
    }
}

spool_sdk::export_handler!(Noop);
