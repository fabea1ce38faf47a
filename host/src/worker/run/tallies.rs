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

/// The counts of this host since it started, each marked when it changed since the last write.
#[derive(Default)]
pub struct BuildTallies {
    counts: Mutex<HashMap<Key, (Tally, bool)>>,
}

impl BuildTallies {
    /// Counts one attempt of `digest` for `task_type` in the trial window `window_ms`.
    pub fn count(&self, task_type: &str, digest: &str, window_ms: i64, attempt: Counted) {
        let key = (task_type.to_string(), digest.to_string(), window_ms);
        let mut counts = self.counts.lock().expect("tallies lock");
        let (tally, changed) = counts.entry(key).or_default();
        tally.count(attempt);
        *changed = true;
    }

    /// Writes the counts changed since the last write; on failure they are written next time.
    pub async fn flush(&self, store: &SharedStore, host_id: &str) {
        let rows: Vec<_> = {
            let mut counts = self.counts.lock().expect("tallies lock");
            counts
                .iter_mut()
                .filter(|(_, (_, changed))| *changed)
                .map(|(key, (tally, changed))| {
                    *changed = false;
                    tally.to_row(&key.0, &key.1, host_id, key.2)
                })
                .collect()
        };
        if rows.is_empty() {
            return;
        }
        if let Err(error) = store.record_tallies(&rows).await {
            tracing::debug!("cannot write the build counts now ({error}); they are kept");
            let mut counts = self.counts.lock().expect("tallies lock");
            for row in &rows {
                let key = (row.task_type.clone(), row.digest.clone(), row.window_ms);
                if let Some((_, changed)) = counts.get_mut(&key) {
                    *changed = true;
                }
            }
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
