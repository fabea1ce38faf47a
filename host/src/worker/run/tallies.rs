//! This host's counts of how each build did ([`crate::plugins::tally`]): every attempt is
//! counted under its type, its build and the trial window it ran in. `GET /types` reads this
//! host's counts of the build each type serves now; the counts of deployed builds are also
//! written to the database every [`FLUSH_INTERVAL`] (and once more at shutdown), each host into
//! rows of its own, for the canary's verdict and `spool versions`. (A folder build's counts stay
//! here: it exists on this host only.)
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

/// One build's counts on this host, and whether they are written to the database.
#[derive(Default)]
struct Counts {
    tally: Tally,
    /// A deployed build's counts, written to the database.
    shared: bool,
    /// Changed since the last write.
    changed: bool,
}

/// The counts of this host since it started.
#[derive(Default)]
pub struct BuildTallies {
    counts: Mutex<HashMap<Key, Counts>>,
}

impl BuildTallies {
    /// Counts one attempt of `digest` for `task_type` in the trial window `window_ms`;
    /// `shared` for a deployed build, whose counts are written to the database.
    pub fn count(
        &self,
        task_type: &str,
        digest: &str,
        window_ms: i64,
        shared: bool,
        attempt: Counted,
    ) {
        let key = (task_type.to_string(), digest.to_string(), window_ms);
        let mut counts = self.counts.lock().expect("tallies lock");
        let entry = counts.entry(key).or_default();
        entry.tally.count(attempt);
        entry.shared |= shared;
        entry.changed = true;
    }

    /// This host's counts of `digest` for `task_type`, over every window (none before its
    /// first attempt here).
    pub fn on_this_host(&self, task_type: &str, digest: &str) -> Option<Tally> {
        let counts = self.counts.lock().expect("tallies lock");
        let mut sum: Option<Tally> = None;
        for ((kind, build, _), entry) in counts.iter() {
            if kind == task_type && build == digest {
                sum.get_or_insert_with(Tally::default).add(&entry.tally);
            }
        }
        sum
    }

    /// Writes the counts changed since the last write; on failure they are written next time.
    pub async fn flush(&self, store: &SharedStore, host_id: &str) {
        let rows: Vec<_> = {
            let mut counts = self.counts.lock().expect("tallies lock");
            counts
                .iter_mut()
                .filter(|(_, entry)| entry.shared && entry.changed)
                .map(|(key, entry)| {
                    entry.changed = false;
                    entry.tally.to_row(&key.0, &key.1, host_id, key.2)
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
                if let Some(entry) = counts.get_mut(&key) {
                    entry.changed = true;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(wall_ms: u64, failed: bool) -> Counted {
        Counted {
            failed,
            wall_ms,
            fuel: Some(10),
            memory: 1 << 20,
        }
    }

    #[test]
    fn this_hosts_counts_sum_the_windows_of_one_build() {
        let tallies = BuildTallies::default();
        tallies.count("report", "d1", 0, true, attempt(5, false));
        tallies.count("report", "d1", 7, true, attempt(9, true));
        tallies.count("report", "d2", 7, true, attempt(50, false));
        tallies.count("mail", "d1", 0, false, attempt(1, false));
        let d1 = tallies.on_this_host("report", "d1").unwrap();
        assert_eq!((d1.attempts, d1.failures, d1.wall_ms_total), (2, 1, 14));
        assert_eq!(tallies.on_this_host("report", "d2").unwrap().attempts, 1);
        assert_eq!(tallies.on_this_host("mail", "d1").unwrap().attempts, 1);
        assert!(tallies.on_this_host("mail", "d2").is_none());
    }

    #[test]
    fn only_deployed_builds_are_marked_for_the_database() {
        let tallies = BuildTallies::default();
        tallies.count("report", "deployed", 0, true, attempt(5, false));
        tallies.count("local", "folder", 0, false, attempt(5, false));
        let counts = tallies.counts.lock().unwrap();
        let written: Vec<&str> = counts
            .iter()
            .filter(|(_, entry)| entry.shared && entry.changed)
            .map(|((kind, _, _), _)| kind.as_str())
            .collect();
        assert_eq!(written, ["report"]);
    }
}
