//! What a host shows of itself, as the CLI prints it: the task types, the plugins (a table,
//! or one in full), the schedules, and an alert drill's outcome.

use anyhow::{Result, bail};
use serde::Serialize;
use std::fmt::Write as _;

use super::{stamp, stamp_or_dash, word};
use crate::alerts::DrillReport;
use crate::api::control::TypesView;
use crate::api::plugins::{PluginView, PluginsView, UnloadedView};
use crate::api::schedules::SchedulesView;
use spool_rules::size::show_measured_size;

/// `spool types`: one line per task type, its counts, plugin, what the plugin's attempts cost
/// on this host (p50 time, mean fuel, peak memory) and its pause.
pub fn types_table(view: &TypesView) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<16} {:>8} {:>8} {:>8} {:>8} {:>9}  {:<8} {:<12} {:>9} {:>11} {:>9}",
        "TYPE",
        "PENDING",
        "RUNNING",
        "DONE",
        "FAILED",
        "CANCELLED",
        "PLUGIN",
        "VERSION",
        "P50 MS",
        "MEAN FUEL",
        "MEMORY"
    );
    for t in &view.types {
        let counts = &t.counts;
        let cost = t.cost.as_ref();
        let mut line = format!(
            "{:<16} {:>8} {:>8} {:>8} {:>8} {:>9}  {:<8} {:<12} {:>9} {:>11} {:>9}",
            t.task_type,
            counts.pending,
            counts.running,
            counts.done,
            counts.failed,
            counts.cancelled,
            t.load_state,
            t.version
                .as_deref()
                .unwrap_or("-")
                .chars()
                .take(12)
                .collect::<String>(),
            cost.and_then(|c| c.p50_ms)
                .map_or("-".to_string(), |ms| ms.to_string()),
            cost.and_then(|c| c.mean_fuel)
                .map_or("-".to_string(), |fuel| fuel.to_string()),
            cost.filter(|c| c.peak_memory > 0)
                .map_or("-".to_string(), |c| show_measured_size(c.peak_memory)),
        );
        if t.paused {
            let at = t.paused_at.as_ref().map_or("?".to_string(), stamp);
            line += &format!("  PAUSED since {at}");
        }
        let _ = writeln!(out, "{line}");
    }
    out
}

/// The periodic tasks as a table: one line each.
pub fn schedules_table(view: &SchedulesView) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<16} {:<12} {:<10} {:<24} {:<24} {:<24}  LAST TASK",
        "TYPE", "NAME", "SOURCE", "WHEN", "NEXT RUN", "LAST TICK"
    );
    for schedule in &view.schedules {
        let when = match (&schedule.cron, &schedule.every) {
            (Some(cron), _) if schedule.timezone == "UTC" => cron.clone(),
            (Some(cron), _) => format!("{cron} {}", schedule.timezone),
            (None, Some(every)) => format!("every {every}"),
            _ => "-".to_string(),
        };
        let loaded = if schedule.plugin_loaded {
            ""
        } else {
            "  (no plugin here: its tasks wait)"
        };
        let _ = writeln!(
            out,
            "{:<16} {:<12} {:<10} {:<24} {:<24} {:<24}  {}{loaded}",
            schedule.task_type,
            schedule.name,
            word(&schedule.source),
            when,
            stamp_or_dash(&schedule.next_run_at),
            stamp_or_dash(&schedule.last_tick),
            schedule
                .last_task_id
                .map_or("-".to_string(), |id| id.to_string()),
        );
    }
    if !view.leading {
        let _ = writeln!(
            out,
            "(this host does not lead: the leading host enqueues the ticks and knows the last ones)"
        );
    }
    out
}

/// `spool plugins`: the folder, one line per loaded plugin, then one per type not loaded.
pub fn plugins_table(view: &PluginsView) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "plugin folder: {}", view.folder);
    let _ = writeln!(
        out,
        "{:<16} {:<12} {:>8} {:>9} {:<25}  LAST ERROR",
        "TYPE", "VERSION", "PENDING", "RETRIES", "LOADED"
    );
    for plugin in &view.plugins {
        let note = match &plugin.loading_since {
            Some(since) => format!("loading a new file since {}", stamp(since)),
            None => one_line(
                plugin.last_error.as_deref().unwrap_or(""),
                &plugin.task_type,
            ),
        };
        let _ = writeln!(
            out,
            "{:<16} {:<12} {:>8} {:>9} {:<25}  {}",
            plugin.task_type,
            plugin.version.chars().take(12).collect::<String>(),
            plugin.pending,
            plugin.policy.max_retry,
            stamp(&plugin.loaded_at),
            note
        );
    }
    for unloaded in &view.unloaded {
        let why = match (&unloaded.error, &unloaded.removed_at) {
            _ if unloaded.loading_since.is_some() => {
                format!("loading since {}", stamp_or_dash(&unloaded.loading_since))
            }
            (Some(error), _) => one_line(&format!("not loaded: {error}"), &unloaded.task_type),
            (None, Some(at)) => format!(
                "removed at {}; pending tasks wait for it to return",
                stamp(at)
            ),
            _ => "not loaded".to_string(),
        };
        let _ = writeln!(
            out,
            "{:<16} {:<12} {:>8} {:>9} {:<25}  {}",
            unloaded.task_type, "-", unloaded.pending, "-", "-", why
        );
    }
    out
}

/// The longest error text a row of the plugin table shows.
const ERROR_COLUMN: usize = 100;

/// An error as one table cell: its first line, cut at [`ERROR_COLUMN`] characters, with where
/// to read the rest when anything was left out.
fn one_line(error: &str, task_type: &str) -> String {
    let error = error.trim();
    let first = error.lines().next().unwrap_or("").trim_end();
    let mut cell: String = first.chars().take(ERROR_COLUMN).collect();
    if cell.len() < error.len() {
        cell = format!("{}… (spool plugins {task_type} shows all)", cell.trim_end());
    }
    cell
}

/// One task type's plugin: loaded, or not loaded and why.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum Plugin<'a> {
    Loaded(&'a PluginView),
    Unloaded(&'a UnloadedView),
}

/// The plugin of task type `name`, loaded or not; an error naming the types the host knows
/// when it has none.
pub fn find_plugin<'a>(view: &'a PluginsView, name: &str) -> Result<Plugin<'a>> {
    if let Some(plugin) = view.plugins.iter().find(|p| p.task_type == name) {
        return Ok(Plugin::Loaded(plugin));
    }
    if let Some(unloaded) = view.unloaded.iter().find(|p| p.task_type == name) {
        return Ok(Plugin::Unloaded(unloaded));
    }
    let known: Vec<&str> = (view.plugins.iter().map(|p| p.task_type.as_str()))
        .chain(view.unloaded.iter().map(|p| p.task_type.as_str()))
        .collect();
    bail!(
        "the host has no plugin for task type `{name}`; it knows: {}",
        if known.is_empty() {
            "none".to_string()
        } else {
            known.join(", ")
        }
    );
}

/// One task type's plugin in full (its whole load error included).
pub fn plugin_detail(plugin: &Plugin) -> Result<String> {
    let mut out = String::new();
    match plugin {
        Plugin::Loaded(plugin) => {
            let _ = writeln!(out, "task type:    {}", plugin.task_type);
            for (label, value) in [
                ("version:     ", plugin.version.clone()),
                ("kind:        ", plugin.kind.clone()),
                ("file:        ", plugin.path.clone()),
                ("loaded at:   ", stamp(&plugin.loaded_at)),
                ("pending:     ", plugin.pending.to_string()),
                (
                    "policy:      ",
                    serde_json::to_value(&plugin.policy)?.to_string(),
                ),
                (
                    "capabilities:",
                    serde_json::to_value(&plugin.capabilities)?.to_string(),
                ),
            ] {
                let _ = writeln!(out, "{label} {value}");
            }
            if let Some(since) = &plugin.loading_since {
                let _ = writeln!(
                    out,
                    "loading a new file since {}; the version above keeps serving",
                    stamp(since)
                );
            }
            if let Some(error) = &plugin.last_error {
                let _ = writeln!(
                    out,
                    "last load error (the version above keeps serving):\n{error}"
                );
            }
        }
        Plugin::Unloaded(plugin) => {
            let _ = writeln!(out, "task type:    {}", plugin.task_type);
            let _ = writeln!(out, "not loaded");
            if let Some(since) = &plugin.loading_since {
                let _ = writeln!(out, "loading since {}", stamp(since));
            }
            let _ = writeln!(out, "pending:      {}", plugin.pending);
            if let Some(at) = &plugin.removed_at {
                let _ = writeln!(
                    out,
                    "removed at:   {}; pending tasks wait for it to return",
                    stamp(at)
                );
            }
            if let Some(error) = &plugin.error {
                let _ = writeln!(out, "error:\n{error}");
            }
        }
    }
    Ok(out)
}

/// An alert drill: when and from where, each channel's outcome, and whether it is on record.
pub fn drill_report(report: &DrillReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "alert drill at {} from host {}",
        stamp(&report.at),
        report.host_id
    );
    for channel in &report.channels {
        let name = format!("{} ({})", channel.channel, channel.kind);
        if channel.ok {
            let _ = writeln!(out, "  ok      {name}");
        } else {
            let _ = writeln!(
                out,
                "  FAILED  {name}: {}",
                channel.error.as_deref().unwrap_or("no reason given")
            );
        }
    }
    if !report.recorded {
        let _ = writeln!(
            out,
            "(the database did not answer: the drill is recorded once it does)"
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn task_types_render_their_counts_plugin_and_pause() {
        let view: TypesView = serde_json::from_value(json!({"types": [{
            "task_type": "resize",
            "counts": {"pending": 3, "running": 1, "done": 40, "failed": 2, "cancelled": 0},
            "paused": true, "paused_at": "2026-01-02T03:04:05Z", "load_state": "loaded",
            "version": "0123456789abcdef", "loaded_at": "2026-01-01T00:00:00Z",
            "load_error": null, "policy": null, "mean_attempt_ms": null,
        }, {
            "task_type": "mail",
            "counts": {"pending": 0, "running": 0, "done": 7, "failed": 0, "cancelled": 0},
            "paused": false, "paused_at": null, "load_state": "loaded",
            "version": "fedcba9876543210", "loaded_at": "2026-01-01T00:00:00Z",
            "load_error": null, "policy": null, "mean_attempt_ms": 40,
            "cost": {"attempts": 7, "failures": 0, "p50_ms": 38, "p95_ms": 90,
                     "mean_fuel": 250000, "peak_memory": 3145728},
        }]}))
        .unwrap();
        let text = types_table(&view);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            [
                "TYPE              PENDING  RUNNING     DONE   FAILED CANCELLED  PLUGIN   VERSION         P50 MS   MEAN FUEL    MEMORY",
                "resize                  3        1       40        2         0  loaded   0123456789ab         -           -         -  PAUSED since 2026-01-02T03:04:05Z",
                "mail                    0        0        7        0         0  loaded   fedcba987654        38      250000    3.0MiB",
            ]
        );
    }

    fn plugins() -> PluginsView {
        serde_json::from_value(json!({
            "folder": "plugins", "grants_root": ".",
            "plugins": [{
                "task_type": "resize", "version": "0123456789abcdef", "path": "plugins/resize.wasm",
                "kind": "handler", "loaded_at": "2026-01-02T03:04:05.500Z",
                "policy": {"max_retry": 3, "backoff_base_ms": 1000, "backoff_max_ms": 60000,
                           "backoff_jitter": 0.2, "priority": 0, "fuel": 1000, "timeout_ms": 30000,
                           "memory_bytes": 1024, "concurrency": null, "rate": null},
                "capabilities": {"dirs": [], "env": ["TOKEN"], "http_allow": [],
                                 "enqueue": {"allow": [], "max_tasks": 10, "max_bytes": 100,
                                             "min_priority": -5, "max_priority": 0}},
                "last_error": "bad file\nsecond line", "pending": 4, "paused": false,
                "loading_since": null,
            }],
            "unloaded": [{"task_type": "mail", "error": null,
                          "removed_at": "2026-01-02T03:04:05Z", "pending": 2,
                          "loading_since": null}],
        }))
        .unwrap()
    }

    #[test]
    fn plugins_render_loaded_and_unloaded_rows() {
        let text = plugins_table(&plugins());
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            [
                "plugin folder: plugins",
                "TYPE             VERSION       PENDING   RETRIES LOADED                     LAST ERROR",
                "resize           0123456789ab        4         3 2026-01-02T03:04:05.500Z   bad file… (spool plugins resize shows all)",
                "mail             -                   2         - -                          removed at 2026-01-02T03:04:05Z; pending tasks wait for it to return",
            ]
        );
    }

    #[test]
    fn one_plugin_renders_in_full_and_an_unknown_one_names_the_known() {
        let view = plugins();
        let text = plugin_detail(&find_plugin(&view, "resize").unwrap()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "task type:    resize");
        assert_eq!(lines[4], "loaded at:    2026-01-02T03:04:05.500Z");
        assert_eq!(
            lines[6],
            "policy:       {\"backoff_base_ms\":1000,\"backoff_jitter\":0.2,\"backoff_max_ms\":60000,\"concurrency\":null,\"fuel\":1000,\"max_retry\":3,\"memory_bytes\":1024,\"priority\":0,\"rate\":null,\"timeout_ms\":30000}"
        );
        assert_eq!(
            lines[7],
            "capabilities: {\"dirs\":[],\"enqueue\":{\"allow\":[],\"max_bytes\":100,\"max_priority\":0,\"max_tasks\":10,\"min_priority\":-5},\"env\":[\"TOKEN\"],\"http_allow\":[]}"
        );
        assert_eq!(
            lines[8..],
            [
                "last load error (the version above keeps serving):",
                "bad file",
                "second line"
            ]
        );
        let error = find_plugin(&view, "nope").unwrap_err().to_string();
        assert_eq!(
            error,
            "the host has no plugin for task type `nope`; it knows: resize, mail"
        );
    }
}
