//! Helpers: build the guest plugins once, start hosts in temporary folders, talk to them.

use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Builds every guest crate (once per test run) and returns the folder with the `.wasm` files.
pub fn plugin_artifacts() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let plugins = repo_root().join("plugins");
        let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .current_dir(&plugins)
            .args(["build", "--release", "--target", "wasm32-wasip2"])
            .env_remove("CARGO_TARGET_DIR")
            .status()
            .expect("cargo runs");
        assert!(
            status.success(),
            "building the guest plugins failed; run `cargo xtask build-plugins` to see why"
        );
        let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .current_dir(&plugins)
            .args([
                "build",
                "--release",
                "--target",
                "wasm32-wasip1",
                "-p",
                "shout",
            ])
            .env_remove("CARGO_TARGET_DIR")
            .status()
            .expect("cargo runs");
        assert!(
            status.success(),
            "building the preview1 programs failed; run `cargo xtask build-plugins` to see why"
        );
        plugins.join("target/wasm32-wasip2/release")
    })
}

/// The preview1 core module of a plain WASI program crate.
pub fn preview1_artifact(name: &str) -> PathBuf {
    plugin_artifacts();
    let path = repo_root().join(format!("plugins/target/wasm32-wasip1/release/{name}.wasm"));
    assert!(path.exists(), "{} was not built", path.display());
    path
}

/// Where the tests build handler projects with `spool plugin build`, and where the pinned
/// toolchains those builds install live (shared by test runs, like `cargo xtask` does).
pub fn builds_root() -> PathBuf {
    repo_root().join("target/spool-test-builds")
}

/// Runs `spool plugin ...` to completion, panicking with its output when it fails.
pub fn spool_plugin(args: &[&str]) -> String {
    let (succeeded, text) = try_spool_plugin(args);
    assert!(succeeded, "spool plugin {args:?} failed:\n{text}");
    text
}

/// Runs `spool plugin ...` to completion: whether it succeeded, and its stdout and stderr.
pub fn try_spool_plugin(args: &[&str]) -> (bool, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_spool"))
        .arg("plugin")
        .args(args)
        .env("SPOOL_TOOLS_DIR", repo_root().join("target/tools"))
        // Rust projects made from the template share one target folder, so a test run does
        // not compile wit-bindgen again for each of them.
        .env("CARGO_TARGET_DIR", builds_root().join("cargo-target"))
        .output()
        .expect("the spool binary runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

/// Builds a handler project with `spool plugin build` (once per test run; builds run one at a
/// time, as they share the tools folder) and returns the installed `.wasm`.
pub fn built_once(key: &str, build: impl FnOnce(&Path) -> PathBuf) -> PathBuf {
    static BUILT: std::sync::Mutex<Vec<(String, PathBuf)>> = std::sync::Mutex::new(Vec::new());
    let mut built = BUILT
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some((_, path)) = built.iter().find(|(k, _)| k == key) {
        return path.clone();
    }
    let out = builds_root().join("plugins").join(key.replace('/', "-"));
    let path = build(&out);
    built.push((key.to_string(), path.clone()));
    path
}

/// An example handler from `plugins/LANG/NAME` in the repository, built with `spool plugin
/// build` and the language's pinned toolchain.
pub fn example_artifact(project: &str) -> PathBuf {
    built_once(project, |out| {
        let source = repo_root().join("plugins").join(project);
        spool_plugin(&[
            "build",
            source.to_str().unwrap(),
            "--plugins",
            out.to_str().unwrap(),
        ]);
        let name = project.rsplit('/').next().unwrap();
        out.join(format!("{name}.wasm"))
    })
}

/// A fresh project from a language's template (`spool plugin new --lang LANG`), built with
/// `spool plugin build`. The task type is `starter_LANG`.
pub fn template_artifact(language: &str) -> PathBuf {
    built_once(&format!("template/{language}"), |out| {
        let name = format!("starter_{language}");
        let projects = builds_root().join("templates");
        let project = projects.join(&name);
        let _ = std::fs::remove_dir_all(&project);
        std::fs::create_dir_all(&projects).unwrap();
        spool_plugin(&[
            "new",
            "--lang",
            language,
            &name,
            "--dir",
            projects.to_str().unwrap(),
        ]);
        spool_plugin(&[
            "build",
            project.to_str().unwrap(),
            "--plugins",
            out.to_str().unwrap(),
        ]);
        out.join(format!("{name}.wasm"))
    })
}

/// The built component of a plugin crate.
pub fn artifact(name: &str) -> PathBuf {
    let path = plugin_artifacts().join(format!("{name}.wasm"));
    assert!(path.exists(), "{} was not built", path.display());
    path
}

/// A test's own folder with a database and a plugin folder.
pub struct Workspace {
    pub dir: tempfile::TempDir,
    /// The task database when it is not the workspace's own SQLite file (a server database).
    pub database: Option<String>,
}

impl Workspace {
    /// A workspace whose plugin folder holds the named plugins (crate name = task type).
    pub fn with_plugins(names: &[&str]) -> Workspace {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("plugins")).unwrap();
        let ws = Workspace {
            dir,
            database: None,
        };
        for name in names {
            ws.add_plugin(name, name);
        }
        ws
    }

    /// Copies plugin crate `crate_name` into the plugin folder as task type `task_type`.
    pub fn add_plugin(&self, crate_name: &str, task_type: &str) {
        std::fs::copy(
            artifact(crate_name),
            self.plugin_dir().join(format!("{task_type}.wasm")),
        )
        .unwrap();
    }

    /// Writes a manifest for a task type.
    pub fn manifest(&self, task_type: &str, text: &str) {
        std::fs::write(self.plugin_dir().join(format!("{task_type}.toml")), text).unwrap();
    }

    pub fn plugin_dir(&self) -> PathBuf {
        self.dir.path().join("plugins")
    }

    /// The host's grants root by default: `plugin-data` beside the plugin folder. Manifests'
    /// folder grants are relative to it.
    pub fn grants_dir(&self) -> PathBuf {
        self.dir.path().join("plugin-data")
    }

    /// Uses `url` (a PostgreSQL or MySQL database) instead of the workspace's SQLite file.
    pub fn on_database(mut self, url: String) -> Workspace {
        self.database = Some(url);
        self
    }

    pub fn database_url(&self) -> String {
        match &self.database {
            Some(url) => url.clone(),
            None => format!("sqlite://{}", self.dir.path().join("spool.db").display()),
        }
    }

    /// Starts a host on this workspace with extra `serve` flags.
    pub fn start(&self, extra: &[&str]) -> Host {
        Host::start(self, extra, &[])
    }

    /// Starts a host with extra `serve` flags and environment variables.
    pub fn start_with_env(&self, extra: &[&str], env: &[(&str, &str)]) -> Host {
        Host::start(self, extra, env)
    }
}

/// A running `spool serve` process.
pub struct Host {
    pub child: Option<Child>,
    pub url: String,
    pub http: reqwest::blocking::Client,
    pub stderr_log: PathBuf,
}

impl Host {
    fn start(ws: &Workspace, extra: &[&str], env: &[(&str, &str)]) -> Host {
        let stderr_log = ws
            .dir
            .path()
            .join(format!("host-{}.log", next_host_number()));
        let mut command = Command::new(env!("CARGO_BIN_EXE_spool"));
        command.arg("serve");
        if !extra.contains(&"--cache-dir") {
            // One compiled-code cache for the whole test run: each build compiles once.
            command
                .arg("--cache-dir")
                .arg(repo_root().join("target/spool-test-cache"));
        }
        let mut child = command
            .args([
                "--listen",
                "127.0.0.1:0",
                "--database-url",
                &ws.database_url(),
            ])
            .arg("--plugins")
            .arg(ws.plugin_dir())
            .args(if extra.contains(&"--poll-interval") {
                &[][..]
            } else {
                &["--poll-interval", "100ms"][..]
            })
            .args(extra)
            .env("RUST_LOG", "info,spool=debug")
            .env_remove("SPOOL_API_TOKEN")
            .env_remove("SPOOL_READ_TOKEN")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr_log).unwrap())
            .spawn()
            .expect("the spool binary starts");
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let url = loop {
            match lines.next() {
                Some(Ok(line)) => {
                    if let Some(url) = line.strip_prefix("spool listening on ") {
                        break url.to_string();
                    }
                }
                _ => panic!(
                    "host exited before listening:\n{}",
                    std::fs::read_to_string(&stderr_log).unwrap_or_default()
                ),
            }
        };
        // Keep draining stdout so the host never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        let http = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap();
        Host {
            child: Some(child),
            url,
            http,
            stderr_log,
        }
    }

    /// Runs the `spool` CLI against this host, without the token variables of the test's own
    /// environment but with `env`; returns whether it succeeded and what it printed (stdout,
    /// then stderr).
    pub fn cli(&self, args: &[&str], env: &[(&str, &str)]) -> (bool, String) {
        let output = Command::new(env!("CARGO_BIN_EXE_spool"))
            .args(args)
            .args(["--url", &self.url])
            .env_remove("SPOOL_API_TOKEN")
            .env_remove("SPOOL_READ_TOKEN")
            .env_remove("SPOOL_DEPLOY_TOKEN")
            .envs(env.iter().copied())
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        (output.status.success(), text)
    }

    /// The host's address (`127.0.0.1:PORT`), for connections made by hand.
    pub fn addr(&self) -> String {
        self.url.trim_start_matches("http://").to_string()
    }

    /// Sends `head` (request line and headers, without the blank line that ends them; the
    /// helper adds `Connection: close`) and `body` on a connection of its own: for requests no
    /// HTTP client would send. Returns the status and the JSON body.
    pub fn raw(&self, head: &str, body: &str) -> (u16, Value) {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(self.addr()).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        write!(stream, "{head}\r\nConnection: close\r\n\r\n{body}").unwrap();
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer);
        let answer = String::from_utf8_lossy(&answer);
        let status = answer
            .split(' ')
            .nth(1)
            .and_then(|code| code.parse().ok())
            .unwrap_or(0);
        let json = answer
            .split_once("\r\n\r\n")
            .and_then(|(_, body)| serde_json::from_str(body).ok());
        (status, json.unwrap_or(Value::Null))
    }

    /// The host's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr_log).unwrap_or_default()
    }

    pub fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let response = self
            .http
            .post(format!("{}{path}", self.url))
            .json(body)
            .send()
            .unwrap();
        (
            response.status().as_u16(),
            response.json().unwrap_or(Value::Null),
        )
    }

    pub fn post_raw(&self, path: &str, body: &str, content_type: &str) -> (u16, Value) {
        let response = self
            .http
            .post(format!("{}{path}", self.url))
            .header("content-type", content_type)
            .body(body.to_string())
            .send()
            .unwrap();
        (
            response.status().as_u16(),
            response.json().unwrap_or(Value::Null),
        )
    }

    pub fn get(&self, path: &str) -> (u16, Value) {
        let response = self.http.get(format!("{}{path}", self.url)).send().unwrap();
        (
            response.status().as_u16(),
            response.json().unwrap_or(Value::Null),
        )
    }

    /// Enqueues a task, asserting success; returns the task.
    pub fn enqueue(&self, task_type: &str, payload: Value) -> Value {
        self.enqueue_with(json!({ "task_type": task_type, "payload": payload }))
    }

    /// Enqueues a full request body, asserting 201.
    pub fn enqueue_with(&self, request: Value) -> Value {
        let (status, body) = self.post("/tasks", &request);
        assert_eq!(status, 201, "enqueue failed: {body}");
        body
    }

    pub fn task(&self, id: i64) -> Value {
        let (status, body) = self.get(&format!("/tasks/{id}"));
        assert_eq!(status, 200, "GET /tasks/{id}: {body}");
        body
    }

    /// Waits until the task is in `status`, failing with the task and the log after `timeout`.
    pub fn wait_for_status(&self, id: i64, status: &str, timeout: Duration) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let task = self.task(id);
            if task["status"] == status {
                return task;
            }
            if Instant::now() > deadline {
                panic!(
                    "task {id} did not become {status} within {timeout:?}: {task:#}\nhost log:\n{}",
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// Polls `check` until it returns Some; on timeout fails with the host's log.
    pub fn eventually<T>(&self, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(value) = check() {
                return value;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; host log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until the task reaches done, failed or cancelled.
    pub fn wait_final(&self, id: i64) -> Value {
        eventually(Duration::from_secs(60), "a final state", || {
            let task = self.task(id);
            matches!(
                task["status"].as_str(),
                Some("done" | "failed" | "cancelled")
            )
            .then_some(task)
        })
    }

    /// Every task, newest first.
    pub fn all_tasks(&self) -> Vec<Value> {
        let (status, body) = self.get("/tasks?limit=1000");
        assert_eq!(status, 200);
        body["tasks"].as_array().unwrap().clone()
    }

    /// Enqueues the task requests through `POST /tasks/batch`, 500 per request, and returns
    /// the tasks' ids in order.
    pub fn enqueue_all(&self, requests: &[Value]) -> Vec<i64> {
        let mut ids = Vec::with_capacity(requests.len());
        for batch in requests.chunks(500) {
            let (status, body) = self.post("/tasks/batch", &json!({ "tasks": batch }));
            assert_eq!(status, 201, "{body}");
            ids.extend(
                body["tasks"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|t| t["id"].as_i64().unwrap()),
            );
        }
        ids
    }

    /// The host's id, as `/health` names it.
    pub fn host_id(&self) -> String {
        self.get("/health").1["host_id"]
            .as_str()
            .unwrap()
            .to_string()
    }

    /// The maintenance leader's host id, as this host's `/health` names it.
    pub fn leader(&self) -> Option<String> {
        self.get("/health").1["leader"].as_str().map(str::to_string)
    }

    /// Sends a signal to the host process.
    pub fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().unwrap().id().to_string();
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &pid])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Kills the host with SIGKILL, as a crash would.
    pub fn kill(&mut self) {
        self.signal("KILL");
        self.child.take().unwrap().wait().unwrap();
    }

    /// Waits for the host to exit by itself (after a signal); returns whether it exited cleanly.
    pub fn wait_exit(&mut self, timeout: Duration) -> bool {
        let mut child = self.child.take().unwrap();
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status.success();
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("host did not exit within {timeout:?}:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A number no other host started by this test process has: it names the host's log file, so
/// two hosts on one workspace never write one file.
fn next_host_number() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// A tiny HTTP server on loopback that answers every request with 200 and a fixed body, and
/// records the request lines it saw; stands in for a downstream service (a mail API).
pub struct TestServer {
    pub port: u16,
    pub requests: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl TestServer {
    pub fn start(body: &'static str) -> TestServer {
        TestServer::serve(body, false)
    }

    /// Like [`TestServer::start`], but closes its side of the connection right after its
    /// answer (draining whatever still comes, so the answer is not lost to a reset): the client
    /// may find the connection gone while it is still finishing the request body.
    pub fn start_closing_early(body: &'static str) -> TestServer {
        TestServer::serve(body, true)
    }

    fn serve(body: &'static str, close_early: bool) -> TestServer {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests: std::sync::Arc<std::sync::Mutex<Vec<String>>> = Default::default();
        let seen = requests.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n")
                    && stream.read(&mut byte).map(|n| n == 1).unwrap_or(false)
                {
                    head.push(byte[0]);
                }
                let text = String::from_utf8_lossy(&head).to_string();
                // Read a body if one was announced, so the client sees its request complete.
                let length = text
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length:")
                            .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                    })
                    .unwrap_or(0);
                let mut body_in = vec![0u8; length];
                let _ = stream.read_exact(&mut body_in);
                seen.lock()
                    .unwrap()
                    .push(text.lines().next().unwrap_or_default().to_string());
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                if close_early {
                    let _ = stream.shutdown(std::net::Shutdown::Write);
                    let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(10)));
                    let _ = std::io::copy(&mut stream, &mut std::io::sink());
                }
            }
        });
        TestServer { port, requests }
    }

    pub fn count(&self) -> usize {
        self.requests.lock().unwrap().len()
    }
}

/// Copies a file into place the way a deploy does: write elsewhere, rename over.
pub fn deploy(from: &Path, to: &Path) {
    let staging = to.with_extension("staging");
    std::fs::copy(from, &staging).unwrap();
    std::fs::rename(&staging, to).unwrap();
}

/// Polls `check` until it returns Some, failing after `timeout`.
pub fn eventually<T>(timeout: Duration, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The resident memory of a process, in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}
