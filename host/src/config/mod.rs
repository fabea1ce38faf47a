//! One checked configuration for a host, merged from (highest first) command-line flags,
//! `SPOOL_*` environment variables, the config file (`spool.toml`), and built-in defaults.
//!
//! Every flat setting is one entry of the `settings!` table below: its help text, its
//! variable, its default and its rule. The entry gives it one name everywhere (`--poll-interval`,
//! `SPOOL_POLL_INTERVAL`, `poll_interval = "1s"` in spool.toml, `config.poll_interval`), shows
//! its default in `spool serve --help`, and makes its line of docs/configuration.md required (a
//! test compares the two). [`Settings`] is what one source gives, [`Config`] the checked
//! result every service receives; a value a rule refuses is reported with the setting's name,
//! where the value came from and what is allowed:
//! ``setting `concurrency` (spool.toml line 4): must be at least 1, got 0``.
//!
//! Why a macro: clap and serde already read one struct for flags, variables and the file, but
//! neither can apply a default without hiding a lower source, nor write the checked form, the
//! layering or the docs list; by hand those made four places to edit per setting. A
//! declarative table is how rustc keeps its `-C` options (`options!` in `rustc_session`), and
//! adding a setting here is adding one entry. The macro is in `define.rs`; how values are
//! read, checked and traced to their source is in [`source`], [`rules`] and [`origin`].

mod define;
pub mod origin;
pub mod rules;
pub mod source;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::backoff::Backoff;
use crate::worker::upkeep::archiver::{
    DEFAULT_ARCHIVE_AFTER, DEFAULT_ARCHIVE_INTERVAL, DEFAULT_ARCHIVE_RETENTION,
    DEFAULT_DEAD_LETTER_RETENTION, Retention,
};
use define::settings;
use origin::Origins;
use rules::{
    Any, AtLeastOne, Fraction, HostNames, Positive, PositiveAtMost, Size, SizeWithin, Token,
    Within, ZeroMeans,
};
use spool_rules::limits::{
    BACKOFF, CANARY_MAX_FAILURE_INCREASE, CANARY_MIN_ATTEMPTS, CANARY_RATIO, DEFAULT_MAX_PAYLOAD,
    EFFECT_RETENTION, KV_KEYS, MAX_RETRY, MEMORY, TIMEOUT,
};
use spool_rules::size::show_size;

use crate::plugins::policy::{
    DEFAULT_EFFECT_RETENTION, DEFAULT_FUEL, DEFAULT_KV_MAX_BYTES, DEFAULT_KV_MAX_KEYS,
    DEFAULT_MAX_RETRY, DEFAULT_MEMORY, DEFAULT_TIMEOUT, Defaults,
};

/// The database when none is configured: a file in the working directory.
pub const DEFAULT_DATABASE_URL: &str = "sqlite://spool.db";
/// The plugin folder when none is configured.
pub const DEFAULT_PLUGIN_DIR: &str = "plugins";
/// Loopback only: exposing the API is a decision the operator makes explicitly.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8787";
/// Polling only covers writers on other hosts and scheduled tasks; local enqueues wake at once.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(1);
/// A lease long enough that heartbeats (every third of it) never let a live task expire.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(60);
/// How often expired leases are looked for.
pub const DEFAULT_RESCUE_INTERVAL: Duration = Duration::from_secs(15);
/// How often the leader samples the queue statistics behind `GET /stats`.
pub const DEFAULT_STATS_INTERVAL: Duration = Duration::from_secs(10);
/// How long running tasks get to finish on shutdown before they are returned to pending.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(30);
/// Where compiled plugins are cached, relative to the working directory.
pub const DEFAULT_CACHE_DIR: &str = ".spool/cache";
/// The name of the default grants root, a folder beside the plugin folder.
pub const DEFAULT_GRANTS_ROOT_NAME: &str = "plugin-data";
/// The largest result a handler may return.
pub const DEFAULT_MAX_RESULT: usize = 1 << 20;
/// The largest plugin file (component or module) the plugin folder may hold.
pub const DEFAULT_MAX_PLUGIN_SIZE: usize = 128 << 20;
/// Deployed versions kept per task type.
pub const DEFAULT_KEEP_VERSIONS: usize = 10;
/// Candidate attempts before a canary is judged.
pub const DEFAULT_CANARY_MIN_ATTEMPTS: u64 = 20;
/// The percentage points of failed attempts a candidate may add before it is rolled back.
pub const DEFAULT_CANARY_MAX_FAILURE_INCREASE: u64 = 10;
/// How long a sound candidate stays on trial before it is promoted.
pub const DEFAULT_CANARY_DURATION: Duration = Duration::from_secs(600);
/// The largest request body (a batch of payloads).
pub const DEFAULT_MAX_BODY: usize = 16 << 20;
/// The most tasks one batch request may enqueue.
pub const DEFAULT_MAX_BATCH: usize = 10_000;
/// How long a client may take to send a request's head, and how long an idle connection stays.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a client may take to send a request body, and may stall taking an answer.
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// API connections served at once; further ones wait in the listen queue.
pub const DEFAULT_MAX_CONNECTIONS: usize = 512;
/// The longest `GET /tasks/{id}?wait=` a host allows by default, and the most it may allow.
pub const DEFAULT_MAX_WAIT: Duration = Duration::from_secs(60);

settings! {
    /// Database URL
    database_url: String {
        env: "SPOOL_DATABASE_URL",
        default: String::from(DEFAULT_DATABASE_URL),
        rule: Any,
    },
    /// Folder of handler components (NAME.wasm registers task type NAME)
    plugins: PathBuf {
        env: "SPOOL_PLUGINS",
        default: PathBuf::from(DEFAULT_PLUGIN_DIR),
        rule: Any,
    },
    /// Address the HTTP API listens on
    listen: SocketAddr {
        env: "SPOOL_LISTEN",
        default: DEFAULT_LISTEN.parse::<SocketAddr>().expect("valid default"),
        rule: Any,
    },
    /// Tasks run at once on this host
    concurrency: usize {
        env: "SPOOL_CONCURRENCY",
        default: default_concurrency(),
        shown: "8 × CPU cores",
        rule: AtLeastOne,
    },
    /// Bearer token every mutating API request must carry
    api_token: String => Option<String> {
        env: "SPOOL_API_TOKEN",
        default: None,
        rule: Token,
        arg: (hide_env_values = true),
    },
    /// Bearer token that allows reads only; needs an API token, which allows reads too
    read_token: String => Option<String> {
        env: "SPOOL_READ_TOKEN",
        default: None,
        rule: Token,
        arg: (hide_env_values = true),
    },
    /// Bearer token that deploying, promoting and rolling back handler builds need; when set, the API token alone cannot (needs an API token as well)
    deploy_token: String => Option<String> {
        env: "SPOOL_DEPLOY_TOKEN",
        default: None,
        rule: Token,
        arg: (hide_env_values = true),
    },
    /// Serve the API without a token on an address other than loopback (anyone who reaches it, or a web page through DNS rebinding, may change tasks)
    open_api: bool {
        env: "SPOOL_OPEN_API",
        default: false,
        rule: Any,
    },
    /// Host names the API also answers to, comma-separated (NAME or NAME:PORT), e.g. behind a local proxy
    allowed_hosts: Vec<String> {
        env: "SPOOL_ALLOWED_HOSTS",
        default: Vec::new(),
        shown: "loopback names and the listen address",
        rule: HostNames,
        arg: (value_delimiter = ','),
    },
    /// Longest wait for a request's head, and for the next request on an idle connection
    header_timeout: Duration {
        env: "SPOOL_HEADER_TIMEOUT",
        default: DEFAULT_HEADER_TIMEOUT,
        rule: Positive,
    },
    /// Longest wait for a request body, and for a client to take an answer
    body_timeout: Duration {
        env: "SPOOL_BODY_TIMEOUT",
        default: DEFAULT_BODY_TIMEOUT,
        rule: Positive,
    },
    /// Most API connections served at once; further ones wait to be accepted
    max_connections: usize {
        env: "SPOOL_MAX_CONNECTIONS",
        default: DEFAULT_MAX_CONNECTIONS,
        rule: AtLeastOne,
    },
    /// How often to look for due tasks when nothing woke the dispatcher
    poll_interval: Duration {
        env: "SPOOL_POLL_INTERVAL",
        default: DEFAULT_POLL_INTERVAL,
        rule: Positive,
    },
    /// How long a claimed task is leased before another host may rescue it
    lease: Duration {
        env: "SPOOL_LEASE",
        default: DEFAULT_LEASE,
        rule: Positive,
    },
    /// How often to rescue tasks whose lease expired
    rescue_interval: Duration {
        env: "SPOOL_RESCUE_INTERVAL",
        default: DEFAULT_RESCUE_INTERVAL,
        rule: Positive,
    },
    /// How often the leader samples the backlog for `GET /stats` (kept a day, then per minute for a week)
    stats_interval: Duration {
        env: "SPOOL_STATS_INTERVAL",
        default: DEFAULT_STATS_INTERVAL,
        rule: Positive,
    },
    /// How long running tasks may finish on shutdown
    shutdown_grace: Duration {
        env: "SPOOL_SHUTDOWN_GRACE",
        default: DEFAULT_SHUTDOWN_GRACE,
        rule: Any,
    },
    /// Retries after the first attempt, unless a manifest or the request says otherwise
    max_retry: u32 {
        env: "SPOOL_MAX_RETRY",
        default: DEFAULT_MAX_RETRY,
        rule: Within(MAX_RETRY),
    },
    /// Delay before the first retry; doubles each retry
    backoff_base: Duration {
        env: "SPOOL_BACKOFF_BASE",
        default: crate::backoff::DEFAULT_BASE,
        rule: Within(BACKOFF),
    },
    /// Longest delay between retries
    backoff_max: Duration {
        env: "SPOOL_BACKOFF_MAX",
        default: crate::backoff::DEFAULT_MAX_DELAY,
        rule: Within(BACKOFF),
    },
    /// Spread each retry delay by ± this fraction
    backoff_jitter: f64 {
        env: "SPOOL_BACKOFF_JITTER",
        default: 0.0,
        rule: Fraction,
    },
    /// Fuel per attempt, the per-task time limit (0: the default)
    fuel: u64 {
        env: "SPOOL_FUEL",
        default: DEFAULT_FUEL,
        rule: ZeroMeans(DEFAULT_FUEL),
    },
    /// Wall-clock limit per attempt, e.g. 30s
    timeout: Duration {
        env: "SPOOL_TIMEOUT",
        default: DEFAULT_TIMEOUT,
        rule: Within(TIMEOUT),
    },
    /// Folder for compiled plugins, keyed by content hash
    cache_dir: PathBuf {
        env: "SPOOL_CACHE_DIR",
        default: PathBuf::from(DEFAULT_CACHE_DIR),
        rule: Any,
    },
    /// Folder that manifests' `[[dirs]]` grants are beneath; created if missing
    grants_root: PathBuf {
        env: "SPOOL_GRANTS_ROOT",
        default: default_grants_root(&plugins),
        shown: "plugin-data beside the plugin folder",
        rule: Any,
    },
    /// Largest result a handler may return, e.g. 1MiB
    max_result: String => usize {
        env: "SPOOL_MAX_RESULT",
        default: DEFAULT_MAX_RESULT,
        rule: Size,
    },
    /// Reuse instance memory through wasmtime's pooling allocator (≈3× cheaper instantiation)
    pooling: bool {
        env: "SPOOL_POOLING",
        default: true,
        rule: Any,
    },
    /// Linear memory per attempt, e.g. 256MiB
    memory: String => usize {
        env: "SPOOL_MEMORY",
        default: DEFAULT_MEMORY,
        rule: SizeWithin(MEMORY),
    },
    /// Largest accepted task payload, e.g. 1MiB
    max_payload: String => usize {
        env: "SPOOL_MAX_PAYLOAD",
        default: DEFAULT_MAX_PAYLOAD,
        rule: Size,
    },
    /// Largest accepted request body, at least max_payload, e.g. 16MiB
    max_body: String => usize {
        env: "SPOOL_MAX_BODY",
        default: DEFAULT_MAX_BODY,
        rule: Size,
    },
    /// Most tasks in one batch request
    max_batch: usize {
        env: "SPOOL_MAX_BATCH",
        default: DEFAULT_MAX_BATCH,
        rule: AtLeastOne,
    },
    /// Largest plugin file loaded from the plugin folder, e.g. 128MiB
    max_plugin_size: String => usize {
        env: "SPOOL_MAX_PLUGIN_SIZE",
        default: DEFAULT_MAX_PLUGIN_SIZE,
        rule: Size,
    },
    /// Deployed versions kept per task type (besides the stable one, the candidate and those a dead letter ran)
    keep_versions: usize {
        env: "SPOOL_KEEP_VERSIONS",
        default: DEFAULT_KEEP_VERSIONS,
        rule: AtLeastOne,
    },
    /// Attempts a canary candidate must have run before it is judged
    canary_min_attempts: u64 {
        env: "SPOOL_CANARY_MIN_ATTEMPTS",
        default: DEFAULT_CANARY_MIN_ATTEMPTS,
        rule: Within(CANARY_MIN_ATTEMPTS),
    },
    /// How many percentage points more often than the stable build a candidate's attempts may fail before it is rolled back on every host
    canary_max_failure_increase: u64 {
        env: "SPOOL_CANARY_MAX_FAILURE_INCREASE",
        default: DEFAULT_CANARY_MAX_FAILURE_INCREASE,
        rule: Within(CANARY_MAX_FAILURE_INCREASE),
    },
    /// Roll back a canary candidate whose p50 attempt time is more than this many times the stable build's (0: no limit)
    canary_max_slowdown: f64 {
        env: "SPOOL_CANARY_MAX_SLOWDOWN",
        default: 0.0,
        rule: Within(CANARY_RATIO),
    },
    /// Roll back a canary candidate whose peak memory is more than this many times the stable build's (0: no limit)
    canary_max_memory_increase: f64 {
        env: "SPOOL_CANARY_MAX_MEMORY_INCREASE",
        default: 0.0,
        rule: Within(CANARY_RATIO),
    },
    /// How long a candidate that passes stays on trial before it is promoted on every host, e.g. 10m
    canary_duration: Duration {
        env: "SPOOL_CANARY_DURATION",
        default: DEFAULT_CANARY_DURATION,
        rule: Positive,
    },
    /// Keys a task type may keep in its key-value store, unless its manifest says otherwise
    kv_max_keys: u64 {
        env: "SPOOL_KV_MAX_KEYS",
        default: DEFAULT_KV_MAX_KEYS,
        rule: Within(KV_KEYS),
    },
    /// Bytes (keys and values) a task type may keep in its key-value store, unless its manifest says otherwise, e.g. 64MiB
    kv_max_bytes: String => usize {
        env: "SPOOL_KV_MAX_BYTES",
        default: DEFAULT_KV_MAX_BYTES as usize,
        rule: Size,
    },
    /// How long the effect ledger remembers a recorded effect, unless a manifest says otherwise, e.g. 30d
    effect_retention: Duration {
        env: "SPOOL_EFFECT_RETENTION",
        default: DEFAULT_EFFECT_RETENTION,
        rule: Within(EFFECT_RETENTION),
    },
    /// Move finished tasks to the archive table and purge the archive, on the leading host (false: keep every task in the live table)
    archive: bool {
        env: "SPOOL_ARCHIVE",
        default: true,
        rule: Any,
    },
    /// Done and cancelled tasks move to the archive this long after they finished, e.g. 30d
    archive_after: Duration {
        env: "SPOOL_ARCHIVE_AFTER",
        default: DEFAULT_ARCHIVE_AFTER,
        rule: Any,
    },
    /// Failed tasks (dead letters) stay retryable in the live table this long, then move to the archive
    dead_letter_retention: Duration {
        env: "SPOOL_DEAD_LETTER_RETENTION",
        default: DEFAULT_DEAD_LETTER_RETENTION,
        rule: Any,
    },
    /// Archived tasks are purged (with their effects and attempt history) this long after they were archived
    archive_retention: Duration {
        env: "SPOOL_ARCHIVE_RETENTION",
        default: DEFAULT_ARCHIVE_RETENTION,
        rule: Any,
    },
    /// How often the leading host archives and purges
    archive_interval: Duration {
        env: "SPOOL_ARCHIVE_INTERVAL",
        default: DEFAULT_ARCHIVE_INTERVAL,
        rule: Positive,
    },
    /// Longest `GET /tasks/{id}?wait=` this host allows, at most 60s; lower it below a proxy's idle timeout
    max_wait: Duration {
        env: "SPOOL_MAX_WAIT",
        default: DEFAULT_MAX_WAIT,
        rule: PositiveAtMost(DEFAULT_MAX_WAIT),
    },
}

/// One flat setting as `--help` and docs/configuration.md describe it.
pub struct SettingInfo {
    /// The key in spool.toml, and the field of [`Settings`] and [`Config`].
    pub name: &'static str,
    /// The environment variable.
    pub env: &'static str,
    /// The help text's lines.
    pub doc: &'static [&'static str],
    /// The default, as written.
    pub shown: fn() -> String,
}

impl SettingInfo {
    /// The command-line flag.
    pub fn flag(&self) -> String {
        flag_of(self.name)
    }

    /// The help text, one line.
    pub fn help(&self) -> String {
        doc_text(self.doc)
    }
}

/// A setting's flag: `max_body` → `--max-body`.
pub fn flag_of(name: &str) -> String {
    format!("--{}", name.replace('_', "-"))
}

fn doc_text(doc: &[&str]) -> String {
    doc.iter()
        .map(|line| line.trim())
        .collect::<Vec<_>>()
        .join(" ")
}

/// A setting's `--help` text: its doc and its default.
fn help_text(doc: &[&str], shown: String) -> String {
    format!("{} [default: {shown}]", doc_text(doc))
}

/// Attempts are async and cost ~45 KiB each while waiting, so several per core keep the CPU
/// busy when handlers wait on host calls; CPU-bound ones share the sandbox threads.
fn default_concurrency() -> usize {
    8 * std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
}

impl Settings {
    /// Reads a config file. `required` makes a missing file an error (an explicit `--config`).
    pub fn from_file(path: &Path, required: bool) -> Result<Settings, ConfigError> {
        match std::fs::read_to_string(path) {
            Ok(text) => {
                let mut settings: Settings = toml::from_str(&text)
                    .map_err(|e| ConfigError(format!("{}: {e}", path.display())))?;
                let names: Vec<&'static str> = SETTINGS.iter().map(|s| s.name).collect();
                settings.origins = Origins::in_file(path, &text, &names);
                Ok(settings)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !required => {
                Ok(Settings::default())
            }
            Err(e) => Err(ConfigError(format!(
                "cannot read config file {}: {e}",
                path.display()
            ))),
        }
    }
}

/// A configuration that cannot be used; the message says which setting and what to do.
#[derive(Debug, thiserror::Error)]
#[error("configuration error: {0}")]
pub struct ConfigError(pub String);

impl ConfigError {
    /// A problem with one setting's value: names the setting and where its value came from
    /// (or, when nobody recorded that, every place it can be set).
    pub fn setting(name: &str, origins: &Origins, problem: impl std::fmt::Display) -> ConfigError {
        let from = match origins.get(name) {
            Some(origin) => origin.describe(),
            None => {
                let env = SETTINGS
                    .iter()
                    .find(|s| s.name == name)
                    .map_or("", |s| s.env);
                format!("{} / {env} / {name} in spool.toml", flag_of(name))
            }
        };
        ConfigError(format!("setting `{name}` ({from}): {problem}"))
    }
}

/// The last step of [`Config::from_settings`]: settings checked against each other, and the
/// spool.toml tables that are no flat setting.
fn finish(
    mut config: Config,
    alerts: Option<crate::alerts::config::AlertSettings>,
    schedule: Vec<crate::schedule::ScheduleEntry>,
    origins: &Origins,
) -> Result<Config, ConfigError> {
    if config.deploy_token.is_some() && config.api_token.is_none() {
        return Err(ConfigError::setting(
            "deploy_token",
            origins,
            "needs api_token as well: without an API token anyone may change tasks, so set both",
        ));
    }
    if config.read_token.is_some() && config.api_token.is_none() {
        return Err(ConfigError::setting(
            "read_token",
            origins,
            "needs api_token as well: without an API token anyone may change tasks, so set both",
        ));
    }
    if !config.listen.ip().is_loopback() && config.api_token.is_none() && !config.open_api {
        return Err(ConfigError::setting(
            "listen",
            origins,
            format!(
                "{} is reachable from other machines, and without api_token anyone who reaches \
                 it (or a web page, through DNS rebinding) may enqueue, retry and cancel tasks: \
                 set api_token (and read_token for read-only callers), listen on 127.0.0.1 \
                 behind a proxy, or set open_api = true to serve it open anyway",
                config.listen
            ),
        ));
    }
    if config.max_body < config.max_payload {
        return Err(ConfigError::setting(
            "max_body",
            origins,
            format!(
                "must be at least max_payload ({}), got {}",
                show_size(config.max_payload),
                show_size(config.max_body)
            ),
        ));
    }
    if config.archive {
        for (name, age) in [
            ("archive_after", config.archive_after),
            ("dead_letter_retention", config.dead_letter_retention),
            ("archive_retention", config.archive_retention),
        ] {
            if age.is_zero() {
                return Err(ConfigError::setting(
                    name,
                    origins,
                    "must be longer than zero; to keep every task, set archive = false",
                ));
            }
        }
    }
    config.schedules = schedules(&schedule, config.max_payload)?;
    config.alerts = crate::alerts::config::AlertsConfig::from_settings(alerts, config.listen)
        .map_err(|error| ConfigError(error.to_string()))?;
    Ok(config)
}

impl Config {
    /// The per-task-type defaults these settings give.
    /// When the leader judges a canary candidate.
    pub fn canary_rules(&self) -> crate::plugins::rollout::CanaryRules {
        crate::plugins::rollout::CanaryRules {
            min_attempts: self.canary_min_attempts,
            max_failure_increase: self.canary_max_failure_increase,
            max_slowdown: (self.canary_max_slowdown > 0.0).then_some(self.canary_max_slowdown),
            max_memory_increase: (self.canary_max_memory_increase > 0.0)
                .then_some(self.canary_max_memory_increase),
            duration: self.canary_duration,
        }
    }

    pub fn defaults(&self) -> Defaults {
        Defaults {
            max_retry: self.max_retry,
            backoff: Backoff::new(self.backoff_base, self.backoff_max, self.backoff_jitter),
            fuel: self.fuel,
            timeout: self.timeout,
            memory_bytes: self.memory,
            kv_max_keys: self.kv_max_keys,
            kv_max_bytes: self.kv_max_bytes as u64,
            effect_retention: self.effect_retention,
        }
    }

    /// How long finished tasks stay in the live table and in the archive; `None` when
    /// archiving is turned off (`archive = false`).
    pub fn retention(&self) -> Option<Retention> {
        self.archive.then_some(Retention {
            after: self.archive_after,
            dead_letters: self.dead_letter_retention,
            archive: self.archive_retention,
        })
    }

    /// The SQLite database file the database URL names, as SQLite will open it; `None` for an
    /// in-memory database or another database server.
    pub fn sqlite_file(&self) -> Option<PathBuf> {
        use std::str::FromStr;
        let scheme = self.database_url.split_once(':').map(|(scheme, _)| scheme);
        if !scheme.is_some_and(|s| s.eq_ignore_ascii_case("sqlite")) {
            return None;
        }
        let options = sqlx::sqlite::SqliteConnectOptions::from_str(&self.database_url).ok()?;
        let file = options.get_filename();
        let name = file.to_string_lossy();
        (!name.is_empty() && !name.starts_with(":memory:") && !name.starts_with("file:"))
            .then(|| file.to_path_buf())
    }

    /// How often running tasks' leases are extended: three times per lease, so one missed
    /// heartbeat never lets a live task expire.
    pub fn heartbeat_interval(&self) -> Duration {
        self.lease / 3
    }
}

/// The `[[schedule]]` tables of spool.toml, checked; payloads within `max_payload`.
fn schedules(
    entries: &[crate::schedule::ScheduleEntry],
    max_payload: usize,
) -> Result<Vec<crate::schedule::Schedule>, ConfigError> {
    use crate::schedule::{Schedule, Source, check_entries};
    let checked = check_entries(entries, Source::Config, chrono::Utc::now())
        .map_err(|e| ConfigError(format!("spool.toml {e}")))?;
    checked
        .into_iter()
        .enumerate()
        .map(|(i, (task_type, spec))| {
            if spec.payload.len() > max_payload {
                return Err(ConfigError(format!(
                    "spool.toml schedule[{i}].payload is {} bytes as JSON; at most {max_payload} (max_payload)",
                    spec.payload.len()
                )));
            }
            Ok(Schedule {
                source: Source::Config,
                task_type: task_type.expect("spool.toml schedules name their type"),
                spec,
            })
        })
        .collect()
}

/// `plugin-data` beside the plugin folder: `plugins` → `plugin-data`, `/srv/spool/plugins` →
/// `/srv/spool/plugin-data`; for `.` or a path ending in `..`, in the folder above it.
pub fn default_grants_root(plugin_dir: &Path) -> PathBuf {
    match (plugin_dir.components().next_back(), plugin_dir.parent()) {
        (Some(std::path::Component::Normal(_)), Some(parent)) => {
            parent.join(DEFAULT_GRANTS_ROOT_NAME)
        }
        _ => plugin_dir.join("..").join(DEFAULT_GRANTS_ROOT_NAME),
    }
}

#[cfg(test)]
mod tests;
