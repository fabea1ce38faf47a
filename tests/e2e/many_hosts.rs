//! Many hosts on one PostgreSQL or MariaDB table, each a real `spool serve` process: they share
//! the backlog fairly, every task runs and its effect happens once, and when one host is killed
//! mid-run (the maintenance leader, so leadership must fail over too) the others finish its
//! tasks after its lease expires.

use serde_json::{Value, json};
use std::time::{Duration, Instant};

use crate::servers::{self, Backend, count};
use crate::util::{Host, Workspace};

/// Tasks enqueued for a drain.
const TASKS: usize = 20_000;

/// A short lease, so a killed host's tasks are rescued within seconds.
const HOST_FLAGS: &[&str] = &[
    "--lease",
    "3s",
    "--rescue-interval",
    "1s",
    "--poll-interval",
    "100ms",
];

#[test]
fn three_hosts_drain_twenty_thousand_tasks_on_postgres() {
    let Some(url) =
        servers::url(Backend::Postgres).map(|_| servers::fresh_database(Backend::Postgres))
    else {
        return;
    };
    drain_with_hosts(&url, 3);
}

#[test]
fn two_hosts_drain_twenty_thousand_tasks_on_mariadb() {
    let Some(url) = servers::url(Backend::MySql).map(|_| servers::fresh_database(Backend::MySql))
    else {
        return;
    };
    drain_with_hosts(&url, 2);
}

#[test]
fn a_killed_host_s_tasks_are_finished_by_the_others_on_postgres() {
    let Some(url) =
        servers::url(Backend::Postgres).map(|_| servers::fresh_database(Backend::Postgres))
    else {
        return;
    };
    kill_one_mid_run(&url, 3);
}

#[test]
fn a_killed_host_s_tasks_are_finished_by_the_others_on_mariadb() {
    let Some(url) = servers::url(Backend::MySql).map(|_| servers::fresh_database(Backend::MySql))
    else {
        return;
    };
    kill_one_mid_run(&url, 2);
}

/// `hosts` hosts on one database drain `TASKS` tasks: all done, each effect once, every host
/// a fair share.
fn drain_with_hosts(url: &str, hosts: usize) {
    let ws = Workspace::with_plugins(&["ledger"]).on_database(url.to_string());
    let hosts: Vec<Host> = (0..hosts).map(|_| ws.start(HOST_FLAGS)).collect();
    enqueue_many(&hosts[0], TASKS);
    let started = Instant::now();
    wait_until_done(&hosts, TASKS, Duration::from_secs(300));
    let elapsed = started.elapsed();

    let effects = effect_outcomes(url);
    assert_eq!(
        effects.performed + effects.already_done,
        TASKS as i64,
        "every task has a result: {effects:?}"
    );
    assert_eq!(
        effects.ledger_keys, TASKS as i64,
        "one ledger key per task: {effects:?}"
    );
    assert_eq!(
        effects.already_done, 0,
        "no host died, so no task ran twice: {effects:?}"
    );

    let shares: Vec<usize> = hosts.iter().map(attempts_finished_by).collect();
    assert_eq!(
        shares.iter().sum::<usize>(),
        TASKS,
        "attempts per host: {shares:?}"
    );
    let fair = TASKS / hosts.len();
    for (host, share) in shares.iter().enumerate() {
        assert!(
            *share >= fair / 3,
            "host {host} ran {share} of {TASKS} tasks ({shares:?}): not a fair share"
        );
    }
    eprintln!(
        "{} hosts drained {TASKS} tasks in {elapsed:?}; attempts per host: {shares:?}",
        hosts.len()
    );
}

/// Kills the maintenance leader with SIGKILL while tasks run; the survivors elect a new
/// leader, which rescues the dead host's tasks once their lease expires, and finish the rest.
fn kill_one_mid_run(url: &str, hosts: usize) {
    let total = 6_000;
    let ws = Workspace::with_plugins(&["ledger"]).on_database(url.to_string());
    let mut hosts: Vec<Host> = (0..hosts).map(|_| ws.start(HOST_FLAGS)).collect();
    enqueue_many(&hosts[0], total);
    let leader = hosts[0].eventually("a leader", || hosts[0].leader());
    let victim = hosts
        .iter()
        .position(|h| h.host_id() == leader)
        .expect("the leader is one of the hosts");
    hosts[victim].eventually("the leader running tasks", || {
        (attempts_finished_by(&hosts[victim]) > 200).then_some(())
    });
    hosts[victim].kill();
    let killed = hosts.remove(victim);

    // Leadership moves to a survivor within about one lease.
    let new_leader = hosts[0].eventually("a new leader", || {
        hosts[0].leader().filter(|l| *l != leader)
    });
    assert!(
        hosts.iter().any(|h| h.host_id() == new_leader),
        "{new_leader} leads"
    );

    wait_until_done(&hosts, total, Duration::from_secs(300));
    let effects = effect_outcomes(url);
    assert_eq!(effects.ledger_keys, total as i64, "{effects:?}");
    assert_eq!(
        effects.performed + effects.already_done,
        total as i64,
        "{effects:?}"
    );
    // Tasks with an attempt the rescuer ended (outcome 7, rescued) in their history.
    let rescued = count(
        url,
        "SELECT COUNT(DISTINCT task_id) FROM async_task_attempt WHERE outcome = 7",
    );
    assert!(
        rescued > 0,
        "the killed host held running tasks that had to be rescued:\n{}",
        killed.log()
    );
    assert!(
        effects.already_done <= rescued,
        "only rescued tasks can find their effect already done: {effects:?}, rescued {rescued}"
    );
    let survivors_log: String = hosts.iter().map(Host::log).collect();
    assert!(
        survivors_log.contains("rescued tasks whose host stopped"),
        "a survivor rescued them"
    );
}

/// Enqueues `n` ledger tasks through one host's batch API.
fn enqueue_many(host: &Host, n: usize) {
    let tasks: Vec<Value> = (0..n)
        .map(|i| json!({"task_type": "ledger", "payload": {"n": i}}))
        .collect();
    host.enqueue_all(&tasks);
}

/// Waits until `n` tasks are done, failing with the hosts' logs on timeout or a dead letter.
fn wait_until_done(hosts: &[Host], n: usize, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        let (status, health) = hosts[0].get("/health");
        assert_eq!(status, 200, "{health:#}");
        let counts = &health["counts"];
        assert_eq!(
            counts["failed"],
            0,
            "no task may fail: {health:#}\n{}",
            hosts[0].log()
        );
        if counts["done"].as_u64() == Some(n as u64) {
            return;
        }
        if Instant::now() > deadline {
            let logs: Vec<String> = hosts.iter().map(Host::log).collect();
            panic!(
                "not all {n} tasks done within {timeout:?}: {health:#}\n{}",
                logs.join("\n----\n")
            );
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Attempts this host finished, from its log (one debug line per attempt).
fn attempts_finished_by(host: &Host) -> usize {
    host.log().matches("attempt finished").count()
}

#[derive(Debug)]
struct Effects {
    performed: i64,
    already_done: i64,
    ledger_keys: i64,
}

fn effect_outcomes(url: &str) -> Effects {
    Effects {
        performed: count(
            url,
            "SELECT COUNT(*) FROM async_task WHERE status = 2 AND result LIKE '%\"performed\"%'",
        ),
        already_done: count(
            url,
            "SELECT COUNT(*) FROM async_task WHERE status = 2 AND result LIKE '%already done%'",
        ),
        ledger_keys: count(
            url,
            "SELECT COUNT(*) FROM effect_ledger WHERE task_type = 'ledger'",
        ),
    }
}
