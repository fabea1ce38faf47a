//! `forkbomb` (test handler): tries to enqueue follow-up tasks without end.
//!
//! Used to test the host's rules for follow-ups: the manifest's allow list, the per-attempt
//! count and payload quotas, the priority range and the namespace of handler-chosen
//! idempotency keys.
//!
//! # Payload
//!
//! ```json
//! {"copies": 1000, "task_type": "noop", "pad": 1024, "priority": 2147483647, "key": "order-"}
//! ```
//!
//! The handler calls `enqueue` `copies` times (default 10) for a task of type `task_type`
//! (default: its own type, so that every child forks again with as many copies), each with the
//! payload `{"copies": copies, "padding": "xxx…"}` holding `pad` `x` characters (default 0;
//! `padding` is read and ignored), the given `priority` (default
//! none) and, with `key`, the idempotency key `key` followed by the call's number (`order-0`,
//! `order-1`, …). It keeps calling after an error.
//!
//! # Result
//!
//! ```json
//! {"enqueued": [12, 13], "errors": ["enqueue denied: …"]}
//! ```
//!
//! the ids the host returned, in order, and each distinct error message once.

use serde::Deserialize;
use spool_sdk::{EnqueueOptions, Failure, Handler, TaskInfo, json};

/// The `forkbomb` handler.
struct ForkBomb;

/// The payload.
#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Request {
    copies: u32,
    task_type: Option<String>,
    pad: usize,
    priority: Option<i32>,
    key: Option<String>,
    padding: String,
}

impl Default for Request {
    fn default() -> Self {
        Request {
            copies: 10,
            task_type: None,
            pad: 0,
            priority: None,
            key: None,
            padding: String::new(),
        }
    }
}

impl Handler for ForkBomb {
    fn handle(task: TaskInfo, payload: String) -> Result<String, Failure> {
        let request: Request = json::parse_payload(&payload)?;
        let task_type = request.task_type.unwrap_or(task.task_type);
        let child = json::json!({ "copies": request.copies, "padding": "x".repeat(request.pad) })
            .to_string();
        let mut enqueued = Vec::new();
        let mut errors: Vec<String> = Vec::new();
        for n in 0..request.copies {
            let mut options = EnqueueOptions::default();
            if let Some(priority) = request.priority {
                options = options.priority(priority);
            }
            if let Some(key) = &request.key {
                options = options.idempotency_key(format!("{key}{n}"));
            }
            match spool_sdk::enqueue(&task_type, &child, options) {
                Ok(id) => enqueued.push(id),
                Err(error) if !errors.contains(&error) => errors.push(error),
                Err(_) => {}
            }
        }
        json::to_result(&json::json!({ "enqueued": enqueued, "errors": errors }))
    }
}

spool_sdk::export_handler!(ForkBomb);
