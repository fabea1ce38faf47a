//! `spool serve` (a host, until a signal stops it) and `spool archive` (one archiver pass
//! straight against the database): the two commands that read the settings themselves.

use anyhow::{Context, Result, bail};
use std::io::Write;
use std::path::Path;

use crate::cli::args::{ArchiveArgs, ServeArgs};
use crate::config::{Config, Settings};
use crate::shutdown::os_signal;

/// The settings file's: the one given (which must exist), else `spool.toml` if present.
fn settings_file(path: Option<&Path>) -> Result<Settings> {
    Ok(match path {
        Some(path) => Settings::from_file(path, true)?,
        None => Settings::from_file(Path::new("spool.toml"), false)?,
    })
}

pub async fn serve(args: ServeArgs) -> Result<()> {
    let file = settings_file(args.config.as_deref())?;
    let config = Config::from_settings(args.settings.or(file))?;
    let host = crate::start(config).await?;
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

/// `spool archive`: one pass of the archiver (or a dry run), straight against the database, so
/// it works whether or not a host is running (a running leader's own passes simply find less).
pub async fn archive(args: ArchiveArgs) -> Result<()> {
    use crate::worker::upkeep::archiver;
    let file = settings_file(args.config.as_deref())?;
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
    let database = crate::store::describe_url(&config.database_url);
    let store = crate::store::open(&config.database_url)
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
