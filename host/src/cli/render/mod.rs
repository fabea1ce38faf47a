//! What the commands print: tables and summaries built from the API's view types (as text,
//! so they can be checked without a host), and a view as pretty JSON.
//!
//! - [`tasks`]: a task and its attempt history, the task listing, a bulk change's summary.
//! - [`host`]: task types, plugins, schedules, an alert drill.
//! - [`deploy`]: a deploy, a promotion or rollback, a type's versions and history.

pub mod deploy;
pub mod host;
pub mod tasks;

use anyhow::Result;
use chrono::{DateTime, Utc};
use serde::Serialize;

/// Prints a view as pretty JSON on stdout. It goes through a [`serde_json::Value`], so the
/// fields come in the order they always did: sorted by name.
pub fn print_json<T: Serialize>(view: &T) -> Result<()> {
    let value = serde_json::to_value(view)?;
    println!("{}", serde_json::to_string_pretty(&value)?);
    Ok(())
}

/// A time as the API writes it (RFC 3339, UTC, `Z`, as many fractional digits as it has).
fn stamp(time: &DateTime<Utc>) -> String {
    word(time)
}

/// A value's JSON text when it is a string (a time, an enum's name), else its compact JSON.
fn word<T: Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(text)) => text,
        Ok(other) => other.to_string(),
        Err(error) => format!("({error})"),
    }
}

/// An optional time as a table cell: `-` when there is none.
fn stamp_or_dash(time: &Option<DateTime<Utc>>) -> String {
    time.as_ref().map_or("-".to_string(), stamp)
}

#[cfg(test)]
mod tests {
    use serde::de::DeserializeOwned;
    use serde_json::{Value, json};

    use crate::api::tasks::{EnqueueResponse, TaskDetail};

    /// A view read from `sent` and written again is `sent`, so `--json` prints what the host
    /// sent.
    fn round_trips<T: DeserializeOwned + serde::Serialize>(sent: Value) {
        let view: T = serde_json::from_value(sent.clone()).unwrap();
        assert_eq!(serde_json::to_value(&view).unwrap(), sent);
    }

    fn task() -> Value {
        json!({
            "id": 7, "task_type": "resize", "status": "pending",
            "payload": {"n": 1.5, "list": [1, -2, "x"], "big": 18446744073709551615u64},
            "priority": -3, "attempts": 0, "retry_count": 0, "max_retry": 3,
            "next_run_at": "2026-01-02T03:04:05.123456789Z", "idempotency_key": "k",
            "result": null, "last_error": null, "progress": 50, "progress_note": "half",
            "plugin_version": null, "log": null, "depth": 0, "lease_owner": null, "lease_expires_at": null,
            "attempted_at": null, "finished_at": null, "created_at": "2026-01-02T03:04:05Z",
            "updated_at": "2026-01-02T03:04:05.100Z", "estimated_done_at": null,
            "archived": false, "archived_at": null,
        })
    }

    #[test]
    fn task_views_print_as_the_host_sent_them() {
        let mut enqueued = task();
        enqueued["duplicate"] = json!(false);
        enqueued["payload_differs"] = json!(false);
        round_trips::<EnqueueResponse>(enqueued);
        let mut detail = task();
        detail["history"] = json!([{
            "attempt": 1, "host": "web-1", "plugin_version": "abc",
            "started_at": "2026-01-02T03:04:05Z", "finished_at": "2026-01-02T03:04:06Z",
            "outcome": "crashed", "error": "trap", "log": "",
            "cost": {"wall_ms": 3, "fuel_used": null, "peak_memory": 65536},
        }]);
        round_trips::<TaskDetail>(detail);
    }
}
