//! The alert service: every `interval` it checks this host (the database answers, the plugins
//! loaded) and, while this host leads, the shared task table (dead letters per type within
//! each rule's window, backlog and oldest due task per type); the [`Evaluator`] decides what
//! to send. On becoming the leader it takes over the alerts the alert log shows open, so a
//! failover neither repeats a firing alert early nor forgets to resolve it; on losing the
//! leadership it drops them unsent (the next leader has them).
//!
//! Once a day the leader prunes the alert log (rows older than 90 days; drills and each
//! alert's latest row stay) and logs a warning when the last drill is older than 90 days.

use chrono::{DateTime, Utc};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Alerts;
use super::config::Rule;
use super::message::Alert;
use super::rules::{self, Active, Condition, Evaluator, Notice};
use crate::plugins::Registry;
use crate::shutdown::{Shutdown, Stage};
use crate::store::{SharedStore, StoreError};
use crate::worker::upkeep::leader::Leadership;

/// How long a database check may take before it counts as "not answering".
const PING_TIMEOUT: Duration = Duration::from_secs(5);
/// How often the leader checks the last drill and prunes the alert log.
const DAILY: Duration = Duration::from_secs(86_400);
/// How long the alert log keeps rows (drills and open alerts' latest rows are kept longer).
const LOG_RETENTION: Duration = Duration::from_secs(90 * 86_400);

/// The alert service of one host.
pub struct AlertService {
    pub alerts: Arc<Alerts>,
    pub store: SharedStore,
    pub registry: Arc<Registry>,
    pub leadership: Arc<Leadership>,
    /// The database as it may be named in an alert (no credentials).
    pub database: String,
    pub shutdown: Shutdown,
}

impl AlertService {
    /// The shared rules' conditions now.
    async fn shared_conditions(&self, now: DateTime<Utc>) -> Result<Vec<Condition>, StoreError> {
        let mut holding = Vec::new();
        let mut dead_letters: BTreeMap<Duration, BTreeMap<String, u64>> = BTreeMap::new();
        let mut backlog = None;
        for rule in &self.alerts.config.rules {
            match rule {
                Rule::DeadLetters { window, .. } => {
                    if !dead_letters.contains_key(window) {
                        let since = now - crate::task::chrono_duration(*window);
                        let counts = self.store.dead_letters_since(since).await?;
                        dead_letters.insert(*window, counts);
                    }
                    holding.extend(rules::dead_letters(rule, &dead_letters[window]));
                }
                Rule::Backlog { .. } | Rule::OldestPending { .. } => {
                    if backlog.is_none() {
                        backlog = Some(self.store.backlog(now).await?);
                    }
                    holding.extend(rules::backlog(rule, backlog.as_ref().unwrap(), now));
                }
                Rule::PluginLoad { .. } | Rule::Database { .. } => {}
            }
        }
        Ok(holding)
    }

    /// This host's conditions now.
    fn local_conditions(
        &self,
        now: DateTime<Utc>,
        database_down_since: Option<DateTime<Utc>>,
    ) -> Vec<Condition> {
        let errors = self.registry.errors();
        let host = &self.alerts.host_id;
        self.alerts
            .config
            .rules
            .iter()
            .flat_map(|rule| match rule {
                Rule::PluginLoad { .. } => rules::plugin_errors(rule, &errors, host),
                Rule::Database { .. } => {
                    rules::database(rule, database_down_since, now, &self.database, host)
                }
                _ => Vec::new(),
            })
            .collect()
    }

    /// The shared alerts the alert log shows open, to take over as the new leader.
    async fn open_shared(&self) -> Result<Vec<Active>, StoreError> {
        Ok(self
            .store
            .open_alerts()
            .await?
            .into_iter()
            .filter_map(|record| {
                let condition =
                    rules::condition_of_key(&record.alert, record.value, String::new())?;
                let text = super::message::condition_text(&record.message);
                condition.shared.then_some(Active {
                    condition: Condition { text, ..condition },
                    since: record.since,
                    last_sent: record.sent_at,
                })
            })
            .collect())
    }

    /// Sends every notice at once, each through every channel.
    async fn deliver(&self, notices: Vec<Notice>) {
        let mut sends = tokio::task::JoinSet::new();
        for notice in notices {
            let alerts = self.alerts.clone();
            sends.spawn(async move {
                let alert =
                    Alert::from_notice(&notice, &alerts.host_id, &alerts.config.dashboard_url);
                alerts.send(&alert).await;
            });
        }
        while sends.join_next().await.is_some() {}
    }

    /// Logs the drill warnings (the leader, once a day) and prunes the alert log.
    async fn daily(&self) {
        match self.alerts.last_drill().await {
            Ok(last) => {
                for warning in self.alerts.drill_warnings(last.as_ref(), Utc::now()) {
                    tracing::warn!("alerts: {warning}");
                }
            }
            Err(error) => tracing::warn!("cannot read the last alert drill: {error}"),
        }
        let before = Utc::now() - crate::task::chrono_duration(LOG_RETENTION);
        if let Err(error) = self.store.prune_alerts(before).await {
            tracing::warn!("pruning the alert log failed: {error}; will try again tomorrow");
        }
    }

    /// Evaluates every `interval` until shutdown.
    pub async fn run(self) {
        let mut evaluator = Evaluator::new(self.alerts.config.cooldown);
        let mut ticker = tokio::time::interval(self.alerts.config.interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut database_down_since: Option<DateTime<Utc>> = None;
        let mut took_over = false;
        let mut daily_at: Option<Instant> = None;
        loop {
            tokio::select! {
                _ = ticker.tick() => {}
                _ = self.shutdown.reached(Stage::Graceful) => return,
            }
            let now = Utc::now();
            let answers = matches!(
                tokio::time::timeout(PING_TIMEOUT, self.store.ping()).await,
                Ok(Ok(()))
            );
            if answers {
                database_down_since = None;
            } else {
                database_down_since.get_or_insert(now);
            }
            let mut notices =
                evaluator.observe(now, false, self.local_conditions(now, database_down_since));

            if self.leadership.is_leader() && answers {
                if !took_over {
                    match self.open_shared().await {
                        Ok(open) => {
                            for active in open {
                                evaluator.restore(active);
                            }
                            took_over = true;
                        }
                        Err(error) => {
                            tracing::warn!("cannot read the open alerts: {error}; will try again")
                        }
                    }
                }
                if took_over {
                    match self.shared_conditions(now).await {
                        Ok(holding) => notices.extend(evaluator.observe(now, true, holding)),
                        Err(error) => {
                            tracing::warn!(
                                "evaluating the alert rules failed: {error}; will try again"
                            )
                        }
                    }
                    if daily_at.is_none_or(|at| at.elapsed() >= DAILY) {
                        daily_at = Some(Instant::now());
                        self.daily().await;
                    }
                }
            } else if !self.leadership.is_leader() && took_over {
                evaluator.forget_shared();
                took_over = false;
                daily_at = None;
            }

            self.deliver(notices).await;
            if answers {
                self.alerts.flush_unrecorded().await;
            }
            self.alerts
                .set_firing(evaluator.active().cloned().collect());
        }
    }
}
