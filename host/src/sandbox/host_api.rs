//! The host side of the handler world's `host` interface: what a guest can ask of Spool.
//!
//! The sandbox does not know the database: durable services go through [`TaskServices`],
//! which the worker implements on top of the store. An infrastructure failure there (the
//! database is away) traps the guest, so the attempt fails and is retried later instead of
//! carrying on with a wrong answer (for instance "this effect was never done").

use async_trait::async_trait;
use std::sync::Arc;

use super::HostState;
use super::bindings::spool::task::host::{EnqueueOptions, Host, Level};
use super::output::TaskLog;

/// The longest log line or progress note kept, so a single call cannot flood anything.
const MAX_MESSAGE_BYTES: usize = 4096;
/// The longest effect or key-value key.
const MAX_KEY_BYTES: usize = 1024;
/// The largest key-value value.
const MAX_VALUE_BYTES: usize = 1 << 20;

/// A failure of a host service that the guest must not paper over.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ServiceError(pub String);

/// A follow-up task a handler asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct FollowUp {
    pub task_type: String,
    pub payload: String,
    pub priority: Option<i32>,
    pub delay_seconds: Option<u32>,
    pub max_retry: Option<u32>,
    /// Always set: the guest's key, or one derived from the parent.
    pub idempotency_key: String,
}

/// Durable services behind the host imports; the worker implements them with the store.
#[async_trait]
pub trait TaskServices: Send + Sync {
    /// The handler reported progress (`percent` already clamped to 0–100).
    fn progress(&self, task_id: u64, percent: u8, note: String);
    async fn effect_done(&self, task_type: &str, key: &str) -> Result<bool, ServiceError>;
    async fn record_effect(
        &self,
        task_type: &str,
        key: &str,
        task_id: u64,
    ) -> Result<(), ServiceError>;
    async fn kv_get(&self, task_type: &str, key: &str) -> Result<Option<String>, ServiceError>;
    async fn kv_set(&self, task_type: &str, key: &str, value: &str) -> Result<(), ServiceError>;
    async fn kv_delete(&self, task_type: &str, key: &str) -> Result<bool, ServiceError>;
    /// Enqueues a follow-up. The outer error traps the guest; the inner one (unknown task
    /// type, invalid payload) is returned to it.
    async fn enqueue(&self, follow_up: FollowUp) -> Result<Result<u64, String>, ServiceError>;
}

/// Identifies the attempt a guest's host calls belong to.
pub(super) struct AttemptContext {
    task_id: u64,
    task_type: String,
    services: Arc<dyn TaskServices>,
    log: TaskLog,
    /// How many follow-ups this attempt enqueued so far (for derived idempotency keys).
    enqueued: u32,
}

impl AttemptContext {
    pub(super) fn new(
        task_id: u64,
        task_type: String,
        services: Arc<dyn TaskServices>,
        log: TaskLog,
    ) -> Self {
        AttemptContext {
            task_id,
            task_type,
            services,
            log,
            enqueued: 0,
        }
    }
}

/// Cuts `text` to at most `MAX_MESSAGE_BYTES` on a character boundary.
fn bounded(mut text: String) -> String {
    if text.len() > MAX_MESSAGE_BYTES {
        let mut end = MAX_MESSAGE_BYTES;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

fn check_key(key: &str) -> wasmtime::Result<()> {
    if key.is_empty() || key.len() > MAX_KEY_BYTES {
        wasmtime::bail!(
            "key of {} bytes rejected: keys must be 1 to {MAX_KEY_BYTES} bytes",
            key.len()
        );
    }
    Ok(())
}

fn trap(service: &str, error: ServiceError) -> wasmtime::Error {
    wasmtime::Error::msg(format!(
        "host service `{service}` failed: {error}; the attempt is retried later"
    ))
}

/// The idempotency key of the `n`-th follow-up of a task: the same on every attempt, so a
/// retried parent that enqueues the same follow-ups in the same order creates each once.
pub fn derived_key(parent_type: &str, parent_id: u64, n: u32) -> String {
    format!("spool:follow-up:{parent_type}:{parent_id}:{n}")
}

impl Host for HostState {
    async fn log(&mut self, level: Level, message: String) -> wasmtime::Result<()> {
        let ctx = &self.task;
        let message = bounded(message);
        let (id, task_type) = (ctx.task_id, ctx.task_type.as_str());
        let name = match level {
            Level::Trace => "trace",
            Level::Debug => "debug",
            Level::Info => "info",
            Level::Warn => "warn",
            Level::Error => "error",
        };
        ctx.log.line(&format!("[{name}] {message}"));
        match level {
            Level::Trace => tracing::trace!(task_id = id, task_type, "{message}"),
            Level::Debug => tracing::debug!(task_id = id, task_type, "{message}"),
            Level::Info => tracing::info!(task_id = id, task_type, "{message}"),
            Level::Warn => tracing::warn!(task_id = id, task_type, "{message}"),
            Level::Error => tracing::error!(task_id = id, task_type, "{message}"),
        }
        Ok(())
    }

    async fn progress(&mut self, percent: u8, note: String) -> wasmtime::Result<()> {
        let ctx = &self.task;
        ctx.services
            .progress(ctx.task_id, percent.min(100), bounded(note));
        Ok(())
    }

    async fn effect_done(&mut self, key: String) -> wasmtime::Result<bool> {
        check_key(&key)?;
        let ctx = &self.task;
        ctx.services
            .effect_done(&ctx.task_type, &key)
            .await
            .map_err(|e| trap("effect-done", e))
    }

    async fn record_effect(&mut self, key: String) -> wasmtime::Result<()> {
        check_key(&key)?;
        let ctx = &self.task;
        ctx.services
            .record_effect(&ctx.task_type, &key, ctx.task_id)
            .await
            .map_err(|e| trap("record-effect", e))
    }

    async fn kv_get(&mut self, key: String) -> wasmtime::Result<Option<String>> {
        check_key(&key)?;
        let ctx = &self.task;
        ctx.services
            .kv_get(&ctx.task_type, &key)
            .await
            .map_err(|e| trap("kv-get", e))
    }

    async fn kv_set(&mut self, key: String, value: String) -> wasmtime::Result<()> {
        check_key(&key)?;
        if value.len() > MAX_VALUE_BYTES {
            wasmtime::bail!(
                "kv-set of {} bytes rejected: values are at most {MAX_VALUE_BYTES} bytes",
                value.len()
            );
        }
        let ctx = &self.task;
        ctx.services
            .kv_set(&ctx.task_type, &key, &value)
            .await
            .map_err(|e| trap("kv-set", e))
    }

    async fn kv_delete(&mut self, key: String) -> wasmtime::Result<bool> {
        check_key(&key)?;
        let ctx = &self.task;
        ctx.services
            .kv_delete(&ctx.task_type, &key)
            .await
            .map_err(|e| trap("kv-delete", e))
    }

    async fn enqueue(
        &mut self,
        task_type: String,
        payload: String,
        options: EnqueueOptions,
    ) -> wasmtime::Result<Result<u64, String>> {
        let ctx = &mut self.task;
        let n = ctx.enqueued;
        ctx.enqueued += 1;
        let idempotency_key = options
            .idempotency_key
            .unwrap_or_else(|| derived_key(&ctx.task_type, ctx.task_id, n));
        let follow_up = FollowUp {
            task_type,
            payload,
            priority: options.priority,
            delay_seconds: options.delay_seconds,
            max_retry: options.max_retry,
            idempotency_key,
        };
        ctx.services
            .enqueue(follow_up)
            .await
            .map_err(|e| trap("enqueue", e))
    }
}

impl super::bindings::spool::task::types::Host for HostState {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_messages_are_cut_on_a_char_boundary() {
        let long = "é".repeat(MAX_MESSAGE_BYTES);
        let cut = bounded(long);
        assert!(cut.len() <= MAX_MESSAGE_BYTES + '…'.len_utf8());
        assert!(cut.ends_with('…'));
        assert_eq!(bounded("short".into()), "short");
    }

    #[test]
    fn derived_keys_depend_on_parent_and_position_only() {
        assert_eq!(derived_key("fanout", 7, 0), derived_key("fanout", 7, 0));
        assert_ne!(derived_key("fanout", 7, 0), derived_key("fanout", 7, 1));
        assert_ne!(derived_key("fanout", 7, 0), derived_key("fanout", 8, 0));
    }

    #[test]
    fn keys_are_bounded() {
        assert!(check_key("ok").is_ok());
        assert!(check_key("").is_err());
        assert!(check_key(&"k".repeat(MAX_KEY_BYTES + 1)).is_err());
    }
}
