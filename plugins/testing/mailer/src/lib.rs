//! `mailer` (test handler): sends a mail once per task, guarded by the effect ledger.
//!
//! Used to test the effect ledger (`spool_sdk::effects`) across retries and host crashes.
//! "Sending" is an HTTP request to a test server standing in for a mail service.
//!
//! # Payload
//!
//! ```json
//! {"to": "ada@example.com", "sink": "http://127.0.0.1:8080/send",
//!  "fail_after_send_on_attempt": 1, "sleep_after_send_ms": 2000}
//! ```
//!
//! `to` and `sink` are required, the others optional. On each attempt the handler:
//!
//! 1. builds the effect key `mail:<task id>:<to>`;
//! 2. unless that key is recorded as done, sends the mail and then records the key. Sending
//!    is `POST <sink>` with the header `idempotency-key: <key>` and the JSON body
//!    `{"key": "<key>", "to": "<to>", "task_id": <id>, "attempt": <attempt>}`. A status
//!    other than 2xx, or a request that fails, asks for a retry without recording the key;
//! 3. sleeps `sleep_after_send_ms` milliseconds, if given, on every attempt (whether or not
//!    it sent), so that a test can stop the host between the record and the result;
//! 4. asks for a retry (`simulated failure after sending`) while the attempt is at most
//!    `fail_after_send_on_attempt`.
//!
//! Each step is logged.
//!
//! # Result
//!
//! ```json
//! {"sent": false, "attempt": 2}
//! ```
//!
//! `sent` tells whether this attempt sent the mail (false when an earlier run had).

use std::time::Duration;

use serde::Deserialize;
use spool_sdk::{Failure, Handler, TaskInfo, effects, json, log};

/// The `mailer` handler.
struct Mailer;

/// The payload.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Request {
    to: String,
    sink: String,
    fail_after_send_on_attempt: Option<u32>,
    sleep_after_send_ms: Option<u64>,
}

impl Handler for Mailer {
    fn handle(task: TaskInfo, payload: String) -> Result<String, Failure> {
        let request: Request = json::parse_payload(&payload)?;
        let key = format!("mail:{}:{}", task.id, request.to);
        log::info(format!("attempt {}: effect {key}", task.attempt));

        let sent = effects::once(&key, || send(&request, &key, &task))?.is_some();
        if sent {
            log::info(format!("sent and recorded {key}"));
        } else {
            log::info(format!("{key} was already done; not sending again"));
        }

        if let Some(ms) = request.sleep_after_send_ms {
            log::info(format!("sleeping {ms} ms"));
            std::thread::sleep(Duration::from_millis(ms));
        }
        if request
            .fail_after_send_on_attempt
            .is_some_and(|n| task.attempt <= n)
        {
            log::info("simulating a failure after sending");
            return Err(Failure::retry("simulated failure after sending"));
        }
        json::to_result(&json::json!({ "sent": sent, "attempt": task.attempt }))
    }
}

spool_sdk::export_handler!(Mailer);

/// Sends the mail to the sink; any failure is transient.
fn send(request: &Request, key: &str, task: &TaskInfo) -> Result<(), Failure> {
    let body = json::json!({
        "key": key,
        "to": request.to,
        "task_id": task.id,
        "attempt": task.attempt,
    })
    .to_string();
    log::info(format!("sending to {} via {}", request.to, request.sink));
    let response = httpclient::post(
        &request.sink,
        "application/json",
        &[("idempotency-key", key)],
        body.as_bytes(),
    )
    .map_err(|err| Failure::Retry(format!("http request failed: {err}")))?;
    if !(200..300).contains(&response.status) {
        return Err(Failure::Retry(format!(
            "mail sink answered {}: {}",
            response.status, response.body
        )));
    }
    Ok(())
}
