//! Keeps the leases of tasks running on this host alive, so the rescuer (on any host) only
//! takes back tasks whose host has really stopped. It also notices tasks this host runs that
//! are no longer leased to it (cancelled through another host's API, or rescued after this
//! host lost the database for too long) and interrupts their attempts.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use super::in_flight::InFlight;
use crate::shutdown::{Shutdown, Stage};
use crate::store::{AttemptId, SharedStore};

/// The lease keeper service.
pub struct LeaseKeeper {
    pub store: SharedStore,
    pub owner: String,
    pub lease: Duration,
    pub interval: Duration,
    pub in_flight: Arc<InFlight>,
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
            // Taken before the statement: anything claimed later is not expected in its answer.
            // Only attempts really running here are extended: a task this host once claimed but
            // no longer runs keeps no lease alive.
            let running: Vec<AttemptId> = self.in_flight.attempts();
            if running.is_empty() {
                continue;
            }
            match self
                .store
                .extend_leases(&self.owner, &running, self.lease)
                .await
            {
                Ok(leased) => {
                    let leased: HashSet<AttemptId> = leased.into_iter().collect();
                    for attempt in running.into_iter().filter(|a| !leased.contains(a)) {
                        if self.in_flight.cancel(attempt) {
                            tracing::info!(
                                task_id = attempt.task,
                                attempt = attempt.attempt,
                                "the task is no longer leased to this attempt (cancelled or rescued); interrupting it"
                            );
                        }
                    }
                }
                Err(error) => {
                    tracing::warn!("extending task leases failed: {error}; will try again")
                }
            }
        }
    }
}
