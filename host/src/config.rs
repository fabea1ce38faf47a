//! One validated configuration for a host, merged from (highest first) command-line flags,
//! `SPOOL_*` environment variables, the config file (`spool.toml`), and built-in defaults.
//!
//! [`Settings`] is the unvalidated form shared by all three sources (it is both a clap argument
//! group and a serde table, so a setting has one name everywhere: `--poll-interval`,
//! `SPOOL_POLL_INTERVAL`, `poll_interval = "1s"`). [`Config`] is the validated result every
//! service receives.

use clap::Args;
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::backoff::Backoff;
use crate::plugins::manifest::parse_byte_size;

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
/// The essay's default: three retries after the first attempt.
pub const DEFAULT_MAX_RETRY: u32 = 3;
/// Fuel per attempt: a few seconds of pure computation on current hardware.
pub const DEFAULT_FUEL: u64 = 10_000_000_000;
/// Wall-clock time per attempt, waiting in host calls included.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);
/// Where compiled plugins are cached, relative to the working directory.
pub const DEFAULT_CACHE_DIR: &str = ".spool/cache";
/// The name of the default grants root, a folder beside the plugin folder.
pub const DEFAULT_GRANTS_ROOT_NAME: &str = "plugin-data";
/// The largest result a handler may return.
pub const DEFAULT_MAX_RESULT: usize = 1 << 20;
/// Linear memory per attempt.
pub const DEFAULT_MEMORY: usize = 256 << 20;
/// The largest payload accepted; a task table is no place for files.
pub const DEFAULT_MAX_PAYLOAD: usize = 1 << 20;
/// The largest plugin file (component or module) the plugin folder may hold.
pub const DEFAULT_MAX_PLUGIN_SIZE: usize = 128 << 20;
/// Keys one task type may keep in its key-value store.
pub const DEFAULT_KV_MAX_KEYS: u64 = 10_000;
/// Bytes (keys and values together) one task type may keep in its key-value store.
pub const DEFAULT_KV_MAX_BYTES: u64 = 64 << 20;
/// How long the effect ledger remembers a recorded effect.
pub const DEFAULT_EFFECT_RETENTION: Duration = Duration::from_secs(30 * 86_400);
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

/// Settings from one source; every field optional so sources can be layered.
#[derive(Debug, Clone, Default, Args, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// Database URL [default: sqlite://spool.db]
    #[arg(long, env = "SPOOL_DATABASE_URL")]
    pub database_url: Option<String>,
    /// Folder of handler components (NAME.wasm registers task type NAME) [default: plugins]
    #[arg(long = "plugins", env = "SPOOL_PLUGINS")]
    pub plugins: Option<PathBuf>,
    /// Address the HTTP API listens on [default: 127.0.0.1:8787]
    #[arg(long, env = "SPOOL_LISTEN")]
    pub listen: Option<SocketAddr>,
    /// Tasks run at once on this host [default: 8 × CPU cores]
    #[arg(long, env = "SPOOL_CONCURRENCY")]
    pub concurrency: Option<usize>,
    /// Bearer token every mutating API request must carry [default: none]
    #[arg(long, env = "SPOOL_API_TOKEN", hide_env_values = true)]
    pub api_token: Option<String>,
    /// Bearer token that allows reads only; needs an API token, which allows reads too [default: none]
    #[arg(long, env = "SPOOL_READ_TOKEN", hide_env_values = true)]
    pub read_token: Option<String>,
    /// Host names the API also answers to, comma-separated (NAME or NAME:PORT), e.g. behind a local proxy [default: loopback names and the listen address]
    #[arg(long, env = "SPOOL_ALLOWED_HOSTS", value_delimiter = ',')]
    pub allowed_hosts: Option<Vec<String>>,
    /// Longest wait for a request's head, and for the next request on an idle connection [default: 10s]
    #[arg(long, env = "SPOOL_HEADER_TIMEOUT", value_parser = humantime::parse_duration)]
    #[serde(default, with = "humantime_serde")]
    pub header_timeout: Option<Duration>,
    /// Longest wait for a request body, and for a client to take an answer [default: 30s]
    #[arg(long, env = "SPOOL_BODY_TIMEOUT", value_parser = humantime::parse_duration)]
    #[serde(default, with = "humantime_serde")]
    pub body_timeout: Option<Duration>,
    /// Most API connections served at once; further ones wait to be accepted [default: 512]
    #[arg(long, env = "SPOOL_MAX_CONNECTIONS")]
    pub max_connections: Option<usize>,
    /// How often to look for due tasks when nothing woke the dispatcher [default: 1s]
    #[arg(long, env = "SPOOL_POLL_INTERVAL", value_parser = humantime::parse_duration)]
    #[serde(default, with = "humantime_serde")]
    pub poll_interval: Option<Duration>,
    /// How long a claimed task is leased before another host may rescue it [default: 60s]
    #[arg(long, env = "SPOOL_LEASE", value_parser = humantime::parse_duration)]
    #[serde(default, with = "humantime_serde")]
    pub lease: Option<Duration>,
    /// How often to rescue tasks whose lease expired [default: 15s]
    #[arg(long, env = "SPOOL_RESCUE_INTERVAL", value_parser = humantime::parse_duration)]
    #[serde(default, with = "humantime_serde")]
    pub rescue_interval: Option<Duration>,
    /// How often the leader samples the backlog for `GET /stats` (kept a day, then per minute for a week) [default: 10s]
    #[arg(long, env = "SPOOL_STATS_INTERVAL", value_parser = humantime::parse_duration)]
    #[serde(default, with = "humantime_serde")]
    pub stats_interval: Option<Duration>,
    /// How long running tasks may finish on shutdown [default: 30s]
    #[arg(long, env = "SPOOL_SHUTDOWN_GRACE", value_parser = humantime::parse_duration)]
    #[serde(default, with = "humantime_serde")]
    pub shutdown_grace: Option<Duration>,
    /// Retries after the first attempt, unless a manifest or the request says otherwise [default: 3]
    #[arg(long, env = "SPOOL_MAX_RETRY")]
    pub max_retry: Option<u32>,
    /// Delay before the first retry; doubles each retry [default: 30s]
    #[arg(long, env = "SPOOL_BACKOFF_BASE", value_parser = humantime::parse_duration)]
    #[serde(default, with = "humantime_serde")]
    pub backoff_base: Option<Duration>,
    /// Longest delay between retries [default: 24h]
    #[arg(long, env = "SPOOL_BACKOFF_MAX", value_parser = humantime::parse_duration)]
    #[serde(default, with = "humantime_serde")]
    pub backoff_max: Option<Duration>,
    /// Spread each retry delay by ± this fraction [default: 0]
    #[arg(long, env = "SPOOL_BACKOFF_JITTER")]
    pub backoff_jitter: Option<f64>,
    /// Fuel per attempt, the per-task time limit [default: 10000000000]
    #[arg(long, env = "SPOOL_FUEL")]
    pub fuel: Option<u64>,
    /// Wall-clock limit per attempt, e.g. 30s [default: 5m]
    #[arg(long, env = "SPOOL_TIMEOUT", value_parser = humantime::parse_duration)]
    #[serde(default, with = "humantime_serde")]
    pub timeout: Option<Duration>,
    /// Folder for compiled plugins, keyed by content hash [default: .spool/cache]
    #[arg(long, env = "SPOOL_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Folder that manifests' [[dirs]] grants are beneath; created if missing [default: plugin-data beside the plugin folder]
    #[arg(long, env = "SPOOL_GRANTS_ROOT")]
    pub grants_root: Option<PathBuf>,
    /// Largest result a handler may return, e.g. 1MiB [default: 1MiB]
    #[arg(long, env = "SPOOL_MAX_RESULT")]
    pub max_result: Option<String>,
    /// Reuse instance memory through wasmtime's pooling allocator (≈3× cheaper instantiation) [default: true]
    #[arg(long, env = "SPOOL_POOLING")]
    pub pooling: Option<bool>,
    /// Linear memory per attempt, e.g. 256MiB [default: 256MiB]
    #[arg(long, env = "SPOOL_MEMORY")]
    pub memory: Option<String>,
    /// Largest accepted task payload, e.g. 1MiB [default: 1MiB]
    #[arg(long, env = "SPOOL_MAX_PAYLOAD")]
    pub max_payload: Option<String>,
    /// Largest accepted request body, e.g. 16MiB [default: 16MiB]
    #[arg(long, env = "SPOOL_MAX_BODY")]
    pub max_body: Option<String>,
    /// Most tasks in one batch request [default: 10000]
    #[arg(long, env = "SPOOL_MAX_BATCH")]
    pub max_batch: Option<usize>,
    /// Largest plugin file loaded from the plugin folder, e.g. 128MiB [default: 128MiB]
    #[arg(long, env = "SPOOL_MAX_PLUGIN_SIZE")]
    pub max_plugin_size: Option<String>,
    /// Keys a task type may keep in its key-value store, unless its manifest says otherwise [default: 10000]
    #[arg(long, env = "SPOOL_KV_MAX_KEYS")]
    pub kv_max_keys: Option<u64>,
    /// Bytes (keys and values) a task type may keep in its key-value store, unless its manifest says otherwise, e.g. 64MiB [default: 64MiB]
    #[arg(long, env = "SPOOL_KV_MAX_BYTES")]
    pub kv_max_bytes: Option<String>,
    /// How long the effect ledger remembers a recorded effect, unless a manifest says otherwise, e.g. 30d [default: 30d]
    #[arg(long, env = "SPOOL_EFFECT_RETENTION", value_parser = humantime::parse_duration)]
    #[serde(default, with = "humantime_serde")]
    pub effect_retention: Option<Duration>,
    /// Move finished tasks to the archive table and purge the archive, on the leading host (false: keep every task in the live table) [default: true]
    #[arg(long, env = "SPOOL_ARCHIVE")]
    pub archive: Option<bool>,
    /// Done and cancelled tasks move to the archive this long after they finished, e.g. 30d [default: 30d]
    #[arg(long, env = "SPOOL_ARCHIVE_AFTER", value_parser = humantime::parse_duration)]
    #[serde(default, with = "humantime_serde")]
    pub archive_after: Option<Duration>,
    /// Failed tasks (dead letters) stay retryable in the live table this long, then move to the archive [default: 90d]
    #[arg(long, env = "SPOOL_DEAD_LETTER_RETENTION", value_parser = humantime::parse_duration)]
    #[serde(default, with = "humantime_serde")]
    pub dead_letter_retention: Option<Duration>,
    /// Archived tasks are purged (with their effects and attempt history) this long after they were archived [default: 365d]
    #[arg(long, env = "SPOOL_ARCHIVE_RETENTION", value_parser = humantime::parse_duration)]
    #[serde(default, with = "humantime_serde")]
    pub archive_retention: Option<Duration>,
    /// How often the leading host archives and purges [default: 5m]
    #[arg(long, env = "SPOOL_ARCHIVE_INTERVAL", value_parser = humantime::parse_duration)]
    #[serde(default, with = "humantime_serde")]
    pub archive_interval: Option<Duration>,
    /// Alert rules, channels and cool-down: the `[alerts]` table of spool.toml only (see
    /// [`crate::alerts::config`]).
    #[arg(skip)]
    #[serde(default)]
    pub alerts: Option<crate::alerts::config::AlertSettings>,
    /// Longest `GET /tasks/{id}?wait=` this host allows, at most 60s; lower it below a proxy's idle timeout [default: 60s]
    #[arg(long, env = "SPOOL_MAX_WAIT", value_parser = humantime::parse_duration)]
    #[serde(default, with = "humantime_serde")]
    pub max_wait: Option<Duration>,
    /// Periodic tasks (`[[schedule]]` tables, spool.toml only; see [`crate::schedule`]).
    #[arg(skip)]
    #[serde(default)]
    pub schedule: Vec<crate::schedule::ScheduleEntry>,
}

impl Settings {
    /// Fills every field this source leaves unset from `lower`.
    pub fn or(self, lower: Settings) -> Settings {
        Settings {
            database_url: self.database_url.or(lower.database_url),
            plugins: self.plugins.or(lower.plugins),
            listen: self.listen.or(lower.listen),
            concurrency: self.concurrency.or(lower.concurrency),
            api_token: self.api_token.or(lower.api_token),
            read_token: self.read_token.or(lower.read_token),
            allowed_hosts: self.allowed_hosts.or(lower.allowed_hosts),
            header_timeout: self.header_timeout.or(lower.header_timeout),
            body_timeout: self.body_timeout.or(lower.body_timeout),
            max_connections: self.max_connections.or(lower.max_connections),
            poll_interval: self.poll_interval.or(lower.poll_interval),
            lease: self.lease.or(lower.lease),
            rescue_interval: self.rescue_interval.or(lower.rescue_interval),
            stats_interval: self.stats_interval.or(lower.stats_interval),
            shutdown_grace: self.shutdown_grace.or(lower.shutdown_grace),
            max_retry: self.max_retry.or(lower.max_retry),
            backoff_base: self.backoff_base.or(lower.backoff_base),
            backoff_max: self.backoff_max.or(lower.backoff_max),
            backoff_jitter: self.backoff_jitter.or(lower.backoff_jitter),
            fuel: self.fuel.or(lower.fuel),
            timeout: self.timeout.or(lower.timeout),
            pooling: self.pooling.or(lower.pooling),
            cache_dir: self.cache_dir.or(lower.cache_dir),
            grants_root: self.grants_root.or(lower.grants_root),
            max_result: self.max_result.or(lower.max_result),
            memory: self.memory.or(lower.memory),
            max_payload: self.max_payload.or(lower.max_payload),
            max_body: self.max_body.or(lower.max_body),
            max_batch: self.max_batch.or(lower.max_batch),
            max_wait: self.max_wait.or(lower.max_wait),
            max_plugin_size: self.max_plugin_size.or(lower.max_plugin_size),
            kv_max_keys: self.kv_max_keys.or(lower.kv_max_keys),
            kv_max_bytes: self.kv_max_bytes.or(lower.kv_max_bytes),
            effect_retention: self.effect_retention.or(lower.effect_retention),
            schedule: if self.schedule.is_empty() {
                lower.schedule
            } else {
                self.schedule
            },
            archive: self.archive.or(lower.archive),
            archive_after: self.archive_after.or(lower.archive_after),
            dead_letter_retention: self.dead_letter_retention.or(lower.dead_letter_retention),
            archive_retention: self.archive_retention.or(lower.archive_retention),
            archive_interval: self.archive_interval.or(lower.archive_interval),
            alerts: self.alerts.or(lower.alerts),
        }
    }

    /// Reads a config file. `required` makes a missing file an error (an explicit `--config`).
    pub fn from_file(path: &Path, required: bool) -> Result<Settings, ConfigError> {
        match std::fs::read_to_string(path) {
            Ok(text) => {
                toml::from_str(&text).map_err(|e| ConfigError(format!("{}: {e}", path.display())))
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

/// Per-task-type defaults; a plugin's manifest overrides them.
#[derive(Debug, Clone, PartialEq)]
pub struct Defaults {
    pub max_retry: u32,
    pub backoff: Backoff,
    pub fuel: u64,
    pub timeout: Duration,
    pub memory_bytes: usize,
    /// What a type may keep in its key-value store.
    pub kv_max_keys: u64,
    pub kv_max_bytes: u64,
    /// How long the effect ledger remembers a type's effects.
    pub effect_retention: Duration,
}

impl Default for Defaults {
    fn default() -> Self {
        Defaults {
            max_retry: DEFAULT_MAX_RETRY,
            backoff: Backoff::default(),
            fuel: DEFAULT_FUEL,
            timeout: DEFAULT_TIMEOUT,
            memory_bytes: DEFAULT_MEMORY,
            kv_max_keys: DEFAULT_KV_MAX_KEYS,
            kv_max_bytes: DEFAULT_KV_MAX_BYTES,
            effect_retention: DEFAULT_EFFECT_RETENTION,
        }
    }
}

/// The validated configuration of one host.
#[derive(Debug, Clone)]
pub struct Config {
    pub database_url: String,
    pub plugin_dir: PathBuf,
    pub cache_dir: PathBuf,
    /// The folder every manifest folder grant lives beneath (see [`crate::sandbox::grants`]).
    pub grants_root: PathBuf,
    pub listen: SocketAddr,
    pub concurrency: usize,
    pub api_token: Option<String>,
    /// A token that allows reads only (see [`crate::api::auth`]).
    pub read_token: Option<String>,
    /// Host names (lower case, `NAME` or `NAME:PORT`) the API answers to besides loopback
    /// names and the listen address (see [`crate::api::guard`]).
    pub allowed_hosts: Vec<String>,
    pub header_timeout: Duration,
    pub body_timeout: Duration,
    pub max_connections: usize,
    pub poll_interval: Duration,
    pub lease: Duration,
    pub rescue_interval: Duration,
    /// How often the leader samples the queue statistics ([`crate::worker::sampler`]).
    pub stats_interval: Duration,
    pub shutdown_grace: Duration,
    pub defaults: Defaults,
    pub max_payload_bytes: usize,
    pub max_body_bytes: usize,
    pub max_batch: usize,
    /// The longest long-poll of `GET /tasks/{id}?wait=`.
    pub max_wait: Duration,
    pub max_result_bytes: usize,
    pub pooling: bool,
    /// The largest plugin file loaded.
    pub max_plugin_bytes: usize,
    /// Periodic tasks declared in spool.toml.
    pub schedules: Vec<crate::schedule::Schedule>,
    /// How long finished tasks stay in the live table and in the archive; `None`: no archiving.
    pub retention: Option<crate::worker::archiver::Retention>,
    /// How often the leading host archives and purges.
    pub archive_interval: Duration,
    /// Alert rules and channels (`[alerts]`).
    pub alerts: crate::alerts::config::AlertsConfig,
}

impl Config {
    /// Validates merged settings, applying defaults.
    pub fn from_settings(settings: Settings) -> Result<Config, ConfigError> {
        let size = |value: Option<String>, name: &str, default: usize| match value {
            None => Ok(default),
            Some(text) => parse_byte_size(&text).map_err(|e| ConfigError(format!("{name}: {e}"))),
        };
        let positive = |value: Option<Duration>, name: &str, default: Duration| {
            let value = value.unwrap_or(default);
            if value.is_zero() {
                Err(ConfigError(format!("{name} must be longer than zero")))
            } else {
                Ok(value)
            }
        };
        // Attempts are async and cost ~45 KiB each while waiting, so several per core keep the
        // CPU busy when handlers wait on host calls; CPU-bound ones share the sandbox threads.
        let concurrency = settings.concurrency.unwrap_or_else(|| {
            8 * std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(2)
        });
        if concurrency == 0 {
            return Err(ConfigError("concurrency must be at least 1".into()));
        }
        let jitter = settings.backoff_jitter.unwrap_or(0.0);
        if !(0.0..=1.0).contains(&jitter) {
            return Err(ConfigError(format!(
                "backoff_jitter = {jitter}: use a fraction between 0 and 1"
            )));
        }
        let retention = retention(&settings)?;
        let archive_interval = positive(
            settings.archive_interval,
            "archive_interval",
            crate::worker::archiver::DEFAULT_ARCHIVE_INTERVAL,
        )?;
        let lease = positive(settings.lease, "lease", DEFAULT_LEASE)?;
        let api_token = settings.api_token.filter(|t| !t.is_empty());
        let read_token = settings.read_token.filter(|t| !t.is_empty());
        if read_token.is_some() && api_token.is_none() {
            return Err(ConfigError(
                "read_token needs api_token: without an API token anyone may change tasks, so set both".into(),
            ));
        }
        let allowed_hosts = settings
            .allowed_hosts
            .unwrap_or_default()
            .iter()
            .map(|name| name.trim().to_ascii_lowercase())
            .filter(|name| !name.is_empty())
            .map(|name| {
                if name.contains(['/', '@', ' ', '\t']) {
                    Err(ConfigError(format!(
                        "allowed_hosts: `{name}` is not a host name; write NAME or NAME:PORT"
                    )))
                } else {
                    Ok(name)
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        let max_connections = settings.max_connections.unwrap_or(DEFAULT_MAX_CONNECTIONS);
        if max_connections == 0 {
            return Err(ConfigError("max_connections must be at least 1".into()));
        }
        let max_batch = settings.max_batch.unwrap_or(DEFAULT_MAX_BATCH);
        let max_wait = positive(settings.max_wait, "max_wait", DEFAULT_MAX_WAIT)?;
        if max_wait > DEFAULT_MAX_WAIT {
            return Err(ConfigError(format!(
                "max_wait is {max_wait:?}; at most {DEFAULT_MAX_WAIT:?}"
            )));
        }
        if max_batch == 0 {
            return Err(ConfigError("max_batch must be at least 1".into()));
        }
        let max_payload_bytes = size(settings.max_payload, "max_payload", DEFAULT_MAX_PAYLOAD)?;
        let max_body_bytes = size(settings.max_body, "max_body", DEFAULT_MAX_BODY)?;
        if max_body_bytes < max_payload_bytes {
            return Err(ConfigError("max_body must be at least max_payload".into()));
        }
        let plugin_dir = settings
            .plugins
            .unwrap_or_else(|| DEFAULT_PLUGIN_DIR.into());
        let schedules = schedules(&settings.schedule, max_payload_bytes)?;
        Ok(Config {
            database_url: settings
                .database_url
                .unwrap_or_else(|| DEFAULT_DATABASE_URL.into()),
            grants_root: settings
                .grants_root
                .unwrap_or_else(|| default_grants_root(&plugin_dir)),
            plugin_dir,
            cache_dir: settings
                .cache_dir
                .unwrap_or_else(|| DEFAULT_CACHE_DIR.into()),
            listen: settings
                .listen
                .unwrap_or_else(|| DEFAULT_LISTEN.parse().expect("valid default")),
            concurrency,
            api_token,
            read_token,
            allowed_hosts,
            header_timeout: positive(
                settings.header_timeout,
                "header_timeout",
                DEFAULT_HEADER_TIMEOUT,
            )?,
            body_timeout: positive(settings.body_timeout, "body_timeout", DEFAULT_BODY_TIMEOUT)?,
            max_connections,
            poll_interval: positive(
                settings.poll_interval,
                "poll_interval",
                DEFAULT_POLL_INTERVAL,
            )?,
            lease,
            rescue_interval: positive(
                settings.rescue_interval,
                "rescue_interval",
                DEFAULT_RESCUE_INTERVAL,
            )?,
            stats_interval: positive(
                settings.stats_interval,
                "stats_interval",
                DEFAULT_STATS_INTERVAL,
            )?,
            shutdown_grace: settings.shutdown_grace.unwrap_or(DEFAULT_SHUTDOWN_GRACE),
            defaults: Defaults {
                max_retry: settings.max_retry.unwrap_or(DEFAULT_MAX_RETRY),
                backoff: Backoff::new(
                    positive(
                        settings.backoff_base,
                        "backoff_base",
                        crate::backoff::DEFAULT_BASE,
                    )?,
                    positive(
                        settings.backoff_max,
                        "backoff_max",
                        crate::backoff::DEFAULT_MAX_DELAY,
                    )?,
                    jitter,
                ),
                fuel: settings.fuel.filter(|f| *f > 0).unwrap_or(DEFAULT_FUEL),
                timeout: positive(settings.timeout, "timeout", DEFAULT_TIMEOUT)?,
                memory_bytes: size(settings.memory, "memory", DEFAULT_MEMORY)?,
                kv_max_keys: settings.kv_max_keys.unwrap_or(DEFAULT_KV_MAX_KEYS),
                kv_max_bytes: size(
                    settings.kv_max_bytes,
                    "kv_max_bytes",
                    DEFAULT_KV_MAX_BYTES as usize,
                )? as u64,
                effect_retention: positive(
                    settings.effect_retention,
                    "effect_retention",
                    DEFAULT_EFFECT_RETENTION,
                )?,
            },
            max_payload_bytes,
            max_body_bytes,
            max_batch,
            max_wait,
            max_result_bytes: size(settings.max_result, "max_result", DEFAULT_MAX_RESULT)?,
            pooling: settings.pooling.unwrap_or(true),
            max_plugin_bytes: size(
                settings.max_plugin_size,
                "max_plugin_size",
                DEFAULT_MAX_PLUGIN_SIZE,
            )?,
            schedules,
            retention,
            archive_interval,
            alerts: crate::alerts::config::AlertsConfig::from_settings(
                settings.alerts,
                settings
                    .listen
                    .unwrap_or_else(|| DEFAULT_LISTEN.parse().expect("valid default")),
            )?,
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

/// The retention settings, validated: `None` when archiving is turned off (`archive = false`).
pub fn retention(
    settings: &Settings,
) -> Result<Option<crate::worker::archiver::Retention>, ConfigError> {
    use crate::worker::archiver::Retention;
    if settings.archive == Some(false) {
        return Ok(None);
    }
    let defaults = Retention::default();
    let positive = |value: Option<Duration>, name: &str, default: Duration| {
        let value = value.unwrap_or(default);
        if value.is_zero() {
            Err(ConfigError(format!(
                "{name} must be longer than zero; to keep every task, set archive = false"
            )))
        } else {
            Ok(value)
        }
    };
    Ok(Some(Retention {
        after: positive(settings.archive_after, "archive_after", defaults.after)?,
        dead_letters: positive(
            settings.dead_letter_retention,
            "dead_letter_retention",
            defaults.dead_letters,
        )?,
        archive: positive(
            settings.archive_retention,
            "archive_retention",
            defaults.archive,
        )?,
    }))
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
mod tests {
    use super::*;

    #[test]
    fn defaults_apply() {
        let config = Config::from_settings(Settings::default()).unwrap();
        assert_eq!(config.database_url, DEFAULT_DATABASE_URL);
        assert_eq!(config.listen.to_string(), DEFAULT_LISTEN);
        assert!(config.listen.ip().is_loopback());
        assert_eq!(config.defaults.backoff.base, Duration::from_secs(30));
        assert!(config.concurrency >= 4);
        assert_eq!(config.api_token, None);
        assert_eq!(
            config.grants_root,
            Path::new("plugin-data"),
            "beside the plugin folder"
        );
    }

    #[test]
    fn the_sqlite_file_is_found_in_the_url() {
        let config = |url: &str| {
            Config::from_settings(Settings {
                database_url: Some(url.into()),
                ..Default::default()
            })
            .unwrap()
        };
        assert_eq!(
            config("sqlite://spool.db").sqlite_file(),
            Some(PathBuf::from("spool.db"))
        );
        assert_eq!(
            config("sqlite:///var/lib/spool/q.db?mode=rwc").sqlite_file(),
            Some(PathBuf::from("/var/lib/spool/q.db"))
        );
        assert_eq!(config("sqlite::memory:").sqlite_file(), None);
        assert_eq!(config("postgres://u@db/spool").sqlite_file(), None);
    }

    #[test]
    fn the_grants_root_defaults_beside_the_plugin_folder() {
        assert_eq!(
            default_grants_root(Path::new("/srv/spool/plugins")),
            Path::new("/srv/spool/plugin-data")
        );
        assert_eq!(
            default_grants_root(Path::new("/srv/spool/plugins/")),
            Path::new("/srv/spool/plugin-data")
        );
        assert_eq!(
            default_grants_root(Path::new("deploy/plugins")),
            Path::new("deploy/plugin-data")
        );
        assert_eq!(
            default_grants_root(Path::new(".")),
            Path::new("./../plugin-data")
        );
        let flags = Settings {
            plugins: Some("/p/wasm".into()),
            ..Settings::default()
        };
        assert_eq!(
            Config::from_settings(flags).unwrap().grants_root,
            Path::new("/p/plugin-data")
        );
        let file: Settings = toml::from_str("grants_root = \"/var/lib/spool/data\"").unwrap();
        assert_eq!(
            Config::from_settings(file).unwrap().grants_root,
            Path::new("/var/lib/spool/data")
        );
    }

    #[test]
    fn higher_sources_win() {
        let file: Settings =
            toml::from_str("concurrency = 3\npoll_interval = \"250ms\"\nmax_retry = 7").unwrap();
        let flags = Settings {
            concurrency: Some(9),
            ..Settings::default()
        };
        let config = Config::from_settings(flags.or(file)).unwrap();
        assert_eq!(config.concurrency, 9);
        assert_eq!(config.poll_interval, Duration::from_millis(250));
        assert_eq!(config.defaults.max_retry, 7);
    }

    #[test]
    fn bad_values_are_named() {
        let err = Config::from_settings(Settings {
            concurrency: Some(0),
            ..Default::default()
        })
        .unwrap_err();
        assert!(err.to_string().contains("concurrency"));
        let err = Config::from_settings(Settings {
            max_payload: Some("huge".into()),
            ..Default::default()
        })
        .unwrap_err();
        assert!(err.to_string().contains("max_payload"));
        let err = toml::from_str::<Settings>("concurency = 3").unwrap_err();
        assert!(err.to_string().contains("concurency"));
        let err = Config::from_settings(Settings {
            read_token: Some("r".into()),
            ..Default::default()
        })
        .unwrap_err();
        assert!(
            err.to_string().contains("read_token needs api_token"),
            "{err}"
        );
        let file: Settings = toml::from_str(
            "api_token = \"w\"\nread_token = \"r\"\nallowed_hosts = [\"Spool.Internal\"]",
        )
        .unwrap();
        let config = Config::from_settings(file).unwrap();
        assert_eq!(
            (config.read_token.as_deref(), config.allowed_hosts),
            (Some("r"), vec!["spool.internal".to_string()])
        );
        let err = Config::from_settings(Settings {
            allowed_hosts: Some(vec!["http://x".into()]),
            ..Default::default()
        })
        .unwrap_err();
        assert!(err.to_string().contains("allowed_hosts"), "{err}");
    }
}
