//! Hosts whose clocks disagree, on PostgreSQL and MariaDB: a host started under libfaketime
//! with its clock 45 s ahead joins a host with the right time. Leases and leadership are
//! measured on the database's clock, so the skewed host neither takes leadership from a leader
//! that renews nor, when it leads, rescues tasks whose host is still extending their leases:
//! every task runs once.
//!
//! The skewed host has no handler for the tasks, so every attempt runs on the right-time host,
//! and a rescue could only come from a lease judged by the wrong clock.

use serde_json::{Value, json};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::servers::{self, Backend};
use crate::util::{Host, Workspace};

/// How far ahead the skewed host's clock runs: more than a lease, less than a task.
const SKEW: &str = "+45s";

/// Short leases and frequent rescues, so a wrong rescue would happen within the run.
const HOST_FLAGS: &[&str] = &["--lease", "2s", "--rescue-interval", "500ms"];

/// Tasks, each running longer than three leases.
const TASKS: usize = 4;
const TASK_MS: u64 = 7_000;

#[test]
fn a_host_whose_clock_runs_ahead_takes_no_leadership_on_postgres() {
    run_on(Backend::Postgres, Leads::RightTime);
}

#[test]
fn a_host_whose_clock_runs_ahead_rescues_no_running_task_on_postgres() {
    run_on(Backend::Postgres, Leads::Skewed);
}

#[test]
fn a_host_whose_clock_runs_ahead_takes_no_leadership_on_mariadb() {
    run_on(Backend::MySql, Leads::RightTime);
}

#[test]
fn a_host_whose_clock_runs_ahead_rescues_no_running_task_on_mariadb() {
    run_on(Backend::MySql, Leads::Skewed);
}

/// Which host starts first and so leads.
#[derive(Clone, Copy, PartialEq)]
enum Leads {
    RightTime,
    Skewed,
}

fn run_on(backend: Backend, leads: Leads) {
    if servers::url(backend).is_none() {
        return;
    }
    let url = servers::fresh_database(backend);
    let runner = Workspace::with_plugins(&["sleepy"]).on_database(url.clone());
    let bystander = Workspace::with_plugins(&["noop"]).on_database(url.clone());
    let faketime = libfaketime();
    let skewed_env = [
        ("LD_PRELOAD", faketime.to_str().unwrap()),
        ("FAKETIME", SKEW),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
    ];
    let start_skewed = || bystander.start_with_env(HOST_FLAGS, &skewed_env);
    let (first, second) = match leads {
        Leads::RightTime => {
            let right = runner.start(HOST_FLAGS);
            await_leader(&right, &right);
            (right, start_skewed())
        }
        Leads::Skewed => {
            let skewed = start_skewed();
            await_leader(&skewed, &skewed);
            (skewed, runner.start(HOST_FLAGS))
        }
    };
    let (right, skewed) = match leads {
        Leads::RightTime => (&first, &second),
        Leads::Skewed => (&second, &first),
    };
    assert_clock_is_skewed(skewed, right);
    let leader = first.host_id();

    let ids: Vec<i64> = (0..TASKS)
        .map(|_| {
            let task = right.enqueue("sleepy", json!({ "ms": TASK_MS }));
            task["id"].as_i64().unwrap()
        })
        .collect();
    // While the tasks run, the first host keeps leading, as both hosts see it.
    let deadline = Instant::now() + Duration::from_secs(120);
    let finished = loop {
        for host in [right, skewed] {
            assert_eq!(
                host.leader().as_deref(),
                Some(leader.as_str()),
                "leadership moved:\n{}\n----\n{}",
                right.log(),
                skewed.log()
            );
        }
        let tasks: Vec<Value> = ids.iter().map(|id| right.task(*id)).collect();
        if tasks.iter().all(|t| t["status"] == "done") {
            break tasks;
        }
        assert!(tasks.iter().all(|t| t["status"] != "failed"), "{tasks:#?}");
        assert!(Instant::now() < deadline, "tasks not done: {tasks:#?}");
        std::thread::sleep(Duration::from_millis(250));
    };
    for task in &finished {
        let outcomes: Vec<&str> = task["history"]
            .as_array()
            .expect("the task's history")
            .iter()
            .map(|a| a["outcome"].as_str().unwrap())
            .collect();
        assert_eq!(
            (task["attempts"].as_u64(), outcomes.as_slice()),
            (Some(1), &["done"][..]),
            "one attempt, never rescued: {task:#}\n{}",
            skewed.log()
        );
    }
    assert!(
        !skewed.log().contains("rescued tasks whose host stopped"),
        "{}",
        skewed.log()
    );
    servers::drop_database(&url);
}

/// Waits until `host` reports `expected` as the leader.
fn await_leader(host: &Host, expected: &Host) {
    let id = expected.host_id();
    host.eventually("the first host to lead", || {
        (host.leader().as_deref() == Some(id.as_str())).then_some(())
    });
}

/// The skewed host's clock, as its HTTP `Date` header shows it, is well ahead of the other's:
/// libfaketime took hold, so the test tests something.
fn assert_clock_is_skewed(skewed: &Host, right: &Host) {
    let date = |host: &Host| {
        let response = host
            .http
            .get(format!("{}/health", host.url))
            .send()
            .unwrap();
        let header = response.headers()["date"].to_str().unwrap().to_string();
        chrono::DateTime::parse_from_rfc2822(&header)
            .unwrap_or_else(|e| panic!("a Date header: {header}: {e}"))
    };
    let ahead = date(skewed) - date(right);
    assert!(
        ahead.num_seconds() >= 40,
        "the skewed host's clock is {ahead} ahead"
    );
}

/// libfaketime's multi-threaded library, as Debian installs it (`cargo xtask test` does).
fn libfaketime() -> PathBuf {
    let found = std::fs::read_dir("/usr/lib")
        .unwrap()
        .filter_map(|entry| {
            let path = entry.ok()?.path().join("faketime/libfaketimeMT.so.1");
            path.exists().then_some(path)
        })
        .next();
    found.expect(
        "libfaketime is not installed: `cargo xtask test` installs it, \
         or `apt-get install libfaketime`",
    )
}
