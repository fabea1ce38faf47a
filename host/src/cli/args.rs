//! The commands' arguments: one struct per command (or group of commands sharing a shape),
//! with the help text `spool help` shows.

use clap::Args;
use std::path::PathBuf;

use crate::api::client::Client;
use crate::config::Settings;
use crate::config::origin::Origin;

#[derive(Args)]
pub struct NewArgs {
    /// The handler's language: rust, python, javascript, c, go or zig
    #[arg(long)]
    pub lang: String,
    /// The handler's name, its task type: letters, digits, `_` and `-`
    pub name: String,
    /// The folder the project folder is created in
    #[arg(long, default_value = ".")]
    pub dir: PathBuf,
}

#[derive(Args)]
pub struct BuildArgs {
    /// The handler project's folder
    #[arg(default_value = ".")]
    pub project: PathBuf,
    /// The plugin folder NAME.wasm goes to
    #[arg(long, env = "SPOOL_PLUGINS", default_value = "plugins")]
    pub plugins: PathBuf,
    /// The task type to build as [default: the project folder's name]
    #[arg(long)]
    pub name: Option<String>,
    /// The project's language [default: recognized from its files]
    #[arg(long)]
    pub lang: Option<String>,
    /// Where pinned toolchains are installed on first use [default: ~/.cache/spool/tools]
    #[arg(long, env = "SPOOL_TOOLS_DIR")]
    pub tools_dir: Option<PathBuf>,
    /// Deploy the build through a running host to every host of its database (see `spool deploy`)
    #[arg(long)]
    pub deploy: bool,
    /// With --deploy: try it on this share of the attempts (1-100) first
    #[arg(long, requires = "deploy", value_parser = clap::value_parser!(u8).range(1..=100))]
    pub canary: Option<u8>,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Args)]
pub struct ServeArgs {
    /// Config file; settings in it are overridden by SPOOL_* variables and flags [default: spool.toml if present]
    #[arg(long, env = "SPOOL_CONFIG")]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub settings: Settings,
}

#[derive(Args)]
pub struct ClientArgs {
    /// The host's API address
    #[arg(long, env = "SPOOL_URL", default_value = "http://127.0.0.1:8787")]
    pub url: String,
    /// API token, if the host requires one (it allows changes and reads)
    #[arg(long, env = "SPOOL_API_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Read-only token, used for reads instead of the API token
    #[arg(long, env = "SPOOL_READ_TOKEN", hide_env_values = true)]
    pub read_token: Option<String>,
    /// Deploy token, used for deploys, promotions and rollbacks instead of the API token
    #[arg(long, env = "SPOOL_DEPLOY_TOKEN", hide_env_values = true)]
    pub deploy_token: Option<String>,
}

impl ClientArgs {
    pub fn client(&self) -> Client {
        Client::new(&self.url, self.token.clone(), self.read_token.clone())
            .with_deploy_token(self.deploy_token.clone())
    }
}

#[derive(Args)]
pub struct DeployArgs {
    /// The handler build: a component (or WASI program) .wasm file
    pub file: PathBuf,
    /// The task type it serves [default: the file's name without .wasm]
    #[arg(long = "type")]
    pub task_type: Option<String>,
    /// Its manifest [default: FILE.toml beside the build, if there is one]
    #[arg(long)]
    pub manifest: Option<PathBuf>,
    /// Try it on this share of the type's attempts (1-100) beside the stable version, instead of making it stable at once
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=100))]
    pub canary: Option<u8>,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Args)]
pub struct RollbackArgs {
    /// The task type
    pub task_type: String,
    /// The version to serve [default: drop the candidate on trial, or else one version back]
    #[arg(long)]
    pub to: Option<u64>,
    /// Why, for the deployment history
    #[arg(long)]
    pub reason: Option<String>,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Args)]
pub struct EnqueueArgs {
    /// The task type (a plugin TASK_TYPE.wasm must be loaded on the host)
    pub task_type: String,
    /// The JSON payload [default: {}]
    pub payload: Option<String>,
    /// Higher runs first
    #[arg(long)]
    pub priority: Option<i32>,
    /// Run no earlier than this long from now, e.g. 30s or 5m
    #[arg(long, conflicts_with = "run_at")]
    pub delay: Option<String>,
    /// Run no earlier than this time (RFC 3339)
    #[arg(long)]
    pub run_at: Option<String>,
    /// Retries after the first attempt
    #[arg(long)]
    pub max_retry: Option<u32>,
    /// At most one task per (type, key); repeating the key returns the existing task
    #[arg(long)]
    pub idempotency_key: Option<String>,
    /// Wait until the task is done, failed or cancelled, then print it
    #[arg(long)]
    pub wait: bool,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Args)]
pub struct StatusArgs {
    /// Task id
    pub id: i64,
    /// Wait until the task is done, failed or cancelled
    #[arg(long)]
    pub wait: bool,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Args)]
pub struct TasksArgs {
    /// Only tasks in this state: pending, running, done, failed, cancelled
    #[arg(long)]
    pub status: Option<String>,
    /// Only tasks of this type
    #[arg(long = "type")]
    pub task_type: Option<String>,
    /// How many
    #[arg(long, default_value_t = 20)]
    pub limit: usize,
    /// Only tasks older than this id: the next page, as the previous one says under `(more: ...)`
    #[arg(long)]
    pub before: Option<i64>,
    /// Only tasks whose last error contains this text (case-sensitive)
    #[arg(long = "error")]
    pub error_contains: Option<String>,
    /// Only tasks that finished (or, unfinished, were created) since: 1h, 30m, 2d, or an RFC 3339 time
    #[arg(long)]
    pub since: Option<String>,
    /// Only tasks that finished (or, unfinished, were created) before: 1h (ago), or an RFC 3339 time
    #[arg(long)]
    pub until: Option<String>,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Args)]
pub struct BulkArgs {
    /// Task ids; `spool retry ID` alone retries that one task and prints it
    pub ids: Vec<i64>,
    /// Only tasks of this type
    #[arg(long = "type")]
    pub task_type: Option<String>,
    /// Only tasks in this state: pending, running, done, failed, cancelled
    #[arg(long)]
    pub status: Option<String>,
    /// Only tasks whose last error contains this text (case-sensitive)
    #[arg(long = "error")]
    pub error_contains: Option<String>,
    /// Only tasks that finished (or, unfinished, were created) since: 1h, 30m, 2d, or an RFC 3339 time
    #[arg(long)]
    pub since: Option<String>,
    /// Only tasks that finished (or, unfinished, were created) before: 1h (ago), or an RFC 3339 time
    #[arg(long)]
    pub until: Option<String>,
    /// Only count what would change
    #[arg(long)]
    pub dry_run: bool,
    /// Allow no filter at all: every task
    #[arg(long)]
    pub all: bool,
    /// Print the host's JSON answer
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Args)]
pub struct TypeArgs {
    /// The task type
    pub task_type: String,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Args)]
pub struct TypesArgs {
    /// Print the full JSON instead of a table
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Args)]
pub struct SchedulesArgs {
    /// Print the full JSON instead of a table
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Args)]
pub struct PluginsArgs {
    /// Show this task type's plugin in full (its whole load error included)
    pub name: Option<String>,
    /// Print the full JSON instead of a table
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Args)]
pub struct IdArgs {
    /// Task id
    pub id: i64,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Args)]
pub struct ArchiveArgs {
    /// Move done and cancelled tasks that finished longer ago than this, e.g. 30d [default: archive_after from the config, else 30d]
    #[arg(long, value_parser = humantime::parse_duration)]
    pub older_than: Option<std::time::Duration>,
    /// Move failed tasks (dead letters) that finished longer ago than this [default: dead_letter_retention, else 90d]
    #[arg(long, value_parser = humantime::parse_duration)]
    pub dead_letters_older_than: Option<std::time::Duration>,
    /// Purge archived tasks that were archived longer ago than this [default: archive_retention, else 365d]
    #[arg(long, value_parser = humantime::parse_duration)]
    pub purge_older_than: Option<std::time::Duration>,
    /// Count what would be archived and purged; change nothing
    #[arg(long)]
    pub dry_run: bool,
    /// Rows per batch; each batch is one short transaction
    #[arg(long, default_value_t = crate::store::archive::DEFAULT_BATCH)]
    pub batch: usize,
    /// Config file with the database URL and retention settings [default: spool.toml if present]
    #[arg(long, env = "SPOOL_CONFIG")]
    pub config: Option<PathBuf>,
    /// Database URL [default: the config's, else sqlite://spool.db]
    #[arg(long, env = "SPOOL_DATABASE_URL")]
    pub database_url: Option<String>,
    /// Where the flags above that stand for settings came from.
    #[arg(skip)]
    pub origins: crate::config::origin::Origins,
}

impl ArchiveArgs {
    /// Records which settings' values came from flags (and which from a variable).
    pub fn note_command_line(&mut self, matches: &clap::ArgMatches) {
        for (setting, id, env) in [
            ("database_url", "database_url", "SPOOL_DATABASE_URL"),
            ("archive_after", "older_than", ""),
            ("dead_letter_retention", "dead_letters_older_than", ""),
            ("archive_retention", "purge_older_than", ""),
        ] {
            let flag = format!("--{}", id.replace('_', "-"));
            if let Some(origin) = Origin::in_matches(matches, id, &flag, env) {
                self.origins.set(setting, origin);
            }
        }
    }
}

#[derive(Args)]
pub struct ReplayArgs {
    /// The task whose attempt to replay
    pub task: i64,
    /// The attempt to replay (default: the task's latest recorded attempt)
    #[arg(long)]
    pub attempt: Option<u32>,
    /// Run the recorded inputs against this build instead of the one that ran
    #[arg(long, value_name = "FILE.wasm")]
    pub build: Option<std::path::PathBuf>,
    /// Print every recorded host call before the replay
    #[arg(long)]
    pub verbose: bool,
    #[command(flatten)]
    pub client: ClientArgs,
}
