//! The attempt history: one record per attempt of a task, kept in a table of its own
//! (`async_task_attempt`, primary key task id and attempt number) on every backend.
//!
//! The task row says where a task is; the history says how it got there. Each record names the
//! attempt (the task's `attempts` counter after the claim that started it, so numbers run on
//! across API retries), the host that ran it, the plugin build, when it started and ended, how
//! it ended ([`Outcome`]), its error and its log (bounded by the sandbox like the task's `log`).
//!
//! Records are written by the store in the same transaction as the change they describe, so
//! the history never disagrees with the task row:
//! - a completion batch ([`super::queue::Queue::complete`]) writes one record per completion that
//!   applied, in one statement per batch (a completion fenced out, because the task was
//!   cancelled or rescued meanwhile, writes nothing: the cancel or rescue wrote that attempt's
//!   record);
//! - the rescuer ([`super::queue::Queue::rescue_expired`]) writes [`Outcome::Rescued`];
//! - a cancel of a running task ([`super::queue::Queue::cancel`]) writes [`Outcome::Cancelled`];
//! - a release at shutdown ([`super::queue::Queue::release`]) writes [`Outcome::Released`].
//!
//! A claimed row that cannot be read is failed at once and gets no record (no attempt ran).
//!
//! # The bound
//!
//! Every write also deletes the records of the same task numbered from 2 up to the attempt
//! just recorded minus [`KEPT_ATTEMPTS`], so a task keeps its first attempt and its latest
//! [`KEPT_ATTEMPTS`] in full, at most `KEPT_ATTEMPTS + 1` records however often it runs. The
//! delete is a range on the primary key and runs only for attempts past `KEPT_ATTEMPTS + 1`,
//! so the common case (a task done in a few attempts) pays nothing for it.
//!
//! Records have no foreign key to `async_task`: a task moved to an archive keeps its history,
//! and whoever purges archived tasks purges their records with them.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::StoreError;
use super::sql::{Arg, Cells, Portable, Via};
pub use crate::task::AttemptCost;
use crate::task::{AttemptOutcome, TaskId};

/// Attempts kept in full besides the first: the latest this many.
pub const KEPT_ATTEMPTS: u32 = 20;

/// How one attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The handler returned a result.
    Done,
    /// The handler asked to be retried (a transient failure), or snoozed more often in a row
    /// than its type allows. The task went back to pending, or became a dead letter when no
    /// retries were left.
    Retry,
    /// The handler failed the task permanently, or the host did (a completion the database
    /// refused).
    Fail,
    /// The handler asked to run again later; no retry was used.
    Snooze,
    /// The sandbox stopped the handler: a trap or panic, a memory limit, or it could not start.
    Crashed,
    /// The handler ran past its wall-clock timeout or its fuel (the per-attempt limits on time
    /// and computation).
    TimedOut,
    /// The task was cancelled while this attempt ran; its outcome was discarded.
    Cancelled,
    /// The host running it stopped answering (its lease expired) and the rescuer took the
    /// task back.
    Rescued,
    /// The host shut down before the attempt finished and handed the task back; the attempt
    /// does not count as a failure.
    Released,
}

impl Outcome {
    /// Every outcome, in code order.
    pub const ALL: [Outcome; 9] = [
        Outcome::Done,
        Outcome::Retry,
        Outcome::Fail,
        Outcome::Snooze,
        Outcome::Crashed,
        Outcome::TimedOut,
        Outcome::Cancelled,
        Outcome::Rescued,
        Outcome::Released,
    ];

    /// The code stored in the `outcome` column.
    pub fn code(self) -> i64 {
        match self {
            Outcome::Done => 0,
            Outcome::Retry => 1,
            Outcome::Fail => 2,
            Outcome::Snooze => 3,
            Outcome::Crashed => 4,
            Outcome::TimedOut => 5,
            Outcome::Cancelled => 6,
            Outcome::Rescued => 7,
            Outcome::Released => 8,
        }
    }

    /// The outcome a stored code stands for, if any.
    pub fn from_code(code: i64) -> Option<Outcome> {
        Outcome::ALL.into_iter().find(|o| o.code() == code)
    }

    /// The name used in the API and the CLI.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Done => "done",
            Outcome::Retry => "retry",
            Outcome::Fail => "fail",
            Outcome::Snooze => "snooze",
            Outcome::Crashed => "crashed",
            Outcome::TimedOut => "timed_out",
            Outcome::Cancelled => "cancelled",
            Outcome::Rescued => "rescued",
            Outcome::Released => "released",
        }
    }

    /// How an attempt the sandbox reported on ended. A crash whose reason is one of the
    /// sandbox's time limits (`timed out: …`, `fuel exhausted: …`) timed out.
    pub fn of(outcome: &AttemptOutcome) -> Outcome {
        match outcome {
            AttemptOutcome::Succeeded(_) => Outcome::Done,
            AttemptOutcome::Retry(_) => Outcome::Retry,
            AttemptOutcome::Fail(_) => Outcome::Fail,
            AttemptOutcome::Snooze(_) => Outcome::Snooze,
            AttemptOutcome::Crashed(reason)
                if reason.starts_with("timed out") || reason.starts_with("fuel exhausted") =>
            {
                Outcome::TimedOut
            }
            AttemptOutcome::Crashed(_) => Outcome::Crashed,
        }
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One attempt of a task, as the history keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AttemptRecord {
    /// The attempt's number: 1 for the first claim, counting on across API retries.
    pub attempt: u32,
    /// The host that ran it (its lease owner name).
    pub host: Option<String>,
    /// Content hash of the plugin build that ran it (unknown for an attempt cancelled,
    /// rescued or released before it finished).
    pub plugin_version: Option<String>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: DateTime<Utc>,
    pub outcome: Outcome,
    /// Why it did not succeed: the handler's message, the sandbox's reason, or the host's.
    pub error: Option<String>,
    /// What it printed (stdout, stderr, log calls), bounded.
    pub log: Option<String>,
    /// What it cost, for an attempt that ended with a result of its own.
    #[serde(default)]
    pub cost: Option<AttemptCost>,
}

/// Reading the attempt history. The writes belong to the operations that end attempts
/// (complete, rescue, cancel, release), in their transactions.
#[async_trait]
pub trait AttemptHistory {
    /// The attempts of a task that are kept (the first and the latest [`KEPT_ATTEMPTS`]),
    /// oldest first; empty for a task that never ran or does not exist.
    async fn attempt_history(&self, id: TaskId) -> Result<Vec<AttemptRecord>, StoreError>;
}

/// The highest attempt number to delete once `attempt` is recorded (deleting from 2 up to it),
/// or `None` when the task has no more than [`KEPT_ATTEMPTS`] + 1 attempts.
pub fn trim_up_to(attempt: u32) -> Option<u32> {
    (attempt > KEPT_ATTEMPTS + 1).then(|| attempt - KEPT_ATTEMPTS)
}

/// Written once for every backend in portable SQL; the writes are each backend's.
#[async_trait]
impl<S: Portable> AttemptHistory for S {
    async fn attempt_history(&self, id: TaskId) -> Result<Vec<AttemptRecord>, StoreError> {
        let mut statement = self.statement(
            "SELECT attempt, host, plugin_version, started_at, finished_at, outcome, error, log, \
                    wall_ms, fuel_used, peak_memory \
             FROM async_task_attempt WHERE task_id = ? ORDER BY attempt",
        );
        statement.bind(Arg::Int(id));
        let rows = self.fetch(Via::Reader, &statement).await?;
        rows.iter().map(|row| record_from_row(id, row)).collect()
    }
}

/// A stored record read back (the columns [`AttemptHistory::attempt_history`] selects, in its
/// order); out-of-range values are a corrupt row.
fn record_from_row(task: TaskId, row: &impl Cells) -> Result<AttemptRecord, StoreError> {
    let corrupt = |reason: String| StoreError::Corrupt { id: task, reason };
    let time = |ms| super::encoding::time_from_millis(task, ms);
    let attempt = row.int(0)?;
    let outcome = row.int(5)?;
    Ok(AttemptRecord {
        attempt: u32::try_from(attempt)
            .map_err(|_| corrupt(format!("attempt number {attempt} is out of range")))?,
        host: row.opt_text(1)?,
        plugin_version: row.opt_text(2)?,
        started_at: row.opt_int(3)?.map(time).transpose()?,
        finished_at: time(row.int(4)?)?,
        outcome: Outcome::from_code(outcome)
            .ok_or_else(|| corrupt(format!("unknown attempt outcome code {outcome}")))?,
        error: row.opt_text(6)?,
        log: row.opt_text(7)?,
        cost: row
            .opt_int(8)?
            .map(|wall_ms| {
                Ok::<_, StoreError>(AttemptCost {
                    wall_ms: unsigned(wall_ms),
                    fuel_used: row.opt_int(9)?.map(unsigned),
                    peak_memory: row.opt_int(10)?.map_or(0, unsigned),
                })
            })
            .transpose()?,
    })
}

/// A stored count read back (a negative one, which no write stores, as 0).
fn unsigned(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

/// How a cost is stored: wall time, fuel and peak memory columns, all empty without a cost.
pub fn cost_columns(cost: Option<&AttemptCost>) -> (Option<i64>, Option<i64>, Option<i64>) {
    let signed = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    match cost {
        Some(c) => (
            Some(signed(c.wall_ms)),
            c.fuel_used.map(signed),
            Some(signed(c.peak_memory)),
        ),
        None => (None, None, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn outcome_codes_and_names_round_trip() {
        for outcome in Outcome::ALL {
            assert_eq!(Outcome::from_code(outcome.code()), Some(outcome));
            let json = serde_json::to_value(outcome).unwrap();
            assert_eq!(json, outcome.as_str());
        }
        assert_eq!(Outcome::from_code(99), None);
    }

    #[test]
    fn sandbox_outcomes_map_to_attempt_outcomes() {
        let of = Outcome::of;
        assert_eq!(of(&AttemptOutcome::Succeeded("{}".into())), Outcome::Done);
        assert_eq!(of(&AttemptOutcome::Retry("x".into())), Outcome::Retry);
        assert_eq!(of(&AttemptOutcome::Fail("x".into())), Outcome::Fail);
        assert_eq!(
            of(&AttemptOutcome::Snooze(Duration::from_secs(1))),
            Outcome::Snooze
        );
        assert_eq!(
            of(&AttemptOutcome::Crashed(
                "trap: the handler panicked or hit unreachable code".into()
            )),
            Outcome::Crashed
        );
        assert_eq!(
            of(&AttemptOutcome::Crashed(
                "timed out: the attempt ran longer than its wall-clock limit of 1s and was stopped"
                    .into()
            )),
            Outcome::TimedOut
        );
        assert_eq!(
            of(&AttemptOutcome::Crashed(
                "fuel exhausted: the handler used its whole budget".into()
            )),
            Outcome::TimedOut
        );
    }

    #[test]
    fn the_first_and_the_latest_attempts_are_kept() {
        assert_eq!(trim_up_to(1), None);
        assert_eq!(trim_up_to(KEPT_ATTEMPTS + 1), None);
        // Attempt 22 with 20 kept: 1 and 3..=22 stay, 2 goes.
        assert_eq!(trim_up_to(KEPT_ATTEMPTS + 2), Some(2));
        assert_eq!(trim_up_to(100), Some(100 - KEPT_ATTEMPTS));
    }
}
