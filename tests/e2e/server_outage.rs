//! The database server goes away for 15 s mid-run (a clean fast shutdown that cuts every
//! connection, then a start), on PostgreSQL and MariaDB, with two hosts on it. The hosts keep
//! running; `/health` answers 503 naming the database; an enqueue answers 503 with the stable
//! code `unavailable` and writes nothing (both at once, once the host's watch has seen the
//! outage); attempts that finish meanwhile are kept and committed
//! after the server is back; dispatch resumes within seconds; nothing is lost or run twice.

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
        let (status, health) = host.get("/health");
        assert_eq!(status, 503, "{health:#}");
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
        (status == 201).then_some(body["id"].as_i64().unwrap())
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
