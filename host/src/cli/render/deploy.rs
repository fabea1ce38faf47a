//! What the deployment commands print: a deploy's outcome, a deployment after a promotion or a
//! rollback, and a type's versions with their history.

use std::fmt::Write as _;

use super::stamp;
use crate::api::deploy::{DeployedView, DeploymentView, VersionsView};
use spool_rules::size::show_measured_size;

/// What serves a type, in one line.
fn serving(deployment: &DeploymentView) -> String {
    let stable = deployment
        .stable
        .map_or("no version".to_string(), |n| format!("version {n}"));
    match deployment.candidate {
        Some(candidate) => format!(
            "{} serves {stable}; version {candidate} runs {}% of its attempts on trial",
            deployment.task_type, deployment.canary_percent
        ),
        None => format!("{} serves {stable} on every host", deployment.task_type),
    }
}

/// `spool deploy`.
pub fn deployed_summary(view: &DeployedView) -> String {
    format!(
        "deployed {} version {} ({}, {} bytes)\n{}\n",
        view.deployment.task_type,
        view.version.number,
        view.version.digest.chars().take(12).collect::<String>(),
        view.version.size,
        serving(&view.deployment)
    )
}

/// `spool promote`, `spool rollback`.
pub fn deployment_summary(done: &str, view: &DeploymentView) -> String {
    format!("{done}: {}\n", serving(view))
}

/// `spool versions`: the kept versions, newest first, then the history.
pub fn versions_table(view: &VersionsView) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}", serving(&view.deployment));
    let _ = writeln!(
        out,
        "{:>7}  {:<9} {:<12} {:>10}  {:<25} {:<7} {:<15} {:>8} {:>7} {:>7} {:>7} {:>12} {:>9}",
        "VERSION",
        "STATE",
        "BUILD",
        "BYTES",
        "DEPLOYED",
        "BY",
        "ORIGIN",
        "ATTEMPTS",
        "FAILED",
        "P50",
        "P95",
        "FUEL",
        "MEMORY"
    );
    for version in &view.versions {
        let figures = version.figures.as_ref();
        let ms = |v: Option<u64>| v.map_or("-".to_string(), |ms| format!("{ms}ms"));
        let _ = writeln!(
            out,
            "{:>7}  {:<9} {:<12} {:>10}  {:<25} {:<7} {:<15} {:>8} {:>7} {:>7} {:>7} {:>12} {:>9}",
            version.number,
            version.state,
            version.digest.chars().take(12).collect::<String>(),
            version.size,
            stamp(&version.deployed_at),
            version.deployed_by,
            version.origin.as_deref().unwrap_or("-"),
            figures.map_or("0".to_string(), |f| f.attempts.to_string()),
            figures.map_or("-".to_string(), |f| format!(
                "{:.1}%",
                f.failures as f64 * 100.0 / f.attempts.max(1) as f64
            )),
            ms(figures.and_then(|f| f.p50_ms)),
            ms(figures.and_then(|f| f.p95_ms)),
            figures
                .and_then(|f| f.mean_fuel)
                .map_or("-".to_string(), |fuel| fuel.to_string()),
            figures.map_or("-".to_string(), |f| show_measured_size(f.peak_memory)),
        );
    }
    let _ = writeln!(out, "\nhistory (newest first):");
    for event in &view.history {
        let version = event
            .version
            .map_or("-".to_string(), |n| format!("version {n}"));
        let detail = event
            .detail
            .as_deref()
            .map(|d| format!(": {d}"))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "  {}  {:<8} {:<11} by {} from {}{detail}",
            stamp(&event.at),
            event.action,
            version,
            event.right,
            event.origin.as_deref().unwrap_or("-")
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_show_state_and_history() {
        let view: VersionsView = serde_json::from_value(serde_json::json!({
            "deployment": {"task_type": "report", "stable": 1, "candidate": 2,
                "canary_percent": 25, "canary_since": "2026-12-04T10:00:00Z", "revision": 3,
                "updated_at": "2026-12-04T10:00:00Z"},
            "versions": [
                {"number": 2, "digest": "bbbbbbbbbbbbbbbbbbbb", "size": 10, "state": "candidate",
                 "manifest": null, "deployed_at": "2026-12-04T10:00:00Z", "deployed_by": "deploy",
                 "origin": "10.0.0.7", "figures": {"attempts": 40, "failures": 10, "p50_ms": 12,
                 "p95_ms": 40, "mean_fuel": 5000, "peak_memory": 2097152}},
                {"number": 1, "digest": "aaaaaaaaaaaaaaaaaaaa", "size": 9, "state": "stable",
                 "manifest": "max_retry = 1\n", "deployed_at": "2026-12-04T09:00:00Z",
                 "deployed_by": "api", "origin": null}],
            "history": [
                {"at": "2026-12-04T10:00:00Z", "action": "canary", "version": 2,
                 "right": "deploy", "origin": "10.0.0.7", "detail": null}]
        }))
        .unwrap();
        let table = versions_table(&view);
        assert!(
            table.starts_with(
                "report serves version 1; version 2 runs 25% of its attempts on trial\n"
            ),
            "{table}"
        );
        assert!(
            table.contains("      2  candidate bbbbbbbbbbbb         10"),
            "{table}"
        );
        assert!(
            table.contains("canary   version 2   by deploy from 10.0.0.7"),
            "{table}"
        );
    }
}
