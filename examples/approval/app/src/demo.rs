//! `approval demo`: the whole story in one command.
//!
//! 1. Starts the stand-in mail service and the approval app (in this process, on free ports).
//! 2. Builds the three handlers with `spool plugin build` into `WORK/plugins` and deploys their
//!    manifests with the app's and the mail service's addresses.
//! 3. Starts a Spool host (`spool serve`) on the same PostgreSQL database.
//! 4. Submits N approvals with `?sync=1` (all the work in the request), then N without (the
//!    work enqueued), and a second approval of an already approved request (rolled back with
//!    its tasks). The mail service refuses one mail of the asynchronous run, once.
//! 5. Prints both response-time medians side by side, waits for every task and checks its
//!    effect: a report file per approval, each mail delivered exactly once (the retried mail
//!    task skipped the mail it had already sent), the statistics cache counting each
//!    approval once. Exits with an error if anything is missing.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use serde_json::{Value, json};
use sqlx::PgPool;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::TcpListener;

use crate::app;
use crate::mail_stub::{self, MailStub};
use crate::report;

/// `approval demo` settings.
#[derive(clap::Args, Clone, Debug)]
pub struct Config {
    /// The PostgreSQL database of the app and the Spool host (`cargo xtask db start` prints one).
    #[arg(long, env = "DATABASE_URL")]
    pub database_url: String,
    /// Approvals to submit each way.
    #[arg(long, default_value_t = 5)]
    pub approvals: usize,
    /// How long the mail service takes to accept a mail, in milliseconds.
    #[arg(long, default_value_t = 1500)]
    pub mail_delay_ms: u64,
    /// Work folder: plugin folder, grants root (the reports), compiled-code cache, host log.
    #[arg(long, default_value = "target/approval-demo")]
    pub work_dir: PathBuf,
    /// The `spool` binary [default: `spool` beside this program, else on the PATH]
    #[arg(long)]
    pub spool: Option<PathBuf>,
    /// The handler projects.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/../handlers"))]
    pub handlers: PathBuf,
    /// The handlers' retry delay in the demo (their manifests say 30 s, the essay's lesson).
    #[arg(long, default_value = "2s")]
    pub backoff: String,
}

/// The handlers: task type (= project folder) and language.
const HANDLERS: [(&str, &str); 3] = [
    ("report", "Rust"),
    ("mail", "JavaScript"),
    ("stats", "Python"),
];

const FINANCE: &str = "finance@example.com";

/// One approval the demo submits.
struct Submission {
    request_id: String,
    approver: &'static str,
    requester: &'static str,
    amount_cents: i64,
}

impl Submission {
    /// The `i`-th approval of this run in a mode (`s`ync or `a`sync).
    fn new(stamp: u64, mode: &str, i: usize) -> Submission {
        let approvers = ["dana", "lee"];
        let requesters = ["sam@example.com", "kim@example.com", "ali@example.com"];
        Submission {
            request_id: format!("PO-{stamp}-{mode}{}", i + 1),
            approver: approvers[i % approvers.len()],
            requester: requesters[i % requesters.len()],
            amount_cents: ((i as i64 * 73_129 + 25_000) % 480_000) + 12_000,
        }
    }

    fn body(&self) -> Value {
        json!({
            "request_id": self.request_id,
            "approver": self.approver,
            "requester": self.requester,
            "amount": self.amount_cents as f64 / 100.0,
        })
    }

    /// The start of its line in the output.
    fn describe(&self) -> String {
        format!(
            "{}  {:<4} {:>9}",
            self.request_id,
            self.approver,
            report::money(self.amount_cents)
        )
    }
}

/// What the demo talks to.
struct Demo {
    client: reqwest::Client,
    app_url: String,
    db: PgPool,
    stub: Arc<MailStub>,
    reports: PathBuf,
}

pub async fn run(config: Config) -> anyhow::Result<()> {
    std::fs::create_dir_all(&config.work_dir)?;
    let work = std::fs::canonicalize(&config.work_dir)?;
    let plugins = work.join("plugins");
    let reports = work.join("plugin-data/approval-reports");
    std::fs::create_dir_all(&plugins)?;
    std::fs::create_dir_all(&reports)?;
    let spool = config.spool.clone().unwrap_or_else(default_spool);
    if config.approvals == 0 {
        bail!("--approvals must be at least 1");
    }

    println!("Approval demo: {} approvals each way\n", config.approvals);
    let stub = MailStub::new(Duration::from_millis(config.mail_delay_ms));
    let (mail_url, _stub_task) = mail_stub::start(stub.clone(), listener().await?)?;
    let app_config = app::Config {
        database_url: config.database_url.clone(),
        listen: "127.0.0.1:0".parse()?,
        mail_url: mail_url.clone(),
        reports_dir: reports.clone(),
        public_url: None,
        finance: FINANCE.into(),
    };
    let (app_url, _app_task) = app::start(&app_config, listener().await?).await?;
    println!(
        "  mail service (stand-in, {} ms a mail)  {mail_url}",
        config.mail_delay_ms
    );
    println!("  approval app                          {app_url}");

    for (name, language) in HANDLERS {
        let started = Instant::now();
        build(&spool, &config.handlers.join(name), &plugins).await?;
        let allow = match name {
            "report" => Some(authority(&app_url)),
            "mail" => Some(authority(&mail_url)),
            _ => None,
        };
        let manifest = plugins.join(format!("{name}.toml"));
        deploy_manifest(&manifest, allow, &config.backoff)?;
        println!(
            "  handler {name:<7} ({language:<10}) built in {:>5.1} s into {}",
            started.elapsed().as_secs_f64(),
            plugins.display()
        );
    }

    println!("  starting a Spool host (the first start compiles the handlers: a minute or two)");
    let host = Host::start(&spool, &config.database_url, &work).await?;
    host.wait_for_types(&["mail", "report", "stats"]).await?;
    println!("  spool host                            {}", host.url);

    let demo = Demo {
        client: reqwest::Client::builder()
            .timeout(Duration::from_secs(120))
            .build()?,
        app_url,
        db: PgPool::connect(&config.database_url).await?,
        stub,
        reports,
    };
    let stamp = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
    let sync: Vec<Submission> = (0..config.approvals)
        .map(|i| Submission::new(stamp, "s", i))
        .collect();
    let enqueued: Vec<Submission> = (0..config.approvals)
        .map(|i| Submission::new(stamp, "a", i))
        .collect();

    let (sync_times, mut approval_ids) = demo.submit_sync(&sync).await?;
    // The mail service is flaky: from now on it refuses the next mail to finance, once.
    demo.stub.fail_next(FINANCE);
    let cache_before = demo.cached_stats().await?;
    let (async_times, async_ids, task_ids) = demo.submit_async(&enqueued).await?;
    approval_ids.extend(async_ids);
    demo.resubmit(&enqueued[0]).await?;

    let (sync_median, async_median) = (median(&sync_times), median(&async_times));
    println!("\nResponse times, median of {}:", config.approvals);
    println!(
        "  ?sync=1, the work in the request   {:>8.1} ms",
        ms(sync_median)
    );
    println!(
        "  with Spool, the work enqueued      {:>8.1} ms   ({:.0}× faster)",
        ms(async_median),
        ms(sync_median) / ms(async_median).max(0.001)
    );

    println!("\nWaiting for the {} tasks...", task_ids.len());
    let started = Instant::now();
    let tasks = wait_for_tasks(&demo.db, &task_ids, Duration::from_secs(600)).await?;
    println!(
        "  all {} done {:.1} s after the last submit",
        tasks.len(),
        started.elapsed().as_secs_f64()
    );
    for task in tasks.iter().filter(|t| t.attempts > 1) {
        let skipped = task.log.lines().find(|l| l.contains("already sent"));
        println!(
            "  {} task {} took {} attempts{}",
            task.task_type,
            task.id,
            task.attempts,
            skipped
                .map(|l| format!(": {}", l.trim_start_matches("[info] ")))
                .unwrap_or_default()
        );
    }

    let mut problems = Vec::new();
    let submitted: Vec<&Submission> = sync.iter().chain(&enqueued).collect();
    demo.check_reports(&approval_ids, &submitted, &mut problems);
    demo.check_mails(&approval_ids, &mut problems);
    demo.check_cache(&cache_before, &enqueued, &mut problems)
        .await?;
    host.stop().await;
    if problems.is_empty() {
        println!("\nEvery task finished with its effect.");
        Ok(())
    } else {
        bail!("missing effects: {}", problems.join("; "))
    }
}

impl Demo {
    /// The endpoint before Spool. Returns the response times and the approvals' ids.
    async fn submit_sync(
        &self,
        submissions: &[Submission],
    ) -> anyhow::Result<(Vec<Duration>, Vec<i64>)> {
        println!(
            "\nBefore Spool: POST /approvals?sync=1 writes the approval, then builds the report, \
             sends two mails and refreshes the cache before it answers"
        );
        let url = format!("{}/approvals?sync=1", self.app_url);
        let (mut times, mut ids) = (Vec::new(), Vec::new());
        for submission in submissions {
            let (took, status, answer) = submit(&self.client, &url, &submission.body()).await?;
            if status != 201 {
                bail!("?sync=1 answered {status}: {answer}");
            }
            let t = &answer["timings_ms"];
            println!(
                "  {}  201 in {:>6} ms  (report {:.0} ms, mails {:.0} ms, cache {:.0} ms)",
                submission.describe(),
                took.as_millis(),
                t["report"].as_f64().unwrap_or_default(),
                t["mail"].as_f64().unwrap_or_default(),
                t["stats"].as_f64().unwrap_or_default(),
            );
            times.push(took);
            ids.push(answer["approval_id"].as_i64().context("no approval_id")?);
        }
        Ok((times, ids))
    }

    /// With Spool. Returns the response times, the approvals' ids and their tasks' ids.
    async fn submit_async(
        &self,
        submissions: &[Submission],
    ) -> anyhow::Result<(Vec<Duration>, Vec<i64>, Vec<i64>)> {
        println!(
            "\nWith Spool: POST /approvals writes the approval and enqueues mail (priority 10), \
             report and stats in one transaction"
        );
        let url = format!("{}/approvals", self.app_url);
        let (mut times, mut ids, mut task_ids) = (Vec::new(), Vec::new(), Vec::new());
        for submission in submissions {
            let (took, status, answer) = submit(&self.client, &url, &submission.body()).await?;
            if status != 201 {
                bail!("POST /approvals answered {status}: {answer}");
            }
            let tasks = &answer["tasks"];
            println!(
                "  {}  201 in {:>6} ms  (tasks mail {}, report {}, stats {})",
                submission.describe(),
                took.as_millis(),
                tasks["mail"],
                tasks["report"],
                tasks["stats"],
            );
            times.push(took);
            ids.push(answer["approval_id"].as_i64().context("no approval_id")?);
            for kind in ["mail", "report", "stats"] {
                task_ids.push(tasks[kind].as_i64().context("no task id")?);
            }
        }
        Ok((times, ids, task_ids))
    }

    /// A second approval of an approved request: refused at commit, with its tasks.
    async fn resubmit(&self, submission: &Submission) -> anyhow::Result<()> {
        let mut body = submission.body();
        body["approver"] = json!("lee");
        let before = task_count(&self.db).await?;
        let url = format!("{}/approvals", self.app_url);
        let (_, status, answer) = submit(&self.client, &url, &body).await?;
        let after = task_count(&self.db).await?;
        println!(
            "\nA second approval of {} (the unique constraint is checked at commit, after the \
             three enqueues): {status} {}; tasks in the table: {before} before, {after} after",
            submission.request_id,
            answer["error"]["code"].as_str().unwrap_or_default(),
        );
        if status != 409 || before != after {
            bail!("the second approval was not refused, or left tasks behind");
        }
        Ok(())
    }

    /// A report file per approval (`approval_ids[i]` is the approval of `submitted[i]`).
    fn check_reports(
        &self,
        approval_ids: &[i64],
        submitted: &[&Submission],
        problems: &mut Vec<String>,
    ) {
        let written = approval_ids
            .iter()
            .zip(submitted)
            .filter(|(id, submission)| {
                let title = format!("# Approval {id}: request {}\n", submission.request_id);
                std::fs::read_to_string(self.reports.join(report::file_name(**id)))
                    .is_ok_and(|text| text.starts_with(&title))
            })
            .count();
        check(
            problems,
            written == approval_ids.len(),
            format!(
                "reports: {written} of {} in {}",
                approval_ids.len(),
                self.reports.display()
            ),
        );
    }

    /// Each approval's two mails, delivered once each.
    fn check_mails(&self, approval_ids: &[i64], problems: &mut Vec<String>) {
        let deliveries = self.stub.deliveries();
        let mut per_key: HashMap<String, usize> = HashMap::new();
        for delivery in &deliveries {
            *per_key
                .entry(delivery.key.clone().unwrap_or_default())
                .or_default() += 1;
        }
        let once = approval_ids
            .iter()
            .filter(|id| {
                let prefix = format!("mail:{id}:");
                let counts: Vec<usize> = per_key
                    .iter()
                    .filter(|(key, _)| key.starts_with(&prefix))
                    .map(|(_, n)| *n)
                    .collect();
                counts == [1, 1]
            })
            .count();
        check(
            problems,
            once == approval_ids.len() && deliveries.len() == 2 * approval_ids.len(),
            format!(
                "mails: {} delivered, {once} of {} approvals got each of their 2 mails exactly \
                 once ({} refused by the flaky service and retried)",
                deliveries.len(),
                approval_ids.len(),
                self.stub.refused()
            ),
        );
    }

    /// The cached statistics of every approver, (approvals, total cents).
    async fn cached_stats(&self) -> anyhow::Result<HashMap<&'static str, (i64, i64)>> {
        let mut stats = HashMap::new();
        for approver in ["dana", "lee"] {
            stats.insert(approver, cached_stats(&self.db, approver).await?);
        }
        Ok(stats)
    }

    /// The cache counted each enqueued approval once.
    async fn check_cache(
        &self,
        before: &HashMap<&'static str, (i64, i64)>,
        enqueued: &[Submission],
        problems: &mut Vec<String>,
    ) -> anyhow::Result<()> {
        let now = self.cached_stats().await?;
        for approver in ["dana", "lee"] {
            let ((count, cents), (count_before, cents_before)) = (now[approver], before[approver]);
            let mine = enqueued.iter().filter(|s| s.approver == approver);
            let expected = (
                mine.clone().count() as i64,
                mine.map(|s| s.amount_cents).sum::<i64>(),
            );
            check(
                problems,
                (count - count_before, cents - cents_before) == expected,
                format!(
                    "cache: approver:{approver} = {count} approvals, {} (this run added {} and \
                     {}, expected {} and {})",
                    report::money(cents),
                    count - count_before,
                    report::money(cents - cents_before),
                    expected.0,
                    report::money(expected.1),
                ),
            );
        }
        Ok(())
    }
}

fn check(problems: &mut Vec<String>, ok: bool, line: String) {
    println!("  {} {line}", if ok { "ok  " } else { "FAIL" });
    if !ok {
        problems.push(line);
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn median(times: &[Duration]) -> Duration {
    let mut sorted = times.to_vec();
    sorted.sort();
    sorted.get(sorted.len() / 2).copied().unwrap_or_default()
}

/// `spool` beside this program (`cargo build` puts both in target/debug), else on the PATH.
fn default_spool() -> PathBuf {
    std::env::current_exe()
        .ok()
        .map(|exe| exe.with_file_name("spool"))
        .filter(|path| path.is_file())
        .unwrap_or_else(|| PathBuf::from("spool"))
}

async fn listener() -> anyhow::Result<TcpListener> {
    Ok(TcpListener::bind("127.0.0.1:0").await?)
}

/// `host:port` of an `http://host:port/...` URL.
fn authority(url: &str) -> String {
    let rest = url.trim_start_matches("http://");
    rest.split('/').next().unwrap_or(rest).to_string()
}

/// `spool plugin build PROJECT --plugins PLUGINS`; its output is shown only if it fails.
async fn build(spool: &Path, project: &Path, plugins: &Path) -> anyhow::Result<()> {
    let output = tokio::process::Command::new(spool)
        .arg("plugin")
        .arg("build")
        .arg(project)
        .arg("--plugins")
        .arg(plugins)
        .output()
        .await
        .with_context(|| {
            format!(
                "cannot run {}: build it with `cargo build -p spool` or pass --spool",
                spool.display()
            )
        })?;
    if !output.status.success() {
        bail!(
            "spool plugin build {} failed:\n{}{}",
            project.display(),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(())
}

/// Rewrites a deployed manifest with this run's addresses and retry delay.
fn deploy_manifest(path: &Path, allow: Option<String>, backoff: &str) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("{} was not deployed", path.display()))?;
    let mut manifest: toml::Table = text.parse()?;
    manifest.insert("backoff_base".into(), backoff.into());
    if let Some(allow) = allow {
        let mut http = toml::Table::new();
        http.insert("allow".into(), toml::Value::Array(vec![allow.into()]));
        manifest.insert("http".into(), http.into());
    }
    let text = format!(
        "# Deployed by `approval demo`: this run's addresses and a {backoff} retry delay.\n{}",
        toml::to_string(&manifest)?
    );
    std::fs::write(path, text)?;
    Ok(())
}

/// A `spool serve` process.
struct Host {
    child: tokio::process::Child,
    url: String,
    log: PathBuf,
}

impl Host {
    async fn start(spool: &Path, database_url: &str, work: &Path) -> anyhow::Result<Host> {
        let log = work.join("host.log");
        let mut child = tokio::process::Command::new(spool)
            .arg("serve")
            .arg("--database-url")
            .arg(database_url)
            .arg("--plugins")
            .arg(work.join("plugins"))
            .arg("--grants-root")
            .arg(work.join("plugin-data"))
            .arg("--cache-dir")
            .arg(work.join("cache"))
            .args(["--listen", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log)?)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("cannot start {}", spool.display()))?;
        let mut lines = BufReader::new(child.stdout.take().context("no stdout")?).lines();
        let url = loop {
            match lines.next_line().await? {
                Some(line) => {
                    if let Some(url) = line.strip_prefix("spool listening on ") {
                        break url.to_string();
                    }
                }
                None => bail!(
                    "the Spool host stopped before listening; its log, {}:\n{}",
                    log.display(),
                    std::fs::read_to_string(&log).unwrap_or_default()
                ),
            }
        };
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(Host { child, url, log })
    }

    /// Waits until the host serves these task types, failing on a plugin load error.
    async fn wait_for_types(&self, types: &[&str]) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(600);
        loop {
            let health: Value = reqwest::get(format!("{}/health", self.url))
                .await?
                .json()
                .await?;
            if let Some(errors) = health["plugin_errors"].as_object()
                && !errors.is_empty()
            {
                bail!("the host cannot load a handler: {errors:?}");
            }
            let served = health["task_types"].as_array().cloned().unwrap_or_default();
            if types.iter().all(|t| served.iter().any(|s| s == t)) {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "the host serves {served:?}, not {types:?}; see {}",
                    self.log.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Stops the host the way an operator does (SIGTERM), waiting for its orderly shutdown.
    async fn stop(mut self) {
        if let Some(pid) = self.child.id() {
            let _ = tokio::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status()
                .await;
        }
        if tokio::time::timeout(Duration::from_secs(15), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}

/// POSTs `body` and returns how long the answer took, its status and its JSON.
async fn submit(
    client: &reqwest::Client,
    url: &str,
    body: &Value,
) -> anyhow::Result<(Duration, u16, Value)> {
    let started = Instant::now();
    let response = client.post(url).json(body).send().await?;
    let status = response.status().as_u16();
    let answer: Value = response.json().await?;
    Ok((started.elapsed(), status, answer))
}

async fn task_count(db: &PgPool) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar("SELECT count(*) FROM async_task")
        .fetch_one(db)
        .await?)
}

/// The `stats` handler's cached (approvals, total cents) of an approver, from its key-value
/// store (the host services' table `task_kv`, in the same database).
async fn cached_stats(db: &PgPool, approver: &str) -> anyhow::Result<(i64, i64)> {
    let value: Option<String> = sqlx::query_scalar(
        "SELECT kv_value FROM task_kv WHERE task_type = 'stats' AND kv_key = $1",
    )
    .bind(format!("approver:{approver}"))
    .fetch_optional(db)
    .await?;
    let value: Value = value
        .map(|v| serde_json::from_str(&v))
        .transpose()?
        .unwrap_or_default();
    Ok((
        value["approvals"].as_i64().unwrap_or_default(),
        value["total_cents"].as_i64().unwrap_or_default(),
    ))
}

/// A task as `wait_for_tasks` reads it: id, type, status, attempts, log, last error.
type TaskRow = (i64, String, i16, i64, Option<String>, Option<String>);

/// A finished task.
struct Finished {
    id: i64,
    task_type: String,
    attempts: i64,
    log: String,
}

/// Waits until every task is done; fails on a dead letter or a cancelled task.
async fn wait_for_tasks(
    db: &PgPool,
    ids: &[i64],
    timeout: Duration,
) -> anyhow::Result<Vec<Finished>> {
    let deadline = Instant::now() + timeout;
    loop {
        let rows: Vec<TaskRow> = sqlx::query_as(
            "SELECT id, task_type, status, attempts, log, last_error
             FROM async_task WHERE id = ANY($1) ORDER BY id",
        )
        .bind(ids)
        .fetch_all(db)
        .await?;
        if let Some(failed) = rows.iter().find(|r| r.2 == 3 || r.2 == 4) {
            bail!(
                "{} task {} ended without success: {}",
                failed.1,
                failed.0,
                failed.5.clone().unwrap_or_default()
            );
        }
        if rows.len() == ids.len() && rows.iter().all(|r| r.2 == 2) {
            return Ok(rows
                .into_iter()
                .map(|(id, task_type, _, attempts, log, _)| Finished {
                    id,
                    task_type,
                    attempts,
                    log: log.unwrap_or_default(),
                })
                .collect());
        }
        if Instant::now() > deadline {
            let waiting: Vec<i64> = rows.iter().filter(|r| r.2 != 2).map(|r| r.0).collect();
            bail!("tasks {waiting:?} did not finish within {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
