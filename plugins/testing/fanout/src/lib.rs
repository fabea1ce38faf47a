//! `fanout` (test handler): enqueues follow-up tasks.
//!
//! Used to test `enqueue` and its derived idempotency keys.
//!
//! # Payload
//!
//! ```json
//! {"children": 3, "task_type": "noop", "fail_on_attempt": 1}
//! ```
//!
//! The handler enqueues `children` tasks (default 0) of type `task_type` (default `noop`),
//! the `i`-th (from 0) with payload `{"parent": <this task's id>, "n": i}` and default
//! options, so the host derives each child's idempotency key from this task and the call's
//! position. Then, on attempt `fail_on_attempt` (optional), it asks for a retry
//! (`fail after fan-out`); a retry enqueues the same children again, which the host must not
//! duplicate. A failed `enqueue` fails the task permanently with
//! `enqueue of child i failed: <host's message>`.
//!
//! `{"enqueue_unknown": true}` instead enqueues a task of type `does-not-exist` and succeeds
//! with the host's error message.
//!
//! # Result
//!
//! ```json
//! {"children": [12, 13, 14]}
//! ```
//!
//! the ids of the children, in order; or `{"error": "<host's message>"}` for
//! `enqueue_unknown` (`{"error": null}` if the host accepted the unknown type).

use serde::Deserialize;
use spool_sdk::{EnqueueOptions, Failure, Handler, TaskInfo, json, log};

/// The `fanout` handler.
struct Fanout;

/// The payload.
#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Request {
    children: u32,
    task_type: String,
    fail_on_attempt: Option<u32>,
    enqueue_unknown: bool,
}

impl Default for Request {
    fn default() -> Self {
        Self {
            children: 0,
            task_type: "noop".to_owned(),
            fail_on_attempt: None,
            enqueue_unknown: false,
        }
    }
}

impl Handler for Fanout {
    fn handle(task: TaskInfo, payload: String) -> Result<String, Failure> {
        let request: Request = json::parse_payload(&payload)?;
        if request.enqueue_unknown {
            let error = spool_sdk::enqueue("does-not-exist", "{}", EnqueueOptions::default()).err();
            log::info(format!("enqueue of an unknown type: {error:?}"));
            return json::to_result(&json::json!({ "error": error }));
        }
        let mut children = Vec::with_capacity(request.children as usize);
        for n in 0..request.children {
            let payload = json::json!({ "parent": task.id, "n": n }).to_string();
            let id = spool_sdk::enqueue(&request.task_type, payload, EnqueueOptions::default())
                .map_err(|e| Failure::Fail(format!("enqueue of child {n} failed: {e}")))?;
            children.push(id);
        }
        log::info(format!(
            "attempt {}: enqueued {} {children:?}",
            task.attempt, request.task_type
        ));
        if request.fail_on_attempt == Some(task.attempt) {
            return Err(Failure::retry("fail after fan-out"));
        }
        json::to_result(&json::json!({ "children": children }))
    }
}

spool_sdk::export_handler!(Fanout);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_payloads_with_defaults() {
        let r: Request = json::parse_payload(r#"{"children": 3}"#).unwrap();
        assert_eq!((r.children, r.task_type.as_str()), (3, "noop"));
        assert_eq!((r.fail_on_attempt, r.enqueue_unknown), (None, false));
        let r: Request = json::parse_payload(r#"{"enqueue_unknown": true}"#).unwrap();
        assert!(r.enqueue_unknown);
        assert!(json::parse_payload::<Request>(r#"{"childs": 3}"#).is_err());
    }
}
