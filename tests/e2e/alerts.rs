//! Alerts end to end: a real host whose `trap` tasks become dead letters, a real HTTP receiver
//! for the webhook, and a real SMTP server (aiosmtpd from PyPI, pinned, installed on first use
//! into `target/tools/aiosmtpd`, delivering into a throw-away Maildir). More than 3 dead letters
//! of a type alert on both channels, naming the type, the count and the dashboard link; the
//! alert resolves once the window has passed; the drill reaches both channels and is recorded;
//! a channel that fails the drill is reported loudly by the API and the CLI.

use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::servers::{Backend, PrivateServer};
use crate::util::{Host, Workspace, eventually, repo_root};

const AIOSMTPD: &str = "aiosmtpd==1.4.6";
const DASHBOARD: &str = "http://dashboard.test/spool/";

/// The Python of a virtual environment holding exactly [`AIOSMTPD`], made on first use.
fn aiosmtpd_python() -> PathBuf {
    static INSTALL: Mutex<()> = Mutex::new(());
    let _one_at_a_time = INSTALL.lock().unwrap_or_else(|p| p.into_inner());
    let venv = repo_root().join("target/tools/aiosmtpd");
    let stamp = venv.join("spool-installed.txt");
    let python = venv.join("bin/python");
    if std::fs::read_to_string(&stamp).is_ok_and(|installed| installed.trim() == AIOSMTPD)
        && python.exists()
    {
        return python;
    }
    eprintln!("installing {AIOSMTPD} into {}", venv.display());
    std::fs::create_dir_all(venv.parent().unwrap()).unwrap();
    let run = |command: &mut Command, what: &str| {
        let status = command.status().unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(status.success(), "{what} failed");
    };
    run(
        Command::new("python3").args(["-m", "venv"]).arg(&venv),
        "python3 -m venv (Debian: apt-get install python3-venv)",
    );
    run(
        Command::new(venv.join("bin/pip")).args([
            "install",
            "--quiet",
            "--disable-pip-version-check",
            AIOSMTPD,
        ]),
        "pip install aiosmtpd",
    );
    std::fs::write(&stamp, AIOSMTPD).unwrap();
    python
}

/// A free port on loopback (nothing listens on it once this returns).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// An SMTP server on loopback that delivers every message into a Maildir of its own.
struct SmtpServer {
    child: Child,
    port: u16,
    maildir: tempfile::TempDir,
}

impl SmtpServer {
    fn start() -> SmtpServer {
        let python = aiosmtpd_python();
        let maildir = tempfile::tempdir().unwrap();
        let port = free_port();
        let child = Command::new(python)
            .args([
                "-m",
                "aiosmtpd",
                "-n",
                "-c",
                "aiosmtpd.handlers.Mailbox",
                "-l",
            ])
            .arg(format!("127.0.0.1:{port}"))
            .arg(maildir.path().join("Maildir"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("aiosmtpd starts");
        let server = SmtpServer {
            child,
            port,
            maildir,
        };
        eventually(Duration::from_secs(30), "aiosmtpd to listen", || {
            TcpStream::connect(("127.0.0.1", port)).ok()
        });
        server
    }

    /// Every message delivered so far, as text (quoted-printable soft line breaks joined).
    fn messages(&self) -> Vec<String> {
        let new = self.maildir.path().join("Maildir/new");
        let mut files: Vec<PathBuf> = std::fs::read_dir(&new)
            .map(|dir| dir.filter_map(|e| e.ok()).map(|e| e.path()).collect())
            .unwrap_or_default();
        files.sort_by_key(|f| std::fs::metadata(f).and_then(|m| m.modified()).ok());
        files
            .iter()
            .filter_map(|f| std::fs::read_to_string(f).ok())
            .map(|m| m.replace("=\r\n", "").replace("=\n", ""))
            .collect()
    }

    /// Waits for a message containing every one of `words`.
    fn wait_for(&self, words: &[&str]) -> String {
        eventually(
            Duration::from_secs(30),
            &format!("an e-mail with {words:?}"),
            || {
                self.messages()
                    .into_iter()
                    .find(|m| words.iter().all(|w| m.contains(w)))
            },
        )
    }
}

impl Drop for SmtpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP server on loopback that answers 200 and keeps every JSON body it receives.
struct Receiver {
    port: u16,
    bodies: Arc<Mutex<Vec<Value>>>,
}

impl Receiver {
    fn start() -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let bodies: Arc<Mutex<Vec<Value>>> = Default::default();
        let kept = bodies.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
                let mut reader = BufReader::new(stream);
                let mut length = 0;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                        length = value.trim().parse().unwrap_or(0);
                    }
                }
                let mut body = vec![0; length];
                if reader.read_exact(&mut body).is_ok() {
                    kept.lock()
                        .unwrap()
                        .push(serde_json::from_slice(&body).unwrap_or(Value::Null));
                }
                let mut stream = reader.into_inner();
                let _ = stream.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                );
            }
        });
        Receiver { port, bodies }
    }

    fn wait_for(&self, what: &str, matches: impl Fn(&Value) -> bool) -> Value {
        eventually(Duration::from_secs(30), what, || {
            self.bodies
                .lock()
                .unwrap()
                .iter()
                .find(|b| matches(b))
                .cloned()
        })
    }
}

fn config(webhook_port: u16, smtp_port: u16) -> String {
    format!(
        r#"
[alerts]
dashboard_url = "{DASHBOARD}"
interval = "200ms"
cooldown = "1h"

[[alerts.rule]]
kind = "dead_letters"
threshold = 3
window = "4s"

[[alerts.webhook]]
name = "ops"
url = "http://127.0.0.1:{webhook_port}/hook"

[[alerts.email]]
name = "oncall"
smtp = "smtp://127.0.0.1:{smtp_port}"
from = "Spool <spool@example.com>"
to = ["oncall@example.com"]
"#
    )
}

fn start_with(ws: &Workspace, name: &str, text: &str) -> Host {
    let path = ws.dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    ws.start(&["--config", path.to_str().unwrap()])
}

fn drill_cli(host: &Host) -> (bool, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_spool"))
        .args(["alert", "drill", "--url", &host.url])
        .env_remove("SPOOL_API_TOKEN")
        .env_remove("SPOOL_READ_TOKEN")
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

fn warnings(host: &Host) -> Vec<String> {
    let (status, health) = host.get("/health");
    assert_eq!(status, 200, "{health}");
    serde_json::from_value(health["warnings"].clone()).unwrap()
}

#[test]
fn dead_letters_alert_on_both_channels_resolve_and_the_drill_proves_the_chain() {
    let smtp = SmtpServer::start();
    let hook = Receiver::start();
    let ws = Workspace::with_plugins(&["trap"]);
    let host = start_with(&ws, "spool.toml", &config(hook.port, smtp.port));

    let (status, view) = host.get("/alerts");
    assert_eq!(status, 200, "{view}");
    assert_eq!(
        view["rules"][0]["description"],
        "more than 3 dead letters of a type within 4s"
    );
    assert_eq!(view["channels"].as_array().unwrap().len(), 2);
    assert_eq!(
        view["channels"][0]["target"],
        format!("http://127.0.0.1:{}", hook.port)
    );
    assert_eq!(view["drill_due"], true);
    assert!(
        warnings(&host)
            .iter()
            .any(|w| w.starts_with("no alert drill on record")),
        "{:?}",
        warnings(&host)
    );

    // Four dead letters of type trap: more than 3 within the window.
    let ids: Vec<i64> = (0..4)
        .map(|_| {
            host.enqueue_with(json!({"task_type": "trap", "payload": {}, "max_retry": 0}))["id"]
                .as_i64()
                .unwrap()
        })
        .collect();
    for id in &ids {
        host.wait_for_status(*id, "failed", Duration::from_secs(60));
    }
    let firing = hook.wait_for("the firing webhook", |b| b["event"] == "firing");
    assert_eq!(firing["task_type"], "trap");
    assert_eq!(firing["count"], 4);
    assert_eq!(firing["alert"], "dead_letters:trap");
    assert_eq!(firing["dashboard_url"], DASHBOARD);
    let text = firing["text"].as_str().unwrap();
    assert!(
        text.contains("4 dead letters of type trap within 4s (more than 3)")
            && text.contains(&format!("Dashboard: {DASHBOARD}")),
        "{text}"
    );
    let mail = smtp.wait_for(&["FIRING", "4 dead letters of type trap", DASHBOARD]);
    assert!(mail.contains("oncall@example.com"), "{mail}");

    let (_, view) = host.get("/alerts");
    assert_eq!(view["firing"][0]["alert"], "dead_letters:trap", "{view:#}");
    assert_eq!(view["firing"][0]["count"], 4);
    assert_eq!(
        view["firing"][0]["text"],
        "4 dead letters of type trap within 4s (more than 3)"
    );
    let sent = &view["recent"][0];
    assert_eq!(sent["event"], "firing");
    assert_eq!(
        sent["channels"],
        json!([
            {"channel": "ops", "kind": "webhook", "ok": true},
            {"channel": "oncall", "kind": "email", "ok": true}
        ])
    );

    // The window passes: resolved, once, on both channels.
    let resolved = hook.wait_for("the resolved webhook", |b| b["event"] == "resolved");
    assert_eq!(resolved["alert"], "dead_letters:trap");
    assert!(resolved["text"].as_str().unwrap().contains("RESOLVED"));
    smtp.wait_for(&["RESOLVED", "dead_letters:trap", DASHBOARD]);
    host.eventually("no alert firing", || {
        let (_, view) = host.get("/alerts");
        view["firing"].as_array().unwrap().is_empty().then_some(())
    });
    let firings = |hook: &Receiver| {
        hook.bodies
            .lock()
            .unwrap()
            .iter()
            .filter(|b| b["event"] != "drill")
            .count()
    };
    assert_eq!(
        firings(&hook),
        2,
        "one firing, one resolved, no repeat within the cool-down"
    );

    // The drill: a marked test message on both channels, recorded.
    let (succeeded, output) = drill_cli(&host);
    assert!(succeeded, "{output}");
    assert!(
        output.contains("ok      ops (webhook)") && output.contains("ok      oncall (email)"),
        "{output}"
    );
    let drill = hook.wait_for("the drill webhook", |b| b["drill"] == true);
    assert!(drill["text"].as_str().unwrap().starts_with("[DRILL]"));
    smtp.wait_for(&["[DRILL]", "no action needed", DASHBOARD]);
    let (_, view) = host.get("/alerts");
    assert_eq!(view["last_drill"]["ok"], true, "{view:#}");
    assert_eq!(view["drill_due"], false);
    assert!(warnings(&host).is_empty(), "{:?}", warnings(&host));
    drop(host);

    // A webhook to a closed port fails the drill, loudly; the e-mail still arrives.
    let closed = free_port();
    let host = start_with(&ws, "failing.toml", &config(closed, smtp.port));
    let response = host
        .http
        .post(format!("{}/alerts/drill", host.url))
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 502);
    let body: Value = response.json().unwrap();
    assert_eq!(body["error"]["code"], "drill_failed");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("ops (webhook): the webhook did not answer"),
        "{message}"
    );
    assert_eq!(body["drill"]["ok"], false);
    assert_eq!(body["drill"]["channels"][0]["ok"], false);
    assert_eq!(body["drill"]["channels"][1]["ok"], true);
    let (succeeded, output) = drill_cli(&host);
    assert!(!succeeded, "the CLI fails when a channel does:\n{output}");
    assert!(output.contains("FAILED  ops (webhook)"), "{output}");
    assert!(output.contains("ok      oncall (email)"), "{output}");
    assert!(
        warnings(&host)
            .iter()
            .any(|w| w.starts_with("the last alert drill failed: ops (webhook)")),
        "{:?}",
        warnings(&host)
    );
    assert!(host.log().contains("ALERT DRILL FAILED"), "{}", host.log());
    let drills = smtp
        .messages()
        .iter()
        .filter(|m| m.contains("[DRILL]"))
        .count();
    assert_eq!(drills, 3, "one e-mail per drill");
}

#[test]
fn a_plugin_that_fails_to_load_alerts_under_the_default_rules_and_resolves_when_removed() {
    let hook = Receiver::start();
    let ws = Workspace::with_plugins(&["noop"]);
    std::fs::write(ws.plugin_dir().join("broken.wasm"), b"not a component").unwrap();
    // No [[alerts.rule]]: the defaults (dead letters, plugin_load, database) apply.
    let host = start_with(
        &ws,
        "spool.toml",
        &format!(
            "[alerts]\ninterval = \"200ms\"\n[[alerts.webhook]]\nurl = \"http://127.0.0.1:{}/\"\n",
            hook.port
        ),
    );
    let (_, view) = host.get("/alerts");
    let kinds: Vec<&str> = view["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["dead_letters", "plugin_load", "database"]);
    assert_eq!(
        view["rules"][0]["description"],
        "more than 3 dead letters of a type within 10m"
    );

    let firing = hook.wait_for("the plugin alert", |b| b["event"] == "firing");
    assert_eq!(firing["alert"], "plugin_load:broken");
    let host_id = host.get("/health").1["host_id"]
        .as_str()
        .unwrap()
        .to_string();
    let text = firing["text"].as_str().unwrap();
    assert!(
        text.contains(&format!("plugin broken failed to load on host {host_id}")),
        "{text}"
    );
    let (_, view) = host.get("/alerts");
    assert_eq!(view["firing"][0]["alert"], "plugin_load:broken", "{view:#}");

    std::fs::remove_file(ws.plugin_dir().join("broken.wasm")).unwrap();
    let resolved = hook.wait_for("the resolved plugin alert", |b| b["event"] == "resolved");
    assert_eq!(resolved["alert"], "plugin_load:broken");
}

#[test]
fn a_database_outage_is_alerted_by_the_host_that_sees_it_and_logged_once_it_is_back() {
    let Some(server) = PrivateServer::new(Backend::Postgres) else {
        return;
    };
    let hook = Receiver::start();
    let ws = Workspace::with_plugins(&["noop"]).on_database(server.fresh_database());
    let host = start_with(
        &ws,
        "spool.toml",
        &format!(
            "[alerts]\ninterval = \"200ms\"\n[[alerts.rule]]\nkind = \"database\"\nafter = \"1s\"\n\
             [[alerts.webhook]]\nurl = \"http://127.0.0.1:{}/\"\n",
            hook.port
        ),
    );
    let host_id = host.get("/health").1["host_id"]
        .as_str()
        .unwrap()
        .to_string();

    server.stop();
    let firing = hook.wait_for("the database alert", |b| b["event"] == "firing");
    assert_eq!(firing["alert"], "database");
    let text = firing["text"].as_str().unwrap();
    assert!(
        text.contains("the task database postgres://127.0.0.1:")
            && text.contains(&format!("has not answered host {host_id} for")),
        "{text}"
    );
    assert!(!text.contains("spool:spool"), "no credentials: {text}");
    // The alert view still answers, from this host's memory.
    let (status, view) = host.get("/alerts");
    assert_eq!(status, 200, "{view:#}");
    assert_eq!(view["firing"][0]["alert"], "database", "{view:#}");
    assert!(
        view["warnings"][0]
            .as_str()
            .unwrap()
            .starts_with("the task database does not answer"),
        "{view:#}"
    );

    server.start();
    let resolved = hook.wait_for("the resolved database alert", |b| b["event"] == "resolved");
    assert_eq!(resolved["alert"], "database");
    // What was sent while the database was away reaches the alert log once it is back.
    host.eventually("the outage in the alert log", || {
        let (_, view) = host.get("/alerts");
        let events: Vec<&str> = view["recent"]
            .as_array()?
            .iter()
            .filter(|r| r["alert"] == "database")
            .filter_map(|r| r["event"].as_str())
            .collect();
        (events == ["resolved", "firing"]).then_some(())
    });
}
