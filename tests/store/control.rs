//! Queue control on every backend: selections, bulk retry and discard in batches (and their dry
//! runs), the listing's error and time filters, paused task types shared by hosts, counts per
//! type.

use chrono::{DateTime, Duration as Span, Utc};
use std::time::Duration;

use crate::Fixture;
use spool::store::control::{BULK_BATCH, BulkAction, TaskSelection, run_bulk};
use spool::store::encoding::LEASE_EXPIRED;
use spool::store::{ClaimRequest, StatusCounts, TaskFilter};
use spool::task::{NewTask, Status, TaskId};

fn new_task(task_type: &str, max_retry: u32) -> NewTask {
    NewTask {
        task_type: task_type.into(),
        payload: "{}".into(),
        priority: 0,
        max_retry,
        run_at: Utc::now() - Span::seconds(1),
        idempotency_key: None,
        depth: 0,
    }
}

async fn enqueue(fixture: &Fixture, task_type: &str, n: usize) -> Vec<TaskId> {
    fixture
        .store
        .enqueue((0..n).map(|_| new_task(task_type, 0)).collect())
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.task.id)
        .collect()
}

/// The lease of the claims here: short, so dead letters are made quickly.
const LEASE: Duration = Duration::from_millis(5);

/// Claims up to `n` due tasks of `task_type` with a short lease.
async fn claim(fixture: &Fixture, task_type: &str, n: usize) -> Vec<TaskId> {
    let request = ClaimRequest {
        owner: "host-a".into(),
        limit: n,
        task_types: vec![task_type.into()],
        now: Utc::now(),
        lease: LEASE,
    };
    let claimed = fixture.store.claim(&request).await.unwrap();
    claimed.into_iter().map(|t| t.id).collect()
}

/// Makes dead letters: claims `n` tasks of `task_type` (enqueued without retries) and lets
/// their leases expire, so the rescuer fails them with the lease-expired error.
async fn dead_letters(fixture: &Fixture, task_type: &str, n: usize) -> Vec<TaskId> {
    let claimed = claim(fixture, task_type, n).await;
    assert_eq!(claimed.len(), n);
    tokio::time::sleep(LEASE + Duration::from_millis(20)).await;
    let report = fixture.store.rescue_expired().await.unwrap();
    assert_eq!(report.failed, n as u64);
    claimed
}

async fn status_of(fixture: &Fixture, id: TaskId) -> Status {
    fixture.store.get(id).await.unwrap().unwrap().status
}

fn selection() -> TaskSelection {
    TaskSelection::default()
}

pub async fn bulk_retry_and_discard_follow_the_filter_and_the_state_machine(fixture: &Fixture) {
    let store = fixture.store.as_ref();
    let mail = enqueue(fixture, "mail", 4).await;
    let mail_failed = dead_letters(fixture, "mail", 3).await;
    let mail_pending = mail[3];
    enqueue(fixture, "report", 2).await;
    let report_failed = dead_letters(fixture, "report", 1).await[0];
    let report_running = claim(fixture, "report", 1).await[0];

    let of_mail = TaskSelection {
        task_type: Some("mail".into()),
        ..selection()
    };
    assert_eq!(
        store.counts_by_type(&of_mail).await.unwrap()["mail"],
        StatusCounts {
            pending: 1,
            failed: 3,
            ..Default::default()
        }
    );

    // A dry run counts and changes nothing.
    let lease_expired = TaskSelection {
        error_contains: Some("lease expired".into()),
        ..selection()
    };
    let dry = run_bulk(store, BulkAction::Retry, &lease_expired, true, Utc::now())
        .await
        .unwrap();
    assert_eq!((dry.matched, dry.eligible, dry.changed), (4, 4, 0));
    assert_eq!(status_of(fixture, mail_failed[0]).await, Status::Failed);
    let none = TaskSelection {
        error_contains: Some("LEASE EXPIRED".into()),
        ..selection()
    };
    assert_eq!(
        run_bulk(store, BulkAction::Retry, &none, true, Utc::now())
            .await
            .unwrap()
            .matched,
        0,
        "error text is compared case-sensitively"
    );

    // Retry exactly the selected dead letters: two of mail's three, by id.
    let two = TaskSelection {
        ids: mail_failed[..2].to_vec(),
        status: Some(Status::Failed),
        ..selection()
    };
    let retried = run_bulk(store, BulkAction::Retry, &two, false, Utc::now())
        .await
        .unwrap();
    assert_eq!(
        (retried.matched, retried.eligible, retried.changed),
        (2, 2, 2)
    );
    for id in &mail_failed[..2] {
        let task = store.get(*id).await.unwrap().unwrap();
        assert_eq!(task.status, Status::Pending);
        assert_eq!(task.retry_count, 0, "a fresh retry budget");
        assert!(task.finished_at.is_none());
    }
    assert_eq!(status_of(fixture, mail_failed[2]).await, Status::Failed);
    assert_eq!(status_of(fixture, report_failed).await, Status::Failed);

    // Discard everything of report: the dead letter is cancelled with a note, the running task
    // is left alone.
    let of_report = TaskSelection {
        task_type: Some("report".into()),
        ..selection()
    };
    let discarded = run_bulk(store, BulkAction::Discard, &of_report, false, Utc::now())
        .await
        .unwrap();
    assert_eq!(
        (discarded.matched, discarded.eligible, discarded.changed),
        (2, 1, 1)
    );
    assert_eq!(discarded.by_status.running, 1);
    let task = store.get(report_failed).await.unwrap().unwrap();
    assert_eq!(task.status, Status::Cancelled);
    assert_eq!(
        task.last_error.as_deref(),
        Some(format!("discarded by an operator while failed: {LEASE_EXPIRED}").as_str())
    );
    assert!(task.finished_at.is_some());
    assert_eq!(status_of(fixture, report_running).await, Status::Running);

    // A pending task can be discarded too; it has no error to keep.
    let pending = TaskSelection {
        ids: vec![mail_pending],
        ..selection()
    };
    run_bulk(store, BulkAction::Discard, &pending, false, Utc::now())
        .await
        .unwrap();
    let task = store.get(mail_pending).await.unwrap().unwrap();
    assert_eq!(task.status, Status::Cancelled);
    assert_eq!(
        task.last_error.as_deref(),
        Some("discarded by an operator while pending")
    );

    // Retry takes cancelled (discarded) tasks back too; discard does not touch cancelled ones.
    let again = run_bulk(store, BulkAction::Discard, &pending, false, Utc::now())
        .await
        .unwrap();
    assert_eq!((again.matched, again.eligible, again.changed), (1, 0, 0));
    let back = run_bulk(store, BulkAction::Retry, &pending, false, Utc::now())
        .await
        .unwrap();
    assert_eq!(back.changed, 1);
    assert_eq!(status_of(fixture, mail_pending).await, Status::Pending);
}

pub async fn bulk_actions_run_in_batches_over_large_selections(fixture: &Fixture) {
    let store = fixture.store.as_ref();
    let n = BULK_BATCH * 2 + 7;
    let ids = enqueue(fixture, "bulk", n).await;
    enqueue(fixture, "other", 3).await;
    let of_bulk = TaskSelection {
        task_type: Some("bulk".into()),
        ..selection()
    };
    let discarded = run_bulk(store, BulkAction::Discard, &of_bulk, false, Utc::now())
        .await
        .unwrap();
    assert_eq!(
        (discarded.matched, discarded.eligible, discarded.changed),
        (n as u64, n as u64, n as u64)
    );
    let of_other = TaskSelection {
        task_type: Some("other".into()),
        ..selection()
    };
    run_bulk(store, BulkAction::Discard, &of_other, false, Utc::now())
        .await
        .unwrap();
    // One selection over both types: every discarded task back, each once.
    let discarded = TaskSelection {
        error_contains: Some("discarded by an operator".into()),
        ..selection()
    };
    let retried = run_bulk(store, BulkAction::Retry, &discarded, false, Utc::now())
        .await
        .unwrap();
    assert_eq!(retried.matched, n as u64 + 3);
    assert_eq!(retried.changed, n as u64 + 3, "each task once");
    let counts = store
        .counts_by_type(&TaskSelection::default())
        .await
        .unwrap();
    assert_eq!(counts["bulk"].pending, n as u64);
    assert_eq!(counts["other"].pending, 3);
    assert_eq!(status_of(fixture, ids[n - 1]).await, Status::Pending);
}

pub async fn selections_and_the_listing_filter_by_error_and_time(fixture: &Fixture) {
    let store = fixture.store.as_ref();
    let before = Utc::now() - Span::seconds(1);
    let pending = enqueue(fixture, "mail", 2).await;
    let failed = dead_letters(fixture, "mail", 1).await[0];
    let later = Utc::now() + Span::hours(1);

    let list = |filter: TaskFilter| async move {
        store
            .list(&TaskFilter {
                limit: 10,
                ..filter
            })
            .await
            .unwrap()
            .into_iter()
            .map(|t| t.id)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        list(TaskFilter {
            error_contains: Some("host running this attempt".into()),
            ..Default::default()
        })
        .await,
        [failed]
    );
    assert_eq!(
        list(TaskFilter {
            since: Some(before),
            until: Some(later),
            ..Default::default()
        })
        .await
        .len(),
        2
    );
    assert!(
        list(TaskFilter {
            since: Some(later),
            ..Default::default()
        })
        .await
        .is_empty()
    );
    assert!(
        list(TaskFilter {
            until: Some(before - Span::hours(1)),
            ..Default::default()
        })
        .await
        .is_empty()
    );
    // The failed task's time is when it failed: at or after `before`.
    let failed_since = TaskSelection {
        status: Some(Status::Failed),
        since: Some(before),
        ..selection()
    };
    assert_eq!(
        store.counts_by_type(&failed_since).await.unwrap()["mail"].failed,
        1
    );
    assert_eq!(pending.len(), 2);
}

pub async fn paused_types_are_shared_by_every_host(fixture: &Fixture) {
    let store = fixture.store.as_ref();
    assert!(store.paused_types().await.unwrap().is_empty());
    let at = DateTime::from_timestamp_millis(Utc::now().timestamp_millis()).unwrap();
    let paused = store.pause_type("mail", at).await.unwrap();
    assert_eq!((paused.task_type.as_str(), paused.paused_at), ("mail", at));
    // Pausing again keeps the first pause.
    let again = store
        .pause_type("mail", at + Span::seconds(5))
        .await
        .unwrap();
    assert_eq!(again.paused_at, at);
    store.pause_type("report", at).await.unwrap();

    let other = fixture.another_host().await;
    let names: Vec<String> = other
        .paused_types()
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.task_type)
        .collect();
    assert_eq!(names, ["mail", "report"]);

    assert!(other.resume_type("mail").await.unwrap());
    assert!(
        !store.resume_type("mail").await.unwrap(),
        "not paused any more"
    );
    let names: Vec<String> = store
        .paused_types()
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.task_type)
        .collect();
    assert_eq!(names, ["report"]);
    other.close().await;
}

on_every_backend!(
    control: bulk_retry_and_discard_follow_the_filter_and_the_state_machine,
    bulk_actions_run_in_batches_over_large_selections,
    selections_and_the_listing_filter_by_error_and_time,
    paused_types_are_shared_by_every_host,
);
