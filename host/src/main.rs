//! The `spool` command line: `serve` runs a host; the other commands talk to a running host's
//! HTTP API. Only argument parsing and printing live here.

use anyhow::{Context, Result, bail};
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use serde_json::{Value, json};
use std::io::Write;
use std::path::PathBuf;

use spool::api::client::Client;
use spool::config::origin::Origin;
use spool::config::{Config, Settings};
use spool::shutdown::os_signal;

#[derive(Parser)]
#[command(
    name = "spool",
    version,
    about = "A job runner: a task table in your database, handlers as sandboxed WebAssembly components."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a host: serve the API and work the queue until Ctrl-C or SIGTERM (a second signal stops at once).
    Serve(Box<ServeArgs>),
    /// Enqueue a task on a running host.
    Enqueue(EnqueueArgs),
    /// Show one task.
    Status(StatusArgs),
    /// List tasks, newest first.
    Tasks(TasksArgs),
    /// Send failed or cancelled tasks back to the queue: one by id, or all a filter selects
    /// (`spool retry --type report --status failed --since 1h --dry-run`).
    Retry(BulkArgs),
    /// Discard the failed or pending tasks a filter selects: they become cancelled, kept with a note.
    Discard(BulkArgs),
    /// Pause a task type on every host: its tasks stay pending, enqueues still work.
    Pause(TypeArgs),
    /// Resume a paused task type.
    Resume(TypeArgs),
    /// List task types: counts per state, plugin version and load state, mean attempt time, paused.
    Types(TypesArgs),
    /// Cancel a pending or running task.
    Cancel(IdArgs),
    /// Show a host's health: database, task types, counts per state.
    Health(ClientArgs),
    /// Move old finished tasks to the archive and purge old archived ones, now, against the database (no host needed).
    Archive(ArchiveArgs),
    /// Alerts: show the rules, firing and recent alerts, the last drill; run a drill.
    #[command(subcommand)]
    Alert(AlertCommand),
    /// List a host's plugins: task types, versions, policies, capabilities, load errors.
    Plugins(PluginsArgs),
    /// List periodic tasks: source, cron or interval, time zone, next run, last tick enqueued.
    Schedules(SchedulesArgs),
    /// Write handlers: start one from a template, build one into the plugin folder.
    #[command(subcommand)]
    Plugin(PluginCommand),
}

#[derive(Subcommand)]
enum AlertCommand {
    /// Send a marked test alert through every configured channel and record it; fails when a channel does.
    Drill(ClientArgs),
    /// Show the rules, channels, firing alerts, recent alerts and the last drill (JSON).
    Show(ClientArgs),
}

#[derive(Subcommand)]
enum PluginCommand {
    /// Start a handler project NAME/ from a template (NAME becomes its task type).
    New(NewArgs),
    /// Build a handler project into NAME.wasm in the plugin folder (a running host picks it up).
    Build(BuildArgs),
}

#[derive(Args)]
#[cfg_attr(not(feature = "toolchain"), allow(dead_code))]
struct NewArgs {
    /// The handler's language: rust, python, javascript, c, go or zig
    #[arg(long)]
    lang: String,
    /// The handler's name, its task type: letters, digits, `_` and `-`
    name: String,
    /// The folder the project folder is created in
    #[arg(long, default_value = ".")]
    dir: PathBuf,
}

#[derive(Args)]
#[cfg_attr(not(feature = "toolchain"), allow(dead_code))]
struct BuildArgs {
    /// The handler project's folder
    #[arg(default_value = ".")]
    project: PathBuf,
    /// The plugin folder NAME.wasm goes to
    #[arg(long, env = "SPOOL_PLUGINS", default_value = "plugins")]
    plugins: PathBuf,
    /// The task type to build as [default: the project folder's name]
    #[arg(long)]
    name: Option<String>,
    /// The project's language [default: recognized from its files]
    #[arg(long)]
    lang: Option<String>,
    /// Where pinned toolchains are installed on first use [default: ~/.cache/spool/tools]
    #[arg(long, env = "SPOOL_TOOLS_DIR")]
    tools_dir: Option<PathBuf>,
}

#[derive(Args)]
struct ServeArgs {
    /// Config file; settings in it are overridden by SPOOL_* variables and flags [default: spool.toml if present]
    #[arg(long, env = "SPOOL_CONFIG")]
    config: Option<PathBuf>,
    #[command(flatten)]
    settings: Settings,
}

#[derive(Args)]
struct ClientArgs {
    /// The host's API address
    #[arg(long, env = "SPOOL_URL", default_value = "http://127.0.0.1:8787")]
    url: String,
    /// API token, if the host requires one (it allows changes and reads)
    #[arg(long, env = "SPOOL_API_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Read-only token, used for reads instead of the API token
    #[arg(long, env = "SPOOL_READ_TOKEN", hide_env_values = true)]
    read_token: Option<String>,
}

impl ClientArgs {
    fn client(&self) -> Client {
        Client::new(&self.url, self.token.clone(), self.read_token.clone())
    }
}

#[derive(Args)]
struct EnqueueArgs {
    /// The task type (a plugin TASK_TYPE.wasm must be loaded on the host)
    task_type: String,
    /// The JSON payload [default: {}]
    payload: Option<String>,
    /// Higher runs first
    #[arg(long)]
    priority: Option<i32>,
    /// Run no earlier than this long from now, e.g. 30s or 5m
    #[arg(long, conflicts_with = "run_at")]
    delay: Option<String>,
    /// Run no earlier than this time (RFC 3339)
    #[arg(long)]
    run_at: Option<String>,
    /// Retries after the first attempt
    #[arg(long)]
    max_retry: Option<u32>,
    /// At most one task per (type, key); repeating the key returns the existing task
    #[arg(long)]
    idempotency_key: Option<String>,
    /// Wait until the task is done, failed or cancelled, then print it
    #[arg(long)]
    wait: bool,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Args)]
struct StatusArgs {
    /// Task id
    id: i64,
    /// Wait until the task is done, failed or cancelled
    #[arg(long)]
    wait: bool,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Args)]
struct TasksArgs {
    /// Only tasks in this state: pending, running, done, failed, cancelled
    #[arg(long)]
    status: Option<String>,
    /// Only tasks of this type
    #[arg(long = "type")]
    task_type: Option<String>,
    /// How many
    #[arg(long, default_value_t = 20)]
    limit: usize,
    /// Only tasks older than this id: the next page, as the previous one says under `(more: ...)`
    #[arg(long)]
    before: Option<i64>,
    /// Only tasks whose last error contains this text (case-sensitive)
    #[arg(long = "error")]
    error_contains: Option<String>,
    /// Only tasks that finished (or, unfinished, were created) since: 1h, 30m, 2d, or an RFC 3339 time
    #[arg(long)]
    since: Option<String>,
    /// Only tasks that finished (or, unfinished, were created) before: 1h (ago), or an RFC 3339 time
    #[arg(long)]
    until: Option<String>,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Args)]
struct BulkArgs {
    /// Task ids; `spool retry ID` alone retries that one task and prints it
    ids: Vec<i64>,
    /// Only tasks of this type
    #[arg(long = "type")]
    task_type: Option<String>,
    /// Only tasks in this state: pending, running, done, failed, cancelled
    #[arg(long)]
    status: Option<String>,
    /// Only tasks whose last error contains this text (case-sensitive)
    #[arg(long = "error")]
    error_contains: Option<String>,
    /// Only tasks that finished (or, unfinished, were created) since: 1h, 30m, 2d, or an RFC 3339 time
    #[arg(long)]
    since: Option<String>,
    /// Only tasks that finished (or, unfinished, were created) before: 1h (ago), or an RFC 3339 time
    #[arg(long)]
    until: Option<String>,
    /// Only count what would change
    #[arg(long)]
    dry_run: bool,
    /// Allow no filter at all: every task
    #[arg(long)]
    all: bool,
    /// Print the host's JSON answer
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Args)]
struct TypeArgs {
    /// The task type
    task_type: String,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Args)]
struct TypesArgs {
    /// Print the full JSON instead of a table
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Args)]
struct SchedulesArgs {
    /// Print the full JSON instead of a table
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Args)]
struct PluginsArgs {
    /// Show this task type's plugin in full (its whole load error included)
    name: Option<String>,
    /// Print the full JSON instead of a table
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Args)]
struct IdArgs {
    /// Task id
    id: i64,
    #[command(flatten)]
    client: ClientArgs,
}

fn main() -> Result<()> {
    let matches = Cli::command().get_matches();
    let mut cli = Cli::from_arg_matches(&matches)
        .map_err(|e| e.format(&mut Cli::command()))
        .unwrap_or_else(|e| e.exit());
    // Where each value came from, so a refused value is reported with its flag or variable.
    match (&mut cli.command, matches.subcommand()) {
        (Command::Serve(args), Some((_, matches))) => args.settings.note_command_line(matches),
        (Command::Archive(args), Some((_, matches))) => args.note_command_line(matches),
        _ => {}
    }
    let command = match cli.command {
        // Building runs compilers as subprocesses; it needs no async runtime or log setup.
        Command::Plugin(command) => return plugin(command),
        other => other,
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    runtime.block_on(async {
        match command {
            Command::Serve(args) => serve(*args).await,
            Command::Enqueue(args) => enqueue(args).await,
            Command::Status(args) => status(args).await,
            Command::Tasks(args) => {
                let mut query = vec![("limit", args.limit.to_string())];
                let filters = [
                    ("status", args.status.clone()),
                    ("type", args.task_type.clone()),
                    ("before", args.before.map(|b| b.to_string())),
                    ("error_contains", args.error_contains.clone()),
                    ("since", time_arg(&args.since)?),
                    ("until", time_arg(&args.until)?),
                ];
                query.extend(filters.into_iter().filter_map(|(k, v)| Some((k, v?))));
                let page = args.client.client().list_where(&query).await?;
                print_tasks(&page, &args);
                Ok(())
            }
            Command::Retry(args) => bulk("retry", args).await,
            Command::Discard(args) => bulk("discard", args).await,
            Command::Pause(args) => {
                print_json(&args.client.client().pause(&args.task_type, true).await?)
            }
            Command::Resume(args) => {
                print_json(&args.client.client().pause(&args.task_type, false).await?)
            }
            Command::Types(args) => {
                let types = args.client.client().types().await?;
                if args.json {
                    print_json(&types)
                } else {
                    print_types(&types);
                    Ok(())
                }
            }
            Command::Cancel(args) => print_json(&args.client.client().cancel(args.id).await?),
            Command::Health(args) => print_json(&args.client().health().await?),
            Command::Archive(args) => archive(args).await,
            Command::Alert(AlertCommand::Show(args)) => print_json(&args.client().alerts().await?),
            Command::Alert(AlertCommand::Drill(args)) => drill(&args.client()).await,
            Command::Plugins(args) => {
                let plugins = args.client.client().plugins().await?;
                match (&args.name, args.json) {
                    (Some(name), json) => print_plugin(&plugins, name, json),
                    (None, true) => print_json(&plugins),
                    (None, false) => {
                        print_plugins(&plugins);
                        Ok(())
                    }
                }
            }
            Command::Schedules(args) => {
                let schedules = args.client.client().schedules().await?;
                if args.json {
                    print_json(&schedules)
                } else {
                    print_schedules(&schedules);
                    Ok(())
                }
            }
            Command::Plugin(_) => unreachable!("handled before the runtime starts"),
        }
    })
}

#[cfg(feature = "toolchain")]
fn plugin(command: PluginCommand) -> Result<()> {
    use spool_toolchain::{BuildRequest, Language};
    match command {
        PluginCommand::New(args) => {
            let language = Language::parse(&args.lang)?;
            let dir = spool_toolchain::new_project(language, &args.name, &args.dir)?;
            println!(
                "created {} ({language}); build it with: spool plugin build {}",
                dir.display(),
                dir.display()
            );
            Ok(())
        }
        PluginCommand::Build(args) => {
            let request = BuildRequest {
                project: args.project,
                language: args.lang.as_deref().map(Language::parse).transpose()?,
                name: args.name,
                plugins: args.plugins,
                tools: args
                    .tools_dir
                    .unwrap_or_else(spool_toolchain::default_tools_dir),
                check_manifest,
            };
            let built = spool_toolchain::build(&request)?;
            println!(
                "built {} ({}, {:.1} MB) in {:.1?}{}",
                built.wasm.display(),
                built.language,
                built.size as f64 / 1e6,
                built.elapsed,
                built
                    .manifest
                    .map(|m| format!(", with {}", m.display()))
                    .unwrap_or_default()
            );
            Ok(())
        }
    }
}

/// The host's verdict on a project's manifest: a build deploys only what a host would load.
#[cfg(feature = "toolchain")]
fn check_manifest(text: &str) -> Result<(), String> {
    spool::plugins::Manifest::parse(text).map(drop)
}

#[cfg(not(feature = "toolchain"))]
fn plugin(command: PluginCommand) -> Result<()> {
    let name = match command {
        PluginCommand::New(_) => "new",
        PluginCommand::Build(_) => "build",
    };
    bail!(
        "this spool was built without the handler toolchain (cargo feature `toolchain`), so it has \
         no `spool plugin {name}`; build handlers with a spool that has it (the default: \
         `cargo build -p spool`), then copy NAME.wasm and NAME.toml into this host's plugin folder"
    )
}

async fn serve(args: ServeArgs) -> Result<()> {
    let file = match &args.config {
        Some(path) => Settings::from_file(path, true)?,
        None => Settings::from_file(std::path::Path::new("spool.toml"), false)?,
    };
    let config = Config::from_settings(args.settings.or(file))?;
    let host = spool::start(config).await?;
    println!("spool listening on http://{}", host.addr);
    std::io::stdout().flush().ok();
    let shutdown = host.shutdown().clone();
    tokio::spawn(async move {
        os_signal().await;
        eprintln!(
            "stopping: running tasks get the grace period to finish (signal again to stop now)"
        );
        shutdown.escalate();
        os_signal().await;
        eprintln!("stopping now: unfinished tasks go back to the queue");
        shutdown.escalate();
    });
    host.stopped()
        .await
        .map_err(|failure| anyhow::anyhow!("the host stopped because a service failed: {failure}"))
}

async fn enqueue(args: EnqueueArgs) -> Result<()> {
    let payload: Value = match &args.payload {
        Some(text) => serde_json::from_str(text).context("the payload is not valid JSON")?,
        None => json!({}),
    };
    let mut request = json!({ "task_type": args.task_type, "payload": payload });
    let fields = [
        ("priority", args.priority.map(Value::from)),
        ("delay", args.delay.map(Value::from)),
        ("run_at", args.run_at.map(Value::from)),
        ("max_retry", args.max_retry.map(Value::from)),
        ("idempotency_key", args.idempotency_key.map(Value::from)),
    ];
    for (name, value) in fields {
        if let Some(value) = value {
            request[name] = value;
        }
    }
    let client = args.client.client();
    let task = client.enqueue(&request).await?;
    if !args.wait {
        return print_json(&task);
    }
    let id = task["id"]
        .as_i64()
        .context("the host's answer has no task id")?;
    wait_for(&client, id).await
}

async fn status(args: StatusArgs) -> Result<()> {
    let client = args.client.client();
    if args.wait {
        wait_for(&client, args.id).await
    } else {
        print_task(client.task(args.id).await?)
    }
}

/// Waits (long-polls) until the task reaches a final state; fails the command unless it is done.
async fn wait_for(client: &Client, id: i64) -> Result<()> {
    // A host may allow shorter waits (`max_wait`); it then refuses this one and 1s is used.
    let mut wait = "20s";
    loop {
        let task = match client.wait(id, wait).await {
            Err(spool::api::client::ClientError::Api { status: 400, .. }) if wait != "1s" => {
                wait = "1s";
                continue;
            }
            answer => answer?,
        };
        match task["status"].as_str() {
            Some("done") => return print_task(task),
            Some(status @ ("failed" | "cancelled")) => {
                print_task(task.clone())?;
                bail!(
                    "task {id} is {status}: {}",
                    task["last_error"].as_str().unwrap_or("no error recorded")
                );
            }
            _ => {}
        }
    }
}

/// Runs the alert drill and prints each channel's outcome; fails loudly when one failed.
async fn drill(client: &Client) -> Result<()> {
    let answer = client.drill().await?;
    let report = answer.get("drill").unwrap_or(&answer);
    println!(
        "alert drill at {} from host {}",
        report["at"].as_str().unwrap_or("?"),
        report["host_id"].as_str().unwrap_or("?")
    );
    for channel in report["channels"].as_array().into_iter().flatten() {
        let name = format!(
            "{} ({})",
            channel["channel"].as_str().unwrap_or(""),
            channel["kind"].as_str().unwrap_or("")
        );
        if channel["ok"] == true {
            println!("  ok      {name}");
        } else {
            println!(
                "  FAILED  {name}: {}",
                channel["error"].as_str().unwrap_or("no reason given")
            );
        }
    }
    if report["recorded"] == false {
        println!("(the database did not answer: the drill is recorded once it does)");
    }
    if report["ok"] != true {
        bail!(
            "{}",
            answer["error"]["message"]
                .as_str()
                .unwrap_or("the alert drill failed: a channel did not take the test alert")
        );
    }
    println!("every channel took the test alert");
    Ok(())
}

fn print_json(value: &Value) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

/// Prints a task from `GET /tasks/{id}`: its fields as JSON on stdout (as every command prints
/// a task), then its attempt history as a short table on stderr, so scripts reading stdout
/// see the same JSON as before and a person sees both.
fn print_task(mut task: Value) -> Result<()> {
    let history = task
        .as_object_mut()
        .and_then(|fields| fields.remove("history"));
    print_json(&task)?;
    if let Some(Value::Array(history)) = history {
        eprint!("{}", history_table(&history));
    }
    Ok(())
}

/// The attempt history as a table: one line per kept attempt (number, outcome, host, plugin
/// build, start, duration, and the first line of its error), and a note when early attempts
/// were not kept.
fn history_table(history: &[Value]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    if history.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "{:>7}  {:<9}  {:<20}  {:<12}  {:<24}  {:>9}  ERROR",
        "ATTEMPT", "OUTCOME", "HOST", "PLUGIN", "STARTED", "TOOK"
    );
    let time = |value: &Value| {
        value
            .as_str()
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
    };
    let mut previous = 0;
    for attempt in history {
        let number = attempt["attempt"].as_u64().unwrap_or(0);
        if number > previous + 1 && previous > 0 {
            let _ = writeln!(
                out,
                "{:>7}  (attempts {}–{} not kept)",
                "…",
                previous + 1,
                number - 1
            );
        }
        previous = number;
        let took = match (time(&attempt["started_at"]), time(&attempt["finished_at"])) {
            (Some(start), Some(end)) => format_took(end - start),
            _ => String::new(),
        };
        let short = |field: &str, n: usize| -> String {
            attempt[field]
                .as_str()
                .unwrap_or("")
                .chars()
                .take(n)
                .collect()
        };
        let error: String = attempt["error"]
            .as_str()
            .unwrap_or("")
            .lines()
            .next()
            .unwrap_or("")
            .chars()
            .take(80)
            .collect();
        let _ = writeln!(
            out,
            "{:>7}  {:<9}  {:<20}  {:<12}  {:<24}  {:>9}  {}",
            number,
            short("outcome", 9),
            short("host", 20),
            short("plugin_version", 12),
            short("started_at", 24),
            took,
            error
        );
    }
    out
}

/// A duration as a person reads it: `850ms`, `12.3s`, `4m05s`.
fn format_took(took: chrono::Duration) -> String {
    let ms = took.num_milliseconds().max(0);
    match ms {
        0..1_000 => format!("{ms}ms"),
        1_000..60_000 => format!("{:.1}s", ms as f64 / 1000.0),
        _ => format!("{}m{:02}s", ms / 60_000, (ms % 60_000) / 1000),
    }
}

fn print_tasks(page: &Value, args: &TasksArgs) {
    println!(
        "{:>8}  {:<16} {:<10} {:>8}  {:<24}  RESULT / ERROR",
        "ID", "TYPE", "STATUS", "ATTEMPTS", "UPDATED"
    );
    for task in page["tasks"].as_array().into_iter().flatten() {
        let outcome = match task["status"].as_str() {
            Some("done") => task["result"].to_string(),
            _ => task["last_error"].as_str().unwrap_or("").to_string(),
        };
        let outcome: String = outcome.chars().take(60).collect();
        println!(
            "{:>8}  {:<16} {:<10} {:>8}  {:<24}  {}",
            // A JSON value ignores the width; its text does not.
            task["id"].to_string(),
            task["task_type"].as_str().unwrap_or(""),
            task["status"].as_str().unwrap_or(""),
            task["attempts"].to_string(),
            task["updated_at"].as_str().unwrap_or(""),
            outcome
        );
    }
    if let Some(next) = page["next_before"].as_i64() {
        let mut command = format!("spool tasks --before {next}");
        if let Some(status) = &args.status {
            command += &format!(" --status {status}");
        }
        if let Some(task_type) = &args.task_type {
            command += &format!(" --type {task_type}");
        }
        if args.limit != 20 {
            command += &format!(" --limit {}", args.limit);
        }
        for (flag, value) in [
            ("error", &args.error_contains),
            ("since", &args.since),
            ("until", &args.until),
        ] {
            if let Some(value) = value {
                command += &format!(" --{flag} {value:?}");
            }
        }
        println!("(more: {command})");
    }
}

fn print_plugins(view: &Value) {
    println!("plugin folder: {}", view["folder"].as_str().unwrap_or(""));
    println!(
        "{:<16} {:<12} {:>8} {:>9} {:<25}  LAST ERROR",
        "TYPE", "VERSION", "PENDING", "RETRIES", "LOADED"
    );
    for plugin in view["plugins"].as_array().into_iter().flatten() {
        let note = match plugin["loading_since"].as_str() {
            Some(since) => format!("loading a new file since {since}"),
            None => one_line(
                plugin["last_error"].as_str().unwrap_or(""),
                &plugin["task_type"],
            ),
        };
        println!(
            "{:<16} {:<12} {:>8} {:>9} {:<25}  {}",
            plugin["task_type"].as_str().unwrap_or(""),
            plugin["version"]
                .as_str()
                .unwrap_or("")
                .chars()
                .take(12)
                .collect::<String>(),
            plugin["pending"].to_string(),
            plugin["policy"]["max_retry"].to_string(),
            plugin["loaded_at"].as_str().unwrap_or(""),
            note
        );
    }
    for unloaded in view["unloaded"].as_array().into_iter().flatten() {
        let why = match (unloaded["error"].as_str(), unloaded["removed_at"].as_str()) {
            _ if unloaded["loading_since"].is_string() => format!(
                "loading since {}",
                unloaded["loading_since"].as_str().unwrap_or("")
            ),
            (Some(error), _) => one_line(&format!("not loaded: {error}"), &unloaded["task_type"]),
            (None, Some(at)) => format!("removed at {at}; pending tasks wait for it to return"),
            _ => "not loaded".to_string(),
        };
        println!(
            "{:<16} {:<12} {:>8} {:>9} {:<25}  {}",
            unloaded["task_type"].as_str().unwrap_or(""),
            "-",
            unloaded["pending"].to_string(),
            "-",
            "-",
            why
        );
    }
}

/// The longest error text a row of the plugin table shows.
const ERROR_COLUMN: usize = 100;

/// An error as one table cell: its first line, cut at [`ERROR_COLUMN`] characters, with where
/// to read the rest when anything was left out.
fn one_line(error: &str, task_type: &Value) -> String {
    let error = error.trim();
    let first = error.lines().next().unwrap_or("").trim_end();
    let mut cell: String = first.chars().take(ERROR_COLUMN).collect();
    if cell.len() < error.len() {
        cell = format!(
            "{}… (spool plugins {} shows all)",
            cell.trim_end(),
            task_type.as_str().unwrap_or("NAME")
        );
    }
    cell
}

/// One task type's plugin (loaded, or not loaded and why), in full.
fn print_plugin(view: &Value, name: &str, json: bool) -> Result<()> {
    let named = |list: &str| {
        view[list]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["task_type"] == name)
            .cloned()
    };
    let Some(plugin) = named("plugins").or_else(|| named("unloaded")) else {
        let known: Vec<&str> = ["plugins", "unloaded"]
            .iter()
            .flat_map(|list| view[*list].as_array().into_iter().flatten())
            .filter_map(|p| p["task_type"].as_str())
            .collect();
        bail!(
            "the host has no plugin for task type `{name}`; it knows: {}",
            if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            }
        );
    };
    if json {
        return print_json(&plugin);
    }
    let text = |value: &Value| match value {
        Value::String(text) => text.clone(),
        Value::Null => "-".to_string(),
        other => other.to_string(),
    };
    println!("task type:    {}", text(&plugin["task_type"]));
    if plugin.get("version").is_some() {
        for (label, field) in [
            ("version:     ", "version"),
            ("kind:        ", "kind"),
            ("file:        ", "path"),
            ("loaded at:   ", "loaded_at"),
            ("pending:     ", "pending"),
            ("policy:      ", "policy"),
            ("capabilities:", "capabilities"),
        ] {
            println!("{label} {}", text(&plugin[field]));
        }
        if let Some(since) = plugin["loading_since"].as_str() {
            println!("loading a new file since {since}; the version above keeps serving");
        }
        if let Some(error) = plugin["last_error"].as_str() {
            println!("last load error (the version above keeps serving):\n{error}");
        }
    } else {
        println!("not loaded");
        if let Some(since) = plugin["loading_since"].as_str() {
            println!("loading since {since}");
        }
        println!("pending:      {}", text(&plugin["pending"]));
        if let Some(at) = plugin["removed_at"].as_str() {
            println!("removed at:   {at}; pending tasks wait for it to return");
        }
        if let Some(error) = plugin["error"].as_str() {
            println!("error:\n{error}");
        }
    }
    Ok(())
}

/// A `--since` / `--until` value as the API takes it: an RFC 3339 time as given, or a duration
/// ago (`90s`, `30m`, `1h`, `2d`, `1w`) as the time it names.
fn time_arg(text: &Option<String>) -> Result<Option<String>> {
    let Some(text) = text else { return Ok(None) };
    if chrono::DateTime::parse_from_rfc3339(text).is_ok() {
        return Ok(Some(text.clone()));
    }
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let (number, unit) = text.split_at(digits);
    let seconds: i64 = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        "w" => 7 * 86_400,
        _ => 0,
    };
    let ago = number
        .parse::<i64>()
        .ok()
        .filter(|_| seconds > 0)
        .and_then(|n| n.checked_mul(seconds))
        .and_then(chrono::TimeDelta::try_seconds)
        .with_context(|| {
            format!(
                "`{text}` is neither a duration ago (90s, 30m, 1h, 2d, 1w) nor an RFC 3339 time"
            )
        })?;
    let at = chrono::Utc::now() - ago;
    Ok(Some(
        at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
    ))
}

/// `spool retry` / `spool discard`: one task by id (retry only), or every task a filter selects.
async fn bulk(action: &str, args: BulkArgs) -> Result<()> {
    let client = args.client.client();
    let filtered = args.task_type.is_some()
        || args.status.is_some()
        || args.error_contains.is_some()
        || args.since.is_some()
        || args.until.is_some()
        || args.all;
    if action == "retry" && args.ids.len() == 1 && !filtered && !args.dry_run {
        return print_json(&client.retry(args.ids[0]).await?);
    }
    let mut filter = json!({ "dry_run": args.dry_run, "all": args.all });
    if !args.ids.is_empty() {
        filter["ids"] = json!(args.ids);
    }
    let fields = [
        ("task_type", args.task_type.clone()),
        ("status", args.status.clone()),
        ("error_contains", args.error_contains.clone()),
        ("since", time_arg(&args.since)?),
        ("until", time_arg(&args.until)?),
    ];
    for (name, value) in fields {
        if let Some(value) = value {
            filter[name] = Value::from(value);
        }
    }
    let report = client.bulk(action, &filter).await?;
    if args.json {
        return print_json(&report);
    }
    let states: Vec<String> = ["pending", "running", "done", "failed", "cancelled"]
        .iter()
        .filter_map(|s| {
            let n = report["by_status"][s].as_u64().unwrap_or(0);
            (n > 0).then(|| format!("{n} {s}"))
        })
        .collect();
    let selected = if states.is_empty() {
        "no tasks".to_string()
    } else {
        states.join(", ")
    };
    let allowed = if action == "retry" {
        "failed or cancelled"
    } else {
        "failed or pending"
    };
    if args.dry_run {
        println!(
            "dry run: {action} would change {} of {} selected tasks ({selected}); only {allowed} tasks change",
            report["eligible"], report["matched"]
        );
    } else {
        println!(
            "{action}: {} of {} selected tasks changed ({selected}, counted before); only {allowed} tasks change",
            report["changed"], report["matched"]
        );
    }
    Ok(())
}

fn print_types(view: &Value) {
    println!(
        "{:<16} {:>8} {:>8} {:>8} {:>8} {:>9}  {:<8} {:<12} {:>9}",
        "TYPE", "PENDING", "RUNNING", "DONE", "FAILED", "CANCELLED", "PLUGIN", "VERSION", "MEAN MS"
    );
    for t in view["types"].as_array().into_iter().flatten() {
        let count = |state: &str| t["counts"][state].to_string();
        let mut line = format!(
            "{:<16} {:>8} {:>8} {:>8} {:>8} {:>9}  {:<8} {:<12} {:>9}",
            t["task_type"].as_str().unwrap_or(""),
            count("pending"),
            count("running"),
            count("done"),
            count("failed"),
            count("cancelled"),
            t["load_state"].as_str().unwrap_or(""),
            t["version"]
                .as_str()
                .unwrap_or("-")
                .chars()
                .take(12)
                .collect::<String>(),
            t["mean_attempt_ms"]
                .as_u64()
                .map_or("-".to_string(), |ms| ms.to_string()),
        );
        if t["paused"] == true {
            line += &format!("  PAUSED since {}", t["paused_at"].as_str().unwrap_or("?"));
        }
        println!("{line}");
    }
}

/// The periodic tasks as a table: one line each.
fn print_schedules(view: &Value) {
    let text = |value: &Value| match value {
        Value::String(text) => text.clone(),
        Value::Null => "-".to_string(),
        other => other.to_string(),
    };
    println!(
        "{:<16} {:<12} {:<10} {:<24} {:<24} {:<24}  LAST TASK",
        "TYPE", "NAME", "SOURCE", "WHEN", "NEXT RUN", "LAST TICK"
    );
    for schedule in view["schedules"].as_array().into_iter().flatten() {
        let when = match (schedule["cron"].as_str(), schedule["every"].as_str()) {
            (Some(cron), _) if schedule["timezone"] == "UTC" => cron.to_string(),
            (Some(cron), _) => format!("{cron} {}", text(&schedule["timezone"])),
            (None, Some(every)) => format!("every {every}"),
            _ => "-".to_string(),
        };
        let loaded = if schedule["plugin_loaded"] == true {
            ""
        } else {
            "  (no plugin here: its tasks wait)"
        };
        println!(
            "{:<16} {:<12} {:<10} {:<24} {:<24} {:<24}  {}{loaded}",
            text(&schedule["task_type"]),
            text(&schedule["name"]),
            text(&schedule["source"]),
            when,
            text(&schedule["next_run_at"]),
            text(&schedule["last_tick"]),
            text(&schedule["last_task_id"]),
        );
    }
    if view["leading"] != true {
        println!(
            "(this host does not lead: the leading host enqueues the ticks and knows the last ones)"
        );
    }
}

#[derive(Args)]
struct ArchiveArgs {
    /// Move done and cancelled tasks that finished longer ago than this, e.g. 30d [default: archive_after from the config, else 30d]
    #[arg(long, value_parser = humantime::parse_duration)]
    older_than: Option<std::time::Duration>,
    /// Move failed tasks (dead letters) that finished longer ago than this [default: dead_letter_retention, else 90d]
    #[arg(long, value_parser = humantime::parse_duration)]
    dead_letters_older_than: Option<std::time::Duration>,
    /// Purge archived tasks that were archived longer ago than this [default: archive_retention, else 365d]
    #[arg(long, value_parser = humantime::parse_duration)]
    purge_older_than: Option<std::time::Duration>,
    /// Count what would be archived and purged; change nothing
    #[arg(long)]
    dry_run: bool,
    /// Rows per batch; each batch is one short transaction
    #[arg(long, default_value_t = spool::store::archive::DEFAULT_BATCH)]
    batch: usize,
    /// Config file with the database URL and retention settings [default: spool.toml if present]
    #[arg(long, env = "SPOOL_CONFIG")]
    config: Option<PathBuf>,
    /// Database URL [default: the config's, else sqlite://spool.db]
    #[arg(long, env = "SPOOL_DATABASE_URL")]
    database_url: Option<String>,
    /// Where the flags above that stand for settings came from.
    #[arg(skip)]
    origins: spool::config::origin::Origins,
}

impl ArchiveArgs {
    /// Records which settings' values came from flags (and which from a variable).
    fn note_command_line(&mut self, matches: &clap::ArgMatches) {
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

/// `spool archive`: one pass of the archiver (or a dry run), straight against the database, so
/// it works whether or not a host is running (a running leader's own passes simply find less).
async fn archive(args: ArchiveArgs) -> Result<()> {
    use spool::worker::upkeep::archiver;
    let file = match &args.config {
        Some(path) => Settings::from_file(path, true)?,
        None => Settings::from_file(std::path::Path::new("spool.toml"), false)?,
    };
    let mut flags = Settings {
        database_url: args.database_url.clone(),
        archive_after: args.older_than,
        dead_letter_retention: args.dead_letters_older_than,
        archive_retention: args.purge_older_than,
        ..Settings::default()
    };
    flags.origins = args.origins.clone();
    let mut settings = flags.or(file);
    // Asked for by hand: runs even where the hosts' own archiving is turned off.
    settings.archive = None;
    let config = Config::from_settings(settings)?;
    let retention = config.retention().expect("archiving is on");
    if let Some(file) = config.sqlite_file()
        && !file.exists()
    {
        bail!(
            "no database at {}: give the database with --database-url or SPOOL_DATABASE_URL, or run where spool.toml names it",
            file.display()
        );
    }
    let database = spool::store::describe_url(&config.database_url);
    let store = spool::store::open(&config.database_url)
        .await
        .with_context(|| format!("cannot open {database}"))?;
    let now = chrono::Utc::now();
    let (finished, dead, archived) = retention.cutoffs(now);
    let at = |time: chrono::DateTime<chrono::Utc>| {
        time.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    };
    let report = if args.dry_run {
        archiver::dry_run(store.as_ref(), &retention, now).await
    } else {
        archiver::pass(store.as_ref(), &retention, now, args.batch, || true).await
    };
    store.close().await;
    let report = report.with_context(|| format!("archiving in {database} failed"))?;
    let (verb, purge_verb) = if args.dry_run {
        ("would archive", "would purge")
    } else {
        ("archived", "purged")
    };
    let moved = report.archived;
    println!(
        "{verb} {} tasks: {} done and {} cancelled (finished before {}), {} failed (finished before {})",
        moved.total(),
        moved.done,
        moved.cancelled,
        at(finished),
        moved.failed,
        at(dead)
    );
    println!(
        "{purge_verb} {} archived tasks (archived before {})",
        report.purged,
        at(archived)
    );
    if args.dry_run {
        println!("dry run on {database}: nothing was changed");
    } else {
        println!("{} batches on {database}", report.batches);
    }
    Ok(())
}

#[cfg(all(test, feature = "toolchain"))]
mod tests {
    #[test]
    fn builds_check_manifests_with_the_hosts_parser() {
        super::check_manifest("max_retry = 3\n").unwrap();
        let error = super::check_manifest("max_retyr = 3\n").unwrap_err();
        assert!(error.contains("max_retyr"), "{error}");
    }
}
