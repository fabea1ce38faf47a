//! Returns tasks whose lease expired (their host died or lost the database) to the queue.
//! Maintenance: only the leading host runs it ([`super::leader`]). Once an hour it also prunes
//! each loaded type's effect ledger of effects older than the type's `[effects] retention`.

use chrono::Utc;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

use super::leader::{LeaderTicks, Leadership};
use crate::plugins::Registry;
use crate::shutdown::Shutdown;
use crate::store::{RescueReport, SharedStore, StoreError};

/// The rescuer service.
pub struct Rescuer {
    pub store: SharedStore,
    pub interval: Duration,
    /// Woken when rescued tasks are due again.
    pub wake: Arc<Notify>,
    /// Passes run only while this host leads.
    pub leadership: Arc<Leadership>,
    pub shutdown: Shutdown,
    /// The loaded task types, whose effect ledgers are pruned by their retention.
    pub registry: Arc<Registry>,
}

/// How often the leader prunes effect ledgers past their retention.
pub const PRUNE_INTERVAL: Duration = Duration::from_secs(3600);

impl Rescuer {
    /// One pass: rescues what expired and says so.
    /// Forgets each loaded type's effects older than its `[effects] retention`.
    pub async fn prune_effects(&self) {
        for plugin in self.registry.plugins() {
            let before = Utc::now() - crate::task::chrono_duration(plugin.policy.effect_retention);
            match self.store.prune_effects(&plugin.task_type, before).await {
                Ok(0) => {}
                Ok(forgotten) => tracing::info!(
                    task_type = %plugin.task_type,
                    forgotten,
                    "forgot effects past the type's retention"
                ),
                Err(error) => tracing::warn!(
                    task_type = %plugin.task_type,
                    "pruning the effect ledger failed: {error}; will try again"
                ),
            }
        }
    }

    pub async fn run_once(&self) -> Result<RescueReport, StoreError> {
        let report = self.store.rescue_expired().await?;
        if report.retried > 0 || report.failed > 0 {
            tracing::warn!(
                retried = report.retried,
                failed = report.failed,
                "rescued tasks whose host stopped while running them"
            );
        }
        if report.retried > 0 {
            self.wake.notify_one();
        }
        Ok(report)
    }

    /// Rescues every `interval` while this host leads, until shutdown begins; a pass runs as
    /// soon as this host becomes the leader, so tasks left by a crashed predecessor are picked
    /// up promptly.
    pub async fn run(self) {
        let mut ticks = LeaderTicks::new(
            self.interval,
            self.leadership.clone(),
            self.shutdown.clone(),
        );
        let mut pruned_at: Option<std::time::Instant> = None;
        while ticks.next().await {
            if let Err(error) = self.run_once().await {
                tracing::warn!("rescuing expired tasks failed: {error}; will try again");
            }
            if pruned_at.is_none_or(|at| at.elapsed() >= PRUNE_INTERVAL) {
                pruned_at = Some(std::time::Instant::now());
                self.prune_effects().await;
            }
        }
    }
}
