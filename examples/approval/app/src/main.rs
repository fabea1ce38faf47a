//! `approval`: the essay's approval submit as a runnable story on PostgreSQL.
//!
//! - `approval serve`: the web app. `POST /approvals` writes the approval row and enqueues the
//!   mail, the report and the statistics-cache refresh in the same transaction, and answers in
//!   milliseconds; `POST /approvals?sync=1` does the same work inline, as the endpoint did
//!   before (seconds).
//! - `approval mail-stub`: a stand-in for the external mail service, slow on purpose.
//! - `approval demo`: the whole story in one command: the mail service, the app and a Spool
//!   host on the same database, N approvals submitted each way, both response times side by
//!   side, and every task's effect checked.
//!
//! See examples/approval/README.md.

mod app;
mod demo;
mod mail_stub;
#[path = "../../handlers/report/src/report.rs"]
mod report;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "approval",
    about = "The essay's approval submit: a web app that hands its slow work to Spool"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the approval app.
    Serve(app::Config),
    /// Serve the stand-in mail service.
    MailStub(mail_stub::Config),
    /// Run the story end to end: mail service, app, Spool host, timings and effects.
    Demo(demo::Config),
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Serve(config) => app::serve(config).await,
        Command::MailStub(config) => mail_stub::serve(config).await,
        Command::Demo(config) => demo::run(config).await,
    }
}
