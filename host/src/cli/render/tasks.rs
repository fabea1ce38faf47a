//! Tasks as the CLI prints them: one task (JSON) with its attempt history (a table), a page of
//! the listing, and what a bulk retry or discard changed.

use anyhow::Result;
use std::fmt::Write as _;

use super::{print_json, stamp};
use crate::api::control::BulkResponse;
use crate::api::tasks::{TaskDetail, TaskPage};
use crate::cli::args::TasksArgs;
use crate::store::history::AttemptRecord;
use crate::task::Status;
use spool_rules::size::show_measured_size;

/// Prints a task from `GET /tasks/{id}`: its fields as JSON on stdout (as every command prints
/// a task), then its attempt history as a short table on stderr, so scripts reading stdout
/// see the same JSON as before and a person sees both.
pub fn print_task(detail: &TaskDetail) -> Result<()> {
    print_json(&detail.task)?;
    eprint!("{}", history_table(&detail.history));
    Ok(())
}

/// The attempt history as a table: one line per kept attempt (number, outcome, host, plugin
/// build, start, duration, fuel, peak memory and the first line of its error), and a note when
/// early attempts were not kept. The duration is the handler's own time where it was measured,
/// else from the claim to the record.
pub fn history_table(history: &[AttemptRecord]) -> String {
    let mut out = String::new();
    if history.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "{:>7}  {:<9}  {:<20}  {:<12}  {:<24}  {:>9}  {:>11}  {:>9}  ERROR",
        "ATTEMPT", "OUTCOME", "HOST", "PLUGIN", "STARTED", "TOOK", "FUEL", "MEMORY"
    );
    let short = |text: &str, n: usize| -> String { text.chars().take(n).collect() };
    let mut previous = 0;
    for attempt in history {
        let number = attempt.attempt;
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
        let took = match (attempt.cost, attempt.started_at) {
            (Some(cost), _) => format_took(chrono::Duration::milliseconds(
                i64::try_from(cost.wall_ms).unwrap_or(i64::MAX),
            )),
            (None, Some(start)) => format_took(attempt.finished_at - start),
            (None, None) => String::new(),
        };
        let fuel = attempt
            .cost
            .and_then(|c| c.fuel_used)
            .map_or(String::new(), |f| f.to_string());
        let memory = attempt
            .cost
            .filter(|c| c.peak_memory > 0)
            .map_or(String::new(), |c| show_measured_size(c.peak_memory));
        let error: String = attempt
            .error
            .as_deref()
            .unwrap_or("")
            .lines()
            .next()
            .unwrap_or("")
            .chars()
            .take(80)
            .collect();
        let _ = writeln!(
            out,
            "{:>7}  {:<9}  {:<20}  {:<12}  {:<24}  {:>9}  {:>11}  {:>9}  {}",
            number,
            short(attempt.outcome.as_str(), 9),
            short(attempt.host.as_deref().unwrap_or(""), 20),
            short(attempt.plugin_version.as_deref().unwrap_or(""), 12),
            short(
                &attempt.started_at.as_ref().map(stamp).unwrap_or_default(),
                24
            ),
            took,
            fuel,
            memory,
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

/// A page of `spool tasks`: one line per task, and the command for the next page if any.
pub fn tasks_table(page: &TaskPage, args: &TasksArgs) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>8}  {:<16} {:<10} {:>8}  {:<24}  RESULT / ERROR",
        "ID", "TYPE", "STATUS", "ATTEMPTS", "UPDATED"
    );
    for task in &page.tasks {
        let outcome = match task.status {
            Status::Done => task
                .result
                .as_ref()
                .map_or("null".to_string(), |result| result.to_string()),
            _ => task.last_error.clone().unwrap_or_default(),
        };
        let outcome: String = outcome.chars().take(60).collect();
        let _ = writeln!(
            out,
            "{:>8}  {:<16} {:<10} {:>8}  {:<24}  {}",
            task.id,
            task.task_type,
            task.status.as_str(),
            task.attempts,
            stamp(&task.updated_at),
            outcome
        );
    }
    if let Some(next) = page.next_before {
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
        let _ = writeln!(out, "(more: {command})");
    }
    out
}

/// What `spool retry` or `spool discard` (`action`) selected and changed, in one line.
pub fn bulk_summary(action: &str, report: &BulkResponse, dry_run: bool) -> String {
    let counts = &report.by_status;
    let states: Vec<String> = [
        ("pending", counts.pending),
        ("running", counts.running),
        ("done", counts.done),
        ("failed", counts.failed),
        ("cancelled", counts.cancelled),
    ]
    .iter()
    .filter(|(_, n)| *n > 0)
    .map(|(state, n)| format!("{n} {state}"))
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
    if dry_run {
        format!(
            "dry run: {action} would change {} of {} selected tasks ({selected}); only {allowed} tasks change\n",
            report.eligible, report.matched
        )
    } else {
        format!(
            "{action}: {} of {} selected tasks changed ({selected}, counted before); only {allowed} tasks change\n",
            report.changed, report.matched
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn args(extra: &[&str]) -> TasksArgs {
        use clap::Parser;
        #[derive(Parser)]
        struct Line {
            #[command(flatten)]
            args: TasksArgs,
        }
        let mut line = vec!["spool"];
        line.extend(extra);
        Line::parse_from(line).args
    }

    fn page() -> TaskPage {
        let task = |id: i64, status: &str, result: serde_json::Value, error: serde_json::Value| {
            json!({
                "id": id, "task_type": "resize", "status": status, "payload": {}, "priority": 0,
                "attempts": 2, "retry_count": 1, "max_retry": 3,
                "next_run_at": "2026-01-02T03:04:05Z", "idempotency_key": null,
                "result": result, "last_error": error, "progress": null, "progress_note": null,
                "plugin_version": null, "log": null, "lease_owner": null,
                "lease_expires_at": null, "attempted_at": null, "finished_at": null,
                "created_at": "2026-01-02T03:04:05Z", "updated_at": "2026-01-02T03:04:05.250Z",
                "estimated_done_at": null, "archived": false, "archived_at": null,
            })
        };
        serde_json::from_value(json!({
            "tasks": [
                task(12, "done", json!({"width": 640}), json!(null)),
                task(11, "failed", json!(null), json!("image too large")),
            ],
            "next_before": 11,
        }))
        .unwrap()
    }

    #[test]
    fn a_page_renders_one_line_per_task_and_the_next_page_command() {
        let text = tasks_table(&page(), &args(&["--status", "failed", "--since", "1h"]));
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            [
                "      ID  TYPE             STATUS     ATTEMPTS  UPDATED                   RESULT / ERROR",
                "      12  resize           done              2  2026-01-02T03:04:05.250Z  {\"width\":640}",
                "      11  resize           failed            2  2026-01-02T03:04:05.250Z  image too large",
                "(more: spool tasks --before 11 --status failed --since \"1h\")",
            ]
        );
    }

    #[test]
    fn a_history_renders_attempts_with_gaps_and_durations() {
        let history: Vec<AttemptRecord> = serde_json::from_value(json!([
            {"attempt": 1, "host": "web-1", "plugin_version": "0123456789abcdef",
             "started_at": "2026-01-02T03:04:05Z", "finished_at": "2026-01-02T03:04:05.850Z",
             "outcome": "retry", "error": "busy\nmore", "log": null,
             "cost": {"wall_ms": 812, "fuel_used": 1234567, "peak_memory": 2097152}},
            {"attempt": 4, "host": null, "plugin_version": null, "started_at": null,
             "finished_at": "2026-01-02T03:09:10Z", "outcome": "timed_out", "error": null,
             "log": null},
        ]))
        .unwrap();
        let text = history_table(&history);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            [
                "ATTEMPT  OUTCOME    HOST                  PLUGIN        STARTED                        TOOK         FUEL     MEMORY  ERROR",
                "      1  retry      web-1                 0123456789ab  2026-01-02T03:04:05Z          812ms      1234567     2.0MiB  busy",
                "      …  (attempts 2–3 not kept)",
                "      4  timed_out                                                                                                   ",
            ]
        );
    }

    #[test]
    fn a_bulk_summary_counts_the_selected_states() {
        let report: BulkResponse = serde_json::from_value(json!({
            "action": "retry", "dry_run": true, "matched": 5, "eligible": 3, "changed": 0,
            "by_status": {"pending": 0, "running": 2, "done": 0, "failed": 2, "cancelled": 1},
        }))
        .unwrap();
        assert_eq!(
            bulk_summary("retry", &report, true),
            "dry run: retry would change 3 of 5 selected tasks (2 running, 2 failed, 1 cancelled); only failed or cancelled tasks change\n"
        );
    }

    #[test]
    fn durations_read_as_a_person_reads_them() {
        let ms = chrono::Duration::milliseconds;
        assert_eq!(format_took(ms(850)), "850ms");
        assert_eq!(format_took(ms(12_340)), "12.3s");
        assert_eq!(format_took(ms(245_000)), "4m05s");
    }
}
