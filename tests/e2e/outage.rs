//! The task database goes away for a while: another process holds SQLite's write lock for
//! longer than the host's busy timeout (as a backup tool or a long migration would). Requests
//! meanwhile fail with a clear error and change nothing; completions of tasks that finish
//! meanwhile wait and are written once the database is back; nothing is lost or run twice.

use serde_json::json;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::Workspace;

/// Holds an exclusive transaction on the database given as argv[1] for argv[2] seconds.
const HOLD_WRITE_LOCK: &str = r#"
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
db.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
db.execute("COMMIT")
"#;

/// Twice the host's 10 s busy timeout, so statements queued behind a failed one fail too.
const OUTAGE: Duration = Duration::from_secs(22);

#[test]
fn a_database_locked_by_another_process_loses_nothing() {
    let ws = Workspace::with_plugins(&["sleepy"]);
    let host = ws.start(&[]);
    let ids: Vec<i64> = (0..8)
        .map(|i| {
            host.enqueue("sleepy", json!({"ms": 1000 + 250 * i}))["id"]
                .as_i64()
                .unwrap()
        })
        .collect();
    host.eventually("tasks running", || {
        let running = ids
            .iter()
            .filter(|id| host.task(**id)["status"] == "running")
            .count();
        (running > 0).then_some(())
    });

    let db = ws.dir.path().join("spool.db");
    let mut locker = Command::new("python3")
        .args(["-c", HOLD_WRITE_LOCK])
        .arg(&db)
        .arg(OUTAGE.as_secs().to_string())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    let mut line = String::new();
    BufReader::new(locker.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "locked");
    let outage = Instant::now();

    // An enqueue during the outage is refused with a clear error, and leaves no row.
    let (status, body) = host.post(
        "/tasks",
        &json!({"task_type": "sleepy", "payload": {"ms": 1}}),
    );
    assert!(
        outage.elapsed() < OUTAGE,
        "the refusal came after the outage ended; lengthen it"
    );
    assert_eq!(status, 503, "{body:#}");
    assert_eq!(body["error"]["code"], "unavailable", "{body:#}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("nothing was changed"),
        "{body:#}"
    );

    assert!(locker.wait().unwrap().success(), "the lock holder failed");
    // The running tasks finished during the outage; their completions are written now, and
    // every task is done after exactly one attempt: nothing lost, nothing run twice.
    for id in &ids {
        let task = host.wait_for_status(*id, "done", Duration::from_secs(60));
        assert_eq!(task["attempts"], 1, "{task:#}");
    }
    assert_eq!(
        host.all_tasks().len(),
        ids.len(),
        "the refused enqueue left no row"
    );
    let log = host.log();
    assert!(
        log.matches("database is locked").count() >= 2,
        "the host's own writes failed too:\n{log}"
    );

    // And the host works as before.
    let after = host.enqueue("sleepy", json!({"ms": 1}));
    host.wait_for_status(
        after["id"].as_i64().unwrap(),
        "done",
        Duration::from_secs(30),
    );
    let (status, health) = host.get("/health");
    assert_eq!(status, 200, "{health:#}");
}
