//! The durable host services handlers call (effect ledger, key-value store, follow-up tasks),
//! implemented with the store, plus progress reports routed to the completer.

use async_trait::async_trait;
use chrono::Utc;
use std::sync::Arc;
use tokio::sync::Notify;

use super::completer::{Update, UpdateSender};
use crate::enqueue::{TaskRequest, prepare};
use crate::plugins::Registry;
use crate::plugins::policy::{DEFAULT_KV_MAX_BYTES, DEFAULT_KV_MAX_KEYS};
use crate::sandbox::{FollowUp, ServiceError, TaskServices};
use crate::store::{ProgressUpdate, SharedStore, StoreError};
use crate::task::NewTask;

/// [`TaskServices`] backed by the task database.
pub struct StoreServices {
    pub store: SharedStore,
    /// Follow-up tasks are group-committed with the API's enqueues.
    pub enqueuer: crate::enqueue::Enqueuer,
    pub registry: Arc<Registry>,
    pub updates: UpdateSender,
    pub wake: Arc<Notify>,
    pub max_payload_bytes: usize,
}

fn unavailable(error: StoreError) -> ServiceError {
    ServiceError::Unavailable(error.to_string())
}

#[async_trait]
impl TaskServices for StoreServices {
    fn progress(&self, task_id: u64, percent: u8, note: String) {
        // Progress is advisory: under extreme back-pressure a report may be dropped.
        let _ = self.updates.try_send(Update::Progress(ProgressUpdate {
            id: task_id as i64,
            percent,
            note,
        }));
    }

    async fn effect_done(&self, task_type: &str, key: &str) -> Result<bool, ServiceError> {
        self.store
            .effect_done(task_type, key)
            .await
            .map_err(unavailable)
    }

    async fn record_effect(
        &self,
        task_type: &str,
        key: &str,
        task_id: u64,
    ) -> Result<(), ServiceError> {
        self.store
            .record_effect(task_type, key, task_id as i64)
            .await
            .map_err(unavailable)
    }

    async fn kv_get(&self, task_type: &str, key: &str) -> Result<Option<String>, ServiceError> {
        self.store.kv_get(task_type, key).await.map_err(unavailable)
    }

    async fn kv_set(&self, task_type: &str, key: &str, value: &str) -> Result<(), ServiceError> {
        // The type's caps: checked before the write, against what the store holds now.
        // Attempts writing new keys at the same moment may pass a cap by one value each.
        let (max_keys, max_bytes) = self
            .registry
            .get(task_type)
            .map_or((DEFAULT_KV_MAX_KEYS, DEFAULT_KV_MAX_BYTES), |plugin| {
                (plugin.policy.kv_max_keys, plugin.policy.kv_max_bytes)
            });
        let usage = self.store.kv_usage(task_type).await.map_err(unavailable)?;
        let old = self
            .store
            .kv_get(task_type, key)
            .await
            .map_err(unavailable)?
            .map(|old| (key.len() + old.len()) as u64);
        let keys = usage.keys + u64::from(old.is_none());
        let bytes =
            (usage.bytes - old.unwrap_or(0).min(usage.bytes)) + (key.len() + value.len()) as u64;
        if keys > max_keys {
            return Err(ServiceError::Refused(format!(
                "task type `{task_type}` keeps {} keys in its key-value store, the most it may (kv.max_keys = {max_keys}); delete keys first, or raise the limit in its manifest",
                usage.keys
            )));
        }
        if bytes > max_bytes && bytes > usage.bytes {
            return Err(ServiceError::Refused(format!(
                "this value would take task type `{task_type}`'s key-value store to {bytes} bytes, past its limit of {max_bytes} (kv.max_bytes); delete keys first, or raise the limit in its manifest"
            )));
        }
        self.store
            .kv_set(task_type, key, value)
            .await
            .map_err(unavailable)
    }

    async fn kv_delete(&self, task_type: &str, key: &str) -> Result<bool, ServiceError> {
        self.store
            .kv_delete(task_type, key)
            .await
            .map_err(unavailable)
    }

    async fn enqueue(&self, follow_up: FollowUp) -> Result<Result<u64, String>, ServiceError> {
        let delay = chrono::Duration::seconds(i64::from(follow_up.delay_seconds.unwrap_or(0)));
        let request = TaskRequest {
            task_type: follow_up.task_type,
            payload: follow_up.payload,
            priority: follow_up.priority,
            max_retry: follow_up.max_retry,
            run_at: Utc::now() + delay,
            idempotency_key: Some(follow_up.idempotency_key),
        };
        let task = match prepare(request, &self.registry, self.max_payload_bytes) {
            Ok(task) => NewTask {
                depth: follow_up.depth,
                ..task
            },
            Err(reason) => return Ok(Err(reason.to_string())),
        };
        let enqueued = self
            .enqueuer
            .enqueue(vec![task])
            .await
            .map_err(|error| ServiceError::Unavailable(error.to_string()))?
            .pop()
            .expect("one result per task");
        if !enqueued.duplicate {
            self.wake.notify_one();
        }
        Ok(Ok(enqueued.task.id as u64))
    }
}
