//! A guest cannot stall or starve the host: what it hands back is bounded and cleaned, its
//! memory is counted per attempt across all its memories and tables, its instances cannot
//! take the pool's slots from other types, its manifest's numbers stay in sane ranges, a
//! snooze cannot spin, and its follow-up tasks are allowed, counted and namespaced.

use serde_json::{Value, json};
use std::time::Duration;

use crate::util::{Workspace, eventually};

const WAIT: Duration = Duration::from_secs(60);
/// The bound on a `retry` or `fail` message (host/src/sandbox/text.rs).
const MESSAGE: usize = 8 << 10;

fn id(task: &Value) -> i64 {
    task["id"].as_i64().unwrap()
}

fn text<'a>(task: &'a Value, field: &str) -> &'a str {
    task[field]
        .as_str()
        .unwrap_or_else(|| panic!("{field} is missing: {task:#}"))
}

/// The last 100 characters of `text`.
fn tail(text: &str) -> String {
    let skip = text.chars().count().saturating_sub(100);
    text.chars().skip(skip).collect()
}

/// Whether `text` holds a control character other than newline and tab.
fn has_raw_controls(text: &str) -> bool {
    text.chars()
        .any(|c| c.is_control() && c != '\n' && c != '\t')
}

/// The peak resident memory of a process, in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[test]
fn what_a_guest_hands_back_is_bounded_and_cleaned_while_other_tasks_complete() {
    let ws = Workspace::with_plugins(&["loud", "noop"]);
    ws.manifest("loud", "memory = \"768MiB\"\nmax_retry = 0\n");
    let host = ws.start(&["--concurrency", "4"]);
    let pid = host.child.as_ref().unwrap().id();
    let before = peak_rss_kib(pid);
    // A 500 MiB `fail` message: read from guest memory only up to its bound.
    let huge = host.enqueue("loud", json!({"fail": 500 << 20}));
    let huge = host.wait_for_status(id(&huge), "failed", WAIT);
    let peak = peak_rss_kib(pid);
    let error = text(&huge, "last_error");
    assert_eq!(huge["attempts"], 1, "fail is permanent: {error:.200}");
    assert!(error.starts_with("xxxxxxxx"), "{error:.200}");
    assert!(
        error.len() < MESSAGE + 100
            && error.ends_with(&format!(
                "[cut: {} bytes in all; {MESSAGE} are kept]",
                500 << 20
            )),
        "{} bytes: …{}",
        error.len(),
        tail(error)
    );
    // The guest filled 500 MiB of its own memory; the host never made a copy of it.
    assert!(
        peak - before < 700 << 10,
        "the host's peak memory grew by {} MiB",
        (peak - before) >> 10
    );

    let others: Vec<i64> = (0..20)
        .map(|i| id(&host.enqueue("noop", json!({ "i": i }))))
        .collect();
    // Control characters that would expand sixfold when escaped as JSON, and NULs a database
    // may refuse, are stored as visible escapes, within the same bound.
    let garbled = host.enqueue("loud", json!({"fail": 1 << 20, "text": "\u{1}\u{0}"}));
    let retried = host.enqueue("loud", json!({"retry": 1 << 20, "text": "é\u{7f}"}));
    let panicked = host.enqueue("loud", json!({"panic": 1 << 20, "text": "\u{1b}[31m"}));
    let logged = host.enqueue("loud", json!({"log": 1 << 20, "text": "\u{0}"}));
    let noted = host.enqueue("loud", json!({"progress": 1 << 20, "text": "\r"}));
    let nul = host.enqueue("loud", json!({"nul_result": true}));
    let large = host.enqueue("loud", json!({"result": 100 << 20}));

    let garbled = host.wait_for_status(id(&garbled), "failed", WAIT);
    let error = text(&garbled, "last_error");
    assert!(error.starts_with("\\u{1}\\u{0}\\u{1}"), "{error:.100}");
    assert!(
        !has_raw_controls(error) && error.len() < MESSAGE + 100,
        "{error:.100}"
    );
    assert!(
        serde_json::to_string(&garbled).unwrap().len() < 4 * MESSAGE,
        "the task's JSON stays small"
    );

    let retried = host.wait_for_status(id(&retried), "failed", WAIT);
    let error = text(&retried, "last_error");
    assert!(error.starts_with("é\\u{7f}é"), "{error:.100}");
    assert!(
        error.contains("[cut: 1048575 bytes in all") && error.len() < MESSAGE + 200,
        "{} bytes: …{}",
        error.len(),
        tail(error)
    );
    assert!(
        error.ends_with("(gave up after 1 attempts)"),
        "{error:.100}"
    );

    let panicked = host.wait_for_status(id(&panicked), "failed", WAIT);
    let error = text(&panicked, "last_error");
    assert!(
        error.contains("trap") && error.contains("\\u{1b}[31m"),
        "{error:.300}"
    );
    assert!(!has_raw_controls(error) && error.len() < MESSAGE + 200);
    let log = text(&panicked, "log");
    assert!(
        !has_raw_controls(log) && log.len() < (64 << 10) + 200,
        "{}",
        log.len()
    );

    let logged = host.wait_for_status(id(&logged), "done", WAIT);
    let log = text(&logged, "log");
    assert!(log.starts_with("[info] \\u{0}\\u{0}"), "{log:.100}");
    assert!(
        !has_raw_controls(log) && log.len() < (64 << 10) + 200,
        "{}",
        log.len()
    );

    let noted = host.wait_for_status(id(&noted), "done", WAIT);
    if let Some(note) = noted["progress_note"].as_str() {
        assert!(
            !has_raw_controls(note) && note.len() < 4096 + 100,
            "{note:.100}"
        );
    }

    let nul = host.wait_for_status(id(&nul), "failed", WAIT);
    assert!(
        text(&nul, "last_error").contains("NUL character at byte 1"),
        "{nul:#}"
    );
    let large = host.wait_for_status(id(&large), "failed", WAIT);
    assert!(
        text(&large, "last_error").contains("(max_result)"),
        "{large:#}"
    );

    for task in others {
        host.wait_for_status(task, "done", WAIT);
    }
}

/// A handler-world component whose handler lives in one core module and which instantiates
/// `memories` more core modules, each defining a memory of `pages` 64 KiB pages. Its `handle`
/// counts down from `spins` (burning fuel, so attempts overlap) and returns `{}`.
fn many_memories(memories: usize, pages: u32, spins: u64) -> Vec<u8> {
    let instances: String = (0..memories)
        .map(|i| format!("  (core instance $m{i} (instantiate $memory))\n"))
        .collect();
    let text = format!(
        r#"(component
  (core module $memory (memory (export "m") {pages}))
{instances}
  (core module $main
    (memory (export "memory") 2)
    (global $next (mut i32) (i32.const 1024))
    ;; The answer `{{}}` at 64, and the return area at 16: ok, pointer 64, length 2.
    (data (i32.const 64) "{{}}")
    (data (i32.const 16) "\00\00\00\00\40\00\00\00\02\00\00\00")
    (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32)
      (local $at i32)
      (local.set $at (i32.and (i32.add (global.get $next) (i32.const 7)) (i32.const -8)))
      (global.set $next (i32.add (local.get $at) (local.get 3)))
      (local.get $at))
    (func (export "handle") (param i64 i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)
      (local $n i64)
      (local.set $n (i64.const {spins}))
      (block $done
        (loop $spin
          (br_if $done (i64.eqz (local.get $n)))
          (local.set $n (i64.sub (local.get $n) (i64.const 1)))
          (br $spin)))
      (i32.const 16)))
  (core instance $main (instantiate $main))
  (type $task-info' (record (field "id" u64) (field "task-type" string) (field "attempt" u32)
    (field "max-attempts" u32) (field "idempotency-key" (option string))))
  (export $task-info "task-info" (type $task-info'))
  (type $failure' (variant (case "retry" string) (case "fail" string) (case "snooze" u32)))
  (export $failure "failure" (type $failure'))
  (type $result (result string (error $failure)))
  (func $handle (param "task" $task-info) (param "payload" string) (result $result)
    (canon lift (core func $main "handle") (memory $main "memory")
      (realloc (func $main "cabi_realloc"))))
  (export "handle" (func $handle))
)"#
    );
    wat::parse_str(text).expect("valid component text")
}

/// A WASI preview1 program whose one module defines `memories` memories of `pages` pages.
fn many_memories_program(memories: usize, pages: u32) -> Vec<u8> {
    let defined: String = (0..memories)
        .map(|_| format!("  (memory {pages})\n"))
        .collect();
    wat::parse_str(format!("(module\n{defined}  (func (export \"_start\")))"))
        .expect("valid module text")
}

#[test]
fn memory_is_capped_per_attempt_across_all_memories() {
    let ws = Workspace::with_plugins(&[]);
    // Seven 1 MiB memories and the handler's own: 7.1 MiB in all, each well under 4 MiB.
    let component = many_memories(7, 16, 0);
    for name in ["tight", "roomy"] {
        std::fs::write(ws.plugin_dir().join(format!("{name}.wasm")), &component).unwrap();
    }
    ws.manifest("tight", "memory = \"4MiB\"\nmax_retry = 0\n");
    ws.manifest("roomy", "memory = \"8MiB\"\nmax_retry = 0\n");
    let host = ws.start(&[]);
    let tight = host.enqueue("tight", json!({}));
    let roomy = host.enqueue("roomy", json!({}));
    let failed = host.wait_for_status(id(&tight), "failed", WAIT);
    let error = text(&failed, "last_error");
    assert!(
        error.starts_with("memory limit")
            && error.contains("(all its linear memories and tables together)")
            && error.contains("4194304 bytes"),
        "{error}"
    );
    host.wait_for_status(id(&roomy), "done", WAIT);
}

#[test]
fn memory_is_capped_per_attempt_without_the_pool_too() {
    let ws = Workspace::with_plugins(&[]);
    // Without the pool a single module may define many memories (the pool allows one).
    std::fs::write(
        ws.plugin_dir().join("multi.wasm"),
        many_memories_program(8, 16),
    )
    .unwrap();
    ws.manifest("multi", "memory = \"4MiB\"\nmax_retry = 0\n");
    std::fs::write(
        ws.plugin_dir().join("swarm.wasm"),
        many_memories_program(100, 1),
    )
    .unwrap();
    ws.manifest("swarm", "max_retry = 0\n");
    let host = ws.start(&["--pooling", "false"]);
    let multi = host.enqueue("multi", json!({}));
    let failed = host.wait_for_status(id(&multi), "failed", WAIT);
    assert!(
        text(&failed, "last_error").starts_with("memory limit"),
        "{failed:#}"
    );
    // However small, no attempt creates more memories than a component may have in the pool.
    let swarm = host.enqueue("swarm", json!({}));
    let failed = host.wait_for_status(id(&swarm), "failed", WAIT);
    assert!(text(&failed, "last_error").contains("memor"), "{failed:#}");
}

#[test]
fn a_type_with_many_memories_cannot_take_the_pool_from_other_types() {
    let ws = Workspace::with_plugins(&["noop"]);
    // Each attempt holds eight memories (the most a component may have) while it spins.
    std::fs::write(
        ws.plugin_dir().join("hog.wasm"),
        many_memories(7, 1, 300_000_000),
    )
    .unwrap();
    ws.manifest("hog", "max_retry = 0\n");
    ws.manifest("noop", "max_retry = 0\n");
    let host = ws.start(&["--concurrency", "4"]);
    let mut tasks: Vec<Value> = (0..3)
        .map(|_| json!({"task_type": "hog", "payload": {}}))
        .collect();
    tasks.extend((0..10).map(|i| json!({"task_type": "noop", "payload": {"i": i}})));
    let (status, body) = host.post("/tasks/batch", &json!({ "tasks": tasks }));
    assert_eq!(status, 201, "{body}");
    for task in body["tasks"].as_array().unwrap() {
        let done = host.wait_final(id(task));
        assert_eq!(done["status"], "done", "{done:#}");
    }
}

#[test]
fn hostile_manifests_are_refused_naming_the_field_and_the_host_serves_on() {
    let ws = Workspace::with_plugins(&["noop", "flaky"]);
    for (task_type, manifest) in [
        ("slow", "rate = 1e-300\n"),
        ("late", "backoff_base = \"400years\"\n"),
        ("never", "backoff_max = \"1000000years\"\n"),
        ("many", "max_retry = 4294967295\n"),
        ("tiny", "memory = 1\n"),
        ("ages", "timeout = \"100years\"\n"),
    ] {
        ws.add_plugin("noop", task_type);
        ws.manifest(task_type, manifest);
    }
    let host = ws.start(&[]);
    let (_, plugins) = host.get("/plugins");
    for (task_type, field) in [
        ("slow", "rate"),
        ("late", "backoff_base"),
        ("never", "backoff_max"),
        ("many", "max_retry"),
        ("tiny", "memory"),
        ("ages", "timeout"),
    ] {
        let error = plugins["unloaded"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["task_type"] == task_type)
            .and_then(|p| p["error"].as_str())
            .unwrap_or_else(|| panic!("{task_type} was not refused: {plugins:#}"));
        assert!(
            error.contains(&format!("invalid manifest: {field} = ")),
            "{task_type}: {error}"
        );
    }
    let task = host.enqueue("noop", json!({}));
    host.wait_for_status(id(&task), "done", WAIT);
}

#[test]
fn snooze_zero_waits_a_second_instead_of_spinning() {
    let ws = Workspace::with_plugins(&["flaky"]);
    let host = ws.start(&[]);
    let task = id(&host.enqueue("flaky", json!({"snooze_seconds": 0})));
    let time = |task: &Value, field: &str| {
        chrono::DateTime::parse_from_rfc3339(text(task, field)).unwrap()
    };
    let mut starts = std::collections::BTreeSet::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    while std::time::Instant::now() < deadline {
        let now = host.task(task);
        if now["status"] == "pending" && now["attempted_at"].is_string() {
            starts.insert(time(&now, "attempted_at"));
            // The second is counted from the attempt's end; the row is written a moment
            // later (the completion writer batches), so `updated_at` may trail by a few ms.
            let wait = time(&now, "next_run_at") - time(&now, "updated_at");
            assert!(
                wait >= chrono::Duration::milliseconds(900),
                "snoozed for {wait:?}: {now:#}"
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        (1..=4).contains(&starts.len()),
        "{} attempts in 3 s",
        starts.len()
    );
    // Each attempt starts at least the shortest snooze after the one before it started.
    let starts: Vec<_> = starts.into_iter().collect();
    for pair in starts.windows(2) {
        assert!(
            pair[1] - pair[0] >= chrono::Duration::seconds(1),
            "attempts {} and {} are less than a second apart",
            pair[0],
            pair[1]
        );
    }
}

#[test]
fn a_fork_bomb_is_contained_by_the_manifest() {
    let ws = Workspace::with_plugins(&["forkbomb", "noop"]);
    let host = ws.start(&[]);
    // Without an [enqueue] section, nothing may be enqueued: not even itself.
    let bomb = host.enqueue("forkbomb", json!({"copies": 1000}));
    let done = host.wait_for_status(id(&bomb), "done", WAIT);
    assert_eq!(done["result"]["enqueued"], json!([]), "{done:#}");
    let error = done["result"]["errors"][0].as_str().unwrap();
    assert!(
        error.contains("task type `forkbomb` may enqueue no follow-ups"),
        "{error}"
    );
    assert_eq!(host.all_tasks().len(), 1);

    // Allowed to enqueue `noop`: five per attempt, 100 KiB of payload, priority up to 3.
    ws.manifest(
        "forkbomb",
        "priority = 3\n[enqueue]\nallow = [\"noop\"]\nmax_tasks = 5\nmax_bytes = \"100KiB\"\n",
    );
    eventually(WAIT, "the manifest to load", || {
        let (_, plugins) = host.get("/plugins");
        plugins["plugins"]
            .as_array()?
            .iter()
            .find(|p| p["task_type"] == "forkbomb")
            .filter(|p| p["capabilities"]["enqueue"]["max_tasks"] == 5)
            .map(|_| ())
    });
    let bomb = host.enqueue(
        "forkbomb",
        json!({"copies": 1000, "task_type": "noop", "priority": i32::MAX, "key": "order-"}),
    );
    let done = host.wait_for_status(id(&bomb), "done", WAIT);
    let children = done["result"]["enqueued"].as_array().unwrap().clone();
    assert_eq!(children.len(), 5, "{done:#}");
    assert!(
        done["result"]["errors"][0]
            .as_str()
            .unwrap()
            .contains("[enqueue] max_tasks"),
        "{done:#}"
    );
    for (n, child) in children.iter().enumerate() {
        let child = host.wait_for_status(child.as_i64().unwrap(), "done", WAIT);
        assert_eq!(child["priority"], 3, "clamped to the type's range");
        assert_eq!(
            child["idempotency_key"],
            format!("guest:forkbomb:order-{n}"),
            "a key of the guest's own"
        );
    }
    // A caller's key is the caller's: the guest's `order-0` did not take it.
    let (status, mine) = host.post(
        "/tasks",
        &json!({"task_type": "noop", "payload": {}, "idempotency_key": "order-0"}),
    );
    assert_eq!(status, 201, "{mine}");
    assert!(!children.contains(&mine["id"]));

    // Itself is still not allowed, and payloads count against the attempt's bytes.
    let bomb = host.enqueue("forkbomb", json!({"copies": 3}));
    let done = host.wait_for_status(id(&bomb), "done", WAIT);
    assert!(
        done["result"]["errors"][0]
            .as_str()
            .unwrap()
            .contains("may enqueue only noop"),
        "{done:#}"
    );
    let bomb = host.enqueue(
        "forkbomb",
        json!({"copies": 3, "task_type": "noop", "pad": 60_000}),
    );
    let done = host.wait_for_status(id(&bomb), "done", WAIT);
    assert_eq!(done["result"]["enqueued"].as_array().unwrap().len(), 1);
    assert!(
        done["result"]["errors"][0]
            .as_str()
            .unwrap()
            .contains("[enqueue] max_bytes"),
        "{done:#}"
    );
}

#[test]
fn a_type_that_enqueues_itself_stops_at_its_depth_limit() {
    let ws = Workspace::with_plugins(&["forkbomb"]);
    // Two copies of itself per attempt, three generations below the root: 1 + 2 + 4 + 8.
    ws.manifest(
        "forkbomb",
        "[enqueue]\nallow = [\"forkbomb\"]\nmax_tasks = 2\nmax_depth = 3\n",
    );
    let host = ws.start(&[]);
    let root = host.enqueue("forkbomb", json!({"copies": 2}));
    assert_eq!(root["depth"], 0, "{root:#}");
    // A parent is done only after its follow-ups are enqueued: once all 15 are done, the
    // tree is whole.
    let tasks = eventually(WAIT, "the tree of follow-ups to finish", || {
        let tasks = host.all_tasks();
        (tasks.len() == 15 && tasks.iter().all(|t| t["status"] == "done")).then_some(tasks)
    });
    let mut per_depth = [0; 4];
    for task in &tasks {
        let depth = task["depth"].as_u64().unwrap() as usize;
        per_depth[depth] += 1;
        let result = &task["result"];
        if depth < 3 {
            assert_eq!(result["enqueued"].as_array().unwrap().len(), 2, "{task:#}");
        } else {
            assert_eq!(result["enqueued"], json!([]), "{task:#}");
            let error = result["errors"][0].as_str().unwrap();
            assert!(
                error.contains("3 follow-ups deep") && error.contains("max_depth = 3"),
                "{error}"
            );
        }
    }
    assert_eq!(per_depth, [1, 2, 4, 8]);
}

#[test]
fn an_outcome_the_database_refuses_fails_its_task_and_others_complete() {
    let ws = Workspace::with_plugins(&["loud", "noop"]);
    ws.manifest("loud", "memory = \"768MiB\"\nmax_retry = 3\n");
    let host = ws.start(&["--max-result", "256MiB"]);
    // 170 MiB of control characters: six times that as the JSON text SQLite gets, past the
    // most it stores in one value. Whatever batch it lands in, only its own task fails.
    let tasks: Vec<Value> = (0..30)
        .map(|i| json!({"task_type": "noop", "payload": {"i": i}}))
        .chain([json!({"task_type": "loud", "payload": {"result": 170 << 20, "text": "\u{1}"}})])
        .chain((30..60).map(|i| json!({"task_type": "noop", "payload": {"i": i}})))
        .collect();
    let (status, body) = host.post("/tasks/batch", &json!({ "tasks": tasks }));
    assert_eq!(status, 201, "{body}");
    let ids: Vec<i64> = body["tasks"].as_array().unwrap().iter().map(id).collect();
    let poison = host.wait_final(ids[30]);
    assert_eq!(poison["status"], "failed", "{poison:#}");
    assert!(
        text(&poison, "last_error")
            .starts_with("the database refused to store this attempt's outcome"),
        "{poison:#}"
    );
    assert_eq!(poison["result"], Value::Null);
    assert_eq!(poison["retry_count"], 0, "failed at once, not retried");
    assert_eq!(poison["history"][0]["outcome"], "fail", "{poison:#}");
    for (i, task) in ids.iter().enumerate().filter(|(i, _)| *i != 30) {
        let done = host.wait_for_status(*task, "done", WAIT);
        assert_eq!(done["result"]["i"], if i < 30 { i } else { i - 1 });
    }
    let task = host.enqueue("noop", json!({"after": true}));
    host.wait_for_status(id(&task), "done", WAIT);
}

#[test]
fn a_type_at_its_key_value_caps_gets_a_clear_error_and_others_are_unaffected() {
    let ws = Workspace::with_plugins(&["counter"]);
    ws.add_plugin("counter", "other_counter");
    ws.manifest(
        "counter",
        "max_retry = 0\n[kv]\nmax_keys = 2\nmax_bytes = 300\n",
    );
    let host = ws.start(&[]);
    let count = |task_type: &str, key: &str| {
        let task = host.enqueue(task_type, json!({ "key": key }));
        host.wait_final(id(&task))
    };
    assert_eq!(count("counter", "a")["result"]["value"], 1);
    assert_eq!(count("counter", "b")["result"]["value"], 1);
    assert_eq!(
        count("counter", "a")["result"]["value"],
        2,
        "an existing key"
    );
    let third = count("counter", "c");
    assert_eq!(third["status"], "failed", "{third:#}");
    assert!(
        text(&third, "last_error")
            .contains("`kv-set` refused: task type `counter` keeps 2 keys in its key-value store, the most it may (kv.max_keys = 2)"),
        "{third:#}"
    );
    // Deleting makes room; a key too long for the bytes left is refused too.
    let deleted = host.enqueue("counter", json!({"delete": "b"}));
    host.wait_for_status(id(&deleted), "done", WAIT);
    let long = count("counter", &"k".repeat(400));
    assert!(
        text(&long, "last_error").contains("past its limit of 300 (kv.max_bytes)"),
        "{long:#}"
    );
    assert_eq!(count("counter", "c")["result"]["value"], 1);
    // Another type keeps its own store, with the host's defaults.
    for key in ["a", "b", "c", "d"] {
        assert_eq!(count("other_counter", key)["result"]["value"], 1);
    }
}

#[test]
fn a_task_that_snoozes_for_ever_runs_out_of_snoozes() {
    let ws = Workspace::with_plugins(&["flaky"]);
    ws.manifest(
        "flaky",
        "max_snoozes = 2\nmax_retry = 1\nbackoff_base = \"10ms\"\n",
    );
    let host = ws.start(&[]);
    let task = host.enqueue("flaky", json!({"snooze_seconds": 0}));
    let failed = host.wait_for_status(id(&task), "failed", WAIT);
    let error = text(&failed, "last_error");
    assert!(
        error.contains("snoozed 2 times in a row, the most its type allows (max_snoozes = 2)"),
        "{failed:#}"
    );
    // Two snoozes, a failed attempt (one retry), two more snoozes, and the last failure.
    assert_eq!(failed["retry_count"], 1, "{failed:#}");
    assert_eq!(failed["attempts"], 6, "{failed:#}");
    let outcomes: Vec<&str> = failed["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(
        outcomes,
        ["snooze", "snooze", "retry", "snooze", "snooze", "retry"]
    );
}
