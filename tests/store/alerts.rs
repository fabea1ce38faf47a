//! The alert concern on every backend: dead letters per type within a window, the backlog and
//! its oldest due task per type, and the alert log (open alerts, recent rows newest first, the
//! last drill, pruning that keeps drills and each alert's latest row).

use chrono::{DateTime, Duration as Span, Utc};
use std::collections::BTreeMap;
use std::time::Duration;

use crate::Fixture;
use spool::store::alerts::{AlertRecord, ChannelOutcome, DRILL};
use spool::store::reads::Backlog;
use spool::store::{ClaimRequest, Completion};
use spool::task::{NewTask, Status};

on_every_backend!(alerts:
    dead_letters_are_counted_per_type_within_a_window,
    the_backlog_counts_pending_and_finds_the_oldest_due,
    the_alert_log_keeps_open_alerts_drills_and_recent_rows,
);

/// A time the database stores exactly (milliseconds).
fn exact(time: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(time.timestamp_millis()).unwrap()
}

fn task(task_type: &str, run_at: DateTime<Utc>) -> NewTask {
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

/// Makes `count` dead letters of `task_type` that failed at `at` (claimed, then failed with no
/// retry left).
async fn dead_letters(fixture: &Fixture, task_type: &str, count: usize, at: DateTime<Utc>) {
    let store = &fixture.store;
    let now = Utc::now();
    let tasks = (0..count)
        .map(|_| task(task_type, now - Span::seconds(1)))
        .collect();
    store.enqueue(tasks).await.unwrap();
    let claimed = store
        .claim(&ClaimRequest {
            owner: "gone".into(),
            limit: count,
            task_types: vec![task_type.into()],
            now,
            lease: Duration::from_secs(1),
        })
        .await
        .unwrap();
    assert_eq!(claimed.len(), count);
    let failed: Vec<_> = claimed
        .iter()
        .map(|task| Completion {
            finished_at: at,
            ..crate::contract::finished(task, "gone", Status::Failed)
        })
        .collect();
    assert_eq!(store.complete(&failed).await.unwrap(), count as u64);
}

pub async fn dead_letters_are_counted_per_type_within_a_window(fixture: &Fixture) {
    let store = &fixture.store;
    let now = exact(Utc::now());
    assert!(store.dead_letters_since(now).await.unwrap().is_empty());
    dead_letters(fixture, "mail", 4, now + Span::seconds(60)).await;
    dead_letters(fixture, "report", 1, now + Span::seconds(120)).await;
    let counts = |pairs: &[(&str, u64)]| -> BTreeMap<String, u64> {
        pairs.iter().map(|(t, n)| (t.to_string(), *n)).collect()
    };
    assert_eq!(
        store.dead_letters_since(now).await.unwrap(),
        counts(&[("mail", 4), ("report", 1)])
    );
    assert_eq!(
        store
            .dead_letters_since(now + Span::seconds(60))
            .await
            .unwrap(),
        counts(&[("mail", 4), ("report", 1)]),
        "the window's start is included"
    );
    assert_eq!(
        store
            .dead_letters_since(now + Span::milliseconds(60_001))
            .await
            .unwrap(),
        counts(&[("report", 1)])
    );
    // A retried dead letter is no longer one.
    let failed = store
        .list(&spool::store::TaskFilter {
            status: Some(spool::task::Status::Failed),
            task_type: Some("report".into()),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    store.retry(failed[0].id, Utc::now()).await.unwrap();
    assert_eq!(
        store.dead_letters_since(now).await.unwrap(),
        counts(&[("mail", 4)])
    );
}

pub async fn the_backlog_counts_pending_and_finds_the_oldest_due(fixture: &Fixture) {
    let store = &fixture.store;
    let now = exact(Utc::now());
    store
        .enqueue(vec![
            task("report", now - Span::seconds(5)),
            task("report", now - Span::seconds(10)),
            task("report", now + Span::hours(1)),
            task("sms", now + Span::hours(1)),
        ])
        .await
        .unwrap();
    let backlog = store.backlog(now).await.unwrap();
    assert_eq!(
        backlog,
        BTreeMap::from([
            (
                "report".to_string(),
                Backlog {
                    pending: 3,
                    due: 2,
                    oldest_due: Some(now - Span::seconds(10)),
                    ..Backlog::default()
                }
            ),
            (
                "sms".to_string(),
                Backlog {
                    pending: 1,
                    ..Backlog::default()
                }
            ),
        ])
    );
}

fn record(event: &str, alert: &str, at: DateTime<Utc>) -> AlertRecord {
    AlertRecord {
        id: 0,
        event: event.into(),
        alert: alert.into(),
        task_type: alert.split_once(':').map(|(_, t)| t.to_string()),
        value: 5,
        message: format!("{event} {alert}\nDashboard: http://x/"),
        channels: vec![ChannelOutcome {
            channel: "webhook-1".into(),
            kind: "webhook".into(),
            ok: true,
            error: None,
        }],
        host_id: "host-a".into(),
        since: at,
        sent_at: at,
    }
}

pub async fn the_alert_log_keeps_open_alerts_drills_and_recent_rows(fixture: &Fixture) {
    let store = &fixture.store;
    let t = exact(Utc::now() - Span::days(200));
    assert!(store.open_alerts().await.unwrap().is_empty());
    assert_eq!(store.last_drill().await.unwrap(), None);
    let firing = record("firing", "dead_letters:mail", t);
    let first = store.record_alert(&firing).await.unwrap();
    let mut repeat = record("repeat", "dead_letters:mail", t + Span::minutes(30));
    repeat.since = t;
    let second = store.record_alert(&repeat).await.unwrap();
    assert!(second > first);
    store
        .record_alert(&record("firing", "backlog:report", t))
        .await
        .unwrap();
    store
        .record_alert(&record("resolved", "backlog:report", t + Span::minutes(1)))
        .await
        .unwrap();
    let mut drill = record(DRILL, DRILL, t + Span::minutes(2));
    drill.task_type = None;
    drill.channels.push(ChannelOutcome {
        channel: "email-1".into(),
        kind: "email".into(),
        ok: false,
        error: Some("the SMTP server did not take the e-mail: refused".into()),
    });
    store.record_alert(&drill).await.unwrap();

    let open = store.open_alerts().await.unwrap();
    assert_eq!(
        open.len(),
        1,
        "backlog:report resolved; mail is open: {open:?}"
    );
    assert_eq!(
        AlertRecord {
            id: 0,
            ..open[0].clone()
        },
        repeat,
        "the latest row, as written"
    );
    assert_eq!(open[0].id, second);

    let recent = store.recent_alerts(3).await.unwrap();
    let events: Vec<&str> = recent.iter().map(|r| r.event.as_str()).collect();
    assert_eq!(events, ["drill", "resolved", "firing"], "newest first");
    let last = store.last_drill().await.unwrap().unwrap();
    assert_eq!(AlertRecord { id: 0, ..last }, drill, "channels round trip");

    // Old rows go, except drills and each alert's latest row.
    assert_eq!(store.prune_alerts(t - Span::days(1)).await.unwrap(), 0);
    assert_eq!(store.prune_alerts(Utc::now()).await.unwrap(), 2);
    let kept: Vec<(String, String)> = store
        .recent_alerts(10)
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.event, r.alert))
        .collect();
    assert_eq!(
        kept,
        [
            ("drill".to_string(), "drill".to_string()),
            ("resolved".to_string(), "backlog:report".to_string()),
            ("repeat".to_string(), "dead_letters:mail".to_string()),
        ]
    );
}
