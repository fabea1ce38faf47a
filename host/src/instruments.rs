//! What the host measures for `GET /metrics`: the metric names, their descriptions and
//! histogram buckets, and the one-line calls the workers make when something happens.
//!
//! Instrumentation goes through the [`metrics`] facade and is exported by
//! `metrics-exporter-prometheus`'s recorder: both are maintained by the same project, the
//! facade's macros cost an atomic add on a handle the recorder hands out once per label set (no
//! lock per task, nothing allocated on the hot path beyond the label strings), and the recorder
//! renders the Prometheus text format itself, so the API only serves its output. Without an
//! installed recorder (a library user that never starts a host) every call is a no-op.
//!
//! The recorder is process-wide: a process that starts several hosts (tests do) reports their
//! sum. Gauges that describe the whole queue (backlog, oldest pending age) are set by the API
//! from a cached store read when scraped ([`crate::api::stats`]), not here.

use std::sync::OnceLock;
use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use crate::task::AttemptCost;

/// Attempts that ended, by `task_type` and `outcome` (done, failed, retried, snoozed,
/// cancelled), counted on the host that ran them when the attempt ends.
pub const TASKS_FINISHED: &str = "spool_tasks_finished_total";
/// How long attempts ran, by `task_type` and `build`.
pub const ATTEMPT_DURATION: &str = "spool_attempt_duration_seconds";
/// From when a task was due (its `run_at`, or its retry time) to the start of its attempt, by
/// `task_type`.
pub const QUEUE_WAIT: &str = "spool_queue_wait_seconds";
/// Tasks of the whole database by `task_type` and `state` (pending, running, failed).
pub const BACKLOG: &str = "spool_backlog_tasks";
/// How long the oldest due pending task of each `task_type` has waited.
pub const OLDEST_PENDING: &str = "spool_oldest_pending_seconds";
/// Attempts running on this host.
pub const IN_FLIGHT: &str = "spool_attempts_in_flight";
/// Plugin versions loaded, by `task_type`.
pub const PLUGIN_LOADS: &str = "spool_plugin_loads_total";
/// Plugin files that failed to load, by `task_type`.
pub const PLUGIN_LOAD_ERRORS: &str = "spool_plugin_load_errors_total";
/// Fuel an attempt consumed, by `task_type` and `build`.
pub const FUEL_USED: &str = "spool_fuel_used";
/// The most memory an attempt held at once (all its linear memories and tables), by
/// `task_type` and `build`.
pub const PEAK_MEMORY: &str = "spool_attempt_peak_memory_bytes";
/// How many hex digits of a build's content hash its `build` label keeps: enough to tell the
/// builds of one type apart, short enough to read on a chart.
pub const BUILD_LABEL_DIGITS: usize = 12;
/// HTTP requests answered, by `method`, `route` (the route's template, never an id) and `status`.
pub const HTTP_REQUESTS: &str = "spool_http_requests_total";

/// Buckets of the time histograms, in seconds: 5 ms to an hour.
const SECONDS_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
];
/// Buckets of the fuel histogram: powers of ten up to the largest budget a manifest may set.
const FUEL_BUCKETS: &[f64] = &[1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12];
/// Buckets of the peak memory histogram, in bytes: powers of four from 64 KiB (one wasm page)
/// to 4 GiB (the most a 32-bit memory can hold).
const MEMORY_BUCKETS: &[f64] = &[
    65536.0,
    262144.0,
    1048576.0,
    4194304.0,
    16777216.0,
    67108864.0,
    268435456.0,
    1073741824.0,
    4294967296.0,
];

static RECORDER: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// Installs the Prometheus recorder for this process (once; later calls return the same
/// handle). None when another recorder was installed first by the embedding program.
pub fn install() -> Option<&'static PrometheusHandle> {
    RECORDER
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Full(ATTEMPT_DURATION.into()), SECONDS_BUCKETS)
                .and_then(|b| {
                    b.set_buckets_for_metric(Matcher::Full(QUEUE_WAIT.into()), SECONDS_BUCKETS)
                })
                .and_then(|b| b.set_buckets_for_metric(Matcher::Full(FUEL_USED.into()), FUEL_BUCKETS))
                .and_then(|b| {
                    b.set_buckets_for_metric(Matcher::Full(PEAK_MEMORY.into()), MEMORY_BUCKETS)
                })
                .expect("bucket lists are not empty")
                .build_recorder();
            let handle = recorder.handle();
            match metrics::set_global_recorder(recorder) {
                Ok(()) => {
                    describe();
                    Some(handle)
                }
                Err(_) => {
                    tracing::warn!(
                        "another metrics recorder is installed in this process; GET /metrics stays empty"
                    );
                    None
                }
            }
        })
        .as_ref()
}

/// The handle that renders the metrics, if the recorder is installed.
pub fn handle() -> Option<&'static PrometheusHandle> {
    RECORDER.get().and_then(Option::as_ref)
}

fn describe() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        TASKS_FINISHED,
        "Attempts that ended on this host, by task type and outcome"
    );
    describe_histogram!(
        ATTEMPT_DURATION,
        Unit::Seconds,
        "How long attempts ran, by task type and build"
    );
    describe_histogram!(
        QUEUE_WAIT,
        Unit::Seconds,
        "From when a task was due to the start of its attempt"
    );
    describe_gauge!(
        BACKLOG,
        "Tasks in the database by task type and state (pending, running, failed)"
    );
    describe_gauge!(
        OLDEST_PENDING,
        Unit::Seconds,
        "How long the oldest due pending task of the type has waited"
    );
    describe_gauge!(IN_FLIGHT, "Attempts running on this host");
    describe_counter!(PLUGIN_LOADS, "Plugin versions loaded, by task type");
    describe_counter!(
        PLUGIN_LOAD_ERRORS,
        "Plugin files that failed to load, by task type"
    );
    describe_histogram!(
        FUEL_USED,
        "Fuel an attempt consumed, by task type and build"
    );
    describe_histogram!(
        PEAK_MEMORY,
        Unit::Bytes,
        "The most memory an attempt held at once, by task type and build"
    );
    describe_counter!(
        HTTP_REQUESTS,
        "HTTP requests answered, by method, route and status"
    );
}

/// An attempt started: how long its task had been due.
pub fn attempt_started(task_type: &str, waited: Duration) {
    metrics::histogram!(QUEUE_WAIT, "task_type" => task_type.to_string()).record(waited);
}

/// An attempt of build `version` ended with `outcome`, having cost `cost`.
pub fn attempt_ended(task_type: &str, version: &str, outcome: &'static str, cost: &AttemptCost) {
    let task_type = task_type.to_string();
    let build = build_label(version).to_string();
    metrics::counter!(TASKS_FINISHED, "task_type" => task_type.clone(), "outcome" => outcome)
        .increment(1);
    metrics::histogram!(ATTEMPT_DURATION, "task_type" => task_type.clone(), "build" => build.clone())
        .record(Duration::from_millis(cost.wall_ms));
    if let Some(fuel) = cost.fuel_used {
        metrics::histogram!(FUEL_USED, "task_type" => task_type.clone(), "build" => build.clone())
            .record(fuel as f64);
    }
    if cost.peak_memory > 0 {
        metrics::histogram!(PEAK_MEMORY, "task_type" => task_type, "build" => build)
            .record(cost.peak_memory as f64);
    }
}

/// The `build` label of a build's content hash.
pub fn build_label(version: &str) -> &str {
    version.get(..BUILD_LABEL_DIGITS).unwrap_or(version)
}

/// A running attempt was interrupted because its task was cancelled.
pub fn attempt_cancelled(task_type: &str) {
    metrics::counter!(TASKS_FINISHED, "task_type" => task_type.to_string(), "outcome" => "cancelled")
        .increment(1);
}

/// A plugin version was loaded (at start or by the folder watcher).
pub fn plugin_loaded(task_type: &str) {
    metrics::counter!(PLUGIN_LOADS, "task_type" => task_type.to_string()).increment(1);
}

/// A plugin file failed to load.
pub fn plugin_load_failed(task_type: &str) {
    metrics::counter!(PLUGIN_LOAD_ERRORS, "task_type" => task_type.to_string()).increment(1);
}

/// The outcome label of an attempt that ended in `status` (with or without an error).
pub fn outcome(status: crate::task::Status, error: bool) -> &'static str {
    use crate::task::Status;
    match status {
        Status::Done => "done",
        Status::Failed => "failed",
        Status::Cancelled => "cancelled",
        Status::Pending | Status::Running if error => "retried",
        Status::Pending | Status::Running => "snoozed",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::Status;

    #[test]
    fn outcomes_name_what_happened_to_the_task() {
        assert_eq!(outcome(Status::Done, false), "done");
        assert_eq!(outcome(Status::Failed, true), "failed");
        assert_eq!(outcome(Status::Pending, true), "retried");
        assert_eq!(outcome(Status::Pending, false), "snoozed");
    }
}
