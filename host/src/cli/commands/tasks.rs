//! The commands about tasks: `enqueue`, `status`, `tasks`, `retry`, `discard`, `cancel`, and
//! `pause` / `resume` of a task type.

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use spool_rules::span::{Span, Unit};

use crate::api::client::{Client, ClientError};
use crate::cli::args::{BulkArgs, EnqueueArgs, IdArgs, StatusArgs, TasksArgs, TypeArgs};
use crate::cli::render::print_json;
use crate::cli::render::tasks::{bulk_summary, print_task, tasks_table};
use crate::task::Status;

pub async fn enqueue(args: EnqueueArgs) -> Result<()> {
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
    wait_for(&client, task.task.id).await
}

pub async fn status(args: StatusArgs) -> Result<()> {
    let client = args.client.client();
    if args.wait {
        wait_for(&client, args.id).await
    } else {
        print_task(&client.task(args.id).await?)
    }
}

/// Waits (long-polls) until the task reaches a final state; fails the command unless it is done.
async fn wait_for(client: &Client, id: i64) -> Result<()> {
    // A host may allow shorter waits (`max_wait`); it then refuses this one and 1s is used.
    let mut wait = "20s";
    loop {
        let task = match client.wait(id, wait).await {
            Err(ClientError::Api { status: 400, .. }) if wait != "1s" => {
                wait = "1s";
                continue;
            }
            answer => answer?,
        };
        match task.task.status {
            Status::Done => return print_task(&task),
            status @ (Status::Failed | Status::Cancelled) => {
                print_task(&task)?;
                bail!(
                    "task {id} is {}: {}",
                    status.as_str(),
                    task.task
                        .last_error
                        .as_deref()
                        .unwrap_or("no error recorded")
                );
            }
            _ => {}
        }
    }
}

/// `spool tasks`: a page of the listing, as a table.
pub async fn list(args: TasksArgs) -> Result<()> {
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
    print!("{}", tasks_table(&page, &args));
    Ok(())
}

/// `spool pause` (`paused`) and `spool resume`.
pub async fn pause(args: TypeArgs, paused: bool) -> Result<()> {
    print_json(&args.client.client().pause(&args.task_type, paused).await?)
}

pub async fn cancel(args: IdArgs) -> Result<()> {
    print_json(&args.client.client().cancel(args.id).await?)
}

/// `spool retry` / `spool discard`: one task by id (retry only), or every task a filter selects.
pub async fn bulk(action: &str, args: BulkArgs) -> Result<()> {
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
    print!("{}", bulk_summary(action, &report, args.dry_run));
    Ok(())
}

/// A `--since` / `--until` value as the API takes it: an RFC 3339 time as given, or a duration
/// ago (`90s`, `30m`, `1h`, `2d`, `1w`) as the time it names.
/// The units of a `--since` / `--until` span.
const SINCE_UNITS: [Unit; 5] = [
    Unit::Seconds,
    Unit::Minutes,
    Unit::Hours,
    Unit::Days,
    Unit::Weeks,
];

fn time_arg(text: &Option<String>) -> Result<Option<String>> {
    let Some(text) = text else { return Ok(None) };
    if chrono::DateTime::parse_from_rfc3339(text).is_ok() {
        return Ok(Some(text.clone()));
    }
    let at = Span::parse(text, &SINCE_UNITS, None)
        .and_then(|span| span.duration())
        .and_then(|ago| chrono::TimeDelta::from_std(ago).ok())
        .and_then(|ago| chrono::Utc::now().checked_sub_signed(ago))
        .with_context(|| {
            format!(
                "`{text}` is neither a duration ago (90s, 30m, 1h, 2d, 1w) nor an RFC 3339 time"
            )
        })?;
    Ok(Some(
        at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
    ))
}
