//! The sampler: keeps the backlog history behind `GET /stats` and the dashboard's curves.
//! Maintenance: only the leading host runs it ([`super::leader`]), so one row per interval is
//! written for every host sharing the database, and the history survives restarts.
//!
//! Every `stats_interval` (10 s by default), at times aligned to the interval, it writes one
//! point per task type ([`Tier::Samples`]): pending, running and failed counts, how long the
//! oldest due pending task has waited, the tasks that finished in the interval by outcome, and
//! the p50/p95 of their attempt times. A type gets a point while any of these is non-zero and
//! once more after, so its curve falls back to zero; a type without a point was idle.
//!
//! Retention with downsampling: each completed minute is rolled up into one [`Tier::Minutes`]
//! point ([`downsample`]); samples are kept [`SAMPLES_KEPT`] (a day), minutes
//! [`MINUTES_KEPT`] (a week), nothing older. With the default interval that is at most
//! 8,640 + 10,080 rows per task type.

use chrono::{DateTime, Utc};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use super::leader::Leadership;
use crate::shutdown::{Shutdown, Stage};
use crate::store::reads::Backlog;
use crate::store::stats::{Finished, StatsPoint, Tier};
use crate::store::{SharedStore, StoreError};

/// How long samples are kept.
pub const SAMPLES_KEPT: Duration = Duration::from_secs(24 * 3600);
/// How long minute points are kept.
pub const MINUTES_KEPT: Duration = Duration::from_secs(7 * 24 * 3600);
/// The span of a rolled-up point.
pub const MINUTE_MS: i64 = 60_000;

/// The sampler service.
pub struct Sampler {
    pub store: SharedStore,
    /// `stats_interval`.
    pub interval: Duration,
    /// Samples are taken only while this host leads.
    pub leadership: Arc<Leadership>,
    pub shutdown: Shutdown,
}

/// What the sampler remembers between ticks.
#[derive(Default)]
struct State {
    /// Types that had a non-zero point last time (they get one more point, at zero).
    active: BTreeSet<String>,
    /// The end of the last minute rolled up, once known.
    rolled_until: Option<i64>,
}

impl Sampler {
    fn interval_ms(&self) -> i64 {
        (self.interval.as_millis() as i64).max(1)
    }

    /// Samples at every interval boundary while this host leads, until shutdown begins.
    pub async fn run(self) {
        let mut state = State::default();
        let interval = self.interval_ms();
        // A little after the boundary, so attempts that finished just before it are committed.
        let lag = (self.interval / 5).min(Duration::from_secs(2));
        loop {
            let now = Utc::now().timestamp_millis();
            let at = (now / interval + 1) * interval;
            let wait = Duration::from_millis((at - now) as u64) + lag;
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = self.shutdown.reached(Stage::Graceful) => return,
            }
            if !self.leadership.is_leader() {
                // Another host samples; if this one leads again, it starts afresh.
                state = State::default();
                continue;
            }
            let at = DateTime::from_timestamp_millis(at).unwrap_or_else(Utc::now);
            if let Err(error) = self.sample(&mut state, at).await {
                tracing::warn!("sampling the queue statistics failed: {error}; will try again");
            }
        }
    }

    /// One tick: the sample ending at `at`, then the minutes completed by it, then pruning.
    async fn sample(&self, state: &mut State, at: DateTime<Utc>) -> Result<(), StoreError> {
        let span = self.interval_ms();
        let backlog = self.store.backlog(Utc::now()).await?;
        let since = at - chrono::Duration::milliseconds(span);
        let mut finished = self.store.finished_between(since, at).await?;
        let types: BTreeSet<String> = backlog
            .keys()
            .chain(finished.keys())
            .chain(state.active.iter())
            .cloned()
            .collect();
        let points: Vec<StatsPoint> = types
            .into_iter()
            .map(|task_type| {
                let done = finished.remove(&task_type).unwrap_or_default();
                let backlog = backlog.get(&task_type).cloned().unwrap_or_default();
                point(task_type, at, span as u64, &backlog, done)
            })
            .collect();
        self.store.write_stats(Tier::Samples, &points).await?;
        state.active = points
            .iter()
            .filter(|p| !is_idle(p))
            .map(|p| p.task_type.clone())
            .collect();
        self.roll_up(state, at).await
    }

    /// Rolls the samples of every minute completed by `at` up into minute points, then
    /// forgets what is past retention.
    async fn roll_up(&self, state: &mut State, at: DateTime<Utc>) -> Result<(), StoreError> {
        let last_complete = at.timestamp_millis() / MINUTE_MS * MINUTE_MS;
        let oldest = last_complete - SAMPLES_KEPT.as_millis() as i64;
        let from = match state.rolled_until {
            Some(until) => until,
            None => match self.store.latest_stats(Tier::Minutes).await? {
                Some(latest) => latest.timestamp_millis(),
                None => last_complete - MINUTE_MS,
            },
        }
        .max(oldest);
        if from >= last_complete {
            return Ok(());
        }
        let samples = self
            .store
            .read_stats(
                Tier::Samples,
                millis_time(from),
                millis_time(last_complete),
                None,
            )
            .await?;
        let minutes = rebucket(samples, MINUTE_MS);
        self.store.write_stats(Tier::Minutes, &minutes).await?;
        state.rolled_until = Some(last_complete);
        let now = Utc::now();
        self.store
            .prune_stats(
                Tier::Samples,
                now - crate::task::chrono_duration(SAMPLES_KEPT),
            )
            .await?;
        self.store
            .prune_stats(
                Tier::Minutes,
                now - crate::task::chrono_duration(MINUTES_KEPT),
            )
            .await?;
        Ok(())
    }
}

fn millis_time(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap_or_default()
}

/// Whether a point says nothing happened: nothing waiting, running, failed or finished.
pub fn is_idle(point: &StatsPoint) -> bool {
    point.pending == 0
        && point.running == 0
        && point.failed == 0
        && point.finished_done == 0
        && point.finished_failed == 0
        && point.finished_cancelled == 0
}

/// The point of one type for the interval of `span_ms` ending at `at`.
pub fn point(
    task_type: String,
    at: DateTime<Utc>,
    span_ms: u64,
    backlog: &Backlog,
    mut finished: Finished,
) -> StatsPoint {
    finished.attempt_ms.sort_unstable();
    StatsPoint {
        task_type,
        at,
        span_ms,
        pending: backlog.pending,
        running: backlog.running,
        failed: backlog.failed,
        oldest_pending_ms: backlog
            .oldest_due
            .map(|due| (at - due).num_milliseconds().max(0) as u64),
        finished_done: finished.done,
        finished_failed: finished.failed,
        finished_cancelled: finished.cancelled,
        attempts_timed: finished.attempt_ms.len() as u64,
        attempt_p50_ms: percentile(&finished.attempt_ms, 0.50),
        attempt_p95_ms: percentile(&finished.attempt_ms, 0.95),
    }
}

/// The nearest-rank percentile `q` (0 < q ≤ 1) of sorted values: the smallest value with at
/// least `q` of all values at or below it. None for no values.
pub fn percentile(sorted: &[u64], q: f64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// Points of one type over consecutive intervals merged into one covering them all, ending at
/// `at` and spanning `span_ms`:
///
/// - pending, running, failed and the oldest pending age are the last point's (the state at
///   the end of the span);
/// - finished counts and timed attempts are summed;
/// - p50 is the mean of the points' p50s weighted by their timed attempts, p95 the largest
///   p95 (an upper bound: percentiles of parts do not combine exactly).
pub fn downsample(
    task_type: &str,
    at: DateTime<Utc>,
    span_ms: u64,
    points: &[StatsPoint],
) -> StatsPoint {
    let mut merged = StatsPoint {
        task_type: task_type.to_string(),
        at,
        span_ms,
        ..StatsPoint::default()
    };
    if let Some(last) = points.iter().max_by_key(|p| p.at) {
        merged.pending = last.pending;
        merged.running = last.running;
        merged.failed = last.failed;
        merged.oldest_pending_ms = last.oldest_pending_ms;
    }
    let mut weighted = 0u128;
    for p in points {
        merged.finished_done += p.finished_done;
        merged.finished_failed += p.finished_failed;
        merged.finished_cancelled += p.finished_cancelled;
        merged.attempts_timed += p.attempts_timed;
        if let Some(p50) = p.attempt_p50_ms {
            weighted += u128::from(p50) * u128::from(p.attempts_timed);
        }
        merged.attempt_p95_ms = merged.attempt_p95_ms.max(p.attempt_p95_ms);
    }
    if merged.attempts_timed > 0 {
        let timed = u128::from(merged.attempts_timed);
        merged.attempt_p50_ms = Some(((weighted + timed / 2) / timed) as u64);
    }
    merged
}

/// Groups points into spans of `step_ms` aligned to the Unix epoch (a point ending at `at`
/// belongs to the span ending at the next multiple of `step_ms` at or after it) and merges
/// each type's points of a span with [`downsample`]. Ordered by time, then type.
pub fn rebucket(points: Vec<StatsPoint>, step_ms: i64) -> Vec<StatsPoint> {
    let step = step_ms.max(1);
    let mut groups: BTreeMap<(i64, String), Vec<StatsPoint>> = BTreeMap::new();
    for p in points {
        let end = (p.at.timestamp_millis() + step - 1).div_euclid(step) * step;
        groups
            .entry((end, p.task_type.clone()))
            .or_default()
            .push(p);
    }
    groups
        .into_iter()
        .map(|((end, task_type), points)| {
            downsample(&task_type, millis_time(end), step as u64, &points)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: i64) -> DateTime<Utc> {
        millis_time(ms)
    }

    fn sample(ms: i64, pending: u64, done: u64, timed: u64, p50: u64, p95: u64) -> StatsPoint {
        StatsPoint {
            task_type: "a".into(),
            at: at(ms),
            span_ms: 10_000,
            pending,
            running: 1,
            failed: 2,
            oldest_pending_ms: Some(ms as u64 / 1000),
            finished_done: done,
            finished_failed: 1,
            finished_cancelled: 0,
            attempts_timed: timed,
            attempt_p50_ms: (timed > 0).then_some(p50),
            attempt_p95_ms: (timed > 0).then_some(p95),
        }
    }

    #[test]
    fn nearest_rank_percentiles() {
        assert_eq!(percentile(&[], 0.5), None);
        assert_eq!(percentile(&[7], 0.5), Some(7));
        assert_eq!(percentile(&[7], 0.95), Some(7));
        let values: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&values, 0.50), Some(50));
        assert_eq!(percentile(&values, 0.95), Some(95));
        assert_eq!(percentile(&[1, 2, 3, 4], 0.5), Some(2));
        assert_eq!(percentile(&[1, 2, 3, 4], 0.95), Some(4));
    }

    #[test]
    fn a_point_sorts_its_attempt_times_and_ages_the_queue_head() {
        let backlog = Backlog {
            pending: 3,
            running: 1,
            failed: 0,
            due: 2,
            oldest_due: Some(at(4_000)),
        };
        let finished = Finished {
            done: 4,
            failed: 1,
            cancelled: 2,
            attempt_ms: vec![50, 10, 40, 20, 30],
        };
        let p = point("a".into(), at(10_000), 10_000, &backlog, finished);
        assert_eq!(p.oldest_pending_ms, Some(6_000));
        assert_eq!(
            (p.finished_done, p.finished_failed, p.finished_cancelled),
            (4, 1, 2)
        );
        assert_eq!(p.attempts_timed, 5);
        assert_eq!((p.attempt_p50_ms, p.attempt_p95_ms), (Some(30), Some(50)));
        assert!(!is_idle(&p));
        let idle = point(
            "a".into(),
            at(10_000),
            10_000,
            &Backlog::default(),
            Finished::default(),
        );
        assert!(is_idle(&idle));
        assert_eq!(idle.attempt_p50_ms, None);
    }

    #[test]
    fn downsampling_keeps_the_last_state_and_sums_what_finished() {
        let points = [
            sample(10_000, 9, 3, 3, 100, 300),
            sample(30_000, 4, 1, 0, 0, 0),
            sample(20_000, 7, 2, 1, 200, 900),
        ];
        let minute = downsample("a", at(60_000), 60_000, &points);
        assert_eq!(minute.pending, 4, "the latest point's backlog");
        assert_eq!(minute.oldest_pending_ms, Some(30));
        assert_eq!(minute.finished_done, 6);
        assert_eq!(minute.finished_failed, 3);
        assert_eq!(minute.attempts_timed, 4);
        assert_eq!(minute.attempt_p50_ms, Some(125), "(3 x 100 + 1 x 200) / 4");
        assert_eq!(minute.attempt_p95_ms, Some(900), "the largest p95");
        let untimed = downsample("a", at(60_000), 60_000, &[sample(10_000, 1, 0, 0, 0, 0)]);
        assert_eq!(
            (untimed.attempt_p50_ms, untimed.attempt_p95_ms),
            (None, None)
        );
    }

    /// A sampler on a real SQLite store, leading, for the roll-up and retention.
    async fn sampler(dir: &tempfile::TempDir) -> Sampler {
        let url = format!("sqlite://{}", dir.path().join("stats.db").display());
        Sampler {
            store: crate::store::open(&url).await.unwrap(),
            interval: Duration::from_secs(10),
            leadership: Arc::new(Leadership::default()),
            shutdown: Shutdown::new(),
        }
    }

    #[tokio::test]
    async fn completed_minutes_roll_up_once_and_old_points_go() {
        let dir = tempfile::tempdir().unwrap();
        let sampler = sampler(&dir).await;
        let store = &sampler.store;
        // Samples of the minute ending at `minute`, and one of the next minute.
        let minute = Utc::now().timestamp_millis() / MINUTE_MS * MINUTE_MS - 5 * MINUTE_MS;
        let samples: Vec<StatsPoint> = (1..=7)
            .map(|i| {
                sample(
                    minute - MINUTE_MS + i * 10_000,
                    10 + i as u64,
                    1,
                    1,
                    100,
                    200,
                )
            })
            .collect();
        store.write_stats(Tier::Samples, &samples).await.unwrap();
        // An ancient sample and minute point, past retention.
        let ancient = minute - 8 * 24 * 3600 * 1000;
        store
            .write_stats(Tier::Samples, &[sample(ancient, 1, 0, 0, 0, 0)])
            .await
            .unwrap();
        store
            .write_stats(Tier::Minutes, &[sample(ancient, 1, 0, 0, 0, 0)])
            .await
            .unwrap();

        let mut state = State::default();
        sampler
            .roll_up(&mut state, at(minute + 15_000))
            .await
            .unwrap();
        let minutes = store
            .read_stats(Tier::Minutes, at(0), at(minute + MINUTE_MS), None)
            .await
            .unwrap();
        assert_eq!(minutes.len(), 1, "one minute was complete: {minutes:?}");
        let rolled = &minutes[0];
        assert_eq!(rolled.at, at(minute));
        assert_eq!(rolled.span_ms, 60_000);
        assert_eq!(rolled.pending, 16, "the minute's last sample (at its end)");
        assert_eq!(rolled.finished_done, 6, "the six samples within the minute");
        assert_eq!(state.rolled_until, Some(minute));
        assert!(
            store
                .read_stats(Tier::Samples, at(0), at(ancient + 1), None)
                .await
                .unwrap()
                .is_empty(),
            "samples older than a day are pruned"
        );

        // A new leader resumes after the latest minute point, rolling up the next minute.
        let mut fresh = State::default();
        sampler
            .roll_up(&mut fresh, at(minute + MINUTE_MS))
            .await
            .unwrap();
        let minutes = store
            .read_stats(Tier::Minutes, at(minute), at(minute + MINUTE_MS), None)
            .await
            .unwrap();
        assert_eq!(minutes.len(), 1);
        assert_eq!(minutes[0].finished_done, 1, "only the next minute's sample");
        store.close().await;
    }

    #[test]
    fn rebucketing_groups_by_aligned_span_and_type() {
        let mut b = sample(50_000, 1, 1, 0, 0, 0);
        b.task_type = "b".into();
        let points = vec![
            sample(10_000, 5, 1, 0, 0, 0),
            sample(60_000, 6, 1, 0, 0, 0),
            sample(70_000, 7, 1, 0, 0, 0),
            b,
        ];
        let minutes = rebucket(points, MINUTE_MS);
        let summary: Vec<(i64, &str, u64, u64)> = minutes
            .iter()
            .map(|p| {
                (
                    p.at.timestamp_millis(),
                    p.task_type.as_str(),
                    p.pending,
                    p.finished_done,
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                (60_000, "a", 6, 2),
                (60_000, "b", 1, 1),
                (120_000, "a", 7, 1)
            ]
        );
        assert!(minutes.iter().all(|p| p.span_ms == 60_000));
    }
}
