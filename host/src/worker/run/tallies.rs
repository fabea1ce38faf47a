//! This host's counts of how each deployed build did ([`crate::plugins::tally`]): every attempt
//! of a deployed type is counted under its build and the trial window it ran in, and the
//! counts are written to the database every [`FLUSH_INTERVAL`] (and once more at shutdown),
//! each host into rows of its own, for the canary's verdict and `spool versions`.
//!
//! A host killed between two writes loses at most that interval's counts: a verdict is made on
//! at least `canary_min_attempts` attempts, so a few missing ones shift a share by little.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::plugins::tally::{Counted, Tally};
use crate::shutdown::{Shutdown, Stage};
use crate::store::SharedStore;

/// How often the counts are written.
pub const FLUSH_INTERVAL: Duration = Duration::from_secs(2);

/// (task type, build digest, window start in Unix ms).
type Key = (String, String, i64);

/// The counts of this host since it started.
#[derive(Default)]
pub struct BuildTallies {
    counts: Mutex<HashMap<Key, Tally>>,
    /// The keys counted since the last write.
    changed: Mutex<Vec<Key>>,
}

impl BuildTallies {
    /// Counts one attempt of `digest` for `task_type` in the trial window `window_ms`.
    pub fn count(&self, task_type: &str, digest: &str, window_ms: i64, attempt: Counted) {
        let key = (task_type.to_string(), digest.to_string(), window_ms);
        self.counts
            .lock()
            .expect("tallies lock")
            .entry(key.clone())
            .or_default()
            .count(attempt);
        self.changed.lock().expect("tallies lock").push(key);
    }

    /// Writes the counts changed since the last write; on failure they are written next time.
    pub async fn flush(&self, store: &SharedStore, host_id: &str) {
        let keys = std::mem::take(&mut *self.changed.lock().expect("tallies lock"));
        if keys.is_empty() {
            return;
        }
        let rows: Vec<_> = {
            let counts = self.counts.lock().expect("tallies lock");
            let mut keys = keys.clone();
            keys.sort();
            keys.dedup();
            keys.iter()
                .filter_map(|key| {
                    let tally = counts.get(key)?;
                    Some(tally.to_row(&key.0, &key.1, host_id, key.2))
                })
                .collect()
        };
        if let Err(error) = store.record_tallies(&rows).await {
            tracing::debug!("cannot write the build counts now ({error}); they are kept");
            self.changed.lock().expect("tallies lock").extend(keys);
        }
    }

    /// Writes every [`FLUSH_INTERVAL`] until the host stops, then once more.
    pub async fn run(self: Arc<Self>, store: SharedStore, host_id: String, shutdown: Shutdown) {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(FLUSH_INTERVAL) => {}
                _ = shutdown.reached(Stage::Immediate) => break,
            }
            self.flush(&store, &host_id).await;
        }
        self.flush(&store, &host_id).await;
    }
}
