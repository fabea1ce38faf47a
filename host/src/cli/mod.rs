//! The `spool` command line: `serve` runs a host, `archive` works on the database, the other
//! commands talk to a running host's HTTP API through [`crate::api::client`]. [`Cli`] is the
//! parsed command line, [`run`] runs it; the binary does no more than call both.
//!
//! - [`args`]: the commands' arguments and their help.
//! - [`commands`]: what each command does.
//! - [`render`]: what the commands print: tables over the API's view types, and JSON.

pub mod args;
pub mod commands;
pub mod render;

use anyhow::{Context, Result};
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use args::{
    ArchiveArgs, BuildArgs, BulkArgs, ClientArgs, DeployArgs, EnqueueArgs, IdArgs, NewArgs,
    PluginsArgs, ReplayArgs, RollbackArgs, SchedulesArgs, ServeArgs, StatusArgs, TasksArgs,
    TypeArgs, TypesArgs,
};
use commands::{deploy, host, info, replay, tasks};

#[derive(Parser)]
#[command(
    name = "spool",
    version,
    about = "A job runner: a task table in your database, handlers as sandboxed WebAssembly components."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
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
    /// Deploy a handler build through a running host to every host of its database, at once or as a canary.
    Deploy(DeployArgs),
    /// Make a type's candidate on trial its stable version on every host.
    Promote(TypeArgs),
    /// Drop a type's candidate, or go back to an earlier version, on every host.
    Rollback(RollbackArgs),
    /// Stop serving a deployed type from the database on every host (its versions are kept).
    Undeploy(TypeArgs),
    /// List a deployed type's kept versions and its deployment history.
    Versions(TypeArgs),
    /// Run a recorded attempt again on this machine: the same build, payload and host-call answers; nothing is sent anywhere.
    Replay(ReplayArgs),
}

#[derive(Subcommand)]
pub enum AlertCommand {
    /// Send a marked test alert through every configured channel and record it; fails when a channel does.
    Drill(ClientArgs),
    /// Show the rules, channels, firing alerts, recent alerts and the last drill (JSON).
    Show(ClientArgs),
}

#[derive(Subcommand)]
pub enum PluginCommand {
    /// Start a handler project NAME/ from a template (NAME becomes its task type).
    New(NewArgs),
    /// Build a handler project into NAME.wasm in the plugin folder (a running host picks it up).
    Build(BuildArgs),
}

impl Cli {
    /// The process's command line, parsed; exits with clap's message and code when it does not
    /// parse. Notes where each setting came from, so a refused value is reported with its flag
    /// or variable.
    pub fn from_command_line() -> Cli {
        let matches = Cli::command().get_matches();
        let mut cli = Cli::from_arg_matches(&matches)
            .map_err(|e| e.format(&mut Cli::command()))
            .unwrap_or_else(|e| e.exit());
        match (&mut cli.command, matches.subcommand()) {
            (Command::Serve(args), Some((_, matches))) => args.settings.note_command_line(matches),
            (Command::Archive(args), Some((_, matches))) => args.note_command_line(matches),
            _ => {}
        }
        cli
    }
}

/// Runs a parsed command line: sets up logging to stderr and an async runtime (but not for
/// `spool plugin`, which runs compilers as subprocesses), then the command.
pub fn run(cli: Cli) -> Result<()> {
    let command = match cli.command {
        Command::Plugin(command) => return commands::plugin::run(command),
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
            Command::Serve(args) => host::serve(*args).await,
            Command::Enqueue(args) => tasks::enqueue(args).await,
            Command::Status(args) => tasks::status(args).await,
            Command::Tasks(args) => tasks::list(args).await,
            Command::Retry(args) => tasks::bulk("retry", args).await,
            Command::Discard(args) => tasks::bulk("discard", args).await,
            Command::Pause(args) => tasks::pause(args, true).await,
            Command::Resume(args) => tasks::pause(args, false).await,
            Command::Types(args) => info::types(args).await,
            Command::Cancel(args) => tasks::cancel(args).await,
            Command::Health(args) => info::health(args).await,
            Command::Archive(args) => host::archive(args).await,
            Command::Alert(AlertCommand::Show(args)) => info::alerts(args).await,
            Command::Alert(AlertCommand::Drill(args)) => info::drill(args).await,
            Command::Plugins(args) => info::plugins(args).await,
            Command::Schedules(args) => info::schedules(args).await,
            Command::Deploy(args) => deploy::deploy(args).await,
            Command::Promote(args) => deploy::promote(args).await,
            Command::Rollback(args) => deploy::rollback(args).await,
            Command::Undeploy(args) => deploy::undeploy(args).await,
            Command::Versions(args) => deploy::versions(args).await,
            Command::Replay(args) => replay::replay(args).await,
            Command::Plugin(_) => unreachable!("handled before the runtime starts"),
        }
    })
}
