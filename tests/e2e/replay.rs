//! `spool replay`: a recorded attempt run again on the test's machine from its record, with the
//! build fetched through the API (or another one given with `--build`), every host call answered
//! from the record, nothing written anywhere.

use serde_json::{Value, json};
use std::time::Duration;

use crate::servers;
use crate::util::{Host, Workspace, artifact};

const WAIT: Duration = Duration::from_secs(30);

fn id(task: &Value) -> i64 {
    task["id"].as_i64().unwrap()
}

fn replay(host: &Host, args: &[&str]) -> (bool, String) {
    let mut all = vec!["replay"];
    all.extend_from_slice(args);
    host.cli(&all, &[])
}

#[test]
fn a_clock_reading_attempt_replays_to_its_recorded_result() {
    let ws = Workspace::with_plugins(&["clock"]);
    ws.manifest("clock", "record = \"all\"\n");
    let host = ws.start(&[]);
    let task = host.enqueue("clock", json!({}));
    let done = host.wait_for_status(id(&task), "done", WAIT);
    let (_, records) = host.get(&format!("/tasks/{}/records", id(&task)));
    assert_eq!(records["records"][0]["attempt"], 1, "{records:#}");
    assert_eq!(records["records"][0]["build"], done["plugin_version"]);
    // Later, on this machine: the clock answers from the record, so the result is the same.
    std::thread::sleep(Duration::from_millis(1100));
    for _ in 0..2 {
        let (ok, output) = replay(&host, &[&id(&task).to_string(), "--verbose"]);
        assert!(ok, "{output}");
        let printed = output.lines().find(|l| l.starts_with('{')).unwrap();
        let replayed: Value = serde_json::from_str(printed).unwrap();
        assert_eq!(replayed, done["result"], "{output}");
        assert!(output.contains("reproduced"), "{output}");
        assert!(output.contains(", as recorded"), "the same fuel: {output}");
        assert!(
            output.contains("wall clock →"),
            "the calls are listed: {output}"
        );
    }
}

#[test]
fn a_failed_attempt_replays_to_its_error_and_a_fixed_build_succeeds() {
    let ws = Workspace::with_plugins(&["flaky", "noop"]);
    failed_attempts_replay(&ws.start(&["--backoff-base", "50ms"]));
}

/// The records and builds are kept on PostgreSQL and MariaDB as on SQLite.
#[test]
fn records_are_kept_on_postgres_and_mysql() {
    for backend in [servers::Backend::Postgres, servers::Backend::MySql] {
        if servers::url(backend).is_none() {
            continue;
        }
        let ws = Workspace::with_plugins(&["flaky", "noop"])
            .on_database(servers::fresh_database(backend));
        failed_attempts_replay(&ws.start(&["--backoff-base", "50ms"]));
    }
}

fn failed_attempts_replay(host: &Host) {
    let task = host.enqueue("flaky", json!({"fail_until_attempt": 1}));
    host.wait_for_status(id(&task), "done", WAIT);
    // By default only the attempt that did not succeed keeps a record.
    let (_, records) = host.get(&format!("/tasks/{}/records", id(&task)));
    let attempts: Vec<&Value> = records["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["attempt"])
        .collect();
    assert_eq!(attempts, [&json!(1)], "{records:#}");
    let (ok, output) = replay(host, &[&id(&task).to_string()]);
    assert!(!ok, "a replayed failure fails: {output}");
    assert!(
        output.contains("failure on attempt 1") && output.contains("reproduced"),
        "{output}"
    );
    // The same inputs against a build that succeeds.
    let noop = artifact("noop");
    let (ok, output) = replay(
        host,
        &[
            &id(&task).to_string(),
            "--attempt",
            "1",
            "--build",
            noop.to_str().unwrap(),
        ],
    );
    assert!(ok, "{output}");
    assert!(output.contains("not reproduced"), "{output}");

    // An attempt with no record, a task with none, and an unknown task: clear errors.
    let (ok, output) = replay(host, &[&id(&task).to_string(), "--attempt", "2"]);
    assert!(!ok && output.contains("attempt 2 of task"), "{output}");
    let quiet = host.enqueue("noop", json!({}));
    host.wait_for_status(id(&quiet), "done", WAIT);
    let (ok, output) = replay(host, &[&id(&quiet).to_string()]);
    assert!(
        !ok && output.contains("has no recorded attempt"),
        "{output}"
    );
    let (ok, output) = replay(host, &["987654321"]);
    assert!(!ok && output.contains("987654321"), "{output}");
}

/// An HTTP-calling attempt replays from its record while the service it called is still up
/// and listening: the guest gets the recorded response, the service gets nothing. The record
/// keeps the request and the response, with the credentials and the manifest's secrets redacted.
#[test]
fn an_http_calling_attempt_replays_its_responses_and_sends_nothing() {
    let sink = crate::util::TestServer::start("hello from the mail api");
    let ws = Workspace::with_plugins(&["httpget"]);
    ws.manifest(
        "httpget",
        &format!(
            "max_retry = 0\nrecord = \"all\"\nsecrets = [\"API_KEY\"]\n[env]\nAPI_KEY = \"k-7781\"\n[http]\nallow = [\"127.0.0.1:{}\"]\n",
            sink.port
        ),
    );
    // The same handler as a type whose service is down.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    ws.add_plugin("httpget", "offline");
    ws.manifest(
        "offline",
        &format!("max_retry = 0\n[http]\nallow = [\"127.0.0.1:{closed}\"]\n"),
    );
    let host = ws.start(&[]);
    let url = format!("http://127.0.0.1:{}/send?key=k-7781", sink.port);
    let task = host.enqueue("httpget", json!({ "url": url, "bearer": "tok-55" }));
    let done = host.wait_for_status(id(&task), "done", WAIT);
    assert_eq!(sink.count(), 1);

    let (_, record) = host.get(&format!("/tasks/{}/records/1", id(&task)));
    // (The payload is kept as it was: this test's payload carries them.)
    let text = format!("{}{}", record["calls"], record["env"]);
    for secret in ["k-7781", "tok-55"] {
        assert!(!text.contains(secret), "{secret} in the record: {record:#}");
    }
    assert_eq!(
        record["env"],
        json!([["API_KEY", "[redacted]"]]),
        "{record:#}"
    );
    let http = record["calls"]
        .as_array()
        .unwrap()
        .iter()
        .find(|call| call["call"] == "http")
        .unwrap_or_else(|| panic!("no http call: {record:#}"));
    assert_eq!(http["method"], "GET");
    assert_eq!(
        http["url"],
        format!("http://127.0.0.1:{}/send?key=[redacted]", sink.port)
    );
    assert!(
        http["headers"]
            .as_array()
            .unwrap()
            .contains(&json!(["authorization", "[redacted]"])),
        "{http:#}"
    );
    assert_eq!(http["answer"]["kind"], "response", "{http:#}");
    assert_eq!(http["answer"]["status"], 200);
    assert_eq!(http["answer"]["body"]["text"], "hello from the mail api");
    assert_eq!(http["answer"]["end"], "complete");

    let (ok, output) = replay(&host, &[&id(&task).to_string(), "--verbose"]);
    assert!(ok, "{output}");
    assert!(output.contains("reproduced"), "{output}");
    assert!(
        output.contains(&format!(
            "http GET http://127.0.0.1:{}/send?key=[redacted] → 200",
            sink.port
        )),
        "the call is listed: {output}"
    );
    let printed = output.lines().find(|l| l.starts_with('{')).unwrap();
    let replayed: Value = serde_json::from_str(printed).unwrap();
    assert_eq!(replayed, done["result"], "{output}");
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(sink.count(), 1, "the replay sent nothing");

    // A refused connection (nothing listens on the port) replays to the same error.
    let refused = host.enqueue(
        "offline",
        json!({ "url": format!("http://127.0.0.1:{closed}/send") }),
    );
    let failed = host.wait_for_status(id(&refused), "failed", WAIT);
    let (ok, output) = replay(&host, &[&id(&refused).to_string()]);
    assert!(!ok, "{output}");
    assert!(output.contains("reproduced"), "{output}");
    assert!(
        output.contains(failed["last_error"].as_str().unwrap()),
        "{output}\n{failed:#}"
    );
}

/// Follow-ups are answered from the record (the replay enqueues nothing); a record past its
/// `record_max` is marked truncated and its replay stops where it was cut, saying so.
#[test]
fn enqueues_replay_from_the_record_and_a_truncated_record_says_where_it_stops() {
    let ws = Workspace::with_plugins(&["fanout", "noop"]);
    ws.manifest(
        "fanout",
        "record = \"all\"\n[enqueue]\nallow = [\"noop\"]\nmax_tasks = 100\n",
    );
    ws.add_plugin("fanout", "bigfanout");
    ws.manifest(
        "bigfanout",
        "record = \"all\"\nrecord_max = \"1KiB\"\n[enqueue]\nallow = [\"noop\"]\nmax_tasks = 100\n",
    );
    let host = ws.start(&[]);
    let small = host.enqueue("fanout", json!({"children": 3, "task_type": "noop"}));
    let small = host.wait_for_status(id(&small), "done", WAIT);
    let before = host.all_tasks().len();
    let (ok, output) = replay(&host, &[&id(&small).to_string()]);
    assert!(ok && output.contains("reproduced"), "{output}");
    let printed = output.lines().find(|l| l.starts_with('{')).unwrap();
    let replayed: Value = serde_json::from_str(printed).unwrap();
    assert_eq!(
        replayed, small["result"],
        "the recorded follow-up ids: {output}"
    );
    assert_eq!(
        host.all_tasks().len(),
        before,
        "the replay enqueued nothing"
    );

    let big = host.enqueue("bigfanout", json!({"children": 40, "task_type": "noop"}));
    host.wait_for_status(id(&big), "done", WAIT);
    let (_, records) = host.get(&format!("/tasks/{}/records", id(&big)));
    assert_eq!(records["records"][0]["truncated"], true, "{records:#}");
    let (ok, output) = replay(&host, &[&id(&big).to_string()]);
    assert!(!ok, "{output}");
    assert!(
        output.contains("the record was truncated here (it reached record_max)"),
        "{output}"
    );
}
