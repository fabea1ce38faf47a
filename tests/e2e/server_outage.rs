//! The database server goes away for 15 s mid-run (a clean fast shutdown that cuts every
//! connection, then a start), on PostgreSQL and MariaDB, with two hosts on it. The hosts keep
//! running; `/health` answers 503 naming the database; an enqueue answers 503 with the stable
//! code `unavailable` and writes nothing (both at once, once the host's watch has seen the
//! outage); attempts that finish meanwhile are kept and committed
//! after the server is back; dispatch resumes within seconds; nothing is lost or run twice.
//! A host started while its server is down waits for it, serving `/health` 503 meanwhile.

use serde_json::json;
use std::time::{Duration, Instant};

use crate::servers::{Backend, PrivateServer};
use crate::util::{Host, Workspace};

const OUTAGE: Duration = Duration::from_secs(15);

#[test]
fn postgres_going_away_for_a_while_loses_nothing() {
    let Some(server) = PrivateServer::new(Backend::Postgres) else {
        return;
    };
    survive_an_outage(&server);
}

#[test]
fn mariadb_going_away_for_a_while_loses_nothing() {
    let Some(server) = PrivateServer::new(Backend::MySql) else {
        return;
    };
    survive_an_outage(&server);
}

fn survive_an_outage(server: &PrivateServer) {
    let url = server.fresh_database();
    let ws = Workspace::with_plugins(&["sleepy"]).on_database(url);
    // A lease well beyond the outage: the hosts cannot extend leases while the server is away.
    let flags = [
        "--lease",
        "60s",
        "--poll-interval",
        "200ms",
        "--concurrency",
        "4",
    ];
    let hosts: Vec<Host> = (0..2).map(|_| ws.start(&flags)).collect();
    let ids: Vec<i64> = (0..16)
        .map(|i| {
            hosts[i % 2].enqueue("sleepy", json!({"ms": 1500 + 200 * (i as u64 % 5)}))["id"]
                .as_i64()
                .unwrap()
        })
        .collect();
    hosts[0].eventually("tasks running on both hosts", || {
        let running = hosts
            .iter()
            .map(|h| {
                h.get("/health").1["counts"]["running"]
                    .as_u64()
                    .unwrap_or(0)
            })
            .max()?;
        (running > 0).then_some(())
    });

    server.stop();
    let outage = Instant::now();
    for host in &hosts {
        // The host's ping finds the outage within about a second.
        let health = host.eventually("/health answers 503", || {
            let (status, health) = host.get("/health");
            (status == 503).then_some(health)
        });
        let database = health["database"].as_str().unwrap();
        assert!(
            database.contains("unavailable") && database.contains("127.0.0.1"),
            "names the database: {database}"
        );
        assert!(
            !database.contains("spool:spool"),
            "no credentials: {database}"
        );
        let (status, body) = host.post(
            "/tasks",
            &json!({"task_type": "sleepy", "payload": {"ms": 1}}),
        );
        assert_eq!(status, 503, "{body:#}");
        assert_eq!(body["error"]["code"], "unavailable", "{body:#}");
    }
    // Once the hosts know the server is away, they say so at once instead of waiting on the
    // pool per request (a probe with a short timeout would take a slow answer for a hung host).
    for host in &hosts {
        for _ in 0..3 {
            let asked = Instant::now();
            assert_eq!(host.get("/health").0, 503);
            let health_took = asked.elapsed();
            let asked = Instant::now();
            let (status, body) = host.post(
                "/tasks",
                &json!({"task_type": "sleepy", "payload": {"ms": 1}}),
            );
            let enqueue_took = asked.elapsed();
            assert_eq!(
                (status, &body["error"]["code"]),
                (503, &json!("unavailable"))
            );
            assert!(
                health_took < Duration::from_secs(1) && enqueue_took < Duration::from_secs(1),
                "health took {health_took:?}, the enqueue {enqueue_took:?}"
            );
        }
    }
    // The hosts keep serving while the server is away.
    std::thread::sleep(OUTAGE.saturating_sub(outage.elapsed()));
    for host in &hosts {
        assert_eq!(host.get("/health").0, 503);
    }
    server.start();
    let back = Instant::now();

    // Dispatch resumes within seconds: a task enqueued now runs promptly.
    let probe = hosts[1].eventually("enqueue accepted again", || {
        let (status, body) = hosts[1].post(
            "/tasks",
            &json!({"task_type": "sleepy", "payload": {"ms": 1}}),
        );
        (status == 201).then(|| body["id"].as_i64().unwrap())
    });
    hosts[1].wait_for_status(probe, "done", Duration::from_secs(30));
    let resumed = back.elapsed();
    assert!(
        resumed < Duration::from_secs(15),
        "dispatch resumed {resumed:?} after the server came back"
    );

    // Every task finished exactly once: the attempts that ended during the outage were
    // committed afterwards, the pending ones ran after.
    for id in &ids {
        let task = hosts[0].wait_for_status(*id, "done", Duration::from_secs(60));
        assert_eq!(task["retry_count"], 0, "{task:#}");
        assert_eq!(task["attempts"], 1, "{task:#}");
    }
    assert_eq!(
        hosts[0].all_tasks().len(),
        ids.len() + 1,
        "the refused enqueues left no row"
    );
    for host in &hosts {
        assert_eq!(host.get("/health").0, 200, "{}", host.log());
    }
    eprintln!("dispatch resumed {resumed:?} after the server came back");
}

/// A host started before its database serves `/health` 503 while it waits, keeps trying, and
/// starts once the server answers, instead of exiting (which makes a supervisor loop).
#[test]
fn a_host_started_before_its_database_waits_for_it() {
    let Some(server) = PrivateServer::new(Backend::Postgres) else {
        return;
    };
    let url = server.fresh_database();
    server.stop();
    let ws = Workspace::with_plugins(&["noop"]).on_database(url);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let log = ws.plugin_dir().with_file_name("waiting-host.log");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_spool"))
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--database-url", &ws.database_url()])
        .arg("--plugins")
        .arg(ws.plugin_dir())
        .env_remove("SPOOL_API_TOKEN")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let health = || -> Option<(u16, serde_json::Value)> {
        let response = http.get(format!("{base}/health")).send().ok()?;
        Some((response.status().as_u16(), response.json().ok()?))
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let (status, body) = loop {
        if let Some(answer) = health() {
            break answer;
        }
        assert!(Instant::now() < deadline, "no answer on {base}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(status, 503, "{body:#}");
    assert!(
        body["database"]
            .as_str()
            .unwrap()
            .contains("waits for the task database"),
        "{body:#}"
    );
    let enqueue = http
        .post(format!("{base}/tasks"))
        .json(&json!({"task_type": "noop"}))
        .send()
        .unwrap();
    assert_eq!(enqueue.status().as_u16(), 503);
    // It keeps waiting (several tries), alive.
    std::thread::sleep(Duration::from_secs(3));
    assert!(child.try_wait().unwrap().is_none(), "the host exited");
    assert_eq!(health().map(|(status, _)| status), Some(503));

    server.start();
    let deadline = Instant::now() + Duration::from_secs(60);
    while health().map(|(status, _)| status) != Some(200) {
        assert!(
            Instant::now() < deadline,
            "the host did not start once its database answered:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let task: serde_json::Value = http
        .post(format!("{base}/tasks"))
        .json(&json!({"task_type": "noop"}))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let id = task["id"].as_i64().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let task: serde_json::Value = http
            .get(format!("{base}/tasks/{id}"))
            .send()
            .unwrap()
            .json()
            .unwrap();
        if task["status"] == "done" {
            break;
        }
        assert!(Instant::now() < deadline, "{task:#}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
}
