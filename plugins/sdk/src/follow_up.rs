//! Enqueueing follow-up tasks.

use crate::host;

pub use host::EnqueueOptions;

/// Enqueues a follow-up task of type `task_type` with the JSON text `payload`, and returns its
/// id.
///
/// Without an explicit [`EnqueueOptions::idempotency_key`], the host derives one from this
/// task's id and the position of this call among the attempt's `enqueue` calls: a retried
/// task that enqueues the same follow-ups in the same order gets the ids of the tasks its
/// earlier attempt enqueued, rather than new ones. When the key was used before, the id
/// returned is the existing task's.
///
/// The error is the host's message: an unknown task type, or a payload that is not JSON.
///
/// ```no_run
/// use spool_sdk::{EnqueueOptions, Failure};
///
/// let id = spool_sdk::enqueue("notify", r#"{"to": "ada@example.com"}"#, EnqueueOptions::default())
///     .map_err(Failure::Fail)?;
/// let later = spool_sdk::enqueue("report", "{}", EnqueueOptions::default().delay_seconds(60))
///     .map_err(Failure::Fail)?;
/// # Ok::<(), Failure>(())
/// ```
pub fn enqueue(
    task_type: impl AsRef<str>,
    payload: impl AsRef<str>,
    options: EnqueueOptions,
) -> Result<u64, String> {
    host::enqueue(task_type.as_ref(), payload.as_ref(), &options)
}

/// All options unset: the task type's priority and retry policy, no delay, and a derived
/// idempotency key.
impl Default for EnqueueOptions {
    fn default() -> Self {
        Self {
            priority: None,
            delay_seconds: None,
            max_retry: None,
            idempotency_key: None,
        }
    }
}

impl EnqueueOptions {
    /// Sets the priority: higher runs first.
    #[must_use]
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = Some(priority);
        self
    }

    /// Runs the task no earlier than `seconds` from now.
    #[must_use]
    pub fn delay_seconds(mut self, seconds: u32) -> Self {
        self.delay_seconds = Some(seconds);
        self
    }

    /// Sets how many retries the task gets after its first attempt.
    #[must_use]
    pub fn max_retry(mut self, retries: u32) -> Self {
        self.max_retry = Some(retries);
        self
    }

    /// Sets the task's idempotency key, in place of the derived one.
    #[must_use]
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }
}

#[cfg(test)]
mod tests {
    use super::EnqueueOptions;

    #[test]
    fn options_default_to_unset_and_build_up() {
        let default = EnqueueOptions::default();
        assert_eq!(
            (
                default.priority,
                default.delay_seconds,
                default.max_retry,
                default.idempotency_key
            ),
            (None, None, None, None)
        );
        let set = EnqueueOptions::default()
            .priority(-3)
            .delay_seconds(60)
            .max_retry(2)
            .idempotency_key("order-42");
        assert_eq!(set.priority, Some(-3));
        assert_eq!(set.delay_seconds, Some(60));
        assert_eq!(set.max_retry, Some(2));
        assert_eq!(set.idempotency_key.as_deref(), Some("order-42"));
    }
}
