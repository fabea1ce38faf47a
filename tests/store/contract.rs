//! The behaviours every backend must show. Each function gets a fresh, empty store.

use chrono::{DateTime, Duration as Span, Utc};
use std::collections::BTreeMap;
use std::time::Duration;

use crate::Fixture;
pub use crate::stats::*;
use spool::store::control::TaskSelection;
use spool::store::reads;
use spool::store::{
    AttemptId, ClaimRequest, Completion, KvUsage, ProgressUpdate, RescueReport, StoreError,
    TaskFilter,
};
use spool::task::{NewTask, Status, Task, TaskId, Transition};

fn task(task_type: &str, priority: i32, run_at: DateTime<Utc>) -> NewTask {
    NewTask {
        task_type: task_type.into(),
        payload: "{}".into(),
        priority,
        max_retry: 1,
        run_at,
        idempotency_key: None,
        depth: 0,
    }
}

fn claim_by(owner: &str, types: &[&str], limit: usize, now: DateTime<Utc>) -> ClaimRequest {
    ClaimRequest {
        owner: owner.into(),
        limit,
        task_types: types.iter().map(|t| t.to_string()).collect(),
        now,
        lease: Duration::from_secs(30),
    }
}

fn claim(limit: usize, now: DateTime<Utc>) -> ClaimRequest {
    claim_by("me", &["a", "b"], limit, now)
}

/// Ends the leases of these running tasks now, on the database's clock, and waits until they
/// are past: what the rescuer sees when the tasks' host stopped extending them.
pub async fn expire_leases(fixture: &Fixture, owner: &str, tasks: &[&Task]) {
    let attempts: Vec<AttemptId> = tasks.iter().map(|task| AttemptId::of(task)).collect();
    let extended = fixture
        .store
        .extend_leases(owner, &attempts, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(extended.len(), attempts.len(), "the tasks were running");
    tokio::time::sleep(Duration::from_millis(20)).await;
}

pub fn finished(task: &Task, owner: &str, status: Status) -> Completion {
    Completion {
        id: task.id,
        owner: owner.into(),
        attempt: task.attempts,
        transition: Transition {
            status,
            retry_count: task.retry_count,
            next_run_at: (status == Status::Pending).then(Utc::now),
            result: (status == Status::Done).then(|| "1".into()),
            error: None,
        },
        outcome: match status {
            Status::Done => spool::store::history::Outcome::Done,
            Status::Pending => spool::store::history::Outcome::Snooze,
            _ => spool::store::history::Outcome::Fail,
        },
        plugin_version: Some("v1".into()),
        log: Some("printed".into()),
        cost: None,
        finished_at: Utc::now(),
        record: None,
    }
}

fn done(task: &Task, owner: &str) -> Completion {
    finished(task, owner, Status::Done)
}

async fn ids_of(fixture: &Fixture, tasks: Vec<NewTask>) -> Vec<TaskId> {
    fixture
        .store
        .enqueue(tasks)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.task.id)
        .collect()
}

async fn get(fixture: &Fixture, id: TaskId) -> Task {
    fixture
        .store
        .get(id)
        .await
        .unwrap()
        .expect("the task exists")
}

// Times are stored with millisecond precision on every backend.
fn ms(time: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(time.timestamp_millis()).unwrap()
}

pub async fn claims_by_priority_then_due_time_then_id(fixture: &Fixture) {
    let now = Utc::now();
    let ids = ids_of(
        fixture,
        vec![
            task("a", 0, now - Span::seconds(10)), // 0: low priority, oldest
            task("a", 5, now - Span::seconds(1)),  // 1: high priority, newer
            task("b", 5, now - Span::seconds(5)),  // 2: high priority, older
            task("a", 9, now + Span::seconds(60)), // 3: highest, but not due
            task("c", 9, now),                     // 4: a type this host does not run
            task("a", 0, now - Span::seconds(10)), // 5: ties with 0 on everything but id
        ],
    )
    .await;
    let claimed = fixture.store.claim(&claim(3, now)).await.unwrap();
    assert_eq!(
        claimed.iter().map(|t| t.id).collect::<Vec<_>>(),
        [ids[2], ids[1], ids[0]]
    );
    for task in &claimed {
        assert_eq!(
            (task.status, task.lease_owner.as_deref(), task.attempts),
            (Status::Running, Some("me"), 1)
        );
        assert!(task.lease_expires_at.unwrap() > now && task.attempted_at.is_some());
    }
    let rest = fixture.store.claim(&claim(10, now)).await.unwrap();
    assert_eq!(
        rest.iter().map(|t| t.id).collect::<Vec<_>>(),
        [ids[5]],
        "not due and foreign types stay"
    );
}

pub async fn claims_only_the_types_asked_for_and_only_due_tasks(fixture: &Fixture) {
    let now = Utc::now();
    let ids = ids_of(
        fixture,
        vec![task("c", 0, now), task("a", 0, now + Span::seconds(5))],
    )
    .await;
    assert!(
        fixture
            .store
            .claim(&claim(10, now))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        fixture
            .store
            .claim(&claim_by("me", &[], 10, now))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        fixture
            .store
            .claim(&claim(0, now))
            .await
            .unwrap()
            .is_empty()
    );
    let later = fixture
        .store
        .claim(&claim(10, now + Span::seconds(6)))
        .await
        .unwrap();
    assert_eq!(later.iter().map(|t| t.id).collect::<Vec<_>>(), [ids[1]]);
    let other = fixture
        .store
        .claim(&claim_by("me", &["c"], 10, now))
        .await
        .unwrap();
    assert_eq!(other.iter().map(|t| t.id).collect::<Vec<_>>(), [ids[0]]);
}

pub async fn concurrent_claims_never_share_a_task(fixture: &Fixture) {
    let now = Utc::now();
    let total = 600;
    let tasks: Vec<NewTask> = (0..total).map(|_| task("a", 0, now)).collect();
    fixture.store.enqueue(tasks).await.unwrap();
    let mut hosts = Vec::new();
    for host in 0..3 {
        let store = fixture.another_host().await;
        hosts.push(tokio::spawn(async move {
            let owner = format!("host-{host}");
            let mut mine = Vec::new();
            loop {
                let claimed = store
                    .claim(&claim_by(&owner, &["a"], 25, Utc::now()))
                    .await
                    .unwrap();
                if claimed.is_empty() {
                    break;
                }
                assert!(
                    claimed
                        .iter()
                        .all(|t| t.lease_owner.as_deref() == Some(owner.as_str()))
                );
                mine.extend(claimed.iter().map(|t| t.id));
            }
            store.close().await;
            mine
        }));
    }
    let mut all = Vec::new();
    for host in hosts {
        all.extend(host.await.unwrap());
    }
    let claimed = all.len();
    all.sort();
    all.dedup();
    assert_eq!(
        (claimed, all.len()),
        (total, total),
        "every task claimed exactly once"
    );
    assert_eq!(fixture.store.counts().await.unwrap().running, total as u64);
}

/// Many callers on one store at once (the dispatcher's claims and the completer's batches
/// meet like this): each task is claimed once, each completion applies once.
pub async fn claims_and_completions_from_many_callers_on_one_store(fixture: &Fixture) {
    let now = Utc::now();
    let total = 400;
    let tasks: Vec<NewTask> = (0..total).map(|_| task("a", 0, now)).collect();
    fixture.store.enqueue(tasks).await.unwrap();
    let mut callers = Vec::new();
    for caller in 0..8 {
        let store = fixture.store.clone();
        callers.push(tokio::spawn(async move {
            let owner = format!("caller-{caller}");
            let (mut claimed, mut completed) = (Vec::new(), 0);
            loop {
                let batch = store
                    .claim(&claim_by(&owner, &["a"], 7, Utc::now()))
                    .await
                    .unwrap();
                if batch.is_empty() {
                    break;
                }
                let completions: Vec<Completion> = batch.iter().map(|t| done(t, &owner)).collect();
                completed += store.complete(&completions).await.unwrap();
                claimed.extend(batch.iter().map(|t| t.id));
            }
            (claimed, completed)
        }));
    }
    let (mut all, mut completed) = (Vec::new(), 0);
    for caller in callers {
        let (claimed, applied) = caller.await.unwrap();
        all.extend(claimed);
        completed += applied;
    }
    let claimed = all.len();
    all.sort();
    all.dedup();
    assert_eq!(
        (claimed, all.len()),
        (total, total),
        "every task claimed once"
    );
    assert_eq!(completed, total as u64, "every completion applied once");
    assert_eq!(fixture.store.counts().await.unwrap().done, total as u64);
}

pub async fn completion_only_applies_to_the_current_claim(fixture: &Fixture) {
    let now = Utc::now();
    fixture
        .store
        .enqueue(vec![task("a", 0, now), task("a", 0, now)])
        .await
        .unwrap();
    let claimed = fixture.store.claim(&claim(2, now)).await.unwrap();
    assert_eq!(
        fixture
            .store
            .complete(&[done(&claimed[0], "someone-else")])
            .await
            .unwrap(),
        0
    );
    fixture.store.cancel(claimed[1].id, now).await.unwrap();
    let changed = fixture
        .store
        .complete(&[done(&claimed[0], "me"), done(&claimed[1], "me")])
        .await
        .unwrap();
    assert_eq!(changed, 1, "the cancelled task's outcome is discarded");
    let first = get(fixture, claimed[0].id).await;
    assert_eq!(
        (
            first.status,
            first.result.as_deref(),
            first.plugin_version.as_deref()
        ),
        (Status::Done, Some("1"), Some("v1"))
    );
    assert_eq!(first.log.as_deref(), Some("printed"));
    assert!(
        first.lease_owner.is_none()
            && first.lease_expires_at.is_none()
            && first.finished_at.is_some()
    );
    assert_eq!(get(fixture, claimed[1].id).await.status, Status::Cancelled);
    assert_eq!(
        fixture
            .store
            .complete(&[done(&claimed[0], "me")])
            .await
            .unwrap(),
        0,
        "a second completion changes nothing"
    );
}

pub async fn a_late_result_never_lands_on_a_newer_claim(fixture: &Fixture) {
    let now = Utc::now();
    let id = ids_of(
        fixture,
        vec![NewTask {
            max_retry: 3,
            ..task("a", 0, now)
        }],
    )
    .await[0];
    let first = fixture.store.claim(&claim(1, now)).await.unwrap().remove(0);
    // The first attempt's host loses its lease; the task is rescued and claimed again by the
    // same owner name (a restarted host with the same name, or this host after an outage).
    expire_leases(fixture, "me", &[&first]).await;
    fixture.store.rescue_expired().await.unwrap();
    let later = Utc::now();
    let second = fixture
        .store
        .claim(&claim(1, later))
        .await
        .unwrap()
        .remove(0);
    assert_eq!((second.id, second.attempts), (id, first.attempts + 1));
    assert_eq!(
        fixture.store.complete(&[done(&first, "me")]).await.unwrap(),
        0,
        "the old attempt's result is fenced off"
    );
    assert_eq!(get(fixture, id).await.status, Status::Running);
    // An API retry resets retry_count but never the claim counter.
    fixture
        .store
        .complete(&[finished(&second, "me", Status::Failed)])
        .await
        .unwrap();
    fixture.store.retry(id, later).await.unwrap();
    let third = fixture
        .store
        .claim(&claim(1, later))
        .await
        .unwrap()
        .remove(0);
    assert_eq!(third.retry_count, 0);
    assert_eq!(
        fixture
            .store
            .complete(&[done(&second, "me")])
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        fixture.store.complete(&[done(&third, "me")]).await.unwrap(),
        1
    );
    assert_eq!(get(fixture, id).await.attempts, 3);
}

pub async fn rescue_counts_the_attempt_and_fails_when_none_are_left(fixture: &Fixture) {
    let now = Utc::now();
    fixture
        .store
        .enqueue(vec![task("a", 0, now)])
        .await
        .unwrap(); // max_retry 1
    let first = fixture.store.claim(&claim(1, now)).await.unwrap().remove(0);
    assert_eq!(
        fixture.store.rescue_expired().await.unwrap(),
        RescueReport::default(),
        "lease still valid"
    );
    expire_leases(fixture, "me", &[&first]).await;
    assert_eq!(
        fixture.store.rescue_expired().await.unwrap(),
        RescueReport {
            retried: 1,
            failed: 0
        }
    );
    let rescued = get(fixture, first.id).await;
    assert_eq!((rescued.status, rescued.retry_count), (Status::Pending, 1));
    assert!(rescued.last_error.unwrap().contains("lease expired"));
    assert!(rescued.lease_owner.is_none());
    let second = fixture
        .store
        .claim(&claim(1, Utc::now()))
        .await
        .unwrap()
        .remove(0);
    expire_leases(fixture, "me", &[&second]).await;
    assert_eq!(
        fixture.store.rescue_expired().await.unwrap(),
        RescueReport {
            retried: 0,
            failed: 1
        }
    );
    let dead = get(fixture, second.id).await;
    // The second rescue scheduled no retry: none was left.
    assert_eq!((dead.status, dead.retry_count), (Status::Failed, 1));
    assert!(dead.finished_at.is_some());
}

pub async fn a_completion_batch_and_a_lease_extension_on_the_same_rows_never_deadlock(
    fixture: &Fixture,
) {
    let other = fixture.another_host().await;
    for _ in 0..3 {
        let now = Utc::now();
        fixture
            .store
            .enqueue((0..200).map(|_| task("a", 0, now)).collect())
            .await
            .unwrap();
        let claimed = fixture.store.claim(&claim(200, now)).await.unwrap();
        assert_eq!(claimed.len(), 200);
        // Handed over in opposite orders, as a completer and a lease keeper may.
        let completions: Vec<Completion> = claimed.iter().rev().map(|t| done(t, "me")).collect();
        let attempts: Vec<AttemptId> = claimed.iter().map(AttemptId::of).collect();
        let (completed, extended) = tokio::join!(
            other.complete(&completions),
            fixture
                .store
                .extend_leases("me", &attempts, Duration::from_secs(300))
        );
        assert_eq!(completed.expect("the completion batch"), 200);
        extended.expect("the lease extension");
    }
    other.close().await;
}

pub async fn leases_extend_only_for_the_claimed_attempt_and_release_is_uncounted(
    fixture: &Fixture,
) {
    let now = Utc::now();
    fixture
        .store
        .enqueue(vec![task("a", 0, now), task("a", 0, now)])
        .await
        .unwrap();
    // Claimed with a lease that ends at once, then extended: the rescuer leaves them alone.
    let brief = ClaimRequest {
        lease: Duration::ZERO,
        ..claim(2, now)
    };
    let claimed = fixture.store.claim(&brief).await.unwrap();
    let attempts: Vec<AttemptId> = claimed.iter().map(AttemptId::of).collect();
    let lease = Duration::from_secs(300);
    let before = Utc::now();
    let mut extended = fixture
        .store
        .extend_leases("me", &attempts, lease)
        .await
        .unwrap();
    let after = Utc::now();
    extended.sort();
    let mut expected = attempts.clone();
    expected.sort();
    assert_eq!(extended, expected);
    // Measured on the database's clock, which is this machine's here.
    let until = get(fixture, claimed[0].id)
        .await
        .lease_expires_at
        .unwrap()
        .timestamp_millis();
    let span = Span::seconds(300);
    let earliest = (before + span).timestamp_millis() - 1;
    let latest = (after + span).timestamp_millis() + 1;
    assert!(
        (earliest..=latest).contains(&until),
        "the lease ends 300 s after the extension"
    );
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(
        fixture
            .store
            .extend_leases("other", &attempts, lease)
            .await
            .unwrap()
            .is_empty(),
        "only the owner extends"
    );
    let stale = AttemptId {
        task: claimed[0].id,
        attempt: claimed[0].attempts + 1,
    };
    assert!(
        fixture
            .store
            .extend_leases("me", &[stale], lease)
            .await
            .unwrap()
            .is_empty(),
        "only the claimed attempt"
    );
    assert!(
        fixture
            .store
            .extend_leases("me", &[], lease)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        fixture.store.rescue_expired().await.unwrap(),
        RescueReport::default(),
        "the extended leases run"
    );
    assert_eq!(fixture.store.release("me", &[stale]).await.unwrap(), 0);
    assert_eq!(
        fixture
            .store
            .release("other", &[attempts[0]])
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        fixture.store.release("me", &[attempts[0]]).await.unwrap(),
        1
    );
    let released = get(fixture, claimed[0].id).await;
    assert_eq!(
        (released.status, released.retry_count),
        (Status::Pending, 0)
    );
    assert!(released.lease_owner.is_none());
    let counts = fixture.store.counts().await.unwrap();
    assert_eq!((counts.pending, counts.running), (1, 1));
}

pub async fn a_follow_up_keeps_its_depth(fixture: &Fixture) {
    let now = Utc::now();
    let enqueued = fixture
        .store
        .enqueue(vec![
            task("a", 1, now),
            NewTask {
                depth: 7,
                ..task("a", 0, now)
            },
        ])
        .await
        .unwrap();
    let depths: Vec<u32> = enqueued.iter().map(|e| e.task.depth).collect();
    assert_eq!(depths, [0, 7]);
    let claimed = fixture.store.claim(&claim(2, now)).await.unwrap();
    let depths: Vec<u32> = claimed.iter().map(|t| t.depth).collect();
    assert_eq!(depths, [0, 7], "claim order is by priority");
    let read = fixture
        .store
        .get(enqueued[1].task.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(read.depth, 7);
}

pub async fn idempotency_keys_dedupe_within_and_across_batches(fixture: &Fixture) {
    let now = Utc::now();
    let keyed = |key: &str| NewTask {
        idempotency_key: Some(key.into()),
        ..task("a", 0, now)
    };
    let first = fixture
        .store
        .enqueue(vec![
            keyed("k1"),
            task("a", 0, now),
            keyed("k1"),
            keyed("k2"),
        ])
        .await
        .unwrap();
    let flags: Vec<bool> = first.iter().map(|e| e.duplicate).collect();
    assert_eq!(flags, [false, false, true, false]);
    assert_eq!(first[0].task.id, first[2].task.id);
    let again = fixture
        .store
        .enqueue(vec![
            keyed("k2"),
            NewTask {
                task_type: "b".into(),
                ..keyed("k2")
            },
        ])
        .await
        .unwrap();
    assert!(again[0].duplicate && again[0].task.id == first[3].task.id);
    assert!(!again[1].duplicate, "keys are unique per task type");
    assert_eq!(fixture.store.counts().await.unwrap().pending, 4);
    // Two hosts racing with the same key still make one task.
    let other = fixture.another_host().await;
    let (left, right) = tokio::join!(
        fixture.store.enqueue(vec![keyed("race")]),
        other.enqueue(vec![keyed("race")])
    );
    let (left, right) = (left.unwrap().remove(0), right.unwrap().remove(0));
    assert_eq!(left.task.id, right.task.id);
    assert!(
        left.duplicate != right.duplicate,
        "exactly one of the two inserted"
    );
    other.close().await;
}

pub async fn large_batches_keep_their_order(fixture: &Fixture) {
    let now = Utc::now();
    let tasks: Vec<NewTask> = (0..1_234)
        .map(|i| NewTask {
            payload: format!("{{\"n\":{i}}}"),
            idempotency_key: (i % 3 == 0).then(|| format!("key-{}", i % 300)),
            ..task("a", 0, now)
        })
        .collect();
    let enqueued = fixture.store.enqueue(tasks).await.unwrap();
    assert_eq!(enqueued.len(), 1_234);
    for (i, e) in enqueued.iter().enumerate() {
        if e.duplicate {
            let first = (i % 300) as u64;
            assert_eq!(
                e.task.idempotency_key.as_deref(),
                Some(format!("key-{first}").as_str())
            );
        } else {
            assert_eq!(e.task.payload["n"], i, "input {i} got its own row");
        }
    }
    let new: Vec<TaskId> = enqueued
        .iter()
        .filter(|e| !e.duplicate)
        .map(|e| e.task.id)
        .collect();
    assert!(
        new.windows(2).all(|w| w[0] < w[1]),
        "ids increase in input order"
    );
}

pub async fn payloads_and_texts_round_trip(fixture: &Fixture) {
    let now = Utc::now();
    let payload = serde_json::json!({"name": "Zoë ✓ 中文 🎉", "quote": "it's \"quoted\"\n\\", "n": [1, 2.5, null, true], "big": "x".repeat(100_000)});
    let id = ids_of(
        fixture,
        vec![NewTask {
            payload: payload.to_string(),
            priority: -7,
            max_retry: 9,
            idempotency_key: Some("ключ".into()),
            ..task("a", 0, now)
        }],
    )
    .await[0];
    let stored = get(fixture, id).await;
    assert_eq!(stored.payload, payload);
    assert_eq!(
        (
            stored.priority,
            stored.max_retry,
            stored.idempotency_key.as_deref()
        ),
        (-7, 9, Some("ключ"))
    );
    assert_eq!(ms(stored.next_run_at), ms(now));
    let claimed = fixture.store.claim(&claim(1, now)).await.unwrap().remove(0);
    let mut completion = done(&claimed, "me");
    completion.transition.result = Some("{\"ok\":\"✓\"}".into());
    completion.log = Some("line 1\nline 2 ✓\n".into());
    fixture.store.complete(&[completion]).await.unwrap();
    let stored = get(fixture, id).await;
    assert_eq!(stored.result.as_deref(), Some("{\"ok\":\"✓\"}"));
    assert_eq!(stored.log.as_deref(), Some("line 1\nline 2 ✓\n"));
}

pub async fn retry_and_cancel_respect_the_state_machine(fixture: &Fixture) {
    let now = Utc::now();
    let id = ids_of(fixture, vec![task("a", 0, now)]).await[0];
    assert!(matches!(
        fixture.store.retry(id, now).await,
        Err(StoreError::Conflict {
            status: Status::Pending,
            ..
        })
    ));
    assert_eq!(
        fixture.store.cancel(id, now).await.unwrap().status,
        Status::Cancelled
    );
    assert!(matches!(
        fixture.store.cancel(id, now).await,
        Err(StoreError::Conflict { .. })
    ));
    let retried = fixture.store.retry(id, now).await.unwrap();
    assert_eq!((retried.status, retried.retry_count), (Status::Pending, 0));
    assert!(retried.finished_at.is_none());
    assert!(matches!(
        fixture.store.cancel(4242, now).await,
        Err(StoreError::NotFound(4242))
    ));
    assert!(matches!(
        fixture.store.retry(4242, now).await,
        Err(StoreError::NotFound(4242))
    ));
    // A done task can be neither cancelled nor retried.
    let claimed = fixture.store.claim(&claim(1, now)).await.unwrap().remove(0);
    fixture
        .store
        .complete(&[done(&claimed, "me")])
        .await
        .unwrap();
    assert!(matches!(
        fixture.store.cancel(id, now).await,
        Err(StoreError::Conflict {
            status: Status::Done,
            ..
        })
    ));
    assert!(matches!(
        fixture.store.retry(id, now).await,
        Err(StoreError::Conflict {
            status: Status::Done,
            ..
        })
    ));
}

pub async fn progress_is_kept_for_running_tasks_only(fixture: &Fixture) {
    let now = Utc::now();
    let ids = ids_of(
        fixture,
        vec![task("a", 0, now), task("a", 0, now + Span::hours(1))],
    )
    .await;
    let running = fixture.store.claim(&claim(1, now)).await.unwrap().remove(0);
    fixture
        .store
        .record_progress(&[
            ProgressUpdate {
                id: running.id,
                percent: 40,
                note: "halfway ✓".into(),
            },
            ProgressUpdate {
                id: ids[1],
                percent: 10,
                note: "not running".into(),
            },
        ])
        .await
        .unwrap();
    let stored = get(fixture, running.id).await;
    assert_eq!(
        (stored.progress, stored.progress_note.as_deref()),
        (Some(40), Some("halfway ✓"))
    );
    assert_eq!(get(fixture, ids[1]).await.progress, None);
    fixture.store.record_progress(&[]).await.unwrap();
}

pub async fn counts_and_backlog_views_agree(fixture: &Fixture) {
    let now = Utc::now();
    let ids = ids_of(
        fixture,
        vec![
            task("a", 0, now - Span::seconds(3)),
            task("a", 5, now),
            task("a", 0, now - Span::seconds(1)),
            task("a", 0, now + Span::hours(1)),
            task("b", 0, now),
            task("b", 0, now),
        ],
    )
    .await;
    let claimed = fixture
        .store
        .claim(&claim_by("me", &["b"], 1, now))
        .await
        .unwrap()
        .remove(0);
    fixture
        .store
        .complete(&[done(&claimed, "me")])
        .await
        .unwrap();
    let counts = fixture.store.counts().await.unwrap();
    assert_eq!(
        (
            counts.pending,
            counts.running,
            counts.done,
            counts.failed,
            counts.cancelled
        ),
        (5, 0, 1, 0, 0)
    );
    let pending: BTreeMap<String, u64> = [("a".to_string(), 4), ("b".to_string(), 1)].into();
    let by_type = fixture
        .store
        .counts_by_type(&TaskSelection::default())
        .await
        .unwrap();
    assert_eq!(reads::pending_by_type(&by_type), pending);
    assert_eq!((by_type["a"].running, by_type["b"].done), (0, 1));
    let of_pending = fixture
        .store
        .counts_by_type(&TaskSelection::in_state(Status::Pending))
        .await
        .unwrap();
    assert_eq!(reads::pending_by_type(&of_pending), pending);
    assert_eq!(
        of_pending["a"].done + of_pending["b"].done,
        0,
        "only pending counted"
    );
    let backlog = fixture.store.backlog(now).await.unwrap();
    let due: BTreeMap<String, u64> = backlog.iter().map(|(t, b)| (t.clone(), b.due)).collect();
    assert_eq!(due, [("a".to_string(), 3), ("b".to_string(), 1)].into());
    assert_eq!(backlog["a"].oldest_due, Some(ms(now - Span::seconds(3))));
    // Claim order is priority, then due time, then id: ids[1] first, then ids[0], then ids[2].
    assert_eq!(
        fixture
            .store
            .count_ahead(&get(fixture, ids[1]).await, now)
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        fixture
            .store
            .count_ahead(&get(fixture, ids[0]).await, now)
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        fixture
            .store
            .count_ahead(&get(fixture, ids[2]).await, now)
            .await
            .unwrap(),
        2
    );
}

pub async fn listing_filters_and_pages_newest_first(fixture: &Fixture) {
    let now = Utc::now();
    let ids = ids_of(
        fixture,
        (0..5)
            .map(|i| task(if i % 2 == 0 { "a" } else { "b" }, 0, now))
            .collect(),
    )
    .await;
    fixture.store.cancel(ids[4], now).await.unwrap();
    let list = |filter: TaskFilter| async move {
        fixture
            .store
            .list(&filter)
            .await
            .unwrap()
            .into_iter()
            .map(|t| t.id)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        list(TaskFilter {
            limit: 10,
            ..Default::default()
        })
        .await,
        [ids[4], ids[3], ids[2], ids[1], ids[0]]
    );
    assert_eq!(
        list(TaskFilter {
            limit: 2,
            ..Default::default()
        })
        .await,
        [ids[4], ids[3]]
    );
    assert_eq!(
        list(TaskFilter {
            limit: 2,
            before_id: Some(ids[3]),
            ..Default::default()
        })
        .await,
        [ids[2], ids[1]]
    );
    assert_eq!(
        list(TaskFilter {
            limit: 10,
            task_type: Some("a".into()),
            ..Default::default()
        })
        .await,
        [ids[4], ids[2], ids[0]]
    );
    assert_eq!(
        list(TaskFilter {
            limit: 10,
            task_type: Some("a".into()),
            status: Some(Status::Pending),
            ..Default::default()
        })
        .await,
        [ids[2], ids[0]]
    );
    assert_eq!(
        list(TaskFilter {
            limit: 10,
            status: Some(Status::Cancelled),
            ..Default::default()
        })
        .await,
        [ids[4]]
    );
    assert!(fixture.store.get(999_999).await.unwrap().is_none());
}

pub async fn effects_and_kv_are_per_task_type_and_durable(fixture: &Fixture) {
    let store = &fixture.store;
    assert!(!store.effect_done("mail", "m-1").await.unwrap());
    store.record_effect("mail", "m-1", 7).await.unwrap();
    store.record_effect("mail", "m-1", 8).await.unwrap(); // twice is harmless
    assert!(store.effect_done("mail", "m-1").await.unwrap());
    assert!(
        !store.effect_done("report", "m-1").await.unwrap(),
        "namespaced by type"
    );
    store.kv_set("report", "hits", "1").await.unwrap();
    store.kv_set("report", "hits", "2 ✓").await.unwrap();
    assert_eq!(
        store.kv_get("report", "hits").await.unwrap().as_deref(),
        Some("2 ✓")
    );
    assert_eq!(store.kv_get("mail", "hits").await.unwrap(), None);
    // Another host sees what was committed.
    let other = fixture.another_host().await;
    assert!(other.effect_done("mail", "m-1").await.unwrap());
    assert!(other.kv_delete("report", "hits").await.unwrap());
    assert!(!other.kv_delete("report", "hits").await.unwrap());
    assert_eq!(store.kv_get("report", "hits").await.unwrap(), None);
    other.close().await;
}

pub async fn meta_keeps_the_first_value(fixture: &Fixture) {
    let other = fixture.another_host().await;
    let (left, right) = tokio::join!(
        fixture.store.meta_get_or_insert("cache-key", "left"),
        other.meta_get_or_insert("cache-key", "right")
    );
    let (left, right) = (left.unwrap(), right.unwrap());
    assert_eq!(left, right, "both hosts agree");
    assert!(left == "left" || left == "right");
    assert_eq!(
        fixture
            .store
            .meta_get_or_insert("cache-key", "third")
            .await
            .unwrap(),
        left
    );
    other.close().await;
}

pub async fn meta_set_replaces_and_every_host_reads_it(fixture: &Fixture) {
    let other = fixture.another_host().await;
    assert_eq!(fixture.store.meta_get("last-tick").await.unwrap(), None);
    fixture.store.meta_set("last-tick", "100").await.unwrap();
    assert_eq!(
        other.meta_get("last-tick").await.unwrap().as_deref(),
        Some("100")
    );
    other.meta_set("last-tick", "200").await.unwrap();
    assert_eq!(
        fixture
            .store
            .meta_get("last-tick")
            .await
            .unwrap()
            .as_deref(),
        Some("200"),
        "the latest writer wins"
    );
    assert_eq!(fixture.store.meta_get("other-name").await.unwrap(), None);
    other.close().await;
}

pub async fn one_leader_at_a_time_with_takeover_after_expiry(fixture: &Fixture) {
    let lease = Duration::from_secs(30);
    let other = fixture.another_host().await;
    let (a, b) = tokio::join!(
        fixture.store.lead("maintenance", "a", lease),
        other.lead("maintenance", "b", lease)
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a, b, "both see the same leader");
    let (leader, follower, leader_store, follower_store) = if a == "a" {
        ("a", "b", &fixture.store, &other)
    } else {
        ("b", "a", &other, &fixture.store)
    };
    // The leader renews; the follower cannot take over while the lease runs.
    assert_eq!(
        leader_store
            .lead("maintenance", leader, lease)
            .await
            .unwrap(),
        leader
    );
    assert_eq!(
        follower_store
            .lead("maintenance", follower, lease)
            .await
            .unwrap(),
        leader,
        "the lease runs"
    );
    // A renewal that ends the lease at once: once it is past, the follower takes over.
    assert_eq!(
        leader_store
            .lead("maintenance", leader, Duration::ZERO)
            .await
            .unwrap(),
        leader
    );
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(
        follower_store
            .lead("maintenance", follower, lease)
            .await
            .unwrap(),
        follower
    );
    assert_eq!(
        leader_store
            .lead("maintenance", leader, lease)
            .await
            .unwrap(),
        follower
    );
    // Roles are independent, and resigning hands over at once.
    assert_eq!(
        leader_store
            .lead("other-role", leader, lease)
            .await
            .unwrap(),
        leader
    );
    follower_store
        .resign("maintenance", follower)
        .await
        .unwrap();
    leader_store.resign("maintenance", "nobody").await.unwrap();
    assert_eq!(
        leader_store
            .lead("maintenance", leader, lease)
            .await
            .unwrap(),
        leader
    );
    other.close().await;
}

pub async fn kv_usage_effect_retention_and_snoozes_in_a_row(fixture: &Fixture) {
    let store = &fixture.store;
    // What a type keeps in its key-value store: keys, and bytes of keys and values (UTF-8).
    assert_eq!(store.kv_usage("cache").await.unwrap(), KvUsage::default());
    store.kv_set("cache", "k1", "abc").await.unwrap();
    store.kv_set("cache", "ключ", "é").await.unwrap();
    store.kv_set("other", "k", "zzzzzz").await.unwrap();
    let usage = |keys, bytes| KvUsage { keys, bytes };
    assert_eq!(store.kv_usage("cache").await.unwrap(), usage(2, 5 + 10));
    store.kv_set("cache", "k1", "a").await.unwrap();
    assert_eq!(store.kv_usage("cache").await.unwrap(), usage(2, 3 + 10));
    assert!(store.kv_delete("cache", "k1").await.unwrap());
    assert_eq!(store.kv_usage("cache").await.unwrap(), usage(1, 10));
    assert_eq!(store.kv_usage("other").await.unwrap(), usage(1, 7));
    // The counts are kept with each write (triggers), so the type's last delete leaves zero.
    assert!(store.kv_delete("cache", "ключ").await.unwrap());
    assert!(!store.kv_delete("cache", "ключ").await.unwrap());
    assert_eq!(store.kv_usage("cache").await.unwrap(), usage(0, 0));
    store.kv_set("cache", "k2", "xy").await.unwrap();
    assert_eq!(store.kv_usage("cache").await.unwrap(), usage(1, 4));

    // The effect ledger forgets a type's effects recorded before a time, and only that type's.
    store.record_effect("mail", "m-1", 1).await.unwrap();
    store.record_effect("sms", "s-1", 2).await.unwrap();
    let an_hour_ago = Utc::now() - Span::hours(1);
    assert_eq!(store.prune_effects("mail", an_hour_ago).await.unwrap(), 0);
    assert!(store.effect_done("mail", "m-1").await.unwrap());
    let soon = Utc::now() + Span::seconds(5);
    assert_eq!(store.prune_effects("mail", soon).await.unwrap(), 1);
    assert!(!store.effect_done("mail", "m-1").await.unwrap());
    assert!(store.effect_done("sms", "s-1").await.unwrap());

    // Snoozes are counted in a row; any other outcome starts the count again.
    let id = ids_of(fixture, vec![task("a", 0, Utc::now() - Span::seconds(1))]).await[0];
    assert_eq!(store.snoozes(id).await.unwrap(), 0);
    let run = |outcome: fn(&Task) -> Completion| async move {
        let claimed = store.claim(&claim(1, Utc::now())).await.unwrap();
        assert_eq!(claimed.len(), 1, "the task is due again");
        assert_eq!(store.complete(&[outcome(&claimed[0])]).await.unwrap(), 1);
        store.snoozes(id).await.unwrap()
    };
    let snooze = |task: &Task| finished(task, "me", Status::Pending);
    let retry = |task: &Task| {
        let mut failed = finished(task, "me", Status::Pending);
        failed.transition.error = Some("try again".into());
        failed.transition.retry_count += 1;
        failed
    };
    assert_eq!(run(snooze).await, 1);
    assert_eq!(run(snooze).await, 2);
    assert_eq!(run(retry).await, 0, "a failed attempt ends the run");
    assert_eq!(run(snooze).await, 1);
    // A snooze keeps the error of the failed attempt before it; success clears it.
    let after_snooze = get(fixture, id).await;
    assert_eq!(after_snooze.last_error.as_deref(), Some("try again"));
    assert_eq!(after_snooze.retry_count, 1);
    assert_eq!(after_snooze.finished_at, None);
    assert_eq!(run(|task| done(task, "me")).await, 0);
    let finished = get(fixture, id).await;
    assert_eq!(finished.status, Status::Done);
    assert_eq!(finished.last_error, None);
    assert_eq!(finished.result.as_deref(), Some("1"));
    assert_eq!(finished.log.as_deref(), Some("printed"));
    assert_eq!(finished.plugin_version.as_deref(), Some("v1"));
    assert!(finished.finished_at.is_some());
    assert_eq!(
        (finished.lease_owner, finished.lease_expires_at),
        (None, None)
    );
    assert_eq!(store.snoozes(id + 1000).await.unwrap(), 0, "unknown task");
}
