//! What an alert says: one [`Alert`] per message, its subject line and text for people, and
//! the JSON a webhook receives. Pure; the channels only deliver it.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;
use std::time::Duration;

use super::rules::{Event, Notice};

/// One message to every channel.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Alert {
    /// `firing`, `repeat`, `resolved` or `drill`.
    pub event: &'static str,
    /// The alert's key (`dead_letters:mail`, `database`, ...; `drill`).
    pub alert: String,
    /// The rule's kind; absent for a drill.
    pub rule: Option<&'static str>,
    pub task_type: Option<String>,
    /// The figure that broke the rule (dead letters in the window, pending tasks, seconds).
    pub count: u64,
    /// The first line: an e-mail's subject.
    pub subject: String,
    /// The whole message; a webhook's Slack-compatible `text`.
    pub text: String,
    /// The host that sent it.
    pub host: String,
    pub dashboard_url: String,
    pub since: DateTime<Utc>,
    pub at: DateTime<Utc>,
    /// A drill: a test of the alert chain, nothing to act on.
    pub drill: bool,
}

fn time(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn lasted(since: DateTime<Utc>, at: DateTime<Utc>) -> String {
    let seconds = (at - since).num_seconds().max(0) as u64;
    humantime::format_duration(Duration::from_secs(seconds)).to_string()
}

impl Alert {
    /// The message for an alert the evaluator decided to send.
    pub fn from_notice(notice: &Notice, host: &str, dashboard_url: &str) -> Alert {
        let condition = &notice.condition;
        let (subject, body) = match notice.event {
            Event::Firing => (
                format!("[spool] FIRING: {}", condition.text),
                format!(
                    "Spool alert FIRING: {}.\nSince {}, seen by host {host}.",
                    condition.text,
                    time(notice.since)
                ),
            ),
            Event::Repeat => (
                format!(
                    "[spool] STILL FIRING ({}): {}",
                    lasted(notice.since, notice.at),
                    condition.text
                ),
                format!(
                    "Spool alert STILL FIRING for {}: {}.\nSince {}, seen by host {host}.",
                    lasted(notice.since, notice.at),
                    condition.text,
                    time(notice.since)
                ),
            ),
            Event::Resolved => (
                format!("[spool] RESOLVED: {}", condition.key),
                format!(
                    "Spool alert RESOLVED: {} cleared after {}.\nLast seen: {}.\nSeen by host {host}.",
                    condition.key,
                    lasted(notice.since, notice.at),
                    condition.text
                ),
            ),
        };
        Alert {
            event: notice.event.as_str(),
            alert: condition.key.clone(),
            rule: Some(condition.rule),
            task_type: condition.task_type.clone(),
            count: condition.value,
            text: format!("{body}\nDashboard: {dashboard_url}"),
            subject,
            host: host.to_string(),
            dashboard_url: dashboard_url.to_string(),
            since: notice.since,
            at: notice.at,
            drill: false,
        }
    }

    /// The message that a canary candidate was rolled back on every host (`event` `rollback`:
    /// a notice, not an alert that stays open).
    pub fn canary_rolled_back(
        task_type: &str,
        version: u64,
        detail: &str,
        host: &str,
        dashboard_url: &str,
        at: DateTime<Utc>,
    ) -> Alert {
        Alert {
            event: "rollback",
            alert: format!("canary:{task_type}"),
            rule: Some("canary"),
            task_type: Some(task_type.to_string()),
            count: version,
            subject: format!("[spool] ROLLED BACK: {task_type} version {version} on every host"),
            text: format!(
                "Spool rolled back the candidate version {version} of {task_type} on every host at {}: {detail}.
                 The stable version serves all attempts again; the candidate's failed attempts are retried on it.
                 See `spool versions {task_type}`. Decided by host {host}.
Dashboard: {dashboard_url}",
                time(at)
            ),
            host: host.to_string(),
            dashboard_url: dashboard_url.to_string(),
            since: at,
            at,
            drill: false,
        }
    }

    /// The marked test message of a drill.
    pub fn drill(host: &str, dashboard_url: &str, at: DateTime<Utc>) -> Alert {
        Alert {
            event: crate::store::alerts::DRILL,
            alert: crate::store::alerts::DRILL.to_string(),
            rule: None,
            task_type: None,
            count: 0,
            subject: "[spool] [DRILL] alert drill: no action needed".to_string(),
            text: format!(
                "[DRILL] Spool alert drill from host {host} at {}: a test of the alert chain, no action needed. \
                 If this reached you, Spool's alerts reach you.\nDashboard: {dashboard_url}",
                time(at)
            ),
            host: host.to_string(),
            dashboard_url: dashboard_url.to_string(),
            since: at,
            at,
            drill: true,
        }
    }

    /// The JSON a webhook receives: `text` (what Slack and compatible receivers show) and
    /// the alert's fields beside it.
    pub fn webhook_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or_default()
    }
}

/// What held, read back from a sent message's first line ("Spool alert FIRING: 4 dead letters
/// of type mail within 10m (more than 3)." → "4 dead letters of type mail within 10m (more than
/// 3)"), for alerts taken over from the alert log.
pub fn condition_text(message: &str) -> String {
    let first = message.lines().next().unwrap_or_default();
    let text = match first.split_once(": ") {
        Some((head, rest)) if head.starts_with("Spool alert") => rest,
        _ => first,
    };
    text.strip_suffix('.').unwrap_or(text).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alerts::rules::condition_of_key;

    fn at(seconds: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + seconds, 0).unwrap()
    }

    #[test]
    fn messages_name_the_type_the_count_and_the_dashboard() {
        let condition = condition_of_key(
            "dead_letters:mail",
            5,
            "5 dead letters of type mail within 10m (more than 3)".into(),
        )
        .unwrap();
        let mut notice = Notice {
            event: Event::Firing,
            condition,
            since: at(0),
            at: at(0),
        };
        let alert = Alert::from_notice(&notice, "h1", "https://spool.internal/");
        assert_eq!(
            alert.subject,
            "[spool] FIRING: 5 dead letters of type mail within 10m (more than 3)"
        );
        assert!(alert.text.ends_with("\nDashboard: https://spool.internal/"));
        let json = alert.webhook_json();
        assert_eq!(json["task_type"], "mail");
        assert_eq!(json["count"], 5);
        assert_eq!(json["event"], "firing");
        assert!(json["text"].as_str().unwrap().contains("type mail"));
        notice.event = Event::Repeat;
        notice.at = at(1800);
        assert!(
            Alert::from_notice(&notice, "h1", "u")
                .subject
                .starts_with("[spool] STILL FIRING (30m): 5 dead letters")
        );
        notice.event = Event::Resolved;
        let resolved = Alert::from_notice(&notice, "h1", "u");
        assert_eq!(resolved.subject, "[spool] RESOLVED: dead_letters:mail");
        assert!(
            resolved.text.contains("cleared after 30m"),
            "{}",
            resolved.text
        );
        assert_eq!(
            condition_text(&alert.text),
            "5 dead letters of type mail within 10m (more than 3)"
        );
        assert_eq!(
            condition_text(&Alert::from_notice(&notice, "h1", "u").text),
            "dead_letters:mail cleared after 30m"
        );
        notice.event = Event::Repeat;
        assert_eq!(
            condition_text(&Alert::from_notice(&notice, "h1", "u").text),
            "5 dead letters of type mail within 10m (more than 3)"
        );
        let drill = Alert::drill("h1", "u", at(0));
        assert!(drill.drill && drill.text.starts_with("[DRILL]"));
        assert_eq!(drill.webhook_json()["drill"], true);
    }
}
