//! Validation and defaults for new tasks, shared by the HTTP API and the follow-up tasks
//! handlers enqueue: one place decides what a valid task is.

use chrono::{DateTime, Utc};

use crate::plugins::Registry;
use crate::task::NewTask;
use crate::task::is_valid_task_type;

/// Longest accepted idempotency key, in characters (Unicode scalar values, as JSON Schema's
/// `maxLength` counts them).
pub const MAX_IDEMPOTENCY_KEY: usize = 255;
/// The most retries a task may be given: enough for any backoff schedule, and far from where
/// counting attempts (`max_retry + 1`) or a database's 32-bit column could overflow.
pub const MAX_RETRY: u32 = 1000;

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
    #[error(
        "idempotency_key must be 1 to {MAX_IDEMPOTENCY_KEY} characters, without control characters"
    )]
    BadIdempotencyKey,
    #[error("max_retry {0} is out of range: at most {MAX_RETRY}")]
    MaxRetryOutOfRange(u32),
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
    if let Some(key) = &request.idempotency_key
        && (key.is_empty()
            || key.chars().count() > MAX_IDEMPOTENCY_KEY
            || key.chars().any(char::is_control))
    {
        return Err(RejectReason::BadIdempotencyKey);
    }
    if let Some(max_retry) = request.max_retry.filter(|&m| m > MAX_RETRY) {
        return Err(RejectReason::MaxRetryOutOfRange(max_retry));
    }
    Ok(NewTask {
        task_type: request.task_type,
        payload: request.payload,
        priority: request.priority.unwrap_or(plugin.policy.priority),
        max_retry: request.max_retry.unwrap_or(plugin.policy.max_retry),
        run_at: request.run_at,
        idempotency_key: request.idempotency_key,
    })
}

/// Group commit for enqueues: requests that arrive while a write is in flight are inserted
/// together in the next transaction, so many concurrent single-task requests cost one commit
/// instead of one each. Each request still gets exactly its own rows back, and a failed
/// transaction fails every request in it (none is half-written).
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
                let all: Vec<NewTask> = requests
                    .iter_mut()
                    .flat_map(|r| std::mem::take(&mut r.tasks))
                    .collect();
                match store.enqueue(all).await {
                    Ok(enqueued) => {
                        let mut rest = enqueued.into_iter();
                        for (request, size) in requests.drain(..).zip(sizes) {
                            let _ = request.reply.send(Ok(rest.by_ref().take(size).collect()));
                        }
                    }
                    Err(error) => {
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
