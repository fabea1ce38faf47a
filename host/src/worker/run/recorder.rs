//! Keeping attempt records ([`crate::sandbox::tape`]) for `spool replay`: which attempts keep
//! one (the type's `record` mode), what a record holds besides the tape's calls (task, payload,
//! environment, outcome), and the build's bytes, stored once per build in `spool_build` so a
//! replay can fetch the very build that ran even after the plugin folder moved on.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use crate::plugins::Plugin;
use crate::plugins::policy::RecordMode;
use crate::plugins::registry::Source;
use crate::sandbox::tape::{RECORD_FORMAT, REDACTED, RecordedLimits, Recording, Tape};
use crate::sandbox::{RunLimits, TaskInfo};
use crate::store::SharedStore;
use crate::store::history::Outcome;
use crate::store::records::NewRecord;

/// Writes the records of this host's attempts.
pub struct Recorder {
    store: SharedStore,
    /// Folder builds whose bytes this host already stored.
    stored_builds: Mutex<HashSet<String>>,
}

/// One finished attempt, as the record needs it.
pub struct Ended<'a> {
    pub info: &'a TaskInfo,
    pub payload: &'a str,
    pub outcome: Outcome,
    /// The attempt's own result and error ([`crate::task::AttemptOutcome::result_and_error`]).
    pub result: Option<String>,
    pub error: Option<String>,
    pub fuel_used: Option<u64>,
    pub limits: &'a RunLimits,
}

impl Recorder {
    pub fn new(store: SharedStore) -> Self {
        Recorder {
            store,
            stored_builds: Mutex::default(),
        }
    }

    /// A tape for the next attempt of `plugin`'s type, if its manifest records any.
    pub fn tape_for(plugin: &Plugin) -> Option<Arc<Tape>> {
        (plugin.policy.record != RecordMode::None)
            .then(|| Tape::recording(plugin.policy.record_max, secret_values(plugin)))
    }

    /// The record of an attempt that ran with `tape`, if the type's mode keeps it, for its
    /// completion to carry ([`crate::store::records`]); the build's bytes are stored first.
    pub async fn record(
        &self,
        plugin: &Plugin,
        tape: &Tape,
        ended: Ended<'_>,
    ) -> Option<Box<NewRecord>> {
        let keep = match plugin.policy.record {
            RecordMode::All => true,
            RecordMode::Failed => ended.outcome != Outcome::Done,
            RecordMode::None => false,
        };
        if !keep {
            return None;
        }
        let (calls, truncated) = tape.calls();
        let info = ended.info;
        let recording = Recording {
            format: RECORD_FORMAT,
            build: plugin.version.clone(),
            task: info.clone(),
            payload: ended.payload.to_string(),
            limits: RecordedLimits {
                fuel: ended.limits.fuel,
                timeout_ms: u64::try_from(ended.limits.timeout.as_millis()).unwrap_or(u64::MAX),
                memory_bytes: ended.limits.memory_bytes,
                max_result_bytes: ended.limits.max_result_bytes,
                log_bytes: ended.limits.log_bytes,
            },
            env: plugin
                .policy
                .capabilities
                .env
                .iter()
                .map(|(name, value)| {
                    let secret = plugin.policy.record_secrets.contains(name);
                    let kept = if secret { REDACTED } else { value };
                    (name.clone(), kept.to_string())
                })
                .collect(),
            insecure_seed: tape.insecure_seed().to_string(),
            calls,
            truncated,
            outcome: ended.outcome.as_str().to_string(),
            result: ended.result,
            error: ended.error,
            fuel_used: ended.fuel_used,
        };
        let json = match serde_json::to_string(&recording) {
            Ok(json) => json,
            Err(error) => {
                tracing::warn!(
                    task_id = info.id,
                    "cannot encode the attempt record: {error}"
                );
                return None;
            }
        };
        self.store_build(plugin).await;
        Some(Box::new(NewRecord {
            build: plugin.version.clone(),
            json,
            truncated,
        }))
    }

    /// Stores a folder build's bytes once (a deployed build's are stored already), if the file
    /// still holds the build that ran.
    async fn store_build(&self, plugin: &Plugin) {
        if matches!(plugin.source, Source::Deployment { .. })
            || self
                .stored_builds
                .lock()
                .expect("recorder lock")
                .contains(&plugin.version)
        {
            return;
        }
        let Ok(bytes) = tokio::fs::read(&plugin.path).await else {
            return;
        };
        use sha2::{Digest, Sha256};
        if hex::encode(Sha256::digest(&bytes)) != plugin.version {
            return;
        }
        match self.store.store_build(&plugin.version, &bytes).await {
            Ok(()) => {
                self.stored_builds
                    .lock()
                    .expect("recorder lock")
                    .insert(plugin.version.clone());
            }
            Err(error) => tracing::warn!(
                task_type = %plugin.task_type,
                "the build of a recorded attempt was not stored: {error}"
            ),
        }
    }
}

/// The values of the type's secret `[env]` variables, which its records redact.
fn secret_values(plugin: &Plugin) -> Vec<String> {
    plugin
        .policy
        .capabilities
        .env
        .iter()
        .filter(|(name, _)| plugin.policy.record_secrets.contains(name))
        .map(|(_, value)| value.clone())
        .collect()
}
