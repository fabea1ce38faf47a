//! Deploying a handler once for every host: real `spool serve` processes with empty plugin
//! folders on one database, builds sent through one host with the `spool deploy` CLI, and
//! every host serving them. On PostgreSQL the hosts poll only every 30 s, so a host serving a
//! deploy within seconds shows the `spool_deploy` notification at work; on MariaDB and on a
//! shared SQLite file they see it at their poll interval.
//!
//! A canary runs its share of the attempts beside the stable build, never a task's last
//! attempt (so a broken candidate costs retries, not dead letters); promote and rollback reach
//! every host; a deployment shadows a folder file of the same type; a host with no plugin
//! folder serves what is deployed; bad builds and missing rights are refused and change
//! nothing.

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::path::PathBuf;
use std::time::Duration;

use crate::servers::{self, Backend};
use crate::util::{Host, Workspace, artifact, eventually};

/// The deployed task type.
const TYPE: &str = "work";

/// Retries with a short backoff, so a task whose attempt ran a broken candidate is retried
/// within the test.
const MANIFEST: &str = "max_retry = 4\nbackoff_base = \"10ms\"\nbackoff_max = \"50ms\"\n";

fn digest_of(build: &str) -> String {
    hex::encode(Sha256::digest(std::fs::read(artifact(build)).unwrap()))
}

/// `build`'s component with [`MANIFEST`] beside it, in the workspace (so `spool deploy` reads
/// the manifest next to the file).
fn staged(ws: &Workspace, build: &str) -> PathBuf {
    let dir = ws.dir.path().join("builds").join(build);
    std::fs::create_dir_all(&dir).unwrap();
    let wasm = dir.join(format!("{TYPE}.wasm"));
    std::fs::copy(artifact(build), &wasm).unwrap();
    std::fs::write(wasm.with_extension("toml"), MANIFEST).unwrap();
    wasm
}

/// Runs the `spool` CLI against `host` ([`Host::cli`]).
fn spool(host: &Host, args: &[&str], env: &[(&str, &str)]) -> (bool, String) {
    host.cli(args, env)
}

fn deploy(host: &Host, ws: &Workspace, build: &str, canary: Option<u8>) -> String {
    let wasm = staged(ws, build);
    let mut args = vec!["deploy".to_string(), wasm.display().to_string()];
    if let Some(percent) = canary {
        args.extend(["--canary".into(), percent.to_string()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (ok, out) = spool(host, &args, &[]);
    assert!(ok, "spool deploy failed: {out}");
    out
}

/// What `host` serves for [`TYPE`]: the stable build's digest and the candidate's, if any.
fn served(host: &Host) -> Option<(String, Option<String>)> {
    let (status, body) = host.get("/plugins");
    assert_eq!(status, 200, "{body}");
    let plugin = body["plugins"]
        .as_array()?
        .iter()
        .find(|p| p["task_type"] == TYPE)?
        .clone();
    Some((
        plugin["version"].as_str()?.to_string(),
        plugin["candidate"]["digest"].as_str().map(str::to_string),
    ))
}

/// Waits until every host serves `stable` (and `candidate`).
fn until_served(hosts: &[Host], stable: &str, candidate: Option<&str>, within: Duration) {
    for host in hosts {
        eventually(within, "the deployment to be served", || {
            let (serving, trial) = served(host)?;
            (serving == stable && trial.as_deref() == candidate).then_some(())
        });
    }
}

/// The builds each attempt of `id` ran, in order.
fn attempt_builds(host: &Host, id: i64) -> Vec<String> {
    let (status, task) = host.get(&format!("/tasks/{id}"));
    assert_eq!(status, 200, "{task}");
    task["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["plugin_version"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// Enqueues `count` tasks of [`TYPE`] through `host` and waits until each is done.
fn run_tasks(host: &Host, count: usize) -> Vec<i64> {
    let requests: Vec<Value> = (0..count)
        .map(|i| json!({"task_type": TYPE, "payload": {"i": i}}))
        .collect();
    let ids = host.enqueue_all(&requests);
    for id in &ids {
        let task = host.wait_final(*id);
        assert_eq!(task["status"], "done", "{task}");
    }
    ids
}

/// `n` hosts with empty plugin folders on `url` (each workspace of its own, for its log).
fn hosts_on(url: &str, n: usize, flags: &[&str]) -> (Vec<Workspace>, Vec<Host>) {
    let workspaces: Vec<Workspace> = (0..n)
        .map(|_| Workspace::with_plugins(&[]).on_database(url.to_string()))
        .collect();
    let hosts = workspaces.iter().map(|ws| ws.start(flags)).collect();
    (workspaces, hosts)
}

fn one_deploy_reaches_every_host(url: &str, n: usize, flags: &[&str]) {
    let (workspaces, hosts) = hosts_on(url, n, flags);
    for host in &hosts {
        assert!(served(host).is_none(), "nothing is deployed yet");
    }
    let out = deploy(&hosts[0], &workspaces[0], "noop", None);
    assert!(out.contains("deployed work version 1"), "{out}");
    let noop = digest_of("noop");
    until_served(&hosts, &noop, None, Duration::from_secs(10));
    let ids = run_tasks(&hosts[n - 1], 300);
    for id in ids.iter().step_by(30) {
        assert_eq!(attempt_builds(&hosts[0], *id), std::slice::from_ref(&noop));
    }
    // The attempts are spread over the hosts: each ran the deployed build.
    let (_, plugins) = hosts[1].get("/plugins");
    let plugin = &plugins["plugins"][0];
    assert_eq!(plugin["source"], "deployment", "{plugins}");
    assert_eq!(plugin["deployed_version"], 1);
}

#[test]
fn one_deploy_reaches_three_hosts_on_postgres_by_notification() {
    let Some(url) =
        servers::url(Backend::Postgres).map(|_| servers::fresh_database(Backend::Postgres))
    else {
        return;
    };
    // Polling every 30 s: only the notification can bring the deploy within the 10 s waited.
    one_deploy_reaches_every_host(&url, 3, &["--poll-interval", "30s"]);
}

#[test]
fn one_deploy_reaches_two_hosts_on_mariadb() {
    let Some(url) = servers::url(Backend::MySql).map(|_| servers::fresh_database(Backend::MySql))
    else {
        return;
    };
    one_deploy_reaches_every_host(&url, 2, &[]);
}

#[test]
fn one_deploy_reaches_two_hosts_on_one_sqlite_file() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("shared.db").display());
    one_deploy_reaches_every_host(&url, 2, &[]);
}

#[test]
fn a_canary_shares_the_attempts_and_promote_and_rollback_reach_every_host_on_postgres() {
    let Some(url) =
        servers::url(Backend::Postgres).map(|_| servers::fresh_database(Backend::Postgres))
    else {
        return;
    };
    // Promotion and rollback by hand only: the leader's verdict waits for more attempts than
    // the test runs (its own test is below).
    let (workspaces, hosts) = hosts_on(&url, 3, &["--canary-min-attempts", "1000000"]);
    let (noop, trap, clock) = (digest_of("noop"), digest_of("trap"), digest_of("clock"));
    deploy(&hosts[0], &workspaces[0], "noop", None);
    // A broken candidate on half the attempts.
    let out = deploy(&hosts[1], &workspaces[1], "trap", Some(50));
    assert!(
        out.contains("version 2 runs 50% of its attempts on trial"),
        "{out}"
    );
    until_served(&hosts, &noop, Some(&trap), Duration::from_secs(10));
    let ids = run_tasks(&hosts[2], 200);
    let (mut first_on_trap, mut retried) = (0, 0);
    for id in &ids {
        let builds = attempt_builds(&hosts[0], *id);
        first_on_trap += usize::from(builds[0] == trap);
        retried += usize::from(builds.len() > 1);
        // Whatever ran before, the attempt that finished it ran the stable build.
        assert_eq!(builds.last(), Some(&noop), "task {id}: {builds:?}");
    }
    // Half the first attempts, give or take: far from none and far from all.
    assert!(
        (50..=150).contains(&first_on_trap),
        "{first_on_trap} of 200 first attempts ran the candidate"
    );
    assert!(retried > 0);

    let (ok, out) = spool(&hosts[2], &["rollback", TYPE, "--reason", "it traps"], &[]);
    assert!(ok, "{out}");
    assert!(
        out.contains("rolled back: work serves version 1 on every host"),
        "{out}"
    );
    until_served(&hosts, &noop, None, Duration::from_secs(10));
    for id in run_tasks(&hosts[0], 60) {
        assert_eq!(attempt_builds(&hosts[1], id), std::slice::from_ref(&noop));
    }

    deploy(&hosts[0], &workspaces[0], "clock", Some(50));
    until_served(&hosts, &noop, Some(&clock), Duration::from_secs(10));
    let (ok, out) = spool(&hosts[1], &["promote", TYPE], &[]);
    assert!(ok, "{out}");
    assert!(
        out.contains("promoted: work serves version 3 on every host"),
        "{out}"
    );
    until_served(&hosts, &clock, None, Duration::from_secs(10));
    for id in run_tasks(&hosts[2], 30) {
        assert_eq!(attempt_builds(&hosts[0], id), std::slice::from_ref(&clock));
    }

    let (ok, out) = spool(&hosts[0], &["versions", TYPE], &[]);
    assert!(ok, "{out}");
    assert!(
        out.starts_with("work serves version 3 on every host\n"),
        "{out}"
    );
    for expected in [
        "      3  stable",
        "      2  kept",
        "      1  kept",
        "promote  version 3   by open from 127.0.0.1",
        "canary   version 3",
        "rollback version 2   by open from 127.0.0.1: it traps",
        "canary   version 2",
        "deploy   version 1",
    ] {
        assert!(out.contains(expected), "no {expected:?} in:\n{out}");
    }
    // Back to a named version.
    let (ok, out) = spool(&hosts[0], &["rollback", TYPE, "--to", "1"], &[]);
    assert!(ok, "{out}");
    until_served(&hosts, &noop, None, Duration::from_secs(10));
}

/// A deploy form with `component` and optionally `manifest`.
fn form(component: Vec<u8>, manifest: Option<&str>) -> reqwest::blocking::multipart::Form {
    let mut form = reqwest::blocking::multipart::Form::new().part(
        "component",
        reqwest::blocking::multipart::Part::bytes(component).file_name("work.wasm"),
    );
    if let Some(manifest) = manifest {
        form = form.text("manifest", manifest.to_string());
    }
    form
}

fn post_deploy(
    host: &Host,
    task_type: &str,
    token: Option<&str>,
    form: reqwest::blocking::multipart::Form,
) -> (u16, Value) {
    let mut request = host
        .http
        .post(format!("{}/plugins/{task_type}/deploy", host.url))
        .multipart(form);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().unwrap();
    let status = response.status().as_u16();
    (status, response.json().unwrap_or(Value::Null))
}

#[test]
fn bad_builds_and_missing_rights_are_refused_and_change_nothing() {
    let ws = Workspace::with_plugins(&[]);
    let host = ws.start(&[
        "--api-token",
        "api-secret",
        "--read-token",
        "read-secret",
        "--deploy-token",
        "deploy-secret",
        "--max-plugin-size",
        "1MiB",
    ]);
    let noop = std::fs::read(artifact("noop")).unwrap();
    let deployer = Some("deploy-secret");
    // Refused before the form is read: a small one, so it is sent whole before the answer.
    let tiny = b"\0asm".to_vec();
    let cases: Vec<(
        &str,
        Option<&str>,
        reqwest::blocking::multipart::Form,
        u16,
        &str,
    )> = vec![
        (
            TYPE,
            deployer,
            form(b"not a component".to_vec(), None),
            422,
            "invalid_plugin",
        ),
        (
            TYPE,
            deployer,
            form(std::fs::read(artifact("wrongworld")).unwrap(), None),
            422,
            "invalid_plugin",
        ),
        (
            TYPE,
            deployer,
            form(vec![0; (1 << 20) + 1], None),
            413,
            "payload_too_large",
        ),
        (
            TYPE,
            deployer,
            form(noop.clone(), Some("max_retyr = 3\n")),
            422,
            "invalid_plugin",
        ),
        (
            "bad.name",
            deployer,
            form(tiny.clone(), None),
            400,
            "invalid_request",
        ),
        (TYPE, None, form(tiny.clone(), None), 401, "unauthorized"),
        (
            TYPE,
            Some("read-secret"),
            form(tiny.clone(), None),
            401,
            "unauthorized",
        ),
        (
            TYPE,
            Some("api-secret"),
            form(tiny.clone(), None),
            403,
            "deploy_token_required",
        ),
    ];
    for (index, (task_type, token, form, status, code)) in cases.into_iter().enumerate() {
        let (got, body) = post_deploy(&host, task_type, token, form);
        assert_eq!(
            (got, body["error"]["code"].as_str()),
            (status, Some(code)),
            "case {index}: {body}"
        );
        assert!(
            !body["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .is_empty()
        );
    }
    // A form without the component, and a canary with nothing stable to compare with.
    let no_component = reqwest::blocking::multipart::Form::new().text("manifest", "");
    let (got, body) = post_deploy(&host, TYPE, deployer, no_component);
    assert_eq!(got, 422, "{body}");
    let canary = form(noop.clone(), None).text("canary", "25");
    let (got, body) = post_deploy(&host, TYPE, deployer, canary);
    assert_eq!(
        (got, body["error"]["code"].as_str()),
        (409, Some("conflict")),
        "{body}"
    );
    // Nothing changed.
    let read = host
        .http
        .get(format!("{}/plugins/{TYPE}/versions", host.url))
        .bearer_auth("read-secret")
        .send()
        .unwrap();
    assert_eq!(read.status().as_u16(), 404);

    // The CLI with the deploy token deploys, and the history names the right used.
    let wasm = staged(&ws, "noop");
    let (ok, out) = spool(
        &host,
        &["deploy", &wasm.display().to_string()],
        &[
            ("SPOOL_API_TOKEN", "api-secret"),
            ("SPOOL_DEPLOY_TOKEN", "deploy-secret"),
        ],
    );
    assert!(ok, "{out}");
    let (ok, out) = spool(
        &host,
        &["versions", TYPE],
        &[("SPOOL_API_TOKEN", "api-secret")],
    );
    assert!(ok, "{out}");
    assert!(
        out.contains("deploy   version 1   by deploy from 127.0.0.1"),
        "{out}"
    );
    // Nor can the CLI deploy with the API token alone; it says why.
    let (ok, out) = spool(
        &host,
        &["deploy", &wasm.display().to_string()],
        &[("SPOOL_API_TOKEN", "api-secret")],
    );
    assert!(!ok);
    assert!(out.contains("deploy_token_required"), "{out}");
    // The API token alone cannot roll back either.
    let (ok, out) = spool(
        &host,
        &["rollback", TYPE],
        &[("SPOOL_API_TOKEN", "api-secret")],
    );
    assert!(!ok);
    assert!(out.contains("deploy_token_required"), "{out}");
}

#[test]
fn a_deployment_shadows_the_folder_file_and_a_host_without_a_folder_serves_it() {
    let ws = Workspace::with_plugins(&[]);
    ws.add_plugin("noop", TYPE);
    let host = ws.start(&[]);
    let noop = digest_of("noop");
    assert_eq!(served(&host), Some((noop.clone(), None)));
    deploy(&host, &ws, "clock", None);
    let clock = digest_of("clock");
    until_served(
        std::slice::from_ref(&host),
        &clock,
        None,
        Duration::from_secs(10),
    );
    let (_, plugins) = host.get("/plugins");
    let plugin = &plugins["plugins"][0];
    assert_eq!(plugin["source"], "deployment", "{plugins}");
    let shadowed = plugin["shadowed_file"].as_str().unwrap();
    assert!(shadowed.ends_with("plugins/work.wasm"), "{shadowed}");
    for id in run_tasks(&host, 5) {
        assert_eq!(attempt_builds(&host, id), std::slice::from_ref(&clock));
    }

    // A second host on the same file with no plugin folder at all serves the deployment.
    let bare = Workspace::with_plugins(&[]).on_database(ws.database_url());
    std::fs::remove_dir(bare.plugin_dir()).unwrap();
    let second = bare.start(&[]);
    assert_eq!(served(&second), Some((clock.clone(), None)));
    let log = second.log();
    assert!(
        log.contains("no plugin folder; serving the types deployed through the database"),
        "{log}"
    );

    // Removed from the database: the folder's file serves again; the host without one has
    // nothing left to serve; the versions and the history stay.
    let (ok, out) = spool(&host, &["undeploy", TYPE], &[]);
    assert!(ok, "{out}");
    assert!(
        out.contains("work is no longer served from the database"),
        "{out}"
    );
    until_served(
        std::slice::from_ref(&host),
        &noop,
        None,
        Duration::from_secs(10),
    );
    let (_, plugins) = host.get("/plugins");
    assert_eq!(plugins["plugins"][0]["source"], "folder", "{plugins}");
    eventually(
        Duration::from_secs(10),
        "the deployment gone from the bare host",
        || served(&second).is_none().then_some(()),
    );
    assert_eq!(history(&host)[0]["action"], "remove");
    let (ok, out) = spool(&host, &["undeploy", TYPE], &[]);
    assert!(!ok);
    assert!(out.contains("is not deployed"), "{out}");
    // A deploy serves it again.
    deploy(&host, &ws, "clock", None);
    until_served(
        std::slice::from_ref(&second),
        &clock,
        None,
        Duration::from_secs(10),
    );
}

/// The deployment history of [`TYPE`], newest first.
fn history(host: &Host) -> Vec<Value> {
    let (status, body) = host.get(&format!("/plugins/{TYPE}/versions"));
    assert_eq!(status, 200, "{body}");
    body["history"].as_array().unwrap().clone()
}

/// Enqueues `count` tasks of [`TYPE`] without waiting for them.
fn enqueue_tasks(host: &Host, count: usize) -> Vec<i64> {
    let requests: Vec<Value> = (0..count)
        .map(|i| json!({"task_type": TYPE, "payload": {"i": i}}))
        .collect();
    host.enqueue_all(&requests)
}

/// Short trials, and a short lease so leadership moves within seconds of a kill.
const JUDGED: &[&str] = &[
    "--canary-min-attempts",
    "20",
    "--canary-duration",
    "10s",
    "--lease",
    "3s",
    "--rescue-interval",
    "1s",
];

#[test]
fn the_leader_rolls_back_a_failing_candidate_and_promotes_a_sound_one_once_despite_a_kill_on_postgres()
 {
    let Some(url) =
        servers::url(Backend::Postgres).map(|_| servers::fresh_database(Backend::Postgres))
    else {
        return;
    };
    let (workspaces, mut hosts) = hosts_on(&url, 3, JUDGED);
    let (noop, trap, clock) = (digest_of("noop"), digest_of("trap"), digest_of("clock"));
    deploy(&hosts[0], &workspaces[0], "noop", None);
    until_served(&hosts, &noop, None, Duration::from_secs(10));

    // A trapping candidate on a quarter of the attempts: rolled back by the leader alone.
    deploy(&hosts[1], &workspaces[1], "trap", Some(25));
    until_served(&hosts, &noop, Some(&trap), Duration::from_secs(10));
    let first = enqueue_tasks(&hosts[2], 400);
    let rollback = eventually(
        Duration::from_secs(60),
        "the candidate to be rolled back",
        || {
            history(&hosts[0])
                .into_iter()
                .find(|event| event["action"] == "rollback")
        },
    );
    assert_eq!(rollback["right"], "leader", "{rollback}");
    assert_eq!(rollback["version"], 2);
    let detail = rollback["detail"].as_str().unwrap();
    assert!(
        detail.starts_with("candidate version 2: ") && detail.contains("past the limit of 10"),
        "{detail}"
    );
    until_served(&hosts, &noop, None, Duration::from_secs(10));
    for id in &first {
        let task = hosts[0].wait_final(*id);
        assert_eq!(task["status"], "done", "{task}");
    }
    for id in run_tasks(&hosts[1], 40) {
        assert_eq!(attempt_builds(&hosts[1], id), std::slice::from_ref(&noop));
    }
    // The rollback went to the alert channels (and the alert log).
    let (_, alerts) = hosts[0].get("/alerts");
    let sent = alerts["recent"].as_array().unwrap();
    assert!(
        sent.iter()
            .any(|a| a["alert"] == "canary:work" && a["event"] == "rollback"),
        "{alerts}"
    );

    // What each build cost, over every host (written every 2 s).
    let figures = |number: u64| {
        let (_, view) = hosts[1].get(&format!("/plugins/{TYPE}/versions"));
        view["versions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["number"] == number)
            .map(|v| v["figures"].clone())
            .unwrap()
    };
    let trapped = eventually(Duration::from_secs(10), "the candidate's figures", || {
        let f = figures(2);
        (f["attempts"].as_u64()? >= 20).then_some(f)
    });
    assert_eq!(trapped["failures"], trapped["attempts"], "{trapped}");
    let stable = figures(1);
    assert!(stable["attempts"].as_u64().unwrap() > 0, "{stable}");
    assert_eq!(stable["failures"], 0, "{stable}");
    assert!(stable["peak_memory"].as_u64().unwrap() > 0, "{stable}");
    assert!(stable["mean_fuel"].as_u64().unwrap() > 0, "{stable}");
    assert!(stable["p50_ms"].is_u64(), "{stable}");

    // A sound candidate on half the attempts; the leader is killed during its trial.
    deploy(&hosts[0], &workspaces[0], "clock", Some(50));
    until_served(&hosts, &noop, Some(&clock), Duration::from_secs(10));
    run_tasks(&hosts[2], 100);
    let leader = hosts[0].leader().expect("a leader");
    let index = hosts
        .iter()
        .position(|host| host.host_id() == leader)
        .expect("the leader is one of the hosts");
    hosts[index].kill();
    let survivors: Vec<Host> = hosts
        .into_iter()
        .enumerate()
        .filter(|(i, _)| *i != index)
        .map(|(_, host)| host)
        .collect();
    run_tasks(&survivors[0], 60);
    eventually(
        Duration::from_secs(60),
        "the candidate to be promoted",
        || {
            history(&survivors[0])
                .into_iter()
                .find(|event| event["action"] == "promote")
        },
    );
    until_served(&survivors, &clock, None, Duration::from_secs(10));
    // Once: one promotion, by a leader, of version 3.
    std::thread::sleep(Duration::from_secs(3));
    let promotions: Vec<Value> = history(&survivors[1])
        .into_iter()
        .filter(|event| event["action"] == "promote")
        .collect();
    assert_eq!(promotions.len(), 1, "{promotions:?}");
    assert_eq!(promotions[0]["right"], "leader");
    assert_eq!(promotions[0]["version"], 3);
    assert!(
        promotions[0]["detail"]
            .as_str()
            .unwrap()
            .contains("within the limit of 10"),
        "{promotions:?}"
    );
}

/// How many times the hosts' logs say a build of [`TYPE`] was compiled rather than loaded.
fn compiles(hosts: &[Host]) -> usize {
    hosts
        .iter()
        .map(|host| {
            host.log()
                .lines()
                .filter(|line| line.contains("loaded plugin deployment:work@"))
                .filter(|line| line.contains("cache=Compiled"))
                .count()
        })
        .sum()
}

#[test]
fn three_hosts_compile_a_deployed_build_once_on_postgres() {
    let Some(url) =
        servers::url(Backend::Postgres).map(|_| servers::fresh_database(Backend::Postgres))
    else {
        return;
    };
    // Each host with a compiled-code cache of its own, as on three machines.
    let workspaces: Vec<Workspace> = (0..3)
        .map(|_| Workspace::with_plugins(&[]).on_database(url.clone()))
        .collect();
    let hosts: Vec<Host> = workspaces
        .iter()
        .map(|ws| {
            let cache = ws.dir.path().join("cache").display().to_string();
            ws.start(&["--cache-dir", &cache])
        })
        .collect();
    deploy(&hosts[0], &workspaces[0], "report", None);
    let report = digest_of("report");
    until_served(&hosts, &report, None, Duration::from_secs(30));
    assert_eq!(compiles(&hosts), 1, "one compile for the fleet");
    for host in &hosts[1..] {
        let log = host.log();
        assert!(
            log.contains("installed the compiled code another host stored"),
            "{log}"
        );
    }
    // A host whose copy of the shared code was tampered with compiles afresh instead of
    // loading it: the tag no longer verifies.
    let engine_dir = std::fs::read_dir(workspaces[2].dir.path().join("cache"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let file = engine_dir.join(format!("{report}.cwasm"));
    let mut bytes = std::fs::read(&file).unwrap();
    bytes[200] ^= 0xff;
    std::fs::write(&file, &bytes).unwrap();
    let fourth = workspaces[2].start(&[
        "--cache-dir",
        &workspaces[2].dir.path().join("cache").display().to_string(),
    ]);
    assert_eq!(served(&fourth), Some((report.clone(), None)));
    assert_eq!(
        compiles(std::slice::from_ref(&fourth)),
        1,
        "{}",
        fourth.log()
    );
}
