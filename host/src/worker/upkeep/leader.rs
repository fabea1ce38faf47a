//! Leadership: which host runs the maintenance services (the rescuer today) when several hosts
//! share one database.
//!
//! A leader row with a lease, in the store (`Coordination::lead`), rather than a session-scoped
//! advisory lock: the same statement shape works on SQLite, PostgreSQL and MySQL, it survives a
//! pooled connection being recycled, and it needs no dedicated connection held open for the
//! life of the host. The leader renews every third of the lease; when it stops renewing (it
//! died or lost the database), any other host takes over at its next attempt after the lease
//! ran out, so failover takes at most one lease plus one renewal interval. A host that stops
//! gracefully resigns, so a successor takes over at once.
//!
//! A leader also keeps a deadline of its own on the monotonic clock: one lease after it *asked*
//! for the renewal that succeeded (the stored lease ends one lease after the database ran the
//! statement, which is later). Past it, [`Leadership::is_leader`] answers false even if no
//! renewal has failed yet: a leader whose elector stalled (a hung database call, a paused
//! process) stops acting as one by the time another host may take over, whatever its wall
//! clock says.

use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::shutdown::{Shutdown, Stage};
use crate::store::SharedStore;

/// The role maintenance services run under.
pub const MAINTENANCE: &str = "maintenance";

/// What this host knows about the leadership, shared with the services and the API.
#[derive(Debug)]
pub struct Leadership {
    leading: watch::Sender<bool>,
    leader: Mutex<Option<String>>,
    /// While leading: when this host's lease surely ends, on the monotonic clock.
    deadline: Mutex<Option<Instant>>,
}

impl Default for Leadership {
    fn default() -> Self {
        Leadership {
            leading: watch::channel(false).0,
            leader: Mutex::new(None),
            deadline: Mutex::new(None),
        }
    }
}

impl Leadership {
    /// Whether this host leads now: it won the latest election and its lease has not run out
    /// on the local monotonic clock since.
    pub fn is_leader(&self) -> bool {
        *self.leading.borrow()
            && self
                .deadline
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .is_some_and(|deadline| Instant::now() < deadline)
    }

    /// The leading host as last seen, if known.
    pub fn leader(&self) -> Option<String> {
        self.leader
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// A receiver that changes whenever this host gains or loses the leadership.
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.leading.subscribe()
    }

    /// Records an election's answer; `until` is the local deadline of a lease this host holds.
    fn set(&self, leader: Option<String>, until: Option<Instant>) {
        let leading = until.is_some();
        *self.deadline.lock().unwrap_or_else(|p| p.into_inner()) = until;
        *self.leader.lock().unwrap_or_else(|p| p.into_inner()) = leader;
        self.leading.send_if_modified(|current| {
            let changed = *current != leading;
            *current = leading;
            changed
        });
    }
}

/// The pace of a periodic upkeep service: a tick every interval while this host leads, and one
/// as soon as it becomes the leader.
pub struct LeaderTicks {
    ticker: tokio::time::Interval,
    leading: watch::Receiver<bool>,
    leadership: Arc<Leadership>,
    shutdown: Shutdown,
}

impl LeaderTicks {
    pub fn new(interval: Duration, leadership: Arc<Leadership>, shutdown: Shutdown) -> Self {
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        LeaderTicks {
            ticker,
            leading: leadership.subscribe(),
            leadership,
            shutdown,
        }
    }

    /// Waits for the next tick at which this host leads; false once shutdown begins.
    pub async fn next(&mut self) -> bool {
        loop {
            tokio::select! {
                _ = self.ticker.tick() => {}
                Ok(()) = self.leading.changed() => {}
                _ = self.shutdown.reached(Stage::Graceful) => return false,
            }
            if self.leadership.is_leader() {
                return true;
            }
        }
    }
}

/// The elector service: takes and renews the leadership, or watches for its expiry.
pub struct Elector {
    pub store: SharedStore,
    pub owner: String,
    /// How long a leader's claim lasts without renewal.
    pub lease: Duration,
    pub leadership: Arc<Leadership>,
    pub shutdown: Shutdown,
}

impl Elector {
    /// One election round: take or renew the leadership if possible; returns whether this host
    /// leads. A database error drops the leadership (it cannot be renewed, so another host may
    /// already hold it by the time the database answers again).
    pub async fn run_once(&self) -> bool {
        let asked = Instant::now();
        match self.store.lead(MAINTENANCE, &self.owner, self.lease).await {
            Ok(leader) => {
                let leading = leader == self.owner;
                if leading != self.leadership.is_leader() {
                    if leading {
                        tracing::info!(host_id = %self.owner, "this host now leads maintenance");
                    } else {
                        tracing::info!(leader = %leader, "another host leads maintenance");
                    }
                }
                self.leadership
                    .set(Some(leader), leading.then_some(asked + self.lease));
                leading
            }
            Err(error) => {
                if self.leadership.is_leader() {
                    tracing::warn!(
                        "cannot renew the maintenance leadership ({error}); stepping down"
                    );
                }
                self.leadership.set(None, None);
                false
            }
        }
    }

    /// Elects every third of the lease until shutdown, then resigns if leading.
    pub async fn run(self) {
        let mut ticker = tokio::time::interval((self.lease / 3).max(Duration::from_millis(100)));
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticker.tick() => {}
                _ = self.shutdown.reached(Stage::Graceful) => break,
            }
            self.run_once().await;
        }
        if self.leadership.is_leader() {
            self.leadership.set(None, None);
            if let Err(error) = self.store.resign(MAINTENANCE, &self.owner).await {
                tracing::warn!(
                    "could not resign the maintenance leadership ({error}); another host takes over when the lease ends"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leader_whose_lease_ran_out_locally_stops_leading() {
        let leadership = Leadership::default();
        assert!(!leadership.is_leader());
        let lease = Duration::from_secs(30);
        leadership.set(Some("me".into()), Some(Instant::now() + lease));
        assert!(leadership.is_leader());
        // The latest election this host won asked a whole lease ago (a stalled elector): no
        // longer the leader, although no election said otherwise.
        let asked = Instant::now() - lease;
        leadership.set(Some("me".into()), Some(asked + lease));
        assert!(!leadership.is_leader());
        assert_eq!(leadership.leader().as_deref(), Some("me"));
        leadership.set(Some("other".into()), None);
        assert!(!leadership.is_leader());
    }
}
