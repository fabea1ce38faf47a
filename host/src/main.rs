//! The `spool` command line: parses it and runs it (see [`spool::cli`]). An error ends the
//! process with its message on stderr and exit code 1.

fn main() -> anyhow::Result<()> {
    spool::cli::run(spool::cli::Cli::from_command_line())
}
