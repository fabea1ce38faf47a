//! The task model and its state machine: pure data and decisions, no I/O.
//!
//! A task moves through these states (see `docs/state_machine.md` for the drawing):
//!
//! ```text
//! pending ──claim──▶ running ──success──────────────▶ done
//!    ▲                  │ ├──retry (retries left)──▶ pending (next_run_at = now + backoff)
//!    │                  │ ├──snooze(n)─────────────▶ pending (next_run_at = now + n s, no retry used)
//!    │                  │ ├──fail / retries spent──▶ failed  (a dead letter)
//!    │                  │ ├──cancel───────────────▶ cancelled
//!    │                  │ └──lease expired─────────▶ pending | failed   (the rescuer; counts the attempt)
//!    │                  └──host shutdown───────────▶ pending (released; the attempt is not counted)
//!    └──── retry (API) ── failed | cancelled          pending ──cancel──▶ cancelled
//! ```
//!
//! The store applies these transitions; this module decides them, so the rules can be read and
//! tested in one place without a database.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;
use utoipa::ToSchema;

use crate::backoff::Backoff;

/// Identifier of a task: the row id in the task table.
pub type TaskId = i64;

/// Where a task is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Waiting for `next_run_at` and a free worker.
    Pending,
    /// Claimed by a host, which holds a lease on it.
    Running,
    /// Finished successfully; `result` holds the handler's answer.
    Done,
    /// A dead letter: retries ran out or the handler failed it permanently; `last_error` says why.
    Failed,
    /// Cancelled by a person or program before it finished.
    Cancelled,
}

impl Status {
    /// Every status, in life-cycle order.
    pub const ALL: [Status; 5] = [
        Status::Pending,
        Status::Running,
        Status::Done,
        Status::Failed,
        Status::Cancelled,
    ];

    /// The lower-case name used in the API and the CLI.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::Running => "running",
            Status::Done => "done",
            Status::Failed => "failed",
            Status::Cancelled => "cancelled",
        }
    }

    /// Whether no further transition happens without a person asking for it.
    pub fn is_final(self) -> bool {
        matches!(self, Status::Done | Status::Failed | Status::Cancelled)
    }

    /// Whether a cancel request may move a task in this state to `cancelled`.
    pub fn can_cancel(self) -> bool {
        matches!(self, Status::Pending | Status::Running)
    }

    /// Whether a retry request may send a task in this state back to `pending`.
    pub fn can_retry(self) -> bool {
        matches!(self, Status::Failed | Status::Cancelled)
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Status {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Status::ALL
            .into_iter()
            .find(|status| status.as_str() == s)
            .ok_or_else(|| {
                format!(
                    "unknown status `{s}`: use one of pending, running, done, failed, cancelled"
                )
            })
    }
}

/// A task as stored in the queue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Task {
    pub id: TaskId,
    pub task_type: String,
    /// The JSON payload the caller enqueued.
    #[schema(value_type = Object)]
    pub payload: serde_json::Value,
    pub status: Status,
    /// Higher runs first.
    pub priority: i32,
    /// Retries scheduled so far: attempts that failed (a rescue after the host running it died
    /// included) and sent the task back to pending. A dead letter's last attempt schedules none,
    /// so a task with `max_retry` 2 fails for good with `retry_count` 2. Reset by an API retry.
    pub retry_count: u32,
    /// Retries allowed after the first attempt.
    pub max_retry: u32,
    /// Claims so far, the running one included. Incremented by every claim and never reset
    /// (an API retry resets `retry_count`, not this), so (id, attempts) names one attempt.
    pub attempts: u32,
    /// The earliest time the task may (next) run.
    pub next_run_at: DateTime<Utc>,
    pub idempotency_key: Option<String>,
    /// The host holding the task while it runs.
    pub lease_owner: Option<String>,
    pub lease_expires_at: Option<DateTime<Utc>>,
    /// When the latest attempt started.
    pub attempted_at: Option<DateTime<Utc>>,
    /// When the task reached done, failed or cancelled.
    pub finished_at: Option<DateTime<Utc>>,
    /// The error of the latest failed attempt while the task is not done: cleared when an
    /// attempt succeeds (the attempt history keeps every attempt's error).
    pub last_error: Option<String>,
    /// The handler's answer on success (by convention JSON text).
    pub result: Option<String>,
    /// The latest progress the handler reported, 0–100.
    pub progress: Option<u8>,
    pub progress_note: Option<String>,
    /// Content hash of the plugin build that ran the latest attempt.
    pub plugin_version: Option<String>,
    /// What the latest finished attempt printed (stdout, stderr, log calls), bounded.
    pub log: Option<String>,
    /// How many follow-ups deep the task is: 0 when enqueued from outside (the API, SQL, a
    /// schedule), one more than its parent's when a handler enqueued it.
    pub depth: u32,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl Task {
    /// The number of the attempt now running or next to run, starting at 1.
    pub fn attempt(&self) -> u32 {
        self.retry_count + 1
    }

    /// All attempts this task may get (a row written by application SQL may hold any
    /// `max_retry`: the count saturates instead of overflowing).
    pub fn max_attempts(&self) -> u32 {
        self.max_retry.saturating_add(1)
    }

    /// The task an enqueue of `new` writes as row `id` at `created`: pending, never attempted.
    /// `payload` is `new.payload` parsed and `next_run_at` its due time as the store keeps it.
    pub fn enqueued(
        id: TaskId,
        new: &NewTask,
        payload: serde_json::Value,
        next_run_at: DateTime<Utc>,
        created: DateTime<Utc>,
    ) -> Task {
        Task {
            id,
            task_type: new.task_type.clone(),
            payload,
            status: Status::Pending,
            priority: new.priority,
            retry_count: 0,
            max_retry: new.max_retry,
            attempts: 0,
            next_run_at,
            idempotency_key: new.idempotency_key.clone(),
            lease_owner: None,
            lease_expires_at: None,
            attempted_at: None,
            finished_at: None,
            last_error: None,
            result: None,
            progress: None,
            progress_note: None,
            plugin_version: None,
            log: None,
            depth: new.depth,
            created_at: created,
            updated_at: created,
        }
    }

    /// The task as a claim at `at` leaves it: running under `owner`'s lease until
    /// `lease_until`, one more attempt counted, the previous attempt's progress cleared.
    ///
    /// A backend whose claim cannot return the rows it changed (MySQL has no
    /// `UPDATE … RETURNING`) reads the rows with its locking read and applies this to them, so
    /// the rule is written once beside the claim's SQL that does the same to the stored row.
    pub fn claimed(self, owner: &str, at: DateTime<Utc>, lease_until: DateTime<Utc>) -> Task {
        Task {
            status: Status::Running,
            attempts: self.attempts.saturating_add(1),
            lease_owner: Some(owner.to_string()),
            lease_expires_at: Some(lease_until),
            attempted_at: Some(at),
            updated_at: at,
            progress: None,
            progress_note: None,
            ..self
        }
    }
}

/// A task to be inserted, already validated and with defaults applied.
#[derive(Debug, Clone, PartialEq)]
pub struct NewTask {
    pub task_type: String,
    /// JSON text.
    pub payload: String,
    pub priority: i32,
    pub max_retry: u32,
    pub run_at: DateTime<Utc>,
    pub idempotency_key: Option<String>,
    /// [`Task::depth`]: 0 unless a handler enqueues it as a follow-up.
    pub depth: u32,
}

/// What an enqueue did: a new row, or the existing row with the same idempotency key.
#[derive(Debug, Clone, PartialEq)]
pub struct Enqueued {
    pub task: Task,
    /// True when the idempotency key matched an existing task and nothing was inserted.
    pub duplicate: bool,
}

/// What one attempt cost, as the sandbox measured it; the attempt history records it with
/// the attempts that ended with a result of their own (not rescued, cancelled or released).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
pub struct AttemptCost {
    /// How long the handler ran in the sandbox, in milliseconds.
    pub wall_ms: u64,
    /// The fuel it used (none when the attempt was stopped at its wall-clock limit).
    pub fuel_used: Option<u64>,
    /// The most memory it held at once, in bytes: all its linear memories and tables (0 when
    /// the attempt was stopped at its wall-clock limit).
    pub peak_memory: u64,
}

/// How one attempt of a task ended, as the sandbox reports it.
#[derive(Debug, Clone, PartialEq)]
pub enum AttemptOutcome {
    /// The handler returned a result.
    Succeeded(String),
    /// The handler asked to be retried (a transient failure).
    Retry(String),
    /// The handler declared the task hopeless: no more retries.
    Fail(String),
    /// The handler asked to run again later, without using up a retry.
    Snooze(Duration),
    /// The sandbox stopped the handler: trap, panic, fuel exhausted, or it could not start.
    /// Treated like a transient failure: a later attempt (or a fixed plugin) may succeed.
    Crashed(String),
}

impl AttemptOutcome {
    /// The attempt's own result (when it succeeded) and error (otherwise), before the task's
    /// state machine adds anything (such as "gave up after N attempts"): what an attempt
    /// record keeps and what a replay compares with.
    pub fn result_and_error(&self) -> (Option<String>, Option<String>) {
        match self {
            AttemptOutcome::Succeeded(result) => (Some(result.clone()), None),
            AttemptOutcome::Retry(message)
            | AttemptOutcome::Fail(message)
            | AttemptOutcome::Crashed(message) => (None, Some(message.clone())),
            AttemptOutcome::Snooze(delay) => (None, Some(format!("snoozed for {delay:?}"))),
        }
    }
}

/// The state a finished attempt moves its task to; the store writes it.
#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    pub status: Status,
    /// Retries scheduled after this attempt: one more than before when this attempt failed
    /// and sends the task back to pending, else unchanged.
    pub retry_count: u32,
    /// When the task runs next (only for `pending`).
    pub next_run_at: Option<DateTime<Utc>>,
    pub result: Option<String>,
    /// The error to record; `None` keeps the previous one (the store clears it when the task
    /// is done).
    pub error: Option<String>,
}

/// Decides where a task goes after an attempt.
///
/// `retry_count` and `max_retry` are the task's values when it was claimed; `backoff` is the
/// task type's policy and `jitter_sample` a number in `[0, 1)` (random in production, fixed in
/// tests) that spreads retries of many tasks failing together.
pub fn decide(
    retry_count: u32,
    max_retry: u32,
    outcome: AttemptOutcome,
    backoff: &Backoff,
    now: DateTime<Utc>,
    jitter_sample: f64,
) -> Transition {
    let failed_with = |error: String| {
        if retry_count < max_retry {
            let delay = backoff.delay(retry_count, jitter_sample);
            Transition {
                status: Status::Pending,
                retry_count: retry_count + 1,
                next_run_at: Some(after(now, delay)),
                result: None,
                error: Some(error),
            }
        } else {
            // No retry is scheduled, so `retry_count` stays: the failed attempts are the
            // retries so far plus the first attempt.
            let failed_attempts = retry_count.saturating_add(1);
            Transition {
                status: Status::Failed,
                retry_count,
                next_run_at: None,
                result: None,
                error: Some(format!(
                    "{error} (gave up after {failed_attempts} attempts)"
                )),
            }
        }
    };
    match outcome {
        AttemptOutcome::Succeeded(result) => Transition {
            status: Status::Done,
            retry_count,
            next_run_at: None,
            result: Some(result),
            error: None,
        },
        AttemptOutcome::Retry(error) => failed_with(error),
        AttemptOutcome::Crashed(error) => failed_with(error),
        AttemptOutcome::Fail(error) => Transition {
            status: Status::Failed,
            retry_count,
            next_run_at: None,
            result: None,
            error: Some(error),
        },
        AttemptOutcome::Snooze(delay) => Transition {
            status: Status::Pending,
            retry_count,
            next_run_at: Some(after(now, delay.max(MIN_SNOOZE))),
            result: None,
            error: None,
        },
    }
}

/// Counts a snooze as a failed attempt (a retry, with backoff) when the task already snoozed
/// `max` times in a row: a handler that snoozes for ever cannot keep a task alive for ever.
pub fn cap_snoozes(outcome: AttemptOutcome, in_a_row: u32, max: u32) -> AttemptOutcome {
    match outcome {
        AttemptOutcome::Snooze(_) if in_a_row >= max => AttemptOutcome::Retry(format!(
            "the handler snoozed {in_a_row} times in a row, the most its type allows (max_snoozes = {max}); this snooze counts as a failed attempt"
        )),
        other => other,
    }
}

/// Converts a std duration to chrono's, saturating at chrono's (very distant) limit.
pub fn chrono_duration(duration: Duration) -> chrono::Duration {
    chrono::Duration::from_std(duration).unwrap_or(chrono::Duration::MAX)
}

/// The shortest snooze: `snooze(0)` (or any shorter request) waits this long, so a handler
/// that snoozes on every run cannot turn a task into a hot loop.
pub const MIN_SNOOZE: Duration = Duration::from_secs(1);

/// The latest time a task is ever scheduled for: the end of year 9999, the last an RFC 3339
/// time can name (and the latest `run_at` the API accepts).
pub fn latest_time() -> DateTime<Utc> {
    DateTime::from_timestamp(253_402_300_799, 999_999_999).expect("a valid time")
}

/// `now + delay`, never past [`latest_time`]: no policy, however large its delays, makes the
/// arithmetic overflow.
pub fn after(now: DateTime<Utc>, delay: Duration) -> DateTime<Utc> {
    now.checked_add_signed(chrono_duration(delay))
        .map_or_else(latest_time, |at| at.min(latest_time()))
}

#[cfg(test)]
impl Task {
    /// A pending task of type `t` due now, for unit tests.
    pub fn sample(id: TaskId) -> Task {
        let now = Utc::now();
        let new = NewTask {
            task_type: "t".into(),
            payload: "{}".into(),
            priority: 0,
            max_retry: 0,
            run_at: now,
            idempotency_key: None,
            depth: 0,
        };
        Task::enqueued(id, &new, serde_json::json!({}), now, now)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_claim_leases_the_task_and_counts_the_attempt() {
        let mut pending = Task::sample(7);
        pending.attempts = 2;
        pending.progress = Some(40);
        pending.progress_note = Some("halfway".into());
        let at = pending.created_at + chrono::Duration::seconds(1);
        let until = at + chrono::Duration::seconds(30);
        let claimed = pending.clone().claimed("host-a", at, until);
        assert_eq!(claimed.status, Status::Running);
        assert_eq!(claimed.attempts, 3);
        assert_eq!(claimed.lease_owner.as_deref(), Some("host-a"));
        assert_eq!(claimed.lease_expires_at, Some(until));
        assert_eq!(claimed.attempted_at, Some(at));
        assert_eq!(claimed.updated_at, at);
        assert_eq!((claimed.progress, claimed.progress_note), (None, None));
        // Everything else is the row as it was.
        assert_eq!(
            (claimed.retry_count, claimed.payload, claimed.next_run_at),
            (pending.retry_count, pending.payload, pending.next_run_at)
        );
    }

    use super::*;

    fn now() -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).unwrap()
    }

    fn essay_backoff() -> Backoff {
        Backoff::new(Duration::from_secs(30), Duration::from_secs(86_400), 0.0)
    }

    #[test]
    fn success_is_done_with_result() {
        let t = decide(
            1,
            3,
            AttemptOutcome::Succeeded("{}".into()),
            &essay_backoff(),
            now(),
            0.5,
        );
        assert_eq!(t.status, Status::Done);
        assert_eq!(t.retry_count, 1);
        assert_eq!(t.result.as_deref(), Some("{}"));
        assert_eq!(t.error, None);
    }

    #[test]
    fn retry_goes_back_to_pending_with_the_essays_backoff() {
        // 30 s × 2^retry_count: 30 s, 60 s, 120 s.
        for (retry_count, secs) in [(0, 30), (1, 60), (2, 120)] {
            let t = decide(
                retry_count,
                3,
                AttemptOutcome::Retry("smtp down".into()),
                &essay_backoff(),
                now(),
                0.5,
            );
            assert_eq!(t.status, Status::Pending);
            assert_eq!(t.retry_count, retry_count + 1);
            assert_eq!(t.next_run_at, Some(now() + chrono::Duration::seconds(secs)));
            assert_eq!(t.error.as_deref(), Some("smtp down"));
        }
    }

    #[test]
    fn retries_spent_is_a_dead_letter_keeping_the_error() {
        let t = decide(
            3,
            3,
            AttemptOutcome::Retry("smtp down".into()),
            &essay_backoff(),
            now(),
            0.5,
        );
        assert_eq!(t.status, Status::Failed);
        assert_eq!(t.retry_count, 3, "a dead letter schedules no retry");
        assert_eq!(t.next_run_at, None);
        assert_eq!(
            t.error.as_deref(),
            Some("smtp down (gave up after 4 attempts)")
        );
    }

    #[test]
    fn crash_is_retried_like_a_transient_failure() {
        let t = decide(
            0,
            1,
            AttemptOutcome::Crashed("fuel exhausted".into()),
            &essay_backoff(),
            now(),
            0.5,
        );
        assert_eq!(t.status, Status::Pending);
        let t = decide(
            1,
            1,
            AttemptOutcome::Crashed("fuel exhausted".into()),
            &essay_backoff(),
            now(),
            0.5,
        );
        assert_eq!(t.status, Status::Failed);
    }

    #[test]
    fn fail_skips_remaining_retries() {
        let t = decide(
            0,
            10,
            AttemptOutcome::Fail("bad address".into()),
            &essay_backoff(),
            now(),
            0.5,
        );
        assert_eq!(t.status, Status::Failed);
        assert_eq!(t.retry_count, 0, "no retry was scheduled");
        assert_eq!(t.error.as_deref(), Some("bad address"));
    }

    #[test]
    fn snooze_does_not_use_a_retry() {
        let t = decide(
            2,
            3,
            AttemptOutcome::Snooze(Duration::from_secs(90)),
            &essay_backoff(),
            now(),
            0.5,
        );
        assert_eq!(t.status, Status::Pending);
        assert_eq!(t.retry_count, 2);
        assert_eq!(t.next_run_at, Some(now() + chrono::Duration::seconds(90)));
        assert_eq!(t.error, None);
    }

    #[test]
    fn snooze_has_a_floor() {
        for asked in [Duration::ZERO, Duration::from_millis(10)] {
            let t = decide(
                0,
                3,
                AttemptOutcome::Snooze(asked),
                &essay_backoff(),
                now(),
                0.5,
            );
            assert_eq!(t.next_run_at, Some(now() + chrono::Duration::seconds(1)));
        }
    }

    #[test]
    fn snoozes_past_the_cap_count_as_failed_attempts() {
        let snooze = AttemptOutcome::Snooze(Duration::from_secs(5));
        assert_eq!(cap_snoozes(snooze.clone(), 2, 3), snooze);
        let capped = cap_snoozes(snooze, 3, 3);
        let AttemptOutcome::Retry(reason) = &capped else {
            panic!("{capped:?}")
        };
        assert!(reason.contains("snoozed 3 times in a row"), "{reason}");
        let t = decide(0, 0, capped, &essay_backoff(), now(), 0.5);
        assert_eq!(t.status, Status::Failed);
        let fail = AttemptOutcome::Fail("no".into());
        assert_eq!(cap_snoozes(fail.clone(), 99, 3), fail);
    }

    #[test]
    fn enormous_delays_stop_at_the_end_of_year_9999() {
        let huge = Backoff::new(Duration::MAX, Duration::MAX, 0.0);
        let t = decide(
            0,
            3,
            AttemptOutcome::Retry("later".into()),
            &huge,
            now(),
            0.5,
        );
        assert_eq!(t.next_run_at, Some(latest_time()));
        let t = decide(
            0,
            3,
            AttemptOutcome::Snooze(Duration::from_secs(u64::MAX)),
            &essay_backoff(),
            now(),
            0.5,
        );
        assert_eq!(t.next_run_at, Some(latest_time()));
        assert_eq!(
            latest_time().to_rfc3339(),
            "9999-12-31T23:59:59.999999999+00:00"
        );
    }

    #[test]
    fn attempts_saturate() {
        let task = Task {
            max_retry: u32::MAX,
            ..Task::sample(1)
        };
        assert_eq!(task.max_attempts(), u32::MAX);
    }

    #[test]
    fn status_names_round_trip_and_rules_hold() {
        for status in Status::ALL {
            assert_eq!(status.as_str().parse::<Status>().unwrap(), status);
        }
        assert!(
            "done!"
                .parse::<Status>()
                .unwrap_err()
                .contains("use one of")
        );
        assert!(Status::Pending.can_cancel() && Status::Running.can_cancel());
        assert!(!Status::Done.can_cancel() && !Status::Failed.can_cancel());
        assert!(Status::Failed.can_retry() && Status::Cancelled.can_retry());
        assert!(
            !Status::Pending.can_retry()
                && !Status::Done.can_retry()
                && !Status::Running.can_retry()
        );
        assert!(Status::Done.is_final() && !Status::Running.is_final());
    }
}
