//! `ledger` (test handler): one external effect per task, guarded by the effect ledger.
//!
//! The effect is recording the key `task:{id}` in the host's effect ledger; the result says
//! whether this attempt performed it (`{"effect": "performed"}`) or found it already done by
//! an earlier attempt of the same task (`{"effect": "already done"}`), which happens when a
//! host died after the effect but before its completion was written. Tests with many hosts
//! count both to prove every task's effect happened exactly once.

use spool_sdk::{Failure, Handler, TaskInfo, effects, json};

/// The `ledger` handler.
struct Ledger;

impl Handler for Ledger {
    fn handle(task: TaskInfo, _payload: String) -> Result<String, Failure> {
        let performed = effects::once(format!("task:{}", task.id), || Ok(()))?.is_some();
        let effect = if performed {
            "performed"
        } else {
            "already done"
        };
        json::to_result(&json::json!({ "effect": effect }))
    }
}

spool_sdk::export_handler!(Ledger);
