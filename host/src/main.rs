//! The `spool` command line: `serve` runs a host; the other commands talk to a running host's
//! HTTP API. Only argument parsing and printing live here.

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use serde_json::{Value, json};
use std::io::Write;
use std::path::PathBuf;

use spool::api::client::Client;
use spool::config::{Config, Settings};
use spool::shutdown::os_signal;
use spool::toolchain;

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
    /// Send a failed or cancelled task back to the queue.
    Retry(IdArgs),
    /// Cancel a pending or running task.
    Cancel(IdArgs),
    /// Show a host's health: database, task types, counts per state.
    Health(ClientArgs),
    /// Alerts: show the rules, firing and recent alerts, the last drill; run a drill.
    #[command(subcommand)]
    Alert(AlertCommand),
    /// List a host's plugins: task types, versions, policies, capabilities, load errors.
    Plugins(PluginsArgs),
    /// List periodic tasks: source, cron or interval, time zone, next run, last tick enqueued.
    Schedules(SchedulesArgs),
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
    let cli = Cli::parse();
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
                let page = args
                    .client
                    .client()
                    .list(
                        args.status.as_deref(),
                        args.task_type.as_deref(),
                        args.limit,
                        args.before,
                    )
                    .await?;
                print_tasks(&page, &args);
                Ok(())
            }
            Command::Retry(args) => print_json(&args.client.client().retry(args.id).await?),
            Command::Cancel(args) => print_json(&args.client.client().cancel(args.id).await?),
            Command::Health(args) => print_json(&args.client().health().await?),
            Command::Alert(AlertCommand::Show(args)) => {
                print_json(&args.client().alerts().await?)
            }
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

fn plugin(command: PluginCommand) -> Result<()> {
    match command {
        PluginCommand::New(args) => {
            let language = toolchain::Language::parse(&args.lang)?;
            let dir = toolchain::new_project(language, &args.name, &args.dir)?;
            println!(
                "created {} ({language}); build it with: spool plugin build {}",
                dir.display(),
                dir.display()
            );
            Ok(())
        }
        PluginCommand::Build(args) => {
            let request = toolchain::BuildRequest {
                project: args.project,
                language: args
                    .lang
                    .as_deref()
                    .map(toolchain::Language::parse)
                    .transpose()?,
                name: args.name,
                plugins: args.plugins,
                tools: args.tools_dir.unwrap_or_else(toolchain::default_tools_dir),
            };
            let built = toolchain::build(&request)?;
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
        print_json(&client.task(args.id).await?)
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
            Some("done") => return print_json(&task),
            Some(status @ ("failed" | "cancelled")) => {
                print_json(&task)?;
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
            one_line(
                plugin["last_error"].as_str().unwrap_or(""),
                &plugin["task_type"]
            )
        );
    }
    for unloaded in view["unloaded"].as_array().into_iter().flatten() {
        let why = match (unloaded["error"].as_str(), unloaded["removed_at"].as_str()) {
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
        if let Some(error) = plugin["last_error"].as_str() {
            println!("last load error (the version above keeps serving):\n{error}");
        }
    } else {
        println!("not loaded");
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
        println!("(this host does not lead: the leading host enqueues the ticks and knows the last ones)");
    }
}
