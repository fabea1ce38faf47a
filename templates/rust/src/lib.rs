//! `__NAME__`: a Spool task handler.
//!
//! Payload: `{"text": "..."}`. Result: `{"task_type": "__NAME__", "attempt": 1, "length": 5}`.
//! Build it into the plugin folder with `spool plugin build` (see README.md).

use serde::Deserialize;
use spool_sdk::{Failure, Handler, TaskInfo, json, log, progress};

/// The payload this handler accepts; an unknown field is a mistake worth reporting.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Payload {
    text: String,
}

struct Component;

impl Handler for Component {
    fn handle(task: TaskInfo, payload: String) -> Result<String, Failure> {
        // A payload that does not parse fails permanently: retrying cannot fix it.
        let payload: Payload = json::parse_payload(&payload)?;
        log::info(format!("handling task {} (attempt {} of {})", task.id, task.attempt, task.max_attempts));

        // Do the work here. Return `Err(Failure::retry(..))` for a problem another attempt
        // may not have (a busy service), `Err(Failure::fail(..))` for one it will.
        let length = payload.text.chars().count();

        progress(100, "done");
        json::to_result(&json::json!({
            "task_type": task.task_type,
            "attempt": task.attempt,
            "length": length,
        }))
    }
}

spool_sdk::export_handler!(Component);
