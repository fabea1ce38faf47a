//! Returns tasks whose lease expired (their host died or lost the database) to the queue.
//! Maintenance: only the leading host runs it ([`super::leader`]).

use chrono::Utc;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

use super::leader::Leadership;
use crate::shutdown::{Shutdown, Stage};
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
}

impl Rescuer {
    /// One pass: rescues what expired and says so.
    pub async fn run_once(&self) -> Result<RescueReport, StoreError> {
        let report = self.store.rescue_expired(Utc::now()).await?;
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
        let mut ticker = tokio::time::interval(self.interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut leading = self.leadership.subscribe();
        loop {
            tokio::select! {
                _ = ticker.tick() => {}
                Ok(()) = leading.changed() => {}
                _ = self.shutdown.reached(Stage::Graceful) => return,
            }
            if !self.leadership.is_leader() {
                continue;
            }
            if let Err(error) = self.run_once().await {
                tracing::warn!("rescuing expired tasks failed: {error}; will try again");
            }
        }
    }
}
