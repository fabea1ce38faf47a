//! The attempt history on every backend: one record per attempt, written by the completion,
//! rescue, cancel and release that end it, fenced like the task row, and bounded to the first
//! and the latest `KEPT_ATTEMPTS` attempts.

use chrono::{DateTime, Duration as Span, Utc};
use std::time::Duration;

use crate::Fixture;
use spool::store::encoding::LEASE_EXPIRED;
use spool::store::history::{AttemptCost, AttemptRecord, KEPT_ATTEMPTS, Outcome};
use spool::store::records::NewRecord;
use spool::store::{AttemptId, ClaimRequest, Completion};
use spool::task::{NewTask, Status, Task, TaskId, Transition};

/// A task of type "a", due at once.
fn due_task(max_retry: u32) -> NewTask {
    NewTask {
        task_type: "a".into(),
        payload: "{}".into(),
        priority: 0,
        max_retry,
        run_at: Utc::now() - Span::seconds(1),
        idempotency_key: None,
        depth: 0,
    }
}

async fn enqueue(fixture: &Fixture, max_retry: u32) -> TaskId {
    fixture
        .store
        .enqueue(vec![due_task(max_retry)])
        .await
        .unwrap()[0]
        .task
        .id
}

/// Claims up to `limit` tasks of type "a" as owner "me", at `now`.
async fn claim_up_to(fixture: &Fixture, limit: usize, now: DateTime<Utc>) -> Vec<Task> {
    let request = ClaimRequest {
        owner: "me".into(),
        limit,
        task_types: vec!["a".into()],
        now,
        lease: Duration::from_secs(30),
    };
    fixture.store.claim(&request).await.unwrap()
}

async fn claim_at(fixture: &Fixture, now: DateTime<Utc>) -> Task {
    let mut claimed = claim_up_to(fixture, 1, now).await;
    assert_eq!(claimed.len(), 1, "a task is due");
    claimed.remove(0)
}

async fn claim(fixture: &Fixture) -> Task {
    claim_at(fixture, Utc::now()).await
}

/// The completion of `task`'s attempt, as the dispatcher would send it.
fn ended(task: &Task, outcome: Outcome, error: Option<&str>, log: &str) -> Completion {
    let (status, retry_count) = match outcome {
        Outcome::Done => (Status::Done, task.retry_count),
        Outcome::Snooze => (Status::Pending, task.retry_count),
        Outcome::Retry if task.retry_count < task.max_retry => {
            (Status::Pending, task.retry_count + 1)
        }
        _ => (Status::Failed, task.retry_count),
    };
    Completion {
        id: task.id,
        owner: "me".into(),
        attempt: task.attempts,
        transition: Transition {
            status,
            retry_count,
            // Due at once, so the next claim finds it.
            next_run_at: (status == Status::Pending).then(|| Utc::now() - Span::seconds(1)),
            result: (status == Status::Done).then(|| "{}".into()),
            error: error.map(str::to_string),
        },
        outcome,
        plugin_version: Some(format!("v{}", task.attempts)),
        log: Some(log.into()),
        cost: Some(cost_of(task)),
        finished_at: Utc::now(),
        record: None,
    }
}

/// A cost told apart per attempt; the first attempt's fuel is unknown (as for an attempt
/// stopped at its wall-clock limit), and the numbers go past 32 bits.
fn cost_of(task: &Task) -> AttemptCost {
    let n = u64::from(task.attempts);
    AttemptCost {
        wall_ms: 10 * n,
        fuel_used: (n > 1).then_some(5_000_000_000 * n),
        peak_memory: (64 << 20) * n,
    }
}

async fn history(fixture: &Fixture, id: TaskId) -> Vec<AttemptRecord> {
    fixture.store.attempt_history(id).await.unwrap()
}

fn ms(time: Option<DateTime<Utc>>) -> Option<i64> {
    time.map(|t| t.timestamp_millis())
}

pub async fn a_retry_then_success_keeps_both_attempts_with_their_own_logs(fixture: &Fixture) {
    let id = enqueue(fixture, 2).await;
    assert!(history(fixture, id).await.is_empty(), "no attempt yet");
    let first = claim(fixture).await;
    let failed = ended(&first, Outcome::Retry, Some("smtp down"), "first try");
    assert_eq!(fixture.store.complete(&[failed]).await.unwrap(), 1);
    let second = claim(fixture).await;
    let done = ended(&second, Outcome::Done, None, "second try");
    assert_eq!(fixture.store.complete(&[done]).await.unwrap(), 1);

    let records = history(fixture, id).await;
    assert_eq!(records.len(), 2, "{records:#?}");
    let (one, two) = (&records[0], &records[1]);
    assert_eq!(
        (
            one.attempt,
            one.outcome,
            one.error.as_deref(),
            one.log.as_deref()
        ),
        (1, Outcome::Retry, Some("smtp down"), Some("first try"))
    );
    assert_eq!(
        (
            two.attempt,
            two.outcome,
            two.error.as_deref(),
            two.log.as_deref()
        ),
        (2, Outcome::Done, None, Some("second try"))
    );
    assert_eq!(one.host.as_deref(), Some("me"));
    assert_eq!(one.plugin_version.as_deref(), Some("v1"));
    assert_eq!(two.plugin_version.as_deref(), Some("v2"));
    assert_eq!(one.cost, Some(cost_of(&first)), "the cost is kept");
    assert_eq!(one.cost.unwrap().fuel_used, None);
    assert_eq!(two.cost, Some(cost_of(&second)));
    assert_eq!(
        ms(one.started_at),
        ms(first.attempted_at),
        "started at the claim"
    );
    assert_eq!(ms(two.started_at), ms(second.attempted_at));
    assert!(one.finished_at <= two.finished_at);

    // The task's own fields mean what their names say.
    let task = fixture.store.get(id).await.unwrap().unwrap();
    assert_eq!(
        (task.status, task.attempts, task.retry_count),
        (Status::Done, 2, 1)
    );
    assert_eq!(
        task.last_error, None,
        "cleared by the success; the history keeps it"
    );
    assert_eq!(task.log.as_deref(), Some("second try"));
}

pub async fn a_dead_letter_and_a_permanent_failure_schedule_no_retry(fixture: &Fixture) {
    // max_retry 2: three attempts, two retries scheduled.
    let id = enqueue(fixture, 2).await;
    for _ in 0..3 {
        let task = claim(fixture).await;
        let failed = ended(&task, Outcome::Retry, Some("down"), "tried");
        assert_eq!(fixture.store.complete(&[failed]).await.unwrap(), 1);
    }
    let dead = fixture.store.get(id).await.unwrap().unwrap();
    assert_eq!(
        (dead.status, dead.attempts, dead.retry_count),
        (Status::Failed, 3, 2)
    );
    assert_eq!(dead.last_error.as_deref(), Some("down"));
    let outcomes: Vec<(u32, Outcome)> = history(fixture, id)
        .await
        .iter()
        .map(|r| (r.attempt, r.outcome))
        .collect();
    assert_eq!(
        outcomes,
        [
            (1, Outcome::Retry),
            (2, Outcome::Retry),
            (3, Outcome::Retry)
        ]
    );

    // `fail` on the first attempt: failed, no retry scheduled.
    let id = enqueue(fixture, 5).await;
    let task = claim(fixture).await;
    let fail = ended(&task, Outcome::Fail, Some("bad address"), "");
    assert_eq!(fixture.store.complete(&[fail]).await.unwrap(), 1);
    let failed = fixture.store.get(id).await.unwrap().unwrap();
    assert_eq!(
        (failed.status, failed.attempts, failed.retry_count),
        (Status::Failed, 1, 0)
    );
    // An API retry starts a fresh retry budget; attempt numbers run on.
    fixture.store.retry(id, Utc::now()).await.unwrap();
    let again = claim(fixture).await;
    let done = ended(&again, Outcome::Done, None, "");
    assert_eq!(fixture.store.complete(&[done]).await.unwrap(), 1);
    let records = history(fixture, id).await;
    let outcomes: Vec<(u32, Outcome)> = records.iter().map(|r| (r.attempt, r.outcome)).collect();
    assert_eq!(outcomes, [(1, Outcome::Fail), (2, Outcome::Done)]);
    assert_eq!(records[0].error.as_deref(), Some("bad address"));
    let task = fixture.store.get(id).await.unwrap().unwrap();
    assert_eq!(
        (task.attempts, task.retry_count, task.last_error),
        (2, 0, None)
    );
}

pub async fn a_rescue_records_the_attempt_of_the_host_that_died(fixture: &Fixture) {
    let id = enqueue(fixture, 1).await;
    let now = Utc::now();
    let first = claim_at(fixture, now).await;
    crate::contract::expire_leases(fixture, "me", &[&first]).await;
    let before = Utc::now().timestamp_millis();
    fixture.store.rescue_expired().await.unwrap();
    let after = Utc::now().timestamp_millis();
    let records = history(fixture, id).await;
    assert_eq!(records.len(), 1, "{records:#?}");
    let rescued = &records[0];
    assert_eq!((rescued.attempt, rescued.outcome), (1, Outcome::Rescued));
    assert_eq!(rescued.host.as_deref(), Some("me"));
    assert_eq!(rescued.error.as_deref(), Some(LEASE_EXPIRED));
    assert_eq!(rescued.cost, None, "a rescued attempt has no measured cost");
    assert_eq!(ms(rescued.started_at), ms(first.attempted_at));
    assert!((before..=after).contains(&rescued.finished_at.timestamp_millis()));
    assert_eq!(
        (rescued.plugin_version.clone(), rescued.log.clone()),
        (None, None)
    );
    let task = fixture.store.get(id).await.unwrap().unwrap();
    assert_eq!((task.status, task.retry_count), (Status::Pending, 1));

    // The late completion of the presumed-dead host writes nothing.
    let late = ended(&first, Outcome::Done, None, "too late");
    assert_eq!(fixture.store.complete(&[late]).await.unwrap(), 0);
    // No retry left: the second rescue fails it and schedules none.
    let second = claim_at(fixture, Utc::now()).await;
    crate::contract::expire_leases(fixture, "me", &[&second]).await;
    fixture.store.rescue_expired().await.unwrap();
    let outcomes: Vec<(u32, Outcome)> = history(fixture, id)
        .await
        .iter()
        .map(|r| (r.attempt, r.outcome))
        .collect();
    assert_eq!(outcomes, [(1, Outcome::Rescued), (2, Outcome::Rescued)]);
    let dead = fixture.store.get(id).await.unwrap().unwrap();
    assert_eq!(
        (dead.status, dead.attempts, dead.retry_count),
        (Status::Failed, second.attempts, 1)
    );
}

pub async fn a_cancel_records_the_running_attempt_and_its_outcome_is_discarded(fixture: &Fixture) {
    let id = enqueue(fixture, 3).await;
    let running = claim(fixture).await;
    let cancelled = fixture.store.cancel(id, Utc::now()).await.unwrap();
    assert_eq!(cancelled.status, Status::Cancelled);
    let done = ended(&running, Outcome::Done, None, "finished anyway");
    assert_eq!(fixture.store.complete(&[done]).await.unwrap(), 0);
    let records = history(fixture, id).await;
    assert_eq!(records.len(), 1, "{records:#?}");
    assert_eq!(
        (records[0].attempt, records[0].outcome),
        (1, Outcome::Cancelled)
    );
    assert_eq!(records[0].host.as_deref(), Some("me"));
    assert_eq!(ms(records[0].started_at), ms(running.attempted_at));
    assert_eq!(records[0].log, None);
    assert_eq!(records[0].cost, None);

    // A pending task has no running attempt: its cancel records nothing.
    let pending = enqueue(fixture, 3).await;
    fixture.store.cancel(pending, Utc::now()).await.unwrap();
    assert!(history(fixture, pending).await.is_empty());
    // Nor does a refused cancel.
    assert!(fixture.store.cancel(id, Utc::now()).await.is_err());
    assert_eq!(history(fixture, id).await.len(), 1);
}

pub async fn a_release_at_shutdown_records_an_uncounted_attempt(fixture: &Fixture) {
    let id = enqueue(fixture, 0).await;
    let running = claim(fixture).await;
    let attempt = AttemptId::of(&running);
    assert_eq!(fixture.store.release("other", &[attempt]).await.unwrap(), 0);
    assert!(history(fixture, id).await.is_empty(), "not this owner's");
    assert_eq!(fixture.store.release("me", &[attempt]).await.unwrap(), 1);
    let again = claim(fixture).await;
    let done = ended(&again, Outcome::Done, None, "");
    assert_eq!(fixture.store.complete(&[done]).await.unwrap(), 1);
    let outcomes: Vec<(u32, Outcome)> = history(fixture, id)
        .await
        .iter()
        .map(|r| (r.attempt, r.outcome))
        .collect();
    assert_eq!(outcomes, [(1, Outcome::Released), (2, Outcome::Done)]);
    let task = fixture.store.get(id).await.unwrap().unwrap();
    assert_eq!((task.attempts, task.retry_count), (2, 0));
}

pub async fn the_history_keeps_the_first_and_the_latest_attempts(fixture: &Fixture) {
    let id = enqueue(fixture, 0).await;
    let other = enqueue(fixture, 0).await;
    let total = KEPT_ATTEMPTS + 5;
    for n in 1..=total {
        // Both tasks in one batch: each batch records and trims both.
        let a = claim(fixture).await;
        let b = claim(fixture).await;
        let log = format!("run {n}");
        let batch = [
            ended(&a, Outcome::Snooze, None, &log),
            ended(&b, Outcome::Snooze, None, &log),
        ];
        assert_eq!(fixture.store.complete(&batch).await.unwrap(), 2);
    }
    for task in [id, other] {
        let records = history(fixture, task).await;
        let numbers: Vec<u32> = records.iter().map(|r| r.attempt).collect();
        let expected: Vec<u32> = std::iter::once(1)
            .chain(total - KEPT_ATTEMPTS + 1..=total)
            .collect();
        assert_eq!(numbers, expected);
        assert_eq!(records[0].log.as_deref(), Some("run 1"));
        assert_eq!(
            records.last().unwrap().log.as_deref(),
            Some(format!("run {total}").as_str())
        );
    }
    // A cancel keeps the bound too.
    let running = claim(fixture).await;
    fixture.store.cancel(running.id, Utc::now()).await.unwrap();
    let numbers: Vec<u32> = history(fixture, running.id)
        .await
        .iter()
        .map(|r| r.attempt)
        .collect();
    assert_eq!(numbers.len() as u32, KEPT_ATTEMPTS + 1);
    assert_eq!((numbers[0], numbers[1]), (1, total + 1 - KEPT_ATTEMPTS + 1));
}

pub async fn a_large_completion_batch_records_each_attempt_once(fixture: &Fixture) {
    // More than one insert statement's worth, with a last statement of an uneven length.
    const TASKS: usize = 300;
    let tasks = (0..TASKS).map(|_| due_task(0)).collect();
    fixture.store.enqueue(tasks).await.unwrap();
    let claimed = claim_up_to(fixture, TASKS, Utc::now()).await;
    assert_eq!(claimed.len(), TASKS);
    let completions: Vec<Completion> = claimed
        .iter()
        .map(|task| ended(task, Outcome::Done, None, &format!("log of {}", task.id)))
        .collect();
    assert_eq!(
        fixture.store.complete(&completions).await.unwrap(),
        TASKS as u64
    );
    // The same batch again, as after a commit whose answer was lost: nothing changes.
    assert_eq!(fixture.store.complete(&completions).await.unwrap(), 0);

    for task in &claimed {
        let records = history(fixture, task.id).await;
        assert_eq!(records.len(), 1, "task {}: {records:#?}", task.id);
        let record = &records[0];
        let expected_log = format!("log of {}", task.id);
        assert_eq!(
            (record.attempt, record.outcome, record.log.as_deref()),
            (1, Outcome::Done, Some(expected_log.as_str()))
        );
        assert_eq!(record.host.as_deref(), Some("me"));
        assert_eq!(ms(record.started_at), ms(task.attempted_at));
    }
}

/// Attempt records for `spool replay` travel with their completions: a batch writes them in
/// runs bounded by count and bytes, before the completions, so each is readable by the time
/// its task shows the attempt ended.
pub async fn attempt_records_travel_with_their_completions(fixture: &Fixture) {
    // More than one statement's worth of records, and one large enough to go alone.
    const TASKS: usize = 250;
    let tasks = (0..TASKS).map(|_| due_task(0)).collect();
    fixture.store.enqueue(tasks).await.unwrap();
    let claimed = claim_up_to(fixture, TASKS, Utc::now()).await;
    assert_eq!(claimed.len(), TASKS);
    let json_of = |i: usize, task: &Task| {
        let padding = if i == 7 {
            "x".repeat(5 << 20)
        } else {
            String::new()
        };
        format!("{{\"task\":{},\"padding\":\"{padding}\"}}", task.id)
    };
    let completions: Vec<Completion> = claimed
        .iter()
        .enumerate()
        .map(|(i, task)| Completion {
            // Every tenth attempt keeps no record.
            record: (i % 10 != 3).then(|| {
                Box::new(NewRecord {
                    build: "b1".into(),
                    json: json_of(i, task),
                    truncated: i % 2 == 0,
                })
            }),
            ..ended(task, Outcome::Done, None, "")
        })
        .collect();
    assert_eq!(
        fixture.store.complete(&completions).await.unwrap(),
        TASKS as u64
    );
    for (i, task) in claimed.iter().enumerate() {
        let listed = fixture.store.records(task.id).await.unwrap();
        if i % 10 == 3 {
            assert!(listed.is_empty(), "task {}: {listed:?}", task.id);
            continue;
        }
        assert_eq!(listed.len(), 1, "task {}: {listed:?}", task.id);
        let json = json_of(i, task);
        assert_eq!(
            (
                listed[0].attempt,
                listed[0].build.as_str(),
                listed[0].truncated
            ),
            (1, "b1", i % 2 == 0)
        );
        assert_eq!(listed[0].bytes, json.len() as u64);
        let stored = fixture.store.record(task.id, 1).await.unwrap().unwrap();
        assert_eq!(stored.record.as_deref(), Some(json.as_str()));
    }
}

on_every_backend!(
    history: attempt_records_travel_with_their_completions,
    a_retry_then_success_keeps_both_attempts_with_their_own_logs,
    a_dead_letter_and_a_permanent_failure_schedule_no_retry,
    a_rescue_records_the_attempt_of_the_host_that_died,
    a_cancel_records_the_running_attempt_and_its_outcome_is_discarded,
    a_release_at_shutdown_records_an_uncounted_attempt,
    the_history_keeps_the_first_and_the_latest_attempts,
    a_large_completion_batch_records_each_attempt_once,
);
