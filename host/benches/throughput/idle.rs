//! What an idle host costs and how fast it reacts: idle pickup to the handler's start, and the
//! CPU an idle host burns.
//!
//! Idle pickup runs the `clock` test handler, whose first act is to read the wall clock (WASI's,
//! the host's system clock) and return it, so one sample is the time from just before the
//! benchmark sends `POST /tasks` to the handler's start, by the same clock: the request, the
//! enqueue's commit, the wake-up, the claim, the hand-over to a sandbox thread and the
//! instantiation all count. The host has finished one attempt of the type first, and idles
//! 20 ms between tasks. The same samples also give enqueue → done as a client waiting with
//! `GET /tasks/{id}?wait=` sees it.
//!
//! Idle CPU is the CPU time (user + system, `getrusage`) this whole process spends while a
//! started host with an empty queue and no clients waits, over a window after it settled.

use hdrhistogram::Histogram;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

use crate::database::Server;

/// Idle pickups, in microseconds.
pub struct Pickup {
    /// Enqueue request sent → handler start.
    pub to_start: Histogram<u64>,
    /// Enqueue request sent → the long-polling client has the finished task.
    pub to_done: Histogram<u64>,
}

/// Microseconds since the Unix epoch, by the system clock.
fn now_us() -> i64 {
    chrono::Utc::now().timestamp_micros()
}

/// `n` tasks of the `clock` handler, one at a time, into an idle host.
pub async fn pickup(server: &Server, n: usize) -> Pickup {
    let fresh = server.fresh().await;
    let clock = std::fs::read(crate::artifact("clock")).unwrap();
    let host =
        crate::start_host_with(fresh.dir.path(), &fresh.url, &[("clock", &clock)], |_| {}).await;
    let client = reqwest::Client::new();
    let base = format!("http://{}", host.addr);
    crate::finish::warm_up(&client, &base, "clock").await;
    let mut result = Pickup {
        to_start: Histogram::new(3).unwrap(),
        to_done: Histogram::new(3).unwrap(),
    };
    for i in 0..n {
        tokio::time::sleep(Duration::from_millis(20)).await; // idle between tasks
        let (sent_us, sent) = (now_us(), Instant::now());
        let id = crate::http::enqueue(&client, &base, "clock", json!({"i": i})).await;
        let done = crate::http::wait_done(&client, &base, id).await;
        result
            .to_done
            .record(sent.elapsed().as_micros() as u64)
            .unwrap();
        assert_eq!(done["status"], "done", "{done}");
        let output: Value = match &done["result"] {
            Value::String(text) => serde_json::from_str(text).unwrap(),
            other => other.clone(),
        };
        let started = output["started_us"]
            .as_i64()
            .unwrap_or_else(|| panic!("the clock handler's result has started_us: {done}"));
        result
            .to_start
            .record((started - sent_us).max(0) as u64)
            .unwrap();
    }
    crate::stop(host).await;
    fresh.remove().await;
    result
}

/// This process's CPU time so far (user + system).
fn cpu_time() -> Duration {
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes the struct it is given and nothing else.
    let status = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    assert_eq!(status, 0, "getrusage");
    let time = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    time(usage.ru_utime) + time(usage.ru_stime)
}

/// CPU used by an idle host with an empty queue over `window`, as a share of one core, after
/// it settled for a second.
pub async fn cpu(server: &Server, window: Duration) -> f64 {
    let fresh = server.fresh().await;
    let host = crate::start_host(&fresh, None).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (cpu_before, before) = (cpu_time(), Instant::now());
    tokio::time::sleep(window).await;
    let share = (cpu_time() - cpu_before).as_secs_f64() / before.elapsed().as_secs_f64();
    crate::stop(host).await;
    fresh.remove().await;
    share
}
