//! Whether this host's database answers, as a ping on a short timer last found, so requests
//! that only need to know (`GET /health`, and enqueues while it is away) answer at once instead
//! of each waiting out the pool's acquire timeout.
//!
//! While the database answers, the watch pings it every [`WHILE_UP`]; a ping that fails or
//! takes longer than [`PING_TIMEOUT`] starts an outage, and while one lasts the watch pings
//! every [`WHILE_AWAY`], so the host sees the database back within a fraction of a second.
//! Requests that do reach the database during the first second of an outage still wait as
//! before; every one after that is told at once.

use chrono::{DateTime, Utc};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::shutdown::{Shutdown, Stage};
use crate::store::{SharedStore, StoreError};

/// How often the database is pinged while it answers.
pub const WHILE_UP: Duration = Duration::from_secs(1);
/// How often the database is pinged while it is away.
pub const WHILE_AWAY: Duration = Duration::from_millis(250);
/// A ping slower than this counts as no answer.
pub const PING_TIMEOUT: Duration = Duration::from_secs(2);

/// An outage as this host sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Outage {
    /// When the first failed ping was sent.
    pub since: DateTime<Utc>,
    /// The last ping's error (for the host's log, not for API responses).
    pub why: String,
}

/// The database's state as the last ping found it; shared by the API and the watch.
#[derive(Debug, Default)]
pub struct DatabaseState {
    outage: Mutex<Option<Outage>>,
}

impl DatabaseState {
    /// The outage under way, if any.
    pub fn outage(&self) -> Option<Outage> {
        self.lock().clone()
    }

    /// Fails at once with [`StoreError::Unavailable`] while the database is away.
    pub fn check(&self) -> Result<(), StoreError> {
        match self.outage() {
            None => Ok(()),
            Some(outage) => Err(StoreError::Unavailable(format!(
                "the task database has not answered since {} ({})",
                outage
                    .since
                    .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
                outage.why
            ))),
        }
    }

    /// Records a ping's result (sent at `sent`); returns whether the state changed.
    pub fn record(&self, sent: DateTime<Utc>, result: Result<(), String>) -> bool {
        let mut outage = self.lock();
        match (result, outage.as_mut()) {
            (Ok(()), None) => false,
            (Ok(()), Some(_)) => {
                *outage = None;
                true
            }
            (Err(why), Some(current)) => {
                current.why = why;
                false
            }
            (Err(why), None) => {
                *outage = Some(Outage { since: sent, why });
                true
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Outage>> {
        self.outage.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The service that pings the database and keeps [`DatabaseState`].
pub struct DatabaseWatch {
    pub store: SharedStore,
    pub state: Arc<DatabaseState>,
    pub shutdown: Shutdown,
}

impl DatabaseWatch {
    pub async fn run(self) {
        loop {
            let sent = Utc::now();
            let answer = match tokio::time::timeout(PING_TIMEOUT, self.store.ping()).await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(error)) => Err(error.to_string()),
                Err(_) => Err(format!("no answer within {PING_TIMEOUT:?}")),
            };
            let answered = answer.is_ok();
            if self.state.record(sent, answer) {
                match self.state.outage() {
                    Some(outage) => tracing::warn!(
                        "the task database does not answer ({}); health checks and enqueues \
                         answer 503 at once until it does",
                        outage.why
                    ),
                    None => tracing::info!("the task database answers again"),
                }
            }
            let pause = if answered { WHILE_UP } else { WHILE_AWAY };
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = self.shutdown.reached(Stage::Graceful) => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outage_starts_at_the_first_failed_ping_and_ends_at_the_first_answer() {
        let state = DatabaseState::default();
        let t = |s: i64| DateTime::from_timestamp(s, 0).unwrap();
        assert!(state.check().is_ok());
        assert!(!state.record(t(1), Ok(())));
        assert!(state.record(t(2), Err("refused".into())));
        assert!(!state.record(t(3), Err("timed out".into())));
        let outage = state.outage().unwrap();
        assert_eq!((outage.since, outage.why.as_str()), (t(2), "timed out"));
        assert!(matches!(state.check(), Err(StoreError::Unavailable(_))));
        assert!(state.record(t(4), Ok(())));
        assert_eq!(state.outage(), None);
    }
}
