//! `deeprec` (test handler): recurses without end, until the stack overflows.
//!
//! Used to test that the host survives a guest's stack overflow: the instance traps. Each
//! call keeps a small buffer on the stack and uses the inner call's result afterwards, so the
//! recursion is not a tail call, and [`core::hint::black_box`] keeps the optimizer from
//! turning it into a loop or removing the frame. The payload is ignored.

use core::hint::black_box;

use spool_sdk::{Failure, Handler, TaskInfo};

/// The `deeprec` handler.
struct Deeprec;

impl Handler for Deeprec {
    fn handle(_task: TaskInfo, _payload: String) -> Result<String, Failure> {
        Ok(descend(0).to_string())
    }
}

spool_sdk::export_handler!(Deeprec);

/// Calls itself one level deeper, for ever: the stop condition never holds, but the optimizer
/// cannot know that.
fn descend(depth: u64) -> u64 {
    let frame = black_box([depth as u8; 64]);
    if black_box(depth) == u64::MAX {
        return 0;
    }
    let below = descend(black_box(depth + 1));
    black_box(below.wrapping_add(u64::from(frame[0])))
}
