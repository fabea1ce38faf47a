//! `loud` (test handler): hands the host strings of any size and content.
//!
//! Used to test that every string a guest gives the host is bounded and cleaned before the
//! host keeps it: `retry` and `fail` messages, panic text, log lines, progress notes and the
//! result.
//!
//! # Payload
//!
//! ```json
//! {"fail": 524288000, "text": "x"}
//! ```
//!
//! One of `fail`, `retry`, `panic`, `log`, `progress` or `result` gives a size in bytes; the
//! handler builds a string of that many bytes by repeating `text` (default `"x"`; a
//! multi-byte `text` is cut where the size ends, on a character boundary) and then:
//!
//! - `fail` / `retry`: fails with it (`fail(…)`, `retry(…)`);
//! - `panic`: panics with it as the message;
//! - `log`: passes it to the `log` import once (level `info`);
//! - `progress`: reports progress 50 with it as the note, then succeeds;
//! - `result`: returns it as the result.
//!
//! `{"nul_result": true}` returns `"a\u0000b"`, a result with a NUL character.
//!
//! # Result
//!
//! For `log` and `progress`, `{"bytes": N}`; for `result`, the string itself. A payload that
//! is not one of these fails permanently.

use serde::Deserialize;
use spool_sdk::{Failure, Handler, TaskInfo, json, log};

/// The `loud` handler.
struct Loud;

/// The payload.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Request {
    fail: Option<usize>,
    retry: Option<usize>,
    panic: Option<usize>,
    log: Option<usize>,
    progress: Option<usize>,
    result: Option<usize>,
    text: Option<String>,
    nul_result: bool,
}

/// `bytes` bytes of `text` repeated, cut on a character boundary. Built by doubling, so that
/// even hundreds of MiB cost little fuel.
fn filled(text: &str, bytes: usize) -> String {
    let text = if text.is_empty() { "x" } else { text };
    let mut out = text.repeat(bytes / text.len());
    let mut end = bytes - out.len();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    out.push_str(&text[..end]);
    out
}

impl Handler for Loud {
    fn handle(_task: TaskInfo, payload: String) -> Result<String, Failure> {
        let request: Request = json::parse_payload(&payload)?;
        let text = request.text.as_deref().unwrap_or("x");
        if request.nul_result {
            return Ok("a\u{0}b".to_owned());
        }
        if let Some(bytes) = request.fail {
            return Err(Failure::Fail(filled(text, bytes)));
        }
        if let Some(bytes) = request.retry {
            return Err(Failure::Retry(filled(text, bytes)));
        }
        if let Some(bytes) = request.panic {
            panic!("{}", filled(text, bytes));
        }
        if let Some(bytes) = request.log {
            log::info(filled(text, bytes));
            return json::to_result(&json::json!({ "bytes": bytes }));
        }
        if let Some(bytes) = request.progress {
            spool_sdk::progress(50, filled(text, bytes));
            return json::to_result(&json::json!({ "bytes": bytes }));
        }
        if let Some(bytes) = request.result {
            return Ok(filled(text, bytes));
        }
        Err(Failure::fail(
            "say what to hand back: fail, retry, panic, log, progress or result",
        ))
    }
}

spool_sdk::export_handler!(Loud);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_to_the_byte_on_character_boundaries() {
        assert_eq!(filled("ab", 5), "ababa");
        assert_eq!(filled("é", 5), "éé");
        assert_eq!(filled("\u{1}", 3), "\u{1}\u{1}\u{1}");
        assert_eq!(filled("", 2), "xx");
    }
}
