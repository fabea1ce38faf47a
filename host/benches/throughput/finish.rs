//! How the throughput benchmark learns that work has finished without loading what it measures.
//!
//! A drain's end is found by counting completions in process: the hosts run in the benchmark's
//! own process, so their counter of finished attempts (`spool_tasks_finished_total`, which
//! `GET /metrics` renders) is read from the process's recorder, with no HTTP and no database
//! statement. The counter moves when an attempt ends, just before its completion is committed,
//! so once it reaches the drain's size one read of the table, repeated every millisecond until
//! no task is pending or running, waits for the last commits: a drain costs one such read at
//! its end instead of a `COUNT` every 20 ms.
//!
//! The enqueue benchmarks first run one attempt of the type to its end ([`warm_up`]), because a
//! production host that has finished attempts of a type also estimates each new task's
//! completion from them when it answers an enqueue.

use serde_json::json;
use std::time::Duration;

use crate::database::Direct;

/// How often the counter is read while a drain runs (rendering the metrics text costs tens of
/// microseconds of this process's time).
const EVERY: Duration = Duration::from_millis(10);

/// Attempts that the hosts of this process finished so far, all types and outcomes.
pub fn finished() -> u64 {
    let Some(handle) = spool::instruments::handle() else {
        return 0;
    };
    let name = spool::instruments::TASKS_FINISHED;
    handle
        .render()
        .lines()
        .filter(|line| {
            line.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// Waits until the hosts have finished `target` attempts in all (as [`finished`] counts) and
/// the table holds no pending or running task.
pub async fn until_drained(sql: &Direct, target: u64) {
    assert!(
        spool::instruments::handle().is_some(),
        "the hosts' metrics recorder is installed once a host has started"
    );
    while finished() < target {
        tokio::time::sleep(EVERY).await;
    }
    while sql.any_unfinished().await {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Enqueues one task of `task_type` through the host at `base` and waits (long-poll) until it
/// is done.
pub async fn warm_up(client: &reqwest::Client, base: &str, task_type: &str) {
    let id = crate::http::enqueue(client, base, task_type, json!({"warm_up": true})).await;
    let done = crate::http::wait_done(client, base, id).await;
    assert_eq!(done["status"], "done", "the warm-up task succeeds: {done}");
}
