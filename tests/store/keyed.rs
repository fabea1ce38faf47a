//! Tasks by idempotency key on every backend: the exact key within its task type, nothing else.

use chrono::Utc;

use crate::Fixture;
use spool::task::NewTask;

fn keyed(task_type: &str, key: &str) -> NewTask {
    NewTask {
        task_type: task_type.into(),
        payload: "{}".into(),
        priority: 0,
        max_retry: 0,
        run_at: Utc::now(),
        idempotency_key: Some(key.into()),
        depth: 0,
    }
}

pub async fn a_task_is_found_by_its_type_and_exact_key(fixture: &Fixture) {
    let store = &fixture.store;
    let key = "spool:schedule:config:nightly:2026-03-01T03:00:00.000Z";
    let enqueued = store
        .enqueue(vec![keyed("report", key), keyed("report", "Other-Key ü")])
        .await
        .unwrap();
    assert_eq!(
        store.task_with_key("report", key).await.unwrap(),
        Some(enqueued[0].task.id)
    );
    assert_eq!(
        store.task_with_key("report", "Other-Key ü").await.unwrap(),
        Some(enqueued[1].task.id)
    );
    assert_eq!(store.task_with_key("notify", key).await.unwrap(), None);
    assert_eq!(
        store.task_with_key("report", "other-key ü").await.unwrap(),
        None,
        "keys are compared exactly"
    );
    assert_eq!(
        store
            .task_with_key("report", &key[..key.len() - 1])
            .await
            .unwrap(),
        None
    );
}

on_every_backend!(keyed: a_task_is_found_by_its_type_and_exact_key);
