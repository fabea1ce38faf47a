//! The statistics contract ([`spool::store::stats::Stats`]): the backlog, the tasks finished in
//! an interval, and the `spool_stats` history, the same on every backend.

use chrono::{DateTime, Duration as Span, Utc};
use std::time::Duration;

use crate::Fixture;
use spool::store::stats::{StatsPoint, Tier};
use spool::store::{ClaimRequest, Completion};
use spool::task::{NewTask, Status, Task};

fn new_task(task_type: &str, run_at: DateTime<Utc>) -> NewTask {
    NewTask {
        task_type: task_type.into(),
        payload: "{}".into(),
        priority: 0,
        max_retry: 0,
        run_at,
        idempotency_key: None,
        depth: 0,
    }
}

fn ms(time: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(time.timestamp_millis()).unwrap()
}

async fn claim(fixture: &Fixture, task_type: &str, limit: usize, now: DateTime<Utc>) -> Vec<Task> {
    fixture
        .store
        .claim(&ClaimRequest {
            owner: "me".into(),
            limit,
            task_types: vec![task_type.into()],
            now,
            lease: Duration::from_secs(60),
        })
        .await
        .unwrap()
}

/// The contract's completion of `task` ending in `status`, finished at `at`.
fn finish(task: &Task, status: Status, at: DateTime<Utc>) -> Completion {
    let mut completion = crate::contract::finished(task, "me", status);
    completion.finished_at = at;
    completion
}

pub async fn stats_backlog_counts_states_and_ages_the_queue_head(fixture: &Fixture) {
    let store = &fixture.store;
    let now = ms(Utc::now());
    let backlog = store.backlog(now).await.unwrap();
    assert!(backlog.is_empty(), "an empty table has no backlog");

    let early = now - Span::seconds(30);
    let tasks = vec![
        new_task("mail", early),
        new_task("mail", now - Span::seconds(5)),
        new_task("mail", now),
        new_task("mail", now + Span::hours(1)),
        new_task("report", now + Span::hours(1)),
        new_task("stale", now),
    ];
    store.enqueue(tasks).await.unwrap();
    // One mail task runs, one stale task fails for good.
    let running = claim(fixture, "mail", 1, now).await;
    assert_eq!(running.len(), 1);
    let stale = claim(fixture, "stale", 1, now).await;
    store
        .complete(&[finish(&stale[0], Status::Failed, now)])
        .await
        .unwrap();

    let backlog = store.backlog(now).await.unwrap();
    let mail = &backlog["mail"];
    assert_eq!((mail.pending, mail.running, mail.failed), (3, 1, 0));
    // The earliest-enqueued due pending task is the one due 5 s ago (the one due 30 s ago runs).
    assert_eq!(mail.oldest_due, Some(now - Span::seconds(5)));
    let report = &backlog["report"];
    assert_eq!((report.pending, report.running), (1, 0));
    assert_eq!(report.oldest_due, None, "nothing of report is due yet");
    let stale = &backlog["stale"];
    assert_eq!((stale.pending, stale.failed), (0, 1));
}

pub async fn stats_finished_between_counts_outcomes_and_attempt_times(fixture: &Fixture) {
    let store = &fixture.store;
    let start = ms(Utc::now()) - Span::seconds(100);
    let tasks = (0..5).map(|_| new_task("mail", start)).collect();
    store.enqueue(tasks).await.unwrap();
    let claimed = claim(fixture, "mail", 4, start).await;
    assert_eq!(claimed.len(), 4);
    let t = |s: i64| start + Span::seconds(s);
    store
        .complete(&[
            finish(&claimed[0], Status::Done, t(10)),
            finish(&claimed[1], Status::Done, t(20)),
            finish(&claimed[2], Status::Failed, t(30)),
            // Outside the interval asked for below.
            finish(&claimed[3], Status::Done, t(90)),
        ])
        .await
        .unwrap();
    let waiting = store
        .list(&spool::store::TaskFilter {
            status: Some(Status::Pending),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    store.cancel(waiting[0].id, t(40)).await.unwrap();

    let finished = store.finished_between(t(5), t(40)).await.unwrap();
    let mail = &finished["mail"];
    assert_eq!((mail.done, mail.failed, mail.cancelled), (2, 1, 1));
    let mut times = mail.attempt_ms.clone();
    times.sort_unstable();
    assert_eq!(
        times,
        [10_000, 20_000, 30_000],
        "finished_at - attempted_at of the tasks that ran"
    );
    // (after, until]: a task finished exactly at `after` is not counted, one at `until` is.
    let edge = store.finished_between(t(10), t(20)).await.unwrap();
    assert_eq!(edge["mail"].done, 1);
    assert!(
        store
            .finished_between(t(91), t(99))
            .await
            .unwrap()
            .is_empty()
    );
}

fn point(task_type: &str, at: DateTime<Utc>, pending: u64) -> StatsPoint {
    StatsPoint {
        task_type: task_type.into(),
        at,
        span_ms: 10_000,
        pending,
        running: 2,
        failed: 3,
        oldest_pending_ms: Some(4_000),
        finished_done: 5,
        finished_failed: 6,
        finished_cancelled: 7,
        attempts_timed: 11,
        attempt_p50_ms: Some(12),
        attempt_p95_ms: None,
    }
}

pub async fn stats_history_round_trips_replaces_and_prunes(fixture: &Fixture) {
    let store = &fixture.store;
    assert_eq!(store.latest_stats(Tier::Samples).await.unwrap(), None);
    let base = DateTime::from_timestamp_millis(1_800_000_000_000).unwrap();
    let at = |s: i64| base + Span::seconds(s);
    let points = vec![
        point("mail", at(10), 1),
        point("report", at(10), 2),
        point("mail", at(20), 3),
        point("mail", at(30), 4),
    ];
    store.write_stats(Tier::Samples, &points).await.unwrap();
    store
        .write_stats(Tier::Minutes, &[point("mail", at(60), 9)])
        .await
        .unwrap();

    let all = store
        .read_stats(Tier::Samples, at(0), at(30), None)
        .await
        .unwrap();
    assert_eq!(
        all, points,
        "every column round-trips, ordered by time then type"
    );
    let mail = store
        .read_stats(Tier::Samples, at(10), at(30), Some("mail"))
        .await
        .unwrap();
    assert_eq!(
        mail.iter().map(|p| p.pending).collect::<Vec<_>>(),
        [3, 4],
        "(after, until], one type"
    );
    assert_eq!(
        store.latest_stats(Tier::Samples).await.unwrap(),
        Some(at(30))
    );
    assert_eq!(
        store.latest_stats(Tier::Minutes).await.unwrap(),
        Some(at(60))
    );

    // Writing the same (tier, time, type) again replaces the point.
    let mut again = point("mail", at(20), 30);
    again.attempt_p95_ms = Some(99);
    store
        .write_stats(Tier::Samples, &[again.clone()])
        .await
        .unwrap();
    let read = store
        .read_stats(Tier::Samples, at(19), at(20), Some("mail"))
        .await
        .unwrap();
    assert_eq!(read, [again]);

    assert_eq!(store.prune_stats(Tier::Samples, at(20)).await.unwrap(), 2);
    let left = store
        .read_stats(Tier::Samples, at(0), at(100), None)
        .await
        .unwrap();
    assert_eq!(left.len(), 2);
    assert_eq!(
        store
            .read_stats(Tier::Minutes, at(0), at(100), None)
            .await
            .unwrap()
            .len(),
        1,
        "pruning one tier leaves the other"
    );
}
