//! Periodic tasks with real hosts: `every = "1s"` ticks from a plugin's manifest enqueue tasks
//! that run, come and go with the manifest, and show in `GET /schedules` and `spool
//! schedules`; two hosts on one database (SQLite, PostgreSQL, MariaDB) enqueue each tick once,
//! also across a failover; a host stopped across several ticks enqueues one task for them when
//! it starts again.

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use std::process::Command;
use std::time::Duration;

use crate::servers::{self, Backend};
use crate::util::{Host, Workspace, eventually};

const WAIT: Duration = Duration::from_secs(60);

/// The scheduled tasks of `task_type`, as (tick, task), oldest tick first. The tick is read
/// from the idempotency key (`spool:schedule:SOURCE:NAME:TICK`).
fn ticks(host: &Host, task_type: &str) -> Vec<(DateTime<Utc>, Value)> {
    let (status, page) = host.get(&format!("/tasks?type={task_type}&limit=1000"));
    assert_eq!(status, 200, "{page}");
    let mut ticks: Vec<(DateTime<Utc>, Value)> = page["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|task| {
            let tick = tick_of(task["idempotency_key"].as_str()?)?;
            Some((tick, task.clone()))
        })
        .collect();
    ticks.sort_by_key(|(tick, _)| *tick);
    ticks
}

/// The tick a scheduled task's key names (the key's last part, after source and name).
fn tick_of(key: &str) -> Option<DateTime<Utc>> {
    let mut parts = key.strip_prefix("spool:schedule:")?.splitn(3, ':');
    parts.nth(2)?.parse().ok()
}

fn seconds(a: DateTime<Utc>, b: DateTime<Utc>) -> f64 {
    (b - a).num_milliseconds() as f64 / 1000.0
}

#[test]
fn manifest_ticks_every_second_run_and_leave_with_the_manifest() {
    let ws = Workspace::with_plugins(&[]);
    ws.add_plugin("noop", "tick");
    ws.manifest(
        "tick",
        "[[schedule]]\nname = \"heartbeat\"\nevery = \"1s\"\npayload = { hello = \"world\", n = 1 }\n",
    );
    let host = ws.start(&[]);
    let done = host.eventually("three scheduled tasks done", || {
        let ticks = ticks(&host, "tick");
        let done = ticks.iter().filter(|(_, t)| t["status"] == "done").count();
        (done >= 3).then_some(ticks)
    });
    for (tick, task) in &done {
        assert_eq!(task["payload"], json!({"hello": "world", "n": 1}), "{task}");
        assert_eq!(
            task["idempotency_key"],
            format!(
                "spool:schedule:manifest:heartbeat:{}",
                tick.format("%Y-%m-%dT%H:%M:%S%.3fZ")
            )
        );
        assert_eq!(tick.timestamp_subsec_millis(), 0, "whole seconds");
    }
    for pair in done.windows(2) {
        assert_eq!(
            seconds(pair[0].0, pair[1].0),
            1.0,
            "one task per tick, no tick skipped while serving: {:?}",
            done.iter().map(|(t, _)| t.to_string()).collect::<Vec<_>>()
        );
    }
    let finished = done.iter().find(|(_, t)| t["status"] == "done").unwrap();
    assert_eq!(finished.1["result"], json!({"hello": "world", "n": 1}));

    // GET /schedules and the CLI show it, with its next and last ticks.
    let (status, view) = host.get("/schedules");
    assert_eq!(status, 200, "{view}");
    assert_eq!(view["leading"], true, "{view}");
    let schedule = &view["schedules"][0];
    assert_eq!(schedule["task_type"], "tick", "{view}");
    assert_eq!(schedule["name"], "heartbeat");
    assert_eq!(schedule["source"], "manifest");
    assert_eq!(schedule["every"], "1s");
    assert_eq!(schedule["every_ms"], 1000);
    assert_eq!(schedule["cron"], Value::Null);
    assert_eq!(schedule["timezone"], "UTC");
    assert_eq!(schedule["plugin_loaded"], true);
    let next: DateTime<Utc> = schedule["next_run_at"].as_str().unwrap().parse().unwrap();
    assert!(next > Utc::now() - chrono::Duration::seconds(1), "{view}");
    let last_id = schedule["last_task_id"].as_i64().expect("a last task");
    assert_eq!(
        tick_of(host.task(last_id)["idempotency_key"].as_str().unwrap()),
        schedule["last_tick"].as_str().unwrap().parse().ok()
    );
    let output = Command::new(env!("CARGO_BIN_EXE_spool"))
        .args(["schedules", "--url", &host.url])
        .env_remove("SPOOL_API_TOKEN")
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{table}");
    assert!(
        table.contains("tick") && table.contains("heartbeat") && table.contains("every 1s"),
        "{table}"
    );

    // A caller cannot take a tick's key.
    let (status, body) = host.post(
        "/tasks",
        &json!({"task_type": "tick", "idempotency_key": "spool:schedule:manifest:heartbeat:2099-01-01T00:00:00.000Z"}),
    );
    assert_eq!(status, 422, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("reserved"),
        "{body}"
    );

    // The manifest goes: the schedule goes with it (hot reload), and ticks stop.
    std::fs::write(ws.plugin_dir().join("tick.toml"), "").unwrap();
    eventually(WAIT, "the schedule to leave", || {
        host.get("/schedules").1["schedules"]
            .as_array()
            .unwrap()
            .is_empty()
            .then_some(())
    });
    std::thread::sleep(Duration::from_millis(300));
    let settled = ticks(&host, "tick").len();
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(
        ticks(&host, "tick").len(),
        settled,
        "no ticks without the schedule"
    );
}

#[test]
fn two_hosts_on_one_database_enqueue_each_tick_once_across_a_failover() {
    two_hosts_tick_once(Workspace::with_plugins(&["noop"]));
}

#[test]
fn two_hosts_on_postgres_enqueue_each_tick_once_across_a_failover() {
    let Some(url) =
        servers::url(Backend::Postgres).map(|_| servers::fresh_database(Backend::Postgres))
    else {
        return;
    };
    two_hosts_tick_once(Workspace::with_plugins(&["noop"]).on_database(url));
}

#[test]
fn two_hosts_on_mariadb_enqueue_each_tick_once_across_a_failover() {
    let Some(url) = servers::url(Backend::MySql).map(|_| servers::fresh_database(Backend::MySql))
    else {
        return;
    };
    two_hosts_tick_once(Workspace::with_plugins(&["noop"]).on_database(url));
}

/// Two hosts share `ws`'s database and a spool.toml schedule ticking every second; the leader
/// is killed and the other takes over.
fn two_hosts_tick_once(ws: Workspace) {
    let config = ws.dir.path().join("spool.toml");
    std::fs::write(
        &config,
        "[[schedule]]\ntask_type = \"noop\"\nname = \"pulse\"\nevery = \"1s\"\npayload = { from = \"spool.toml\" }\n",
    )
    .unwrap();
    let flags = [
        "--config",
        config.to_str().unwrap(),
        "--lease",
        "2s",
        "--rescue-interval",
        "1s",
    ];
    let mut hosts = [ws.start(&flags), ws.start(&flags)];
    hosts[0].eventually("four ticks", || {
        (ticks(&hosts[0], "noop").len() >= 4).then_some(())
    });
    let leader = hosts
        .iter()
        .position(|h| h.get("/schedules").1["leading"] == true)
        .expect("one host leads");
    let follower = 1 - leader;
    let view = hosts[follower].get("/schedules").1;
    assert_eq!(view["leading"], false, "{view}");
    assert_eq!(view["schedules"][0]["source"], "spool.toml", "{view}");
    // A host that does not lead finds the last tick's task by its key.
    let known = hosts[follower].eventually("the follower to know a last tick", || {
        let view = hosts[follower].get("/schedules").1;
        view["schedules"][0]["last_task_id"]
            .as_i64()
            .map(|id| (id, view))
    });
    let task = hosts[follower].task(known.0);
    assert_eq!(
        tick_of(task["idempotency_key"].as_str().unwrap()),
        known.1["schedules"][0]["last_tick"]
            .as_str()
            .unwrap()
            .parse()
            .ok(),
        "{}",
        known.1
    );
    // The leader dies; the other takes over within about a lease and keeps ticking.
    hosts[leader].kill();
    let survivor = &hosts[follower];
    let before = ticks(survivor, "noop").len();
    survivor.eventually("the survivor to lead and tick", || {
        (survivor.get("/schedules").1["leading"] == true
            && ticks(survivor, "noop").len() >= before + 3)
            .then_some(())
    });
    let all = ticks(survivor, "noop");
    for pair in all.windows(2) {
        assert!(
            pair[1].0 > pair[0].0,
            "each tick once: {:?}",
            all.iter().map(|(t, _)| t.to_string()).collect::<Vec<_>>()
        );
    }
    // At most one gap, over the failover; every other tick is a second after the one before.
    let gaps = all
        .windows(2)
        .filter(|pair| seconds(pair[0].0, pair[1].0) != 1.0)
        .count();
    assert!(
        gaps <= 1,
        "{:?}",
        all.iter().map(|(t, _)| t.to_string()).collect::<Vec<_>>()
    );
    survivor.eventually("every scheduled task done", || {
        ticks(survivor, "noop")
            .iter()
            .take(before)
            .all(|(_, t)| t["status"] == "done" || t["status"] == "running")
            .then_some(())
    });
    assert_eq!(all[0].1["payload"], json!({"from": "spool.toml"}));
}

#[test]
fn a_host_stopped_across_ticks_enqueues_one_task_for_them() {
    let ws = Workspace::with_plugins(&["noop"]);
    ws.manifest("noop", "[[schedule]]\nevery = \"3s\"\n");
    let mut host = ws.start(&[]);
    let first = host.eventually("a first tick", || ticks(&host, "noop").last().map(|t| t.0));
    host.signal("TERM");
    assert!(host.wait_exit(WAIT), "{}", host.log());
    let stopped = Utc::now();
    // Three ticks pass while no host runs (last+3s, +6s, +9s); start again just after the
    // third, so the first pass certainly comes before the next one.
    let expected = first + chrono::Duration::seconds(9);
    let restart_at = expected + chrono::Duration::milliseconds(100);
    let pause = (restart_at - Utc::now()).to_std().unwrap_or_default();
    assert!(pause > Duration::from_secs(2), "the stop took too long");
    std::thread::sleep(pause);
    let host = ws.start(&[]);
    let started = Utc::now();
    let catch_up = host.eventually("the catch-up tick", || {
        ticks(&host, "noop")
            .into_iter()
            .find(|(tick, _)| *tick >= expected)
    });
    assert_eq!(catch_up.0, expected, "the latest missed tick runs");
    // The last tick enqueued before the stop (the first one, or one more if the stop was slow).
    let last = ticks(&host, "noop")
        .into_iter()
        .map(|(tick, _)| tick)
        .filter(|tick| *tick < stopped)
        .max()
        .unwrap();
    assert!(
        seconds(last, catch_up.0) >= 6.0,
        "at least two ticks were missed"
    );
    assert!(catch_up.0 < started, "it is a tick missed while stopped");
    let created: DateTime<Utc> = catch_up.1["created_at"].as_str().unwrap().parse().unwrap();
    assert!(created >= started - chrono::Duration::seconds(1));
    let missed: Vec<DateTime<Utc>> = ticks(&host, "noop")
        .into_iter()
        .map(|(tick, _)| tick)
        .filter(|tick| *tick > last && *tick < catch_up.0)
        .collect();
    assert!(
        missed.is_empty(),
        "one task for the missed ticks, not one each: {missed:?}"
    );
    host.wait_for_status(catch_up.1["id"].as_i64().unwrap(), "done", WAIT);
}
