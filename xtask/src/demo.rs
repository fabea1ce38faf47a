//! `cargo xtask demo`: builds the example plugins and the host (release), starts it on SQLite, enqueues
//! sample tasks with the CLI, shows them finish, and keeps serving until Ctrl-C.

use crate::{cargo, plugins, run};
use anyhow::{Context, Result, bail};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Stops the demo host when the demo ends, however it ends.
struct HostProcess(Child);

impl Drop for HostProcess {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let _ = self.0.wait();
    }
}

pub fn demo(root: &Path, exit: bool) -> Result<()> {
    // Only what the demo runs: the example handlers, and the `spool` binary in the release
    // profile, whose dependencies `cargo build --release` and `cargo xtask bench` reuse.
    // The example handlers build beside the host: the host's build leaves a core idle for part
    // of its time (while one large crate compiles alone), which the guests' small build fills.
    let examples = std::thread::spawn({
        let root = root.to_path_buf();
        move || plugins::build_examples(&root)
    });
    let host = run(cargo().current_dir(root).args([
        "build",
        "--release",
        "-p",
        "spool",
        "--bin",
        "spool",
    ]));
    examples
        .join()
        .map_err(|_| anyhow::anyhow!("the example plugins' build panicked"))??;
    host?;
    let spool = root.join("target/release/spool");
    let mut child = Command::new(&spool)
        .current_dir(root)
        .args(["serve", "--listen", "127.0.0.1:8787"])
        .stdout(Stdio::piped())
        .spawn()
        .context("cannot start the spool host")?;
    let stdout = child.stdout.take().expect("piped stdout");
    let host = HostProcess(child);
    let mut lines = BufReader::new(stdout).lines();
    let url = loop {
        match lines.next() {
            Some(Ok(line)) => {
                if let Some(url) = line.strip_prefix("spool listening on ") {
                    break url.to_string();
                }
            }
            _ => bail!("the host stopped before it was ready; see its log above"),
        }
    };
    let samples: &[(&str, &str)] = &[
        (
            "notify",
            r#"{"channel":"email","to":"ana@example.com","subject":"Approval {{id}}","template":"Hello {{name}}, approval {{id}} is {{status}}.","vars":{"name":"Ana","id":"A-1042","status":"approved"}}"#,
        ),
        (
            "report",
            r#"{"title":"Approvals by region","group_by":"region","sum":"amount","rows":[{"region":"north","amount":120.5},{"region":"south","amount":80},{"region":"north","amount":42},{"region":"east","amount":310.25}]}"#,
        ),
        ("flaky", r#"{"fail_until_attempt":2}"#),
    ];
    let started = Instant::now();
    for (task_type, payload) in samples {
        eprintln!("\n$ spool enqueue {task_type} '{payload}' --wait");
        run(Command::new(&spool).args(["enqueue", task_type, payload, "--wait", "--url", &url]))?;
    }
    eprintln!("\n$ spool tasks");
    run(Command::new(&spool).args(["tasks", "--url", &url]))?;
    eprintln!("\nall sample tasks finished in {:.1?}", started.elapsed());
    if exit {
        drop(host);
        return Ok(());
    }
    eprintln!(
        "\nSpool is serving at {url}: open {url}/ in a browser for the dashboard (API description: {url}/openapi.json). Try:\n  target/release/spool enqueue report '{{\"rows\":[{{\"k\":\"a\",\"v\":1}}],\"group_by\":\"k\",\"sum\":\"v\"}}' --wait\nCtrl-C stops it."
    );
    // Keep the host in the foreground; its own Ctrl-C handling drains and stops it.
    for line in lines.map_while(Result::ok) {
        println!("{line}");
    }
    let mut host = host;
    let _ = host.0.wait();
    std::mem::forget(host);
    std::thread::sleep(Duration::from_millis(10));
    Ok(())
}
