//! The task types paused on this database, as this host knows them: the dispatcher leaves them
//! out of its claims, so their tasks stay pending while every other type keeps flowing.
//!
//! The store's paused-type table is the truth every host shares. The dispatcher re-reads it at
//! most once per poll interval ([`PausedTypes::refresh_if_stale`]), so a pause or resume made on
//! another host takes effect here within about one poll interval; one made through this host's
//! API applies here at once ([`PausedTypes::set`]). A read that started before a local change
//! never overwrites it (a generation counter tells).

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::store::Store;

/// The paused task types as last read, and when.
#[derive(Debug, Default)]
pub struct PausedTypes {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    types: BTreeSet<String>,
    /// When the set was last read from the store (None: never).
    refreshed: Option<Instant>,
    /// Bumped by every local change: a read that began before it is dropped.
    generation: u64,
}

impl PausedTypes {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Whether `task_type` is paused.
    pub fn contains(&self, task_type: &str) -> bool {
        self.lock().types.contains(task_type)
    }

    /// Every paused type, by name.
    pub fn all(&self) -> Vec<String> {
        self.lock().types.iter().cloned().collect()
    }

    /// Records a pause or resume made through this host (already written to the store).
    pub fn set(&self, task_type: &str, paused: bool) {
        let mut state = self.lock();
        state.generation += 1;
        if paused {
            state.types.insert(task_type.to_string());
        } else {
            state.types.remove(task_type);
        }
    }

    /// Re-reads the paused types from the store when the last read is older than `every`.
    /// A failed read keeps the set as it was (and is tried again next time).
    pub async fn refresh_if_stale(&self, store: &dyn Store, every: Duration) {
        let generation = {
            let state = self.lock();
            if state.refreshed.is_some_and(|at| at.elapsed() < every) {
                return;
            }
            state.generation
        };
        match store.paused_types().await {
            Ok(paused) => {
                let mut state = self.lock();
                state.refreshed = Some(Instant::now());
                if state.generation == generation {
                    let types: BTreeSet<String> = paused.into_iter().map(|p| p.task_type).collect();
                    if types != state.types {
                        tracing::info!(paused = ?types, "paused task types changed");
                    }
                    state.types = types;
                }
            }
            Err(error) => {
                tracing::debug!("reading the paused task types failed: {error}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_changes_apply_at_once() {
        let paused = PausedTypes::default();
        assert!(!paused.contains("mail"));
        paused.set("mail", true);
        assert!(paused.contains("mail"));
        assert_eq!(paused.all(), ["mail"]);
        paused.set("mail", false);
        assert!(!paused.contains("mail"));
        assert!(paused.all().is_empty());
    }
}
