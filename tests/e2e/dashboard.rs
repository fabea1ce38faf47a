//! The dashboard in a real browser: headless Chromium (Debian's `chromium`, driven through
//! Debian's `chromedriver` over WebDriver with `fantoccini`) against a real host with real
//! tasks. Each page loads without a console error; the backlog curve has points; selecting dead
//! letters and retrying them re-queues exactly those; a task's page shows its log. A screenshot
//! of each page lands in `target/dashboard-screenshots/<page>.png`.
//!
//! WebDriver rather than the DevTools protocol: `fantoccini` is small (no generated protocol
//! bindings to compile), the W3C protocol is stable across Chromium releases, screenshots are
//! part of it, and chromedriver's log endpoint hands over the console's errors: uncaught
//! exceptions, `console.error`, failed loads and Content-Security-Policy refusals.
//!
//! The test is never skipped: without Chromium it fails and says that `cargo xtask test`
//! installs it.

use fantoccini::wd::WebDriverCompatibleCommand;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::{Host, Workspace, artifact, repo_root};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
const TOKEN: &str = "dashboard-token";
const READ_TOKEN: &str = "dashboard-read-token";

/// `POST /session/{id}/se/log`: chromedriver's console log since the last call.
#[derive(Debug)]
struct BrowserLog;

impl WebDriverCompatibleCommand for BrowserLog {
    fn endpoint(
        &self,
        base: &url::Url,
        session: Option<&str>,
    ) -> Result<url::Url, url::ParseError> {
        base.join(&format!("session/{}/se/log", session.unwrap_or_default()))
    }

    fn method_and_body(&self, _: &url::Url) -> (http::Method, Option<String>) {
        (http::Method::POST, Some(r#"{"type":"browser"}"#.into()))
    }
}

/// chromedriver on a free loopback port, stopped on drop.
struct Driver {
    child: Child,
    url: String,
}

impl Driver {
    fn start() -> Driver {
        for (path, package) in [(CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")] {
            assert!(
                Path::new(path).exists(),
                "{path} is missing: the dashboard test needs Debian's {package}. `cargo xtask test` installs it (or run `apt-get install chromium chromium-driver`)"
            );
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let url = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not listen");
            std::thread::sleep(Duration::from_millis(50));
        }
        Driver { child, url }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A headless Chromium session, driven from this (synchronous) test.
struct Browser {
    runtime: tokio::runtime::Runtime,
    client: Option<Client>,
    _driver: Driver,
}

impl Browser {
    fn open() -> Browser {
        let driver = Driver::start();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let capabilities = json!({
            "browserName": "chrome",
            "goog:loggingPrefs": { "browser": "ALL" },
            "goog:chromeOptions": {
                "binary": CHROMIUM,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1400,1500"]
            }
        });
        let Value::Object(capabilities) = capabilities else {
            unreachable!()
        };
        let client = runtime
            .block_on(
                ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
                    .capabilities(capabilities)
                    .connect(&driver.url),
            )
            .expect("chromedriver opens a Chromium session");
        Browser {
            runtime,
            client: Some(client),
            _driver: driver,
        }
    }

    fn client(&self) -> &Client {
        self.client.as_ref().unwrap()
    }

    fn goto(&self, url: &str) {
        self.runtime.block_on(self.client().goto(url)).unwrap();
    }

    /// Runs `script` (a function body; `arguments` holds `args`) in the page.
    fn js(&self, script: &str, args: Vec<Value>) -> Value {
        self.runtime
            .block_on(self.client().execute(script, args))
            .unwrap_or_else(|e| panic!("script failed: {e}\n{script}"))
    }

    /// Waits until `script` returns something truthy; returns it.
    fn wait_js(&self, what: &str, script: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let value = self.js(script, vec![]);
            if !matches!(value, Value::Null | Value::Bool(false))
                && value != json!(0)
                && value != json!("")
            {
                return value;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; the page shows:\n{}",
                self.js("return document.body.innerText", vec![])
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Clicks the element; again when the page replaced it in between (it re-renders its
    /// tables on every refresh, so an element found a moment ago may be gone).
    fn click(&self, css: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let clicked = self.runtime.block_on(async {
                self.client()
                    .wait()
                    .at_most(Duration::from_secs(30))
                    .for_element(Locator::Css(css))
                    .await?
                    .click()
                    .await
            });
            match clicked {
                Ok(()) => return,
                Err(e) if Instant::now() > deadline => panic!("clicking {css}: {e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    /// Console entries since the last call, as `LEVEL source message`.
    fn console(&self) -> Vec<(String, String)> {
        let entries = self
            .runtime
            .block_on(self.client().issue_cmd(BrowserLog))
            .expect("chromedriver hands over the console log");
        entries
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| {
                (
                    e["level"].as_str().unwrap_or("").to_string(),
                    e["message"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect()
    }

    /// Fails on any console error so far (`page` names where).
    fn assert_no_console_errors(&self, page: &str) {
        let entries = self.console();
        let errors: Vec<_> = entries
            .iter()
            .filter(|(level, _)| level == "SEVERE")
            .collect();
        assert!(
            errors.is_empty(),
            "console errors on the {page} page: {errors:#?}"
        );
    }

    fn screenshot(&self, page: &str) -> PathBuf {
        let png = self
            .runtime
            .block_on(self.client().screenshot())
            .expect("screenshot");
        let dir = repo_root().join("target/dashboard-screenshots");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{page}.png"));
        std::fs::write(&path, png).unwrap();
        path
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            let _ = self.runtime.block_on(client.close());
        }
    }
}

/// An API call with the token.
fn api(host: &Host, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let url = format!("{}{path}", host.url);
    let request = match method {
        "GET" => host.http.get(url),
        _ => host.http.post(url).json(&body.unwrap_or(json!({}))),
    };
    let response = request.bearer_auth(TOKEN).send().unwrap();
    let status = response.status().as_u16();
    (status, response.json().unwrap_or(Value::Null))
}

fn task(host: &Host, id: i64) -> Value {
    let (status, body) = api(host, "GET", &format!("/tasks/{id}"), None);
    assert_eq!(status, 200, "{body}");
    body
}

fn enqueue(host: &Host, task_type: &str, payload: Value) -> i64 {
    let (status, body) = api(
        host,
        "POST",
        "/tasks",
        Some(json!({ "task_type": task_type, "payload": payload })),
    );
    assert_eq!(status, 201, "{body}");
    body["id"].as_i64().unwrap()
}

fn wait_until(host: &Host, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; host log:\n{}",
            host.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Deploys `build` as `task_type` through the API, as a candidate on `canary` percent if given.
fn deploy(host: &Host, task_type: &str, build: &str, canary: Option<u8>) {
    let mut form = reqwest::blocking::multipart::Form::new().part(
        "component",
        reqwest::blocking::multipart::Part::bytes(std::fs::read(artifact(build)).unwrap()),
    );
    if let Some(percent) = canary {
        form = form.text("canary", percent.to_string());
    }
    let response = host
        .http
        .post(format!("{}/plugins/{task_type}/deploy", host.url))
        .bearer_auth(TOKEN)
        .multipart(form)
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 201, "{:?}", response.text());
}

/// Every page, in a real browser, against a host with a token and tasks in every state.
#[test]
fn dashboard_pages_work_in_a_real_browser() {
    let ws = Workspace::with_plugins(&["noop", "loud"]);
    // Every attempt of `loud` keeps a record, for the task page's recorded attempts.
    ws.manifest("loud", "record = \"all\"\n");
    // A short sampling interval, so the stored backlog curve has points within the test.
    let args = [
        "--api-token",
        TOKEN,
        "--read-token",
        READ_TOKEN,
        "--stats-interval",
        "1s",
    ];
    let host = ws.start(&args);

    for n in 0..3 {
        enqueue(&host, "noop", json!({ "n": n }));
    }
    let logged = enqueue(
        &host,
        "loud",
        json!({ "log": 48, "text": "dashboard log line " }),
    );
    let dead: Vec<i64> = (0..4)
        .map(|_| {
            enqueue(
                &host,
                "loud",
                json!({ "fail": 30, "text": "permanently broken " }),
            )
        })
        .collect();
    wait_until(&host, "the dead letters", || {
        dead.iter().all(|id| task(&host, *id)["status"] == "failed")
            && task(&host, logged)["status"] == "done"
    });

    let browser = Browser::open();
    browser.goto(&format!("{}/", host.url));
    // The host asks for a token: the page asks the person before reading anything.
    browser.wait_js(
        "the token dialog",
        "return document.getElementById('token-dialog').open",
    );
    browser.js(
        "document.getElementById('token-input').value = arguments[0]",
        vec![json!(TOKEN)],
    );
    browser.click("#token-form button[type=submit]");

    let loaded = |page: &str| {
        browser.wait_js(
            &format!("the {page} page"),
            &format!(
                "const m = document.getElementById('main'); return m.dataset.page === '{page}' && m.dataset.loaded === 'true'"
            ),
        );
    };

    // Overview: the counts and a curve with points.
    loaded("overview");
    // The console is really read: a probe error shows up (and only it).
    browser.js("console.error('spool console probe')", vec![]);
    let probe: Vec<_> = browser
        .console()
        .into_iter()
        .filter(|(level, _)| level == "SEVERE")
        .collect();
    assert!(
        probe.len() == 1 && probe[0].1.contains("spool console probe"),
        "the console shows {probe:?}"
    );
    browser.wait_js(
        "the backlog curve's points",
        "return Number(document.getElementById('backlog-chart').dataset.points || 0) >= 2",
    );
    let counts = browser.js("return document.getElementById('counts').innerText", vec![]);
    assert!(counts.as_str().unwrap().contains("failed"), "{counts}");
    browser.screenshot("overview");
    // Live: a task enqueued now shows in the counts without a reload.
    let (status, body) = api(
        &host,
        "POST",
        "/tasks",
        Some(json!({ "task_type": "noop", "payload": {}, "delay": "1h" })),
    );
    assert_eq!(status, 201, "{body}");
    browser.wait_js(
        "the new pending task in the counts",
        "return document.querySelector('#counts .card-pending .card-value').innerText === '1'",
    );
    browser.assert_no_console_errors("overview");

    // Dead letters: select two of the four and retry them.
    browser.click("#nav a[data-page=dead-letters]");
    loaded("dead-letters");
    for id in &dead {
        browser.wait_js(
            "every dead letter listed",
            &format!("return document.querySelector('input[data-id=\"{id}\"]') !== null"),
        );
    }
    browser.screenshot("dead-letters");
    let (chosen, others) = dead.split_at(2);
    let before: Vec<Value> = dead.iter().map(|id| task(&host, *id)).collect();
    for id in chosen {
        browser.click(&format!("input[data-id=\"{id}\"]"));
    }
    browser.click("#retry-selected");
    browser.wait_js(
        "the retry's confirmation",
        "const m = document.getElementById('dead-message'); return m.innerText.includes('Re-queued 2')",
    );
    browser.assert_no_console_errors("dead letters");
    // Exactly the chosen tasks ran again (and, this handler failing for good, failed again);
    // the others were not touched.
    wait_until(&host, "the retried tasks' second attempts", || {
        chosen.iter().zip(&before).all(|(id, old)| {
            let t = task(&host, *id);
            t["status"] == "failed" && t["updated_at"] != old["updated_at"]
        })
    });
    for (id, old) in others.iter().zip(&before[chosen.len()..]) {
        let t = task(&host, *id);
        assert_eq!(t["status"], "failed", "task {id} was not selected: {t}");
        assert_eq!(
            t["updated_at"], old["updated_at"],
            "task {id} was not selected: {t}"
        );
    }

    // Discarding the other two leaves them cancelled, kept with a note.
    for id in others {
        browser.click(&format!("input[data-id=\"{id}\"]"));
    }
    browser.click("#discard-selected");
    browser.wait_js(
        "the discard's confirmation",
        "return document.getElementById('dead-message').innerText.includes('Discarded 2')",
    );
    for id in others {
        let t = task(&host, *id);
        assert_eq!(t["status"], "cancelled", "task {id}: {t}");
    }
    for id in chosen {
        assert_eq!(
            task(&host, *id)["status"],
            "failed",
            "task {id} was not selected"
        );
    }
    browser.assert_no_console_errors("dead letters");

    // A task's page shows its log.
    browser.goto(&format!("{}/#/task/{logged}", host.url));
    loaded("task");
    let log = browser.wait_js(
        "the task's log",
        "const l = document.getElementById('task-log'); return l && l.innerText",
    );
    assert!(
        log.as_str().unwrap().contains("dashboard log line"),
        "the log shown: {log}"
    );
    // Each attempt shows what it cost: its fuel and its peak memory, as the history has them.
    let cost = browser.wait_js(
        "the attempt's cost",
        "const f = document.querySelector('#task-attempts .attempt-fuel'); const m = document.querySelector('#task-attempts .attempt-memory'); return f && m && f.innerText !== '—' && m.innerText.endsWith('iB') && [f.innerText, m.innerText]",
    );
    assert!(
        task(&host, logged)["history"][0]["cost"]["fuel_used"].as_u64() > Some(0),
        "{cost}"
    );
    // The recorded attempt, with the command that replays it.
    let records = browser.wait_js(
        "the recorded attempts",
        "const r = document.getElementById('task-records'); return r && r.innerText.includes('spool replay') && r.innerText",
    );
    assert!(
        records
            .as_str()
            .unwrap()
            .contains(&format!("spool replay {logged} --attempt 1")),
        "{records}"
    );
    browser.screenshot("task");
    browser.assert_no_console_errors("task");

    for (page, shows) in [
        ("types", ("types", "fuel")),
        ("plugins", ("plugins-loaded", "loud")),
        ("alerts", ("alerts", "Last drill")),
    ] {
        browser.click(&format!("#nav a[data-page={page}]"));
        loaded(page);
        let (element, text) = shows;
        let shown = browser.js(
            "return document.getElementById(arguments[0]).innerText",
            vec![json!(element)],
        );
        assert!(
            shown.as_str().unwrap().contains(text),
            "the {page} page shows {shown}"
        );
        browser.screenshot(page);
        browser.assert_no_console_errors(page);
    }

    // A deployed type with a candidate on trial: its builds, share and history, and Promote.
    deploy(&host, "canaried", "noop", None);
    deploy(&host, "canaried", "clock", Some(50));
    wait_until(&host, "the candidate served", || {
        let (_, plugins) = api(&host, "GET", "/plugins", None);
        plugins["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["task_type"] == "canaried" && p["candidate"]["version"] == 2)
    });
    browser.click("#nav a[data-page=types]");
    loaded("types");
    browser.click("#nav a[data-page=plugins]");
    loaded("plugins");
    let shown = browser.wait_js(
        "the deployment panel",
        "const d = document.getElementById('plugins-deployed'); return d && d.innerText.includes('Candidate: version 2 on 50 % of attempts') && d.innerText",
    );
    let shown = shown.as_str().unwrap();
    assert!(shown.contains("Stable: version 1"), "{shown}");
    assert!(shown.contains("canary"), "the history: {shown}");
    browser.screenshot("plugins-deployed");
    browser.click("button[data-action=promote][data-type=canaried]");
    wait_until(&host, "the candidate promoted", || {
        let (_, view) = api(&host, "GET", "/plugins/canaried/versions", None);
        view["deployment"]["stable"] == 2 && view["deployment"]["candidate"].is_null()
    });
    browser.wait_js(
        "the promotion shown",
        "return document.getElementById('deploy-message').innerText.includes('canaried: promoted')",
    );
    browser.assert_no_console_errors("plugins, deployed");

    // Pausing a type from its row, and resuming it.
    browser.click("#nav a[data-page=types]");
    loaded("types");
    let paused = |host: &Host| {
        let (status, body) = api(host, "GET", "/types", None);
        assert_eq!(status, 200, "{body}");
        body["types"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["task_type"] == "noop")
            .map(|t| t["paused"] == true)
            .unwrap()
    };
    browser.click("button[data-action=pause][data-type=noop]");
    wait_until(&host, "noop paused", || paused(&host));
    browser.click("button[data-action=resume][data-type=noop]");
    wait_until(&host, "noop resumed", || !paused(&host));
    browser.assert_no_console_errors("types");

    // With the read token a person can look but not change: the retry is refused and says so.
    browser.click("#forget-token");
    browser.wait_js(
        "the token dialog again",
        "return document.getElementById('token-dialog').open",
    );
    browser.js(
        "document.getElementById('token-input').value = arguments[0]",
        vec![json!(READ_TOKEN)],
    );
    browser.click("#token-form button[type=submit]");
    browser.click("#nav a[data-page=dead-letters]");
    loaded("dead-letters");
    let id = chosen[0];
    let before = task(&host, id);
    browser.click(&format!("input[data-id=\"{id}\"]"));
    browser.click("#retry-selected");
    browser.wait_js(
        "the refusal",
        "return document.getElementById('dead-message').innerText.includes('read token does not allow changes')",
    );
    assert_eq!(task(&host, id)["updated_at"], before["updated_at"]);
}

/// The page and its files need no token and carry their security headers; the API behind
/// them still asks for the token.
#[test]
fn dashboard_files_are_served_with_their_policy() {
    let ws = Workspace::with_plugins(&["noop"]);
    let host = ws.start(&["--api-token", TOKEN]);
    let page = host.http.get(format!("{}/", host.url)).send().unwrap();
    assert_eq!(page.status(), 200);
    let headers = page.headers().clone();
    assert!(
        headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    let csp = headers["content-security-policy"].to_str().unwrap();
    assert!(
        csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"),
        "{csp}"
    );
    assert_eq!(headers["cache-control"], "no-cache");
    let html = page.text().unwrap();
    let app = html
        .split('"')
        .find(|s| s.starts_with("/ui/") && s.ends_with("/app.js"))
        .expect("the page loads app.js")
        .to_string();

    let asset = host.http.get(format!("{}{app}", host.url)).send().unwrap();
    assert_eq!(asset.status(), 200);
    assert!(
        asset.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/javascript")
    );
    assert!(
        asset.headers()["cache-control"]
            .to_str()
            .unwrap()
            .contains("immutable")
    );

    let missing = host
        .http
        .get(format!("{}/ui/0/no-such-file.js", host.url))
        .send()
        .unwrap();
    assert_eq!(missing.status(), 404);

    let (status, _) = host.get("/tasks");
    assert_eq!(status, 401, "the data still needs the token");
    let (status, _) = host.get("/openapi.json");
    assert_eq!(status, 200);
}
