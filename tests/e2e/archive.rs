//! Archive and retention end to end: `spool archive` (dry run, then a pass) against the database
//! of a running host; `GET /tasks/{id}` still finds an archived task, marked archived, while
//! listings show the live table and a retry of it answers 409; and a leader that archives every
//! few hundred milliseconds keeps claiming and finishing a backlog meanwhile.

use serde_json::{Value, json};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::util::{Host, Workspace};

fn spool_archive(ws: &Workspace, args: &[&str]) -> (bool, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_spool"))
        .arg("archive")
        .args(["--database-url", &ws.database_url()])
        .args(args)
        .current_dir(ws.dir.path())
        .output()
        .unwrap();
    (
        output.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    )
}

fn counts(host: &Host) -> Value {
    let (status, health) = host.get("/health");
    assert_eq!(status, 200, "{health}");
    health["counts"].clone()
}

fn enqueue_many(host: &Host, n: usize) -> Vec<i64> {
    let requests: Vec<Value> = (0..n)
        .map(|i| json!({"task_type": "noop", "payload": {"i": i}}))
        .collect();
    host.enqueue_all(&requests)
}

#[test]
fn archived_tasks_are_found_by_id_and_spool_archive_runs_a_pass() {
    let ws = Workspace::with_plugins(&["noop"]);
    let host = ws.start(&[]);
    let done: Vec<i64> = (0..3)
        .map(|i| {
            host.enqueue("noop", json!({ "i": i }))["id"]
                .as_i64()
                .unwrap()
        })
        .collect();
    for id in &done {
        host.wait_for_status(*id, "done", Duration::from_secs(20));
    }
    let later = host.enqueue_with(json!({"task_type": "noop", "payload": {}, "delay": "1h"}));
    let cancelled = later["id"].as_i64().unwrap();
    let (status, _) = host.post(&format!("/tasks/{cancelled}/cancel"), &json!({}));
    assert_eq!(status, 200);
    let pending = host.enqueue_with(json!({"task_type": "noop", "payload": {}, "delay": "1h"}));
    let pending = pending["id"].as_i64().unwrap();
    std::thread::sleep(Duration::from_millis(20));

    let (ok, out) = spool_archive(&ws, &["--older-than", "1ms", "--dry-run"]);
    assert!(ok, "{out}");
    assert!(
        out.contains("would archive 4 tasks: 3 done and 1 cancelled")
            && out.contains("would purge 0 archived tasks")
            && out.contains("nothing was changed"),
        "{out}"
    );
    assert_eq!(host.all_tasks().len(), 5, "a dry run moves nothing");

    let (ok, out) = spool_archive(&ws, &["--older-than", "1ms"]);
    assert!(ok, "{out}");
    assert!(
        out.contains("archived 4 tasks: 3 done and 1 cancelled"),
        "{out}"
    );
    let live: Vec<i64> = host
        .all_tasks()
        .iter()
        .map(|t| t["id"].as_i64().unwrap())
        .collect();
    assert_eq!(live, [pending], "listings show the live table");

    let task = host.task(done[0]);
    assert_eq!(task["status"], "done", "{task:#}");
    assert_eq!(task["archived"], true, "{task:#}");
    assert!(task["archived_at"].is_string(), "{task:#}");
    assert_eq!(task["payload"], json!({"i": 0}));
    let live_task = host.task(pending);
    assert_eq!(
        (&live_task["archived"], &live_task["archived_at"]),
        (&json!(false), &Value::Null)
    );
    // A long-poll on an archived task answers at once: it is final.
    let started = Instant::now();
    let (status, waited) = host.get(&format!("/tasks/{}?wait=10s", done[1]));
    assert_eq!((status, &waited["archived"]), (200, &json!(true)));
    assert!(started.elapsed() < Duration::from_secs(5));

    let (status, body) = host.post(&format!("/tasks/{cancelled}/retry"), &json!({}));
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "conflict");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("archived"),
        "{body}"
    );
    let (status, _) = host.post(&format!("/tasks/{}/cancel", done[2]), &json!({}));
    assert_eq!(status, 409);
    let (status, body) = host.get("/tasks/999999");
    assert_eq!((status, &body["error"]["code"]), (404, &json!("not_found")));

    // Nothing is old enough for the purge; a missing SQLite file is refused, not created.
    let (ok, out) = spool_archive(&ws, &["--purge-older-than", "1d", "--dry-run"]);
    assert!(ok && out.contains("would purge 0 archived tasks"), "{out}");
    let output = Command::new(env!("CARGO_BIN_EXE_spool"))
        .args(["archive", "--dry-run", "--database-url"])
        .arg(format!(
            "sqlite://{}",
            ws.dir.path().join("missing.db").display()
        ))
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("no database at"));
}

#[test]
fn claims_keep_flowing_while_the_leader_archives() {
    let ws = Workspace::with_plugins(&["noop"]);
    let finished = {
        let mut host = ws.start(&["--archive", "false"]);
        let ids = enqueue_many(&host, 3000);
        host.eventually("3000 tasks done", || {
            (counts(&host)["done"] == 3000).then_some(())
        });
        // Stopped gracefully, it resigns the leadership: the next host leads at once.
        host.signal("TERM");
        assert!(host.wait_exit(Duration::from_secs(30)));
        ids
    };
    // Archives every 200 ms whatever finished at least 1 ms ago: the 3000 finished tasks in
    // batches of 500, then the new ones as they finish, while the host claims them.
    let host = ws.start(&["--archive-after", "1ms", "--archive-interval", "200ms"]);
    let started = Instant::now();
    let backlog = enqueue_many(&host, 2000);
    host.eventually("the backlog drained and every task archived", || {
        let counts = counts(&host);
        (counts["pending"] == 0 && counts["running"] == 0 && counts["done"] == 0).then_some(())
    });
    let drained = started.elapsed();
    for id in finished
        .iter()
        .step_by(250)
        .chain(backlog.iter().step_by(100))
    {
        let task = host.task(*id);
        assert_eq!(
            (&task["status"], &task["archived"]),
            (&json!("done"), &json!(true)),
            "{task:#}"
        );
    }
    let passes = host.log().matches("archived finished tasks").count();
    assert!(
        passes >= 2,
        "the archiver ran while the backlog drained ({passes} passes in {drained:?}):\n{}",
        host.log()
    );
}
