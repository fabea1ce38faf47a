//! The host side of the handler world's `host` interface: what a guest can ask of Spool.
//!
//! The sandbox does not know the database: durable services go through [`TaskServices`],
//! which the worker implements on top of the store. An infrastructure failure there (the
//! database is away) traps the guest, so the attempt fails and is retried later instead of
//! carrying on with a wrong answer (for instance "this effect was never done"). So does a call
//! past one of the guest's limits, with a message naming the limit.
//!
//! Follow-up tasks are the manifest's to allow (`[enqueue]`, see
//! [`super::capabilities::EnqueueGrant`]): a type not on the allow list, a call past the
//! attempt's count or payload quota, a follow-up deeper than the chain may go (`max_depth`
//! generations below a task enqueued from outside), or an idempotency key too long is
//! answered with an error the guest sees; a priority outside the type's range is clamped into it; and a key the guest
//! chooses is stored as `guest:{its type}:{key}`, a namespace of its own, so that no guest can
//! take over an idempotency key that callers (or other types) use.

use async_trait::async_trait;
use std::sync::Arc;

use super::HostState;
use super::bindings::spool::task::host::{EnqueueOptions, Host, Level};
use super::capabilities::EnqueueGrant;
use super::output::TaskLog;
use super::text;
use spool_rules::names::MAX_IDEMPOTENCY_KEY;

/// The longest log line or progress note kept, so a single call cannot flood anything.
const MAX_MESSAGE_BYTES: usize = 4096;
/// The longest effect or key-value key.
const MAX_KEY_BYTES: usize = 1024;
/// The largest key-value value.
pub(super) const MAX_VALUE_BYTES: usize = 1 << 20;
/// The most `record-effect` calls one attempt may make.
pub const MAX_EFFECTS_PER_ATTEMPT: u32 = 1000;
/// The most calls one attempt may make that reach the database (`effect-done`,
/// `record-effect`, `kv-get`, `kv-set`, `kv-delete`, `enqueue`): each takes a connection, so a
/// guest looping on them would take the database from every other type's tasks. The fuel
/// budget does not bound them, since a guest burns little fuel while the host waits.
pub const MAX_DATABASE_CALLS_PER_ATTEMPT: u32 = 10_000;

/// A failure of a host service that the guest must not paper over.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// The database cannot be reached: the attempt fails and is retried later.
    #[error("{0}")]
    Unavailable(String),
    /// The call passed one of the task type's limits; the message names it.
    #[error("{0}")]
    Refused(String),
}

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
    /// One more than the parent's depth.
    pub depth: u32,
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
    /// How many `enqueue` calls this attempt made so far (for derived idempotency keys).
    enqueue_calls: u32,
    /// What the manifest lets this attempt enqueue, and what it used of that.
    enqueue: EnqueueGrant,
    enqueued_tasks: u32,
    enqueued_bytes: usize,
    effects_recorded: u32,
    /// The running task's depth: its follow-ups are one deeper.
    depth: u32,
    /// Calls that reached the database so far ([`MAX_DATABASE_CALLS_PER_ATTEMPT`]).
    database_calls: u32,
}

impl AttemptContext {
    pub(super) fn new(
        task_id: u64,
        task_type: String,
        services: Arc<dyn TaskServices>,
        log: TaskLog,
        enqueue: EnqueueGrant,
        depth: u32,
    ) -> Self {
        AttemptContext {
            task_id,
            task_type,
            services,
            log,
            enqueue_calls: 0,
            enqueue,
            enqueued_tasks: 0,
            enqueued_bytes: 0,
            effects_recorded: 0,
            depth,
            database_calls: 0,
        }
    }

    /// Counts a call that reaches the database; traps the attempt past the cap.
    fn database_call(&mut self, call: &str) -> wasmtime::Result<()> {
        if self.database_calls >= MAX_DATABASE_CALLS_PER_ATTEMPT {
            wasmtime::bail!(
                "`{call}` refused: this attempt already made {MAX_DATABASE_CALLS_PER_ATTEMPT} calls that reach the database (effects, key-value store, enqueue), the most one attempt may; do the work in fewer calls or split it into follow-up tasks"
            );
        }
        self.database_calls += 1;
        Ok(())
    }

    /// Checks a follow-up against the manifest's `[enqueue]` rules and applies them: the
    /// priority clamped into the type's range, a guest's key moved into its namespace.
    fn admit(
        &self,
        task_type: &str,
        payload: &str,
        options: &EnqueueOptions,
    ) -> Result<(Option<i32>, Option<String>), String> {
        let grant = &self.enqueue;
        let own = &self.task_type;
        if !grant.permits(task_type) {
            return Err(if grant.allow.is_empty() {
                format!(
                    "enqueue of task type `{task_type}` denied: task type `{own}` may enqueue no follow-ups (allow them in its manifest: [enqueue] allow = [\"{task_type}\"])"
                )
            } else {
                format!(
                    "enqueue of task type `{task_type}` denied: task type `{own}` may enqueue only {} ([enqueue] allow in its manifest)",
                    grant.allow.join(", ")
                )
            });
        }
        if self.depth >= grant.max_depth {
            return Err(format!(
                "enqueue denied: this task is {} follow-ups deep, the deepest a chain of follow-ups below a task enqueued from outside may go for `{own}` ([enqueue] max_depth = {})",
                self.depth, grant.max_depth
            ));
        }
        if self.enqueued_tasks >= grant.max_tasks {
            return Err(format!(
                "enqueue denied: this attempt already enqueued {} follow-ups, the most one attempt of `{own}` may ([enqueue] max_tasks)",
                self.enqueued_tasks
            ));
        }
        if self.enqueued_bytes.saturating_add(payload.len()) > grant.max_bytes {
            return Err(format!(
                "enqueue denied: a payload of {} bytes would take this attempt's follow-ups past {} bytes, the most one attempt of `{own}` may enqueue ([enqueue] max_bytes)",
                payload.len(),
                grant.max_bytes
            ));
        }
        let key = match &options.idempotency_key {
            Some(key) => {
                let key = guest_key(own, key);
                if key.chars().count() > MAX_IDEMPOTENCY_KEY {
                    return Err(format!(
                        "enqueue denied: the idempotency key is too long; keys a handler chooses are stored as `{}` and must fit {MAX_IDEMPOTENCY_KEY} characters",
                        guest_key(own, "KEY")
                    ));
                }
                Some(key)
            }
            None => None,
        };
        let priority = options
            .priority
            .map(|p| p.clamp(grant.min_priority, grant.max_priority));
        Ok((priority, key))
    }
}

/// Cleans guest text and cuts it to at most `MAX_MESSAGE_BYTES`.
fn bounded(text: String) -> String {
    text::clean(&text, MAX_MESSAGE_BYTES, text.len())
}

/// The idempotency key a follow-up gets for the key `key` a handler of `parent_type` chose.
pub fn guest_key(parent_type: &str, key: &str) -> String {
    format!("guest:{parent_type}:{key}")
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
    wasmtime::Error::msg(match error {
        ServiceError::Unavailable(error) => {
            format!("host service `{service}` failed: {error}; the attempt is retried later")
        }
        ServiceError::Refused(why) => format!("`{service}` refused: {why}"),
    })
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
        // One line in the host's log, whatever the guest wrote.
        let message = message.replace('\n', "\\n");
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
        self.task.database_call("effect-done")?;
        let ctx = &self.task;
        ctx.services
            .effect_done(&ctx.task_type, &key)
            .await
            .map_err(|e| trap("effect-done", e))
    }

    async fn record_effect(&mut self, key: String) -> wasmtime::Result<()> {
        check_key(&key)?;
        self.task.database_call("record-effect")?;
        let ctx = &mut self.task;
        if ctx.effects_recorded >= MAX_EFFECTS_PER_ATTEMPT {
            wasmtime::bail!(
                "`record-effect` refused: this attempt already recorded {MAX_EFFECTS_PER_ATTEMPT} effects, the most one attempt may"
            );
        }
        ctx.effects_recorded += 1;
        ctx.services
            .record_effect(&ctx.task_type, &key, ctx.task_id)
            .await
            .map_err(|e| trap("record-effect", e))
    }

    async fn kv_get(&mut self, key: String) -> wasmtime::Result<Option<String>> {
        check_key(&key)?;
        self.task.database_call("kv-get")?;
        let ctx = &self.task;
        ctx.services
            .kv_get(&ctx.task_type, &key)
            .await
            .map_err(|e| trap("kv-get", e))
    }

    async fn kv_set(&mut self, key: String, value: String) -> wasmtime::Result<()> {
        check_key(&key)?;
        self.task.database_call("kv-set")?;
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
        self.task.database_call("kv-delete")?;
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
        ctx.database_call("enqueue")?;
        let n = ctx.enqueue_calls;
        ctx.enqueue_calls += 1;
        let (priority, key) = match ctx.admit(&task_type, &payload, &options) {
            Ok(admitted) => admitted,
            Err(denied) => {
                ctx.log.line(&format!("[spool] {denied}"));
                return Ok(Err(denied));
            }
        };
        ctx.enqueued_tasks += 1;
        ctx.enqueued_bytes += payload.len();
        let follow_up = FollowUp {
            task_type,
            payload,
            priority,
            delay_seconds: options.delay_seconds,
            max_retry: options.max_retry,
            idempotency_key: key.unwrap_or_else(|| derived_key(&ctx.task_type, ctx.task_id, n)),
            depth: ctx.depth.saturating_add(1),
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
        let (kept, note) = cut.split_once('…').unwrap();
        assert!(
            kept.len() <= MAX_MESSAGE_BYTES && note.len() < 100,
            "{note}"
        );
        assert_eq!(bounded("short".into()), "short");
        assert_eq!(bounded("a\u{0}b".into()), "a\\u{0}b");
    }

    struct NoServices;

    #[async_trait]
    impl TaskServices for NoServices {
        fn progress(&self, _: u64, _: u8, _: String) {}
        async fn effect_done(&self, _: &str, _: &str) -> Result<bool, ServiceError> {
            Ok(false)
        }
        async fn record_effect(&self, _: &str, _: &str, _: u64) -> Result<(), ServiceError> {
            Ok(())
        }
        async fn kv_get(&self, _: &str, _: &str) -> Result<Option<String>, ServiceError> {
            Ok(None)
        }
        async fn kv_set(&self, _: &str, _: &str, _: &str) -> Result<(), ServiceError> {
            Ok(())
        }
        async fn kv_delete(&self, _: &str, _: &str) -> Result<bool, ServiceError> {
            Ok(false)
        }
        async fn enqueue(&self, _: FollowUp) -> Result<Result<u64, String>, ServiceError> {
            Ok(Ok(1))
        }
    }

    fn context(grant: EnqueueGrant) -> AttemptContext {
        AttemptContext::new(
            7,
            "fork".into(),
            Arc::new(NoServices),
            TaskLog::new(100),
            grant,
            0,
        )
    }

    fn options(priority: Option<i32>, key: Option<&str>) -> EnqueueOptions {
        EnqueueOptions {
            priority,
            delay_seconds: None,
            max_retry: None,
            idempotency_key: key.map(str::to_string),
        }
    }

    #[test]
    fn an_attempt_may_make_only_so_many_database_calls() {
        let mut ctx = context(EnqueueGrant::default());
        for _ in 0..MAX_DATABASE_CALLS_PER_ATTEMPT {
            ctx.database_call("kv-get").unwrap();
        }
        let refused = ctx.database_call("kv-set").unwrap_err().to_string();
        assert!(
            refused.starts_with("`kv-set` refused: this attempt already made 10000 calls"),
            "{refused}"
        );
    }

    #[test]
    fn follow_ups_are_denied_unless_allowed() {
        let ctx = context(EnqueueGrant::default());
        let denied = ctx.admit("notify", "{}", &options(None, None)).unwrap_err();
        assert!(denied.contains("may enqueue no follow-ups"), "{denied}");
        let ctx = context(EnqueueGrant {
            allow: vec!["notify".into()],
            ..EnqueueGrant::default()
        });
        assert!(ctx.admit("notify", "{}", &options(None, None)).is_ok());
        let denied = ctx.admit("fork", "{}", &options(None, None)).unwrap_err();
        assert!(denied.contains("may enqueue only notify"), "{denied}");
    }

    #[test]
    fn a_chain_of_follow_ups_ends_at_its_depth_limit() {
        let grant = EnqueueGrant {
            allow: vec!["fork".into()],
            max_depth: 3,
            ..EnqueueGrant::default()
        };
        let at_depth = |depth| AttemptContext {
            depth,
            ..context(grant.clone())
        };
        assert!(
            at_depth(0)
                .admit("fork", "{}", &options(None, None))
                .is_ok()
        );
        assert!(
            at_depth(2)
                .admit("fork", "{}", &options(None, None))
                .is_ok()
        );
        let denied = at_depth(3)
            .admit("fork", "{}", &options(None, None))
            .unwrap_err();
        assert!(
            denied.contains("3 follow-ups deep") && denied.contains("max_depth = 3"),
            "{denied}"
        );
    }

    #[test]
    fn follow_ups_have_quotas_a_priority_range_and_their_own_keys() {
        let mut ctx = context(EnqueueGrant {
            allow: vec!["notify".into()],
            max_tasks: 2,
            max_bytes: 10,
            max_depth: 1,
            min_priority: -5,
            max_priority: 5,
        });
        let (priority, key) = ctx
            .admit("notify", "{}", &options(Some(i32::MAX), Some("order-42")))
            .unwrap();
        assert_eq!(priority, Some(5));
        assert_eq!(key.as_deref(), Some("guest:fork:order-42"));
        assert_eq!(
            ctx.admit("notify", "{}", &options(Some(i32::MIN), None))
                .unwrap(),
            (Some(-5), None)
        );
        let too_big = ctx
            .admit("notify", "[1,2,3,4,5,6]", &options(None, None))
            .unwrap_err();
        assert!(too_big.contains("max_bytes"), "{too_big}");
        let long = "k".repeat(MAX_IDEMPOTENCY_KEY);
        let too_long = ctx
            .admit("notify", "{}", &options(None, Some(&long)))
            .unwrap_err();
        assert!(too_long.contains("guest:fork:KEY"), "{too_long}");
        ctx.enqueued_tasks = 2;
        let too_many = ctx.admit("notify", "{}", &options(None, None)).unwrap_err();
        assert!(too_many.contains("max_tasks"), "{too_many}");
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
