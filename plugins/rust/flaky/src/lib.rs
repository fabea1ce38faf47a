//! `flaky`: fails, snoozes or panics on demand, to show how the host handles each outcome.
//!
//! # Payload
//!
//! A JSON object with at most one of these fields; an empty object (or an empty payload)
//! succeeds at once.
//!
//! * `{"fail_until_attempt": N}` — a transient failure ([`Failure::Retry`]) on attempts 1 to
//!   `N`; attempt `N + 1` succeeds. With `max_attempts <= N` the task runs out of attempts
//!   and ends as a dead letter.
//! * `{"fail": "message"}` — a permanent failure ([`Failure::Fail`]) with that message; the
//!   host skips any remaining attempts.
//! * `{"snooze_seconds": S}` — [`Failure::Snooze`] for `S` seconds, on *every* run. A snooze
//!   does not use up an attempt, so the handler cannot tell a first run from a later one: such
//!   a task snoozes until it is cancelled. Use it only to watch snoozing happen.
//! * `{"panic": "message"}` — panics with that message; the instance traps.
//!
//! Unknown fields, or more than one of the fields above, fail permanently, so that a typo does
//! not pass for success.
//!
//! # Result
//!
//! ```json
//! {"ok": true, "attempt": 3, "max_attempts": 5}
//! ```

use serde::{Deserialize, Serialize};
use spool_sdk::{Failure, Handler, TaskInfo, json, log};

/// The `flaky` handler.
struct Flaky;

impl Handler for Flaky {
    fn handle(task: TaskInfo, payload: String) -> Result<String, Failure> {
        let behaviour = parse(&payload)?;
        log::info(format!(
            "attempt {} of {}: {behaviour:?}",
            task.attempt, task.max_attempts
        ));
        outcome(&behaviour, task.attempt, task.max_attempts)
    }
}

spool_sdk::export_handler!(Flaky);

/// What the payload asks for.
#[derive(Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case")]
enum Behaviour {
    /// Succeed at once (an empty object, not a field).
    #[default]
    #[serde(skip)]
    Succeed,
    /// Ask for a retry on attempts up to and including this one.
    FailUntilAttempt(u32),
    /// Fail permanently with this message.
    Fail(String),
    /// Snooze for this many seconds, every time.
    SnoozeSeconds(u32),
    /// Panic with this message.
    Panic(String),
}

/// Reads the payload: `{}` or empty text means [`Behaviour::Succeed`], otherwise an object
/// with exactly one field naming the behaviour.
fn parse(payload: &str) -> Result<Behaviour, Failure> {
    let payload = payload.trim();
    if payload.is_empty() {
        return Ok(Behaviour::Succeed);
    }
    // Externally tagged enums read `{"fail": "…"}`; an empty object is the default.
    let object: serde_json::Map<String, serde_json::Value> = json::parse_payload(payload)?;
    match object.len() {
        0 => Ok(Behaviour::Succeed),
        1 => json::parse_payload(payload),
        _ => Err(Failure::fail(format!(
            "payload is not valid: expected at most one field, got {}",
            object
                .keys()
                .map(|k| format!("{k:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// The result of a successful run.
#[derive(Serialize)]
struct Success {
    ok: bool,
    attempt: u32,
    max_attempts: u32,
}

/// The outcome of `behaviour` on attempt `attempt` of `max_attempts`.
fn outcome(behaviour: &Behaviour, attempt: u32, max_attempts: u32) -> Result<String, Failure> {
    match behaviour {
        Behaviour::FailUntilAttempt(n) if attempt <= *n => Err(Failure::retry(format!(
            "simulated transient failure on attempt {attempt} (succeeds on attempt {})",
            n.saturating_add(1)
        ))),
        Behaviour::Fail(message) => Err(Failure::fail(message.clone())),
        Behaviour::SnoozeSeconds(seconds) => Err(Failure::snooze(*seconds)),
        Behaviour::Panic(message) => panic!("{message}"),
        Behaviour::Succeed | Behaviour::FailUntilAttempt(_) => json::to_result(&Success {
            ok: true,
            attempt,
            max_attempts,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_each_behaviour() {
        assert_eq!(parse("").unwrap(), Behaviour::Succeed);
        assert_eq!(parse(" {} ").unwrap(), Behaviour::Succeed);
        assert_eq!(
            parse(r#"{"fail_until_attempt": 2}"#).unwrap(),
            Behaviour::FailUntilAttempt(2)
        );
        assert_eq!(
            parse(r#"{"fail": "no"}"#).unwrap(),
            Behaviour::Fail("no".into())
        );
        assert_eq!(
            parse(r#"{"snooze_seconds": 5}"#).unwrap(),
            Behaviour::SnoozeSeconds(5)
        );
        assert_eq!(
            parse(r#"{"panic": "oh"}"#).unwrap(),
            Behaviour::Panic("oh".into())
        );
    }

    #[test]
    fn rejects_typos_and_mixtures() {
        assert!(matches!(
            parse(r#"{"fail_until": 2}"#),
            Err(Failure::Fail(_))
        ));
        assert!(matches!(
            parse(r#"{"fail": "x", "panic": "y"}"#),
            Err(Failure::Fail(_))
        ));
        assert!(matches!(
            parse(r#"{"succeed": null}"#),
            Err(Failure::Fail(_))
        ));
        assert!(matches!(parse("[]"), Err(Failure::Fail(_))));
    }

    #[test]
    fn fails_until_the_given_attempt() {
        let b = Behaviour::FailUntilAttempt(2);
        assert!(matches!(outcome(&b, 1, 5), Err(Failure::Retry(m)) if m.contains("attempt 1")));
        assert!(matches!(outcome(&b, 2, 5), Err(Failure::Retry(_))));
        assert_eq!(
            outcome(&b, 3, 5).unwrap(),
            r#"{"ok":true,"attempt":3,"max_attempts":5}"#
        );
    }

    #[test]
    fn other_outcomes() {
        assert!(
            matches!(outcome(&Behaviour::Fail("x".into()), 1, 3), Err(Failure::Fail(m)) if m == "x")
        );
        assert!(matches!(
            outcome(&Behaviour::SnoozeSeconds(7), 1, 3),
            Err(Failure::Snooze(7))
        ));
        assert!(outcome(&Behaviour::Succeed, 1, 1).is_ok());
    }

    #[test]
    #[should_panic(expected = "on purpose")]
    fn panics_on_demand() {
        let _ = outcome(&Behaviour::Panic("on purpose".into()), 1, 1);
    }
}
