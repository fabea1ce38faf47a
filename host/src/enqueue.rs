//! Validation and defaults for new tasks, shared by the HTTP API and the follow-up tasks
//! handlers enqueue: one place decides what a valid task is.

use chrono::{DateTime, Utc};

use spool_rules::limits::MAX_RETRY;
use spool_rules::names::{
    MAX_IDEMPOTENCY_KEY, RESERVED_KEY_PREFIX, is_reserved_key, is_valid_idempotency_key,
    is_valid_task_type,
};

use crate::plugins::Registry;
use crate::task::NewTask;

/// A task as a caller describes it, before defaults.
#[derive(Debug, Clone)]
pub struct TaskRequest {
    pub task_type: String,
    /// JSON text.
    pub payload: String,
    pub priority: Option<i32>,
    pub max_retry: Option<u32>,
    pub run_at: DateTime<Utc>,
    pub idempotency_key: Option<String>,
}

/// Why a task cannot be enqueued.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RejectReason {
    #[error(
        "task_type `{0}` is not a task type name (letters, digits, `_` or `-`, at most 64 characters)"
    )]
    BadTaskType(String),
    #[error("no plugin handles task type `{task_type}`; known task types: {}", if known.is_empty() { "none: add NAME.wasm to the plugin folder".to_string() } else { known.join(", ") })]
    UnknownTaskType {
        task_type: String,
        known: Vec<String>,
    },
    #[error(
        "the payload is {size} bytes; this host accepts at most {limit} (max_payload): store large data elsewhere and pass a reference"
    )]
    PayloadTooLarge { size: usize, limit: usize },
    #[error("the payload is not valid JSON: {0}")]
    PayloadNotJson(String),
    #[error("the payload cannot be stored: {0}")]
    PayloadNotStorable(spool_rules::json::JsonProblem),
    #[error(
        "idempotency_key must be 1 to {MAX_IDEMPOTENCY_KEY} characters, without control characters"
    )]
    BadIdempotencyKey,
    #[error("max_retry {0} is out of range: {shown}", shown = MAX_RETRY.shown)]
    MaxRetryOutOfRange(u32),
    #[error(
        "idempotency_key {0:?}: keys starting with `{RESERVED_KEY_PREFIX}` are reserved for the keys the host makes (scheduled ticks, follow-up tasks); choose another key"
    )]
    ReservedKey(String),
    #[error(
        "payload is a JSON string that starts with {{ or [, a JSON document encoded twice; send the object or array itself: \"payload\": {{\"k\": 1}}, not \"payload\": \"{{\\\"k\\\": 1}}\""
    )]
    DoubleEncoded,
    #[error("give either run_at or delay, not both")]
    RunAtAndDelay,
    #[error("run_at {0} is out of range: at most 9999-12-31T23:59:59Z")]
    RunAtOutOfRange(DateTime<Utc>),
}

/// What a string payload may not look like: JSON whitespace, then `{` or `[` (the OpenAPI
/// description gives it as the payload's `not`).
pub const DOUBLE_ENCODED_PATTERN: &str = "^[ \t\r\n]*[\\[{]";

/// Refuses a payload that is a JSON string starting with `{` or `[`: a document encoded
/// twice (or a broken one), which the handler would receive as a quoted string.
pub fn check_not_double_encoded(payload: &serde_json::Value) -> Result<(), RejectReason> {
    let serde_json::Value::String(text) = payload else {
        return Ok(());
    };
    let inner = text.trim_start_matches([' ', '\t', '\r', '\n']);
    if inner.starts_with('{') || inner.starts_with('[') {
        return Err(RejectReason::DoubleEncoded);
    }
    Ok(())
}

/// Refuses a key an application chose that is one of the host's own (see
/// [`spool_rules::names::RESERVED_KEY_PREFIX`]): only schedules and follow-ups make those.
pub fn check_caller_key(key: Option<&str>) -> Result<(), RejectReason> {
    match key {
        Some(key) if is_reserved_key(key) => Err(RejectReason::ReservedKey(key.to_string())),
        _ => Ok(()),
    }
}

/// When a task asked for with `run_at` or `delay` (at most one of them) is due, from `now`. A
/// time long ago is simply due (and every database can store the epoch); the latest is the end
/// of year 9999, the last an RFC 3339 time can name.
pub fn due_at(
    run_at: Option<DateTime<Utc>>,
    delay: Option<std::time::Duration>,
    now: DateTime<Utc>,
) -> Result<DateTime<Utc>, RejectReason> {
    let latest = DateTime::parse_from_rfc3339("9999-12-31T23:59:59.999999999Z")
        .expect("a valid time")
        .to_utc();
    match (run_at, delay) {
        (Some(_), Some(_)) => Err(RejectReason::RunAtAndDelay),
        (Some(at), None) if at > latest => Err(RejectReason::RunAtOutOfRange(at)),
        (Some(at), None) => Ok(at.max(DateTime::UNIX_EPOCH)),
        (None, Some(delay)) => Ok(now + crate::task::chrono_duration(delay)),
        (None, None) => Ok(now),
    }
}

/// Checks a request against the registered task types and limits, and applies the type's
/// policy defaults (priority, max_retry).
pub fn prepare(
    request: TaskRequest,
    registry: &Registry,
    max_payload: usize,
) -> Result<NewTask, RejectReason> {
    if !is_valid_task_type(&request.task_type) {
        return Err(RejectReason::BadTaskType(request.task_type));
    }
    let Some(plugin) = registry.get(&request.task_type) else {
        return Err(RejectReason::UnknownTaskType {
            task_type: request.task_type,
            known: registry.task_types(),
        });
    };
    if request.payload.len() > max_payload {
        return Err(RejectReason::PayloadTooLarge {
            size: request.payload.len(),
            limit: max_payload,
        });
    }
    if let Err(error) = serde_json::from_str::<serde::de::IgnoredAny>(&request.payload) {
        return Err(RejectReason::PayloadNotJson(error.to_string()));
    }
    if let Err(problem) = spool_rules::json::storable_json(&request.payload) {
        return Err(RejectReason::PayloadNotStorable(problem));
    }
    if let Some(key) = &request.idempotency_key
        && !is_valid_idempotency_key(key)
    {
        return Err(RejectReason::BadIdempotencyKey);
    }
    if let Some(max_retry) = request.max_retry.filter(|m| !MAX_RETRY.contains(m)) {
        return Err(RejectReason::MaxRetryOutOfRange(max_retry));
    }
    Ok(NewTask {
        task_type: request.task_type,
        payload: request.payload,
        priority: request.priority.unwrap_or(plugin.policy.priority),
        max_retry: request.max_retry.unwrap_or(plugin.policy.max_retry),
        run_at: request.run_at,
        idempotency_key: request.idempotency_key,
        depth: 0,
    })
}

/// Group commit for enqueues: requests that arrive while a write is in flight are inserted
/// together in the next transaction, so many concurrent single-task requests cost one commit
/// instead of one each. Each request still gets exactly its own rows back, and none is ever
/// half-written. A group the database refuses for a reason waiting cannot fix (a row it will
/// not store) is split: each request is tried alone, so only the request with that row fails.
/// A group that fails for a transient reason (the database away) fails every request in it.
#[derive(Clone)]
pub struct Enqueuer {
    sender: tokio::sync::mpsc::Sender<EnqueueRequest>,
}

struct EnqueueRequest {
    tasks: Vec<NewTask>,
    reply: tokio::sync::oneshot::Sender<
        Result<Vec<crate::task::Enqueued>, std::sync::Arc<crate::store::StoreError>>,
    >,
}

/// Most requests gathered into one transaction.
const GROUP: usize = 512;

impl Enqueuer {
    /// Starts the writer task; it ends when the last clone of the returned handle is dropped.
    pub fn start(store: crate::store::SharedStore) -> Enqueuer {
        let (sender, mut receiver) = tokio::sync::mpsc::channel::<EnqueueRequest>(GROUP * 4);
        tokio::spawn(async move {
            let mut requests = Vec::with_capacity(GROUP);
            while receiver.recv_many(&mut requests, GROUP).await > 0 {
                let sizes: Vec<usize> = requests.iter().map(|r| r.tasks.len()).collect();
                // A group of several requests keeps each one's tasks, so that a refused group
                // can be split and nobody fails for a neighbour's row.
                let kept: Option<Vec<Vec<NewTask>>> = (requests.len() > 1)
                    .then(|| requests.iter().map(|r| r.tasks.clone()).collect());
                let all: Vec<NewTask> = requests
                    .iter_mut()
                    .flat_map(|r| std::mem::take(&mut r.tasks))
                    .collect();
                match (store.enqueue(all).await, kept) {
                    (Ok(enqueued), _) => {
                        let mut rest = enqueued.into_iter();
                        for (request, size) in requests.drain(..).zip(sizes) {
                            let _ = request.reply.send(Ok(rest.by_ref().take(size).collect()));
                        }
                    }
                    (Err(error), Some(kept)) if !error.is_transient() => {
                        tracing::warn!(
                            requests = kept.len(),
                            "the database refused a group of enqueues ({error}); each request \
                             is tried alone"
                        );
                        for (request, tasks) in requests.drain(..).zip(kept) {
                            let alone = store.enqueue(tasks).await.map_err(std::sync::Arc::new);
                            let _ = request.reply.send(alone);
                        }
                    }
                    (Err(error), _) => {
                        let error = std::sync::Arc::new(error);
                        for request in requests.drain(..) {
                            let _ = request.reply.send(Err(error.clone()));
                        }
                    }
                }
            }
        });
        Enqueuer { sender }
    }

    /// Inserts tasks (in one transaction with whatever else is being enqueued right now).
    pub async fn enqueue(
        &self,
        tasks: Vec<NewTask>,
    ) -> Result<Vec<crate::task::Enqueued>, std::sync::Arc<crate::store::StoreError>> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let closed = || std::sync::Arc::new(crate::store::StoreError::Closed);
        self.sender
            .send(EnqueueRequest { tasks, reply })
            .await
            .map_err(|_| closed())?;
        answer.await.map_err(|_| closed())?
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;

    fn task(payload: &str) -> NewTask {
        NewTask {
            task_type: "t".into(),
            payload: payload.into(),
            priority: 0,
            max_retry: 0,
            run_at: Utc::now(),
            idempotency_key: None,
            depth: 0,
        }
    }

    #[tokio::test]
    async fn a_row_the_database_refuses_fails_only_its_own_request() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spool.db");
        let store = crate::store::open(&format!("sqlite://{}", path.display()))
            .await
            .unwrap();
        // The database refuses one payload, as MySQL refuses JSON it cannot store.
        rusqlite::Connection::open(&path)
            .unwrap()
            .execute_batch(
                "CREATE TRIGGER refuse_poison BEFORE INSERT ON async_task \
                 WHEN NEW.payload LIKE '%poison%' BEGIN SELECT RAISE(ABORT, 'refused'); END",
            )
            .unwrap();
        let enqueuer = Enqueuer::start(store.clone());
        // Sent together, so they share one group.
        let (good, bad, other) = tokio::join!(
            enqueuer.enqueue(vec![task(r#"{"n": 1}"#)]),
            enqueuer.enqueue(vec![task(r#"{"poison": true}"#)]),
            enqueuer.enqueue(vec![task(r#"{"n": 2}"#), task(r#"{"n": 3}"#)]),
        );
        assert_eq!(good.unwrap().len(), 1);
        assert!(bad.is_err());
        assert_eq!(other.unwrap().len(), 2);
        let counts = store.counts().await.unwrap();
        assert_eq!(counts.pending, 3, "the neighbours' rows are stored");
    }
}
