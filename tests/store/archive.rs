//! The archive on every backend: only old finished tasks move (done and cancelled after one age,
//! failed after their own), batch by batch; archived tasks are found by id and nowhere else;
//! the purge removes old archived tasks with their effects; dry runs count without changing.

use chrono::{DateTime, Duration as Span, Utc};
use std::time::Duration;

use crate::Fixture;
use spool::store::archive::{ArchiveBatch, ArchiveCounts};
use spool::store::history::Outcome;
use spool::store::{ClaimRequest, Completion, StoreError, TaskFilter};
use spool::task::{NewTask, Status, TaskId, Transition};
use spool::worker::upkeep::archiver::{self, Retention};

on_every_backend!(archive:
    only_old_finished_tasks_move_in_batches,
    archived_tasks_are_found_by_id_only_and_not_retried,
    a_pass_moves_and_purges_batch_by_batch_and_a_dry_run_counts,
    the_purge_forgets_archived_tasks_with_their_effects,
);

fn days(n: i64) -> Span {
    Span::days(n)
}

/// A task of its own type `kind`, claimed and finished as `status` at `finished_at` (cancelled
/// tasks are cancelled at that time while pending); `None` leaves it pending, `Running` running.
async fn task_in(
    fixture: &Fixture,
    kind: &str,
    status: Status,
    finished_at: DateTime<Utc>,
) -> TaskId {
    let now = Utc::now();
    let enqueued = fixture
        .store
        .enqueue(vec![NewTask {
            task_type: kind.into(),
            payload: format!("{{\"kind\":\"{kind}\"}}"),
            priority: 0,
            max_retry: 0,
            run_at: now - days(400),
            idempotency_key: Some(format!("key-{kind}")),
            depth: 0,
        }])
        .await
        .unwrap();
    let id = enqueued[0].task.id;
    match status {
        Status::Pending => return id,
        Status::Cancelled => {
            fixture.store.cancel(id, finished_at).await.unwrap();
            return id;
        }
        _ => {}
    }
    let claimed = fixture
        .store
        .claim(&ClaimRequest {
            owner: "me".into(),
            limit: 1,
            task_types: vec![kind.into()],
            now,
            lease: Duration::from_secs(60),
        })
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    if status == Status::Running {
        return id;
    }
    let changed = fixture
        .store
        .complete(&[Completion {
            id,
            owner: "me".into(),
            attempt: claimed[0].attempts,
            transition: Transition {
                status,
                retry_count: 0,
                next_run_at: None,
                result: (status == Status::Done).then(|| format!("\"{kind} result\"")),
                error: (status == Status::Failed).then(|| "it broke".to_string()),
            },
            outcome: if status == Status::Done {
                Outcome::Done
            } else {
                Outcome::Fail
            },
            plugin_version: Some("v1".into()),
            log: Some("printed".into()),
            cost: None,
            finished_at,
            record: None,
        }])
        .await
        .unwrap();
    assert_eq!(changed, 1);
    id
}

fn batch(statuses: &[Status], finished_before: DateTime<Utc>, limit: usize) -> ArchiveBatch {
    ArchiveBatch {
        statuses: statuses.to_vec(),
        finished_before,
        limit,
        now: Utc::now(),
    }
}

const DONE_OR_CANCELLED: &[Status] = &[Status::Done, Status::Cancelled];

async fn live_ids(fixture: &Fixture) -> Vec<TaskId> {
    let mut ids: Vec<TaskId> = fixture
        .store
        .list(&TaskFilter {
            limit: 100,
            ..Default::default()
        })
        .await
        .unwrap()
        .iter()
        .map(|t| t.id)
        .collect();
    ids.sort();
    ids
}

pub async fn only_old_finished_tasks_move_in_batches(fixture: &Fixture) {
    let now = Utc::now();
    let old_done = [
        task_in(fixture, "d1", Status::Done, now - days(40)).await,
        task_in(fixture, "d2", Status::Done, now - days(41)).await,
        task_in(fixture, "d3", Status::Done, now - days(400)).await,
    ];
    let recent_done = task_in(fixture, "d4", Status::Done, now - days(1)).await;
    let old_cancelled = task_in(fixture, "c1", Status::Cancelled, now - days(40)).await;
    let failed_40 = task_in(fixture, "f1", Status::Failed, now - days(40)).await;
    let failed_100 = task_in(fixture, "f2", Status::Failed, now - days(100)).await;
    let pending = task_in(fixture, "p1", Status::Pending, now).await;
    let running = task_in(fixture, "r1", Status::Running, now).await;

    let cutoff = now - days(30);
    assert_eq!(
        fixture
            .store
            .count_archivable(DONE_OR_CANCELLED, cutoff)
            .await
            .unwrap(),
        ArchiveCounts {
            done: 3,
            failed: 0,
            cancelled: 1
        }
    );
    // Batches of two: 2, 2, then nothing left.
    let first = fixture
        .store
        .archive_batch(&batch(DONE_OR_CANCELLED, cutoff, 2))
        .await
        .unwrap();
    assert_eq!(first.total(), 2);
    let second = fixture
        .store
        .archive_batch(&batch(DONE_OR_CANCELLED, cutoff, 2))
        .await
        .unwrap();
    assert_eq!(second.total(), 2);
    let mut both = first;
    both.merge(second);
    assert_eq!((both.done, both.cancelled, both.failed), (3, 1, 0));
    let third = fixture
        .store
        .archive_batch(&batch(DONE_OR_CANCELLED, cutoff, 2))
        .await
        .unwrap();
    assert_eq!(third.total(), 0);
    // Dead letters by their own age: only the one older than 90 days.
    let dead = fixture
        .store
        .archive_batch(&batch(&[Status::Failed], now - days(90), 10))
        .await
        .unwrap();
    assert_eq!(dead.failed, 1);

    let mut live = vec![recent_done, failed_40, pending, running];
    live.sort();
    assert_eq!(live_ids(fixture).await, live);
    for id in old_done.iter().chain([&old_cancelled, &failed_100]) {
        assert!(fixture.store.get(*id).await.unwrap().is_none(), "{id} left");
        assert!(fixture.store.get_archived(*id).await.unwrap().is_some());
    }
    for id in live {
        assert!(fixture.store.get_archived(id).await.unwrap().is_none());
    }
    let counts = fixture.store.counts().await.unwrap();
    assert_eq!(
        (
            counts.pending,
            counts.running,
            counts.done,
            counts.failed,
            counts.cancelled
        ),
        (1, 1, 1, 1, 0)
    );
    // A running or pending task is never archived.
    assert!(
        fixture
            .store
            .archive_batch(&batch(&[Status::Running], now, 10))
            .await
            .is_err()
    );
}

pub async fn archived_tasks_are_found_by_id_only_and_not_retried(fixture: &Fixture) {
    let now = Utc::now();
    let finished_at = now - days(100);
    let done = task_in(fixture, "d1", Status::Done, finished_at).await;
    let failed = task_in(fixture, "f1", Status::Failed, finished_at).await;
    let live = fixture.store.get(done).await.unwrap().unwrap();
    let before = Utc::now();
    for statuses in [DONE_OR_CANCELLED, &[Status::Failed]] {
        fixture
            .store
            .archive_batch(&batch(statuses, now - days(30), 10))
            .await
            .unwrap();
    }
    let archived = fixture.store.get_archived(done).await.unwrap().unwrap();
    assert_eq!(archived.task, live, "every column as it was");
    assert_eq!(archived.task.result.as_deref(), Some("\"d1 result\""));
    assert_eq!(
        archived.task.payload,
        serde_json::json!({"kind": "d1"}),
        "payload round-trips"
    );
    assert!(archived.archived_at >= before - Span::seconds(1));
    assert!(archived.archived_at <= Utc::now() + Span::seconds(1));
    let dead = fixture.store.get_archived(failed).await.unwrap().unwrap();
    assert_eq!(dead.task.status, Status::Failed);
    assert_eq!(dead.task.last_error.as_deref(), Some("it broke"));
    // The live table no longer has them: a retry finds nothing to change.
    assert!(matches!(
        fixture.store.retry(failed, Utc::now()).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(fixture.store.get_archived(failed).await.unwrap().is_some());
    assert!(live_ids(fixture).await.is_empty());
    // The idempotency key holds while its task is archived: the same key, alone or among new
    // tasks, is answered with the archived task, and nothing new runs.
    let again = fixture
        .store
        .enqueue(vec![
            keyed("d1", "fresh-1"),
            keyed("d1", "key-d1"),
            keyed("f1", "key-f1"),
            keyed("d1", "fresh-2"),
        ])
        .await
        .unwrap();
    let answered: Vec<(TaskId, bool)> = again.iter().map(|e| (e.task.id, e.duplicate)).collect();
    assert_eq!(answered[1], (done, true), "the archived done task");
    assert_eq!(answered[2], (failed, true), "the archived dead letter");
    assert_eq!(again[1].task.status, Status::Done);
    assert!(!answered[0].1 && !answered[3].1, "new keys insert");
    assert!(
        answered[0].0 > failed && answered[3].0 > answered[0].0,
        "in order, ids never reused"
    );
    assert_eq!(live_ids(fixture).await, [answered[0].0, answered[3].0]);
    assert_eq!(
        fixture.store.task_with_key("d1", "key-d1").await.unwrap(),
        Some(done),
        "the key names its archived task"
    );
}

/// A new task of type `kind` with idempotency key `key`.
fn keyed(kind: &str, key: &str) -> NewTask {
    NewTask {
        task_type: kind.into(),
        payload: "{}".into(),
        priority: 0,
        max_retry: 0,
        run_at: Utc::now(),
        idempotency_key: Some(key.into()),
        depth: 0,
    }
}

pub async fn a_pass_moves_and_purges_batch_by_batch_and_a_dry_run_counts(fixture: &Fixture) {
    let now = Utc::now();
    for i in 0..5 {
        task_in(fixture, &format!("d{i}"), Status::Done, now - days(31)).await;
    }
    task_in(fixture, "c1", Status::Cancelled, now - days(31)).await;
    task_in(fixture, "f1", Status::Failed, now - days(31)).await;
    task_in(fixture, "f2", Status::Failed, now - days(91)).await;
    task_in(fixture, "d9", Status::Done, now - days(29)).await;
    let retention = Retention::default();
    let planned = archiver::dry_run(fixture.store.as_ref(), &retention, now)
        .await
        .unwrap();
    assert_eq!(
        (planned.archived, planned.purged, planned.batches),
        (
            ArchiveCounts {
                done: 5,
                failed: 1,
                cancelled: 1
            },
            0,
            0
        )
    );
    assert_eq!(
        live_ids(fixture).await.len(),
        9,
        "a dry run changes nothing"
    );
    let report = archiver::pass(fixture.store.as_ref(), &retention, now, 2, || true)
        .await
        .unwrap();
    assert_eq!(report.archived, planned.archived);
    // Done and cancelled: 2 + 2 + 2, then a batch that finds none; failed: 1 (short); purge: 0.
    assert_eq!(report.batches, 6);
    assert_eq!(live_ids(fixture).await.len(), 2);
    // Nothing is old enough for the purge until the archive retention has passed.
    let later = now + Span::from_std(retention.archive).unwrap() + days(1);
    let planned = archiver::dry_run(fixture.store.as_ref(), &retention, later)
        .await
        .unwrap();
    assert_eq!(planned.purged, 7);
    let report = archiver::pass(fixture.store.as_ref(), &retention, later, 5, || true)
        .await
        .unwrap();
    // The two tasks still live are archived then (at `later`), and are not purged yet.
    assert_eq!((report.archived.total(), report.purged), (2, 7));
    // A pass told to stop does nothing.
    let report = archiver::pass(fixture.store.as_ref(), &retention, later, 5, || false)
        .await
        .unwrap();
    assert_eq!(report, Default::default());
}

pub async fn the_purge_forgets_archived_tasks_with_their_effects(fixture: &Fixture) {
    let now = Utc::now();
    let old = task_in(fixture, "mail", Status::Done, now - days(500)).await;
    let newer = task_in(fixture, "mail2", Status::Done, now - days(40)).await;
    fixture
        .store
        .record_effect("mail", "to:ana", old)
        .await
        .unwrap();
    fixture
        .store
        .record_effect("mail2", "to:bo", newer)
        .await
        .unwrap();
    assert!(!fixture.store.attempt_history(old).await.unwrap().is_empty());
    // Archived long ago, and just now.
    let mut long_ago = batch(DONE_OR_CANCELLED, now - days(400), 10);
    long_ago.now = now - days(400);
    assert_eq!(
        fixture
            .store
            .archive_batch(&long_ago)
            .await
            .unwrap()
            .total(),
        1
    );
    fixture
        .store
        .archive_batch(&batch(DONE_OR_CANCELLED, now - days(30), 10))
        .await
        .unwrap();
    let cutoff = now - days(365);
    assert_eq!(fixture.store.count_purgeable(cutoff).await.unwrap(), 1);
    assert_eq!(
        fixture.store.purge_archive_batch(cutoff, 10).await.unwrap(),
        1
    );
    assert_eq!(
        fixture.store.purge_archive_batch(cutoff, 10).await.unwrap(),
        0
    );
    assert!(fixture.store.get_archived(old).await.unwrap().is_none());
    assert!(
        fixture.store.attempt_history(old).await.unwrap().is_empty(),
        "the purge deletes the attempt history"
    );
    assert_eq!(
        fixture.store.attempt_history(newer).await.unwrap().len(),
        1,
        "an archived task keeps its attempt history"
    );
    assert!(fixture.store.get_archived(newer).await.unwrap().is_some());
    assert!(!fixture.store.effect_done("mail", "to:ana").await.unwrap());
    assert!(fixture.store.effect_done("mail2", "to:bo").await.unwrap());
    assert_eq!(fixture.store.count_purgeable(cutoff).await.unwrap(), 0);
    // The purged task's key is free again; the archived one's still holds.
    let again = fixture
        .store
        .enqueue(vec![keyed("mail", "key-mail"), keyed("mail2", "key-mail2")])
        .await
        .unwrap();
    assert!(!again[0].duplicate && again[0].task.id > newer);
    assert_eq!((again[1].task.id, again[1].duplicate), (newer, true));
}
