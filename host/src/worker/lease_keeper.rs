//! Keeps the leases of tasks running on this host alive, so the rescuer (on any host) only
//! takes back tasks whose host has really stopped.

use chrono::Utc;
use std::time::Duration;

use crate::shutdown::{Shutdown, Stage};
use crate::store::SharedStore;
use crate::task::chrono_duration;

/// The lease keeper service.
pub struct LeaseKeeper {
    pub store: SharedStore,
    pub owner: String,
    pub lease: Duration,
    pub interval: Duration,
    pub shutdown: Shutdown,
}

impl LeaseKeeper {
    /// Extends leases every `interval` until immediate shutdown (during a graceful drain the
    /// still-running tasks keep their leases).
    pub async fn run(self) {
        let mut ticker = tokio::time::interval(self.interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticker.tick() => {}
                _ = self.shutdown.reached(Stage::Immediate) => return,
            }
            let until = Utc::now() + chrono_duration(self.lease);
            if let Err(error) = self.store.extend_leases(&self.owner, until).await {
                tracing::warn!("extending task leases failed: {error}; will try again");
            }
        }
    }
}
