//! Alerts and the drill: the essay's "more than 3 failed tasks notify a person", and its
//! quarterly drill that proves the chain still works.
//!
//! - [`config`]: the `[alerts]` table of `spool.toml` (rules, channels, cool-down);
//! - [`rules`]: the pure evaluator: conditions in, firing / repeat / resolved out;
//! - [`message`]: what an alert and a drill say, to people and to webhooks;
//! - [`channels`]: delivery by webhook (JSON POST, Slack-compatible `text`) and e-mail (SMTP);
//! - [`service`]: the loop that evaluates the rules every `interval` and sends what they say.
//!
//! [`Alerts`] is what the service and the API share: the channels, this host's firing alerts,
//! and the alert log writes that wait for the database. Where each rule runs:
//! rules over the shared task table (dead letters, backlog, oldest pending) are evaluated by
//! the leading host only, so one alert goes out per incident however many hosts there are,
//! and a new leader takes over the alerts its predecessor had firing from the alert log.
//! Rules about a host (its plugins fail to load, its database does not answer) are evaluated
//! by every host and sent by the host that sees the problem, naming itself: when the database
//! is away no leader can be elected, so each host that notices says so; with N hosts a
//! database outage sends up to N alerts, one per host (their state is in memory, and they
//! reach the alert log once the database is back).

pub mod channels;
pub mod config;
pub mod message;
pub mod rules;
pub mod service;

use chrono::{DateTime, Utc};
use std::collections::VecDeque;
use std::sync::Mutex;

use crate::store::SharedStore;
use crate::store::alerts::{AlertRecord, ChannelOutcome, DRILL};
use channels::Channels;
use config::{AlertsConfig, DRILL_MAX_AGE};
use message::Alert;
use rules::Active;

/// Alert-log rows kept in memory while the database does not take them.
const UNRECORDED_MAX: usize = 100;

/// What the alert service and the API share.
pub struct Alerts {
    pub config: AlertsConfig,
    pub channels: Channels,
    pub host_id: String,
    store: SharedStore,
    /// The alerts this host's evaluator has firing (local ones always, shared ones while it
    /// leads), as of its last pass.
    firing: Mutex<Vec<Active>>,
    /// Alert-log rows the database did not take yet (it was away); written on the next pass.
    unrecorded: Mutex<VecDeque<AlertRecord>>,
}

/// The outcome of a drill.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct DrillReport {
    pub at: DateTime<Utc>,
    /// The host that sent it.
    pub host_id: String,
    /// Every channel took the test message.
    pub ok: bool,
    /// Each channel's outcome.
    pub channels: Vec<ChannelOutcome>,
    /// Whether the drill is in the alert log (false while the database is away; it is
    /// written once the database answers again).
    pub recorded: bool,
}

impl DrillReport {
    /// The drill of an alert-log row.
    pub fn of(record: &AlertRecord) -> DrillReport {
        DrillReport {
            at: record.sent_at,
            host_id: record.host_id.clone(),
            ok: record.channels.iter().all(|c| c.ok) && !record.channels.is_empty(),
            channels: record.channels.clone(),
            recorded: true,
        }
    }

    /// The failing channels in words, e.g. "webhook-1 (webhook): the webhook did not answer".
    pub fn failures(&self) -> String {
        self.channels
            .iter()
            .filter(|c| !c.ok)
            .map(|c| {
                format!(
                    "{} ({}): {}",
                    c.channel,
                    c.kind,
                    c.error.as_deref().unwrap_or("failed")
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}

impl Alerts {
    pub fn new(config: AlertsConfig, store: SharedStore, host_id: String) -> Alerts {
        Alerts {
            channels: Channels::new(&config.channels),
            config,
            host_id,
            store,
            firing: Mutex::new(Vec::new()),
            unrecorded: Mutex::new(VecDeque::new()),
        }
    }

    /// The alerts this host has firing.
    pub fn firing_here(&self) -> Vec<Active> {
        self.firing
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub(crate) fn set_firing(&self, firing: Vec<Active>) {
        *self.firing.lock().unwrap_or_else(|p| p.into_inner()) = firing;
    }

    /// Sends an alert through every channel and writes it to the alert log (later, if the
    /// database is away). Also logs it: the log is the channel that is always there.
    pub async fn send(&self, alert: &Alert) -> Vec<ChannelOutcome> {
        if alert.drill {
            tracing::info!(
                channels = self.config.channels.len(),
                "alert drill: {}",
                alert.subject
            );
        } else {
            tracing::warn!(alert = %alert.alert, event = alert.event, "{}", alert.subject);
        }
        let outcomes = self.channels.send(alert).await;
        let record = AlertRecord {
            id: 0,
            event: alert.event.to_string(),
            alert: alert.alert.clone(),
            task_type: alert.task_type.clone(),
            value: alert.count,
            message: alert.text.clone(),
            channels: outcomes.clone(),
            host_id: self.host_id.clone(),
            since: alert.since,
            sent_at: alert.at,
        };
        // Older entries first, so the log keeps the order things happened in.
        self.flush_unrecorded().await;
        let waiting = !self
            .unrecorded
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty();
        let written = if waiting {
            Err("older entries are still waiting".to_string())
        } else {
            self.store
                .record_alert(&record)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        if let Err(error) = written {
            tracing::warn!(
                "the alert log cannot be written now ({error}); the entry is kept until the database answers"
            );
            let mut waiting = self.unrecorded.lock().unwrap_or_else(|p| p.into_inner());
            if waiting.len() == UNRECORDED_MAX {
                waiting.pop_front();
            }
            waiting.push_back(record);
        }
        outcomes
    }

    /// Writes alert-log rows kept while the database was away; stops at the first failure.
    pub async fn flush_unrecorded(&self) {
        loop {
            let next = self
                .unrecorded
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .front()
                .cloned();
            let Some(record) = next else { return };
            if self.store.record_alert(&record).await.is_err() {
                return;
            }
            self.unrecorded
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .pop_front();
        }
    }

    /// Whether a drill is waiting to be written to the alert log.
    fn drill_unrecorded(&self) -> Option<AlertRecord> {
        self.unrecorded
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .rev()
            .find(|r| r.event == DRILL)
            .cloned()
    }

    /// Sends the marked test message through every channel and records the drill.
    pub async fn drill(&self) -> DrillReport {
        let at = Utc::now();
        let alert = Alert::drill(&self.host_id, &self.config.dashboard_url, at);
        let channels = self.send(&alert).await;
        let recorded = self.drill_unrecorded().is_none_or(|r| r.sent_at != at);
        let report = DrillReport {
            at,
            host_id: self.host_id.clone(),
            ok: channels.iter().all(|c| c.ok) && !channels.is_empty(),
            channels,
            recorded,
        };
        if report.ok {
            tracing::info!("alert drill: every channel took the test message");
        } else {
            tracing::error!(
                "ALERT DRILL FAILED: {}; alerts do not reach a person through these channels",
                report.failures()
            );
        }
        report
    }

    /// The latest drill: from the alert log, or the one waiting to be written to it.
    pub async fn last_drill(&self) -> Result<Option<DrillReport>, crate::store::StoreError> {
        let stored = self.store.last_drill().await?.map(|r| DrillReport::of(&r));
        let waiting = self.drill_unrecorded().map(|r| DrillReport {
            recorded: false,
            ..DrillReport::of(&r)
        });
        Ok(match (stored, waiting) {
            (Some(s), Some(w)) => Some(if w.at > s.at { w } else { s }),
            (s, w) => s.or(w),
        })
    }

    /// What is wrong with the alert chain, in words: no channel, no drill on record, a drill
    /// older than 90 days, or a failed last drill.
    pub fn drill_warnings(&self, last: Option<&DrillReport>, now: DateTime<Utc>) -> Vec<String> {
        drill_warnings(self.config.channels.is_empty(), last, now)
    }
}

/// See [`Alerts::drill_warnings`].
pub fn drill_warnings(
    no_channels: bool,
    last: Option<&DrillReport>,
    now: DateTime<Utc>,
) -> Vec<String> {
    let mut warnings = Vec::new();
    if no_channels {
        warnings.push(
            "no alert channel is configured: dead letters alert nobody; add [[alerts.webhook]] or [[alerts.email]] to spool.toml"
                .to_string(),
        );
    }
    match last {
        None => warnings.push(
            "no alert drill on record: run `spool alert drill` to prove alerts reach a person (a drill every quarter)"
                .to_string(),
        ),
        Some(drill) => {
            let age = (now - drill.at).to_std().unwrap_or_default();
            if age > DRILL_MAX_AGE {
                warnings.push(format!(
                    "the last alert drill was at {}, over 90 days ago ({} days): run `spool alert drill` (a drill every quarter)",
                    drill.at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                    age.as_secs() / 86_400
                ));
            }
            if !drill.ok {
                warnings.push(format!(
                    "the last alert drill failed: {}; fix the channel and run `spool alert drill` again",
                    if drill.channels.is_empty() {
                        "no channel took it".to_string()
                    } else {
                        drill.failures()
                    }
                ));
            }
        }
    }
    warnings
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drill(days_ago: i64, ok: bool) -> DrillReport {
        DrillReport {
            at: DateTime::from_timestamp(1_800_000_000, 0).unwrap()
                - chrono::Duration::days(days_ago),
            host_id: "h".into(),
            ok,
            channels: vec![ChannelOutcome {
                channel: "webhook-1".into(),
                kind: "webhook".into(),
                ok,
                error: (!ok).then(|| "refused".into()),
            }],
            recorded: true,
        }
    }

    #[test]
    fn drills_are_due_every_quarter_and_failures_are_loud() {
        let now = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        assert!(drill_warnings(false, Some(&drill(30, true)), now).is_empty());
        assert!(drill_warnings(false, Some(&drill(90, true)), now).is_empty());
        let never = drill_warnings(false, None, now);
        assert!(never[0].starts_with("no alert drill on record"));
        let old = drill_warnings(false, Some(&drill(91, true)), now);
        assert!(old[0].contains("over 90 days ago (91 days)"), "{old:?}");
        let failed = drill_warnings(false, Some(&drill(1, false)), now);
        assert!(
            failed[0].contains("webhook-1 (webhook): refused"),
            "{failed:?}"
        );
        let none = drill_warnings(true, Some(&drill(1, true)), now);
        assert!(none[0].starts_with("no alert channel is configured"));
    }
}
