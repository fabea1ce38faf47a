//! `GET /metrics` and `GET /stats` on a real host with real tasks: the Prometheus text parses
//! with a real exposition-format parser and counts exactly the attempts that ran; the leader's
//! sampler writes points that `/stats` serves.

use prometheus_parse::{Sample, Scrape, Value};
use serde_json::{Value as Json, json};
use std::time::Duration;

use crate::util::{Host, Workspace};

const WAIT: Duration = Duration::from_secs(60);

fn scrape(host: &Host) -> (String, Scrape) {
    let response = host
        .http
        .get(format!("{}/metrics", host.url))
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(content_type.starts_with("text/plain"), "{content_type}");
    let text = response.text().unwrap();
    let scrape = Scrape::parse(text.lines().map(|line| Ok(line.to_string())))
        .expect("the exposition format parses");
    (text, scrape)
}

/// The one sample of `metric` whose labels include all of `labels`.
fn sample<'a>(scrape: &'a Scrape, metric: &str, labels: &[(&str, &str)]) -> Option<&'a Sample> {
    scrape
        .samples
        .iter()
        .find(|s| s.metric == metric && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
}

fn number(sample: Option<&Sample>) -> f64 {
    match sample.map(|s| &s.value) {
        Some(Value::Counter(n) | Value::Gauge(n) | Value::Untyped(n)) => *n,
        other => panic!("not a number: {other:?}"),
    }
}

/// The count of observations of a histogram sample (its `+Inf` bucket).
fn observations(sample: Option<&Sample>) -> f64 {
    match sample.map(|s| &s.value) {
        Some(Value::Histogram(buckets)) => buckets
            .iter()
            .find(|b| b.less_than.is_infinite())
            .map_or(0.0, |b| b.count),
        other => panic!("not a histogram: {other:?}"),
    }
}

#[test]
fn metrics_count_what_ran_and_stats_keep_the_backlog_history() {
    let ws = Workspace::with_plugins(&["noop", "trap"]);
    let host = ws.start(&["--stats-interval", "1s"]);
    let done: Vec<i64> = (0..5)
        .map(|n| {
            host.enqueue("noop", json!({ "n": n }))["id"]
                .as_i64()
                .unwrap()
        })
        .collect();
    let failed = host.enqueue_with(json!({"task_type": "trap", "payload": {}, "max_retry": 0}));
    for id in &done {
        host.wait_for_status(*id, "done", WAIT);
    }
    host.wait_for_status(failed["id"].as_i64().unwrap(), "failed", WAIT);

    let (text, metrics) = scrape(&host);
    let finished = |task_type: &str, outcome: &str| {
        number(sample(
            &metrics,
            "spool_tasks_finished_total",
            &[("task_type", task_type), ("outcome", outcome)],
        ))
    };
    assert_eq!(finished("noop", "done"), 5.0, "{text}");
    assert_eq!(finished("trap", "failed"), 1.0, "{text}");
    assert_eq!(
        observations(sample(
            &metrics,
            "spool_attempt_duration_seconds",
            &[("task_type", "noop")]
        )),
        5.0,
        "{text}"
    );
    assert_eq!(
        observations(sample(
            &metrics,
            "spool_queue_wait_seconds",
            &[("task_type", "noop")]
        )),
        5.0,
        "{text}"
    );
    // The sandbox reports the fuel and the peak memory of each attempt, by type and build.
    let (_, types) = host.get("/types");
    let noop = types["types"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["task_type"] == "noop")
        .unwrap();
    let build = &noop["version"].as_str().unwrap()[..12];
    for metric in [
        "spool_fuel_used",
        "spool_attempt_peak_memory_bytes",
        "spool_attempt_duration_seconds",
    ] {
        assert_eq!(
            observations(sample(
                &metrics,
                metric,
                &[("task_type", "noop"), ("build", build)]
            )),
            5.0,
            "{metric}: {text}"
        );
    }
    // `GET /types` states what the build's attempts cost on this host.
    let cost = &noop["cost"];
    assert_eq!(
        (&cost["attempts"], &cost["failures"]),
        (&json!(5), &json!(0)),
        "{noop:#}"
    );
    assert!(cost["mean_fuel"].as_u64().unwrap() > 0, "{noop:#}");
    assert!(cost["peak_memory"].as_u64().unwrap() >= 65536, "{noop:#}");
    assert!(cost["p50_ms"].is_u64(), "{noop:#}");
    assert!(
        number(sample(
            &metrics,
            "spool_plugin_loads_total",
            &[("task_type", "noop")]
        )) >= 1.0
    );
    assert_eq!(
        number(sample(&metrics, "spool_attempts_in_flight", &[])),
        0.0
    );
    for state in ["pending", "running", "failed"] {
        assert!(
            sample(
                &metrics,
                "spool_backlog_tasks",
                &[("task_type", "trap"), ("state", state)]
            )
            .is_some(),
            "backlog gauge of trap {state}: {text}"
        );
    }
    assert_eq!(
        number(sample(
            &metrics,
            "spool_backlog_tasks",
            &[("task_type", "trap"), ("state", "failed")]
        )),
        1.0,
        "the dead letter is in the backlog: {text}"
    );
    assert_eq!(
        number(sample(
            &metrics,
            "spool_http_requests_total",
            &[("method", "POST"), ("route", "/tasks"), ("status", "201")]
        )),
        6.0,
        "{text}"
    );
    // Requests are labelled by route template, never by a task's id.
    assert!(text.contains(r#"route="/tasks/{id}""#), "{text}");
    for id in &done {
        assert!(
            !text.contains(&format!("/tasks/{id}\"")),
            "a raw id in a label: {text}"
        );
    }

    // The leader samples every second: the finished tasks show up in the history.
    let stats = host.eventually("the sampler's points in /stats", || {
        let (status, body) = host.get("/stats?window=1h");
        assert_eq!(status, 200, "{body}");
        let done: u64 = series(&body, "noop")
            .iter()
            .map(|p| p["finished"]["done"].as_u64().unwrap())
            .sum();
        (done == 5).then_some(body)
    });
    assert_eq!(stats["window"], "1h");
    assert_eq!(stats["step_seconds"], 1);
    let points = series(&stats, "noop");
    let busy = points
        .iter()
        .find(|p| p["finished"]["done"].as_u64().unwrap() > 0)
        .unwrap();
    assert!(busy["attempt_p50_ms"].is_u64(), "{busy}");
    assert!(busy["attempt_p95_ms"].as_u64() >= busy["attempt_p50_ms"].as_u64());
    assert!(busy["finished_per_minute"]["done"].as_f64().unwrap() > 0.0);
    let trap = series(&stats, "trap");
    assert_eq!(trap.last().unwrap()["failed"], 1, "{stats:#}");
    let current = stats["current"].as_array().unwrap();
    assert!(
        current
            .iter()
            .any(|c| c["task_type"] == "trap" && c["failed"] == 1),
        "{stats:#}"
    );
    let (status, one) = host.get("/stats?window=1h&task_type=trap");
    assert_eq!(status, 200);
    assert!(
        one["series"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["task_type"] == "trap")
    );
    for window in ["1d", "7d"] {
        let (status, body) = host.get(&format!("/stats?window={window}"));
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["window"], window);
    }
    let (status, body) = host.get("/stats?window=2h");
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "invalid_request");
}

fn series<'a>(stats: &'a Json, task_type: &str) -> Vec<&'a Json> {
    stats["series"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["task_type"] == task_type)
        .flat_map(|s| s["points"].as_array().unwrap())
        .collect()
}

#[test]
fn metrics_and_stats_are_reads_that_need_a_token_where_tokens_are_set() {
    let ws = Workspace::with_plugins(&["noop"]);
    let host = ws.start(&["--api-token", "w-token", "--read-token", "r-token"]);
    for path in ["/metrics", "/stats"] {
        let url = format!("{}{path}", host.url);
        let anonymous = host.http.get(&url).send().unwrap();
        assert_eq!(anonymous.status().as_u16(), 401, "{path} without a token");
        for token in ["r-token", "w-token"] {
            let answer = host.http.get(&url).bearer_auth(token).send().unwrap();
            assert_eq!(answer.status().as_u16(), 200, "{path} with {token}");
        }
    }
}
