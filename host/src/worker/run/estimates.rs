//! Estimated completion times for the enqueue answer and the status API ("when will it be
//! done?").
//!
//! The dispatcher records how long each attempt took; the estimate for a new task is
//!
//! ```text
//! start  = max(now, run_at)
//! wait   = ceil(ahead / slots) × mean attempt time     (and at least ahead / rate, if limited)
//! done   = start + wait + mean attempt time
//! ```
//!
//! where `ahead` is the type's due pending tasks before it (for an enqueue answer, all of them,
//! from a snapshot at most a second old; for `GET /tasks/{id}`, those a claim takes first),
//! `slots` what the type may
//! run at once on this host (its manifest's concurrency, capped by the host's), and the mean is
//! an exponentially weighted moving average, so a handler that got slower shows up within a
//! few attempts. It is this host's view: other hosts working the same table make it late-leaning
//! (pessimistic), and tasks of other types sharing the slots make it early-leaning. With no
//! finished attempt of the type on this host yet, there is no estimate.

use chrono::{DateTime, Utc};
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::plugins::Registry;
use crate::store::{Store, StoreError};
use crate::task::{Enqueued, Status, Task, chrono_duration};

/// Weight of the newest attempt in the moving average.
const NEWEST_WEIGHT: f64 = 0.2;
/// How long a snapshot of the due backlog is reused before it is read again.
pub const BACKLOG_REFRESH: Duration = Duration::from_secs(1);

/// Attempt times per task type, and a recent snapshot of the due backlog.
#[derive(Default)]
pub struct Estimates {
    mean_attempt: Mutex<HashMap<String, f64>>,
    backlog: Mutex<Option<(Instant, BTreeMap<String, u64>)>>,
}

/// What an estimate for one task type needs to know about the host.
#[derive(Clone, Copy, Debug)]
pub struct Capacity {
    /// Tasks of the type that may run at once on this host.
    pub slots: usize,
    /// The type's start-rate limit per second, if any.
    pub rate: Option<f64>,
}

impl Estimates {
    /// Records how long one attempt of `task_type` took.
    pub fn record(&self, task_type: &str, took: Duration) {
        let mut means = self.mean_attempt.lock().expect("estimates lock");
        let seconds = took.as_secs_f64();
        means
            .entry(task_type.to_string())
            .and_modify(|mean| *mean += NEWEST_WEIGHT * (seconds - *mean))
            .or_insert(seconds);
    }

    /// The mean attempt time of a type, once one attempt has finished here.
    pub fn mean_attempt(&self, task_type: &str) -> Option<Duration> {
        self.mean_attempt
            .lock()
            .expect("estimates lock")
            .get(task_type)
            .map(|s| Duration::from_secs_f64(*s))
    }

    /// The due backlog per type, if the snapshot is fresh enough to reuse.
    pub fn fresh_backlog(&self) -> Option<BTreeMap<String, u64>> {
        let backlog = self.backlog.lock().expect("estimates lock");
        backlog
            .as_ref()
            .filter(|(read, _)| read.elapsed() < BACKLOG_REFRESH)
            .map(|(_, counts)| counts.clone())
    }

    /// Keeps a new snapshot of the due backlog per type.
    pub fn set_backlog(&self, counts: BTreeMap<String, u64>) {
        *self.backlog.lock().expect("estimates lock") = Some((Instant::now(), counts));
    }
}

/// When a task should be done: `ahead` due tasks of its type are before it, attempts take
/// `mean_attempt`, and it may start no earlier than `start`.
pub fn estimate_done(
    start: DateTime<Utc>,
    ahead: u64,
    capacity: Capacity,
    mean_attempt: Duration,
) -> DateTime<Utc> {
    let slots = capacity.slots.max(1) as u64;
    let rounds = ahead.div_ceil(slots);
    let mut wait = mean_attempt.as_secs_f64() * rounds as f64;
    if let Some(rate) = capacity.rate.filter(|r| *r > 0.0) {
        wait = wait.max(ahead as f64 / rate);
    }
    let total = Duration::from_secs_f64(wait + mean_attempt.as_secs_f64());
    start + chrono::Duration::from_std(total).unwrap_or(chrono::Duration::MAX)
}

/// Estimates for particular tasks: the attempt times and backlog of [`Estimates`], the task
/// types' limits from the registry and the queue as the store has it.
pub struct Estimator<'a> {
    pub estimates: &'a Estimates,
    pub store: &'a dyn Store,
    pub registry: &'a Registry,
    /// Tasks this host runs at once.
    pub host_concurrency: usize,
    /// Paused task types: their pending tasks get no estimate (they run once resumed).
    pub paused: &'a super::paused::PausedTypes,
}

impl Estimator<'_> {
    /// Estimated completion times for tasks just enqueued, in order. A task is estimated
    /// behind the due backlog of its type and behind the tasks of its type earlier in the same
    /// request.
    pub async fn for_enqueued(&self, enqueued: &[Enqueued]) -> Vec<Option<DateTime<Utc>>> {
        // No attempt of these types has finished here yet: nothing to estimate, no backlog to read.
        if enqueued
            .iter()
            .all(|e| self.estimates.mean_attempt(&e.task.task_type).is_none())
        {
            return vec![None; enqueued.len()];
        }
        let now = Utc::now();
        let backlog = match self.estimates.fresh_backlog() {
            Some(backlog) => Some(backlog),
            None => match self.store.backlog(now).await {
                Ok(backlog) => {
                    let backlog: BTreeMap<String, u64> = backlog
                        .into_iter()
                        .map(|(task_type, b)| (task_type, b.due))
                        .collect();
                    self.estimates.set_backlog(backlog.clone());
                    Some(backlog)
                }
                Err(error) => {
                    tracing::debug!("no completion estimate: reading the backlog failed: {error}");
                    None
                }
            },
        };
        let mut earlier_in_request: HashMap<&str, u64> = HashMap::new();
        enqueued
            .iter()
            .map(|e| {
                let task = &e.task;
                let position = earlier_in_request
                    .entry(task.task_type.as_str())
                    .or_default();
                let ahead =
                    backlog.as_ref()?.get(&task.task_type).copied().unwrap_or(0) + *position;
                *position += 1;
                if task.status != Status::Pending {
                    return None;
                }
                self.pending(task, ahead, now)
            })
            .collect()
    }

    /// The estimate for one task being looked at: behind exactly the due tasks of its type
    /// that will be claimed before it, or, while it runs, one mean attempt after it started.
    pub async fn for_task(&self, task: &Task) -> Result<Option<DateTime<Utc>>, StoreError> {
        let now = Utc::now();
        Ok(match task.status {
            Status::Pending => {
                let ahead = self.store.count_ahead(task, now).await?;
                self.pending(task, ahead, now)
            }
            Status::Running => match (
                self.estimates.mean_attempt(&task.task_type),
                task.attempted_at,
            ) {
                (Some(mean), Some(started)) => Some((started + chrono_duration(mean)).max(now)),
                _ => None,
            },
            _ => None,
        })
    }

    /// The estimate for a pending task with `ahead` due tasks of its type before it.
    fn pending(&self, task: &Task, ahead: u64, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        if self.paused.contains(&task.task_type) {
            return None;
        }
        let mean = self.estimates.mean_attempt(&task.task_type)?;
        let plugin = self.registry.get(&task.task_type)?;
        let capacity = Capacity {
            slots: plugin
                .policy
                .concurrency
                .unwrap_or(self.host_concurrency)
                .min(self.host_concurrency),
            rate: plugin.policy.rate,
        };
        Some(estimate_done(
            task.next_run_at.max(now),
            ahead,
            capacity,
            mean,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + seconds, 0).unwrap()
    }

    #[test]
    fn an_empty_queue_takes_one_attempt() {
        let capacity = Capacity {
            slots: 8,
            rate: None,
        };
        assert_eq!(
            estimate_done(at(0), 0, capacity, Duration::from_secs(2)),
            at(2)
        );
    }

    #[test]
    fn a_backlog_drains_in_rounds_of_the_types_slots() {
        let capacity = Capacity {
            slots: 4,
            rate: None,
        };
        // 9 ahead on 4 slots: 3 rounds of 2 s, then its own attempt.
        assert_eq!(
            estimate_done(at(0), 9, capacity, Duration::from_secs(2)),
            at(8)
        );
        assert_eq!(
            estimate_done(at(0), 8, capacity, Duration::from_secs(2)),
            at(6)
        );
    }

    #[test]
    fn a_rate_limit_bounds_the_drain() {
        let capacity = Capacity {
            slots: 100,
            rate: Some(2.0),
        };
        // 10 ahead at 2 starts per second: 5 s, although the slots would take one round.
        assert_eq!(
            estimate_done(at(0), 10, capacity, Duration::from_secs(1)),
            at(6)
        );
    }

    #[test]
    fn a_scheduled_task_starts_at_its_time() {
        let capacity = Capacity {
            slots: 1,
            rate: None,
        };
        assert_eq!(
            estimate_done(at(60), 0, capacity, Duration::from_secs(3)),
            at(63)
        );
    }

    #[test]
    fn the_mean_follows_recent_attempts() {
        let estimates = Estimates::default();
        assert_eq!(estimates.mean_attempt("report"), None);
        estimates.record("report", Duration::from_secs(10));
        assert_eq!(
            estimates.mean_attempt("report"),
            Some(Duration::from_secs(10))
        );
        for _ in 0..20 {
            estimates.record("report", Duration::from_secs(2));
        }
        let mean = estimates.mean_attempt("report").unwrap().as_secs_f64();
        assert!((2.0..2.2).contains(&mean), "{mean}");
        assert_eq!(estimates.mean_attempt("other"), None);
    }

    #[test]
    fn the_backlog_snapshot_expires() {
        let estimates = Estimates::default();
        assert!(estimates.fresh_backlog().is_none());
        estimates.set_backlog(BTreeMap::from([("report".to_string(), 3)]));
        assert_eq!(estimates.fresh_backlog().unwrap()["report"], 3);
        *estimates.backlog.lock().unwrap() =
            Some((Instant::now() - BACKLOG_REFRESH, BTreeMap::new()));
        assert!(estimates.fresh_backlog().is_none());
    }
}
