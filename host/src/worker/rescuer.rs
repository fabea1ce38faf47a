//! Returns tasks whose lease expired (their host died or lost the database) to the queue.

use chrono::Utc;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

use crate::shutdown::{Shutdown, Stage};
use crate::store::{RescueReport, SharedStore, StoreError};

/// The rescuer service.
pub struct Rescuer {
    pub store: SharedStore,
    pub interval: Duration,
    /// Woken when rescued tasks are due again.
    pub wake: Arc<Notify>,
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

    /// Rescues every `interval` until shutdown begins; the first pass runs at start, so tasks
    /// left by a crashed predecessor are picked up promptly.
    pub async fn run(self) {
        let mut ticker = tokio::time::interval(self.interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticker.tick() => {}
                _ = self.shutdown.reached(Stage::Graceful) => return,
            }
            if let Err(error) = self.run_once().await {
                tracing::warn!("rescuing expired tasks failed: {error}; will try again");
            }
        }
    }
}
