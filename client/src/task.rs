//! [`Task`]: a task as the application describes it, and its checks.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::Error;
use crate::rules::{self, DEFAULT_MAX_PAYLOAD};

/// A task to enqueue: its type and JSON payload, and what to set beyond the table's defaults.
///
/// ```
/// use spool_client::Task;
/// use std::time::Duration;
///
/// #[derive(serde::Serialize)]
/// struct Report { approval_id: i64 }
///
/// let task = Task::new("report", &Report { approval_id: 1042 })
///     .idempotency_key("approval-1042-report")
///     .priority(10)
///     .delay(Duration::from_secs(30))
///     .max_retry(5);
/// assert_eq!(task.task_type(), "report");
/// assert!(task.check().is_ok());
/// ```
///
/// Building never fails; [`enqueue`](crate::enqueue) (or [`Task::check`], earlier) reports
/// what is wrong with it before any statement runs.
#[derive(Debug, Clone)]
pub struct Task {
    task_type: String,
    /// The JSON text, or why the value given could not be written as JSON.
    payload: Result<String, String>,
    /// Whether `payload` came from the caller as text and still has to be checked as JSON.
    unchecked_text: bool,
    priority: Option<i32>,
    max_retry: Option<u32>,
    when: When,
    idempotency_key: Option<String>,
    max_payload: usize,
}

/// When the task is due.
#[derive(Debug, Clone, Copy)]
enum When {
    Now,
    After(Duration),
    At(SystemTime),
}

impl Task {
    /// A task of type `task_type` (the plugin `task_type.wasm` handles it) with `payload`
    /// written as JSON by `serde_json`.
    pub fn new<T: serde::Serialize + ?Sized>(task_type: impl Into<String>, payload: &T) -> Task {
        let payload = serde_json::to_string(payload).map_err(|e| e.to_string());
        Task::with_payload(task_type.into(), payload, false)
    }

    /// A task whose payload is JSON text the application already has (checked to be one JSON
    /// value when enqueued).
    pub fn from_json(task_type: impl Into<String>, json: impl Into<String>) -> Task {
        Task::with_payload(task_type.into(), Ok(json.into()), true)
    }

    fn with_payload(
        task_type: String,
        payload: Result<String, String>,
        unchecked_text: bool,
    ) -> Task {
        Task {
            task_type,
            payload,
            unchecked_text,
            priority: None,
            max_retry: None,
            when: When::Now,
            idempotency_key: None,
            max_payload: DEFAULT_MAX_PAYLOAD,
        }
    }

    /// Higher runs first (default: the table's, 0). Due tasks are claimed by priority, then by
    /// due time, then in insertion order.
    pub fn priority(mut self, priority: i32) -> Task {
        self.priority = Some(priority);
        self
    }

    /// Retries allowed after the first attempt (default: the table's, 3).
    pub fn max_retry(mut self, max_retry: u32) -> Task {
        self.max_retry = Some(max_retry);
        self
    }

    /// Due `delay` after the enqueue (by the application's clock). Replaces a [`Task::run_at`].
    pub fn delay(mut self, delay: Duration) -> Task {
        self.when = When::After(delay);
        self
    }

    /// Due at `at` (a `std::time::SystemTime`, or anything that converts into one, such as a
    /// `chrono::DateTime` or a `time::OffsetDateTime`). A time in the past is due at once.
    /// Replaces a [`Task::delay`].
    pub fn run_at(mut self, at: impl Into<SystemTime>) -> Task {
        self.when = When::At(at.into());
        self
    }

    /// At most one task per task type and key: enqueueing the same key again (say, when the
    /// application retries its transaction) inserts nothing and answers with the existing
    /// task's id and `duplicate: true`. 1 to 255 bytes.
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Task {
        self.idempotency_key = Some(key.into());
        self
    }

    /// The largest payload accepted, in bytes (default [`rules::DEFAULT_MAX_PAYLOAD`], the
    /// host's default `max_payload`). Set it to the host's `max_payload` if that was raised.
    pub fn max_payload(mut self, bytes: usize) -> Task {
        self.max_payload = bytes;
        self
    }

    /// The task type.
    pub fn task_type(&self) -> &str {
        &self.task_type
    }

    /// The payload as JSON text, if the value could be written as JSON.
    pub fn payload(&self) -> Option<&str> {
        self.payload.as_deref().ok()
    }

    /// Checks the task the way [`enqueue`](crate::enqueue) does before it writes anything.
    pub fn check(&self) -> Result<(), Error> {
        self.row(SystemTime::now()).map(|_| ())
    }

    /// The values to insert, checked, with times taken from `now`.
    pub(crate) fn row(&self, now: SystemTime) -> Result<Row<'_>, Error> {
        if !rules::is_valid_task_type(&self.task_type) {
            return Err(Error::BadTaskType(self.task_type.clone()));
        }
        let payload = self
            .payload
            .as_deref()
            .map_err(|e| Error::PayloadNotSerializable(e.clone()))?;
        if payload.len() > self.max_payload {
            return Err(Error::PayloadTooLarge {
                size: payload.len(),
                limit: self.max_payload,
            });
        }
        if self.unchecked_text {
            rules::check_json(payload).map_err(|e| Error::PayloadNotJson(e.to_string()))?;
        }
        rules::storable_json(payload).map_err(|e| Error::PayloadNotStorable(e.to_string()))?;
        if let Some(key) = &self.idempotency_key
            && !rules::is_valid_idempotency_key(key)
        {
            return Err(Error::BadIdempotencyKey {
                len: key.chars().count(),
            });
        }
        if let Some(key) = &self.idempotency_key
            && rules::is_reserved_key(key)
        {
            return Err(Error::ReservedIdempotencyKey(key.clone()));
        }
        let run_at = match self.when {
            When::Now => Some(now),
            When::After(delay) => now.checked_add(delay),
            When::At(at) => Some(at),
        };
        let now = unix_millis(now).ok_or(Error::RunAtOutOfRange)?;
        let next_run_at = run_at.and_then(unix_millis).ok_or(Error::RunAtOutOfRange)?;
        Ok(Row {
            task_type: &self.task_type,
            payload,
            priority: self.priority,
            max_retry: self.max_retry,
            next_run_at,
            now,
            idempotency_key: self.idempotency_key.as_deref(),
        })
    }
}

/// A time as Unix milliseconds, the task table's time format; None before 1970 or beyond i64.
fn unix_millis(time: SystemTime) -> Option<i64> {
    let since_epoch = time.duration_since(UNIX_EPOCH).ok()?;
    i64::try_from(since_epoch.as_millis()).ok()
}

/// A checked task, as the values of one row of `async_task`.
#[derive(Debug, Clone, PartialEq)]
pub struct Row<'a> {
    pub task_type: &'a str,
    /// JSON text.
    pub payload: &'a str,
    /// None: the table's default.
    pub priority: Option<i32>,
    /// None: the table's default.
    pub max_retry: Option<u32>,
    /// Unix milliseconds.
    pub next_run_at: i64,
    /// Unix milliseconds: `created_at` and `updated_at`.
    pub now: i64,
    pub idempotency_key: Option<&'a str>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(ms)
    }

    #[test]
    fn defaults_leave_the_table_to_decide() {
        let task = Task::new("report", &serde_json::json!({"rows": [1, 2]}));
        let row = task.row(at(1_800_000_000_123)).unwrap();
        assert_eq!(
            row,
            Row {
                task_type: "report",
                payload: r#"{"rows":[1,2]}"#,
                priority: None,
                max_retry: None,
                next_run_at: 1_800_000_000_123,
                now: 1_800_000_000_123,
                idempotency_key: None,
            }
        );
    }

    #[test]
    fn options_and_times() {
        let now = at(1_800_000_000_000);
        let task = Task::from_json("notify", r#"{"to": "a@example.com"}"#)
            .priority(-5)
            .max_retry(0)
            .delay(Duration::from_millis(1_500))
            .idempotency_key("approval-1042");
        let row = task.row(now).unwrap();
        assert_eq!((row.priority, row.max_retry), (Some(-5), Some(0)));
        assert_eq!(
            (row.next_run_at, row.now),
            (1_800_000_001_500, 1_800_000_000_000)
        );
        assert_eq!(row.idempotency_key, Some("approval-1042"));
        assert_eq!(
            row.payload, r#"{"to": "a@example.com"}"#,
            "JSON text is kept as given"
        );
        let scheduled = task.clone().run_at(at(1_900_000_000_000));
        assert_eq!(
            scheduled.row(now).unwrap().next_run_at,
            1_900_000_000_000,
            "run_at replaces delay"
        );
    }

    #[test]
    fn each_rule_has_its_error() {
        let now = SystemTime::now();
        let err = |task: Task| task.row(now).unwrap_err();
        assert!(
            matches!(err(Task::new("report.wasm", &1)), Error::BadTaskType(t) if t == "report.wasm")
        );
        assert!(matches!(err(Task::new("", &1)), Error::BadTaskType(_)));
        let map_with_tuple_keys: std::collections::BTreeMap<(i32, i32), i32> = [((1, 2), 3)].into();
        assert!(matches!(
            err(Task::new("a", &map_with_tuple_keys)),
            Error::PayloadNotSerializable(_)
        ));
        assert!(matches!(
            err(Task::from_json("a", "{oops")),
            Error::PayloadNotJson(_)
        ));
        assert!(matches!(
            err(Task::from_json("a", "")),
            Error::PayloadNotJson(_)
        ));
        let deep = format!("{}{}", "[".repeat(65), "]".repeat(65));
        assert!(matches!(
            err(Task::from_json("a", &deep)),
            Error::PayloadNotStorable(_)
        ));
        let deep_value: serde_json::Value = serde_json::from_str(&deep).unwrap();
        assert!(matches!(
            err(Task::new("a", &deep_value)),
            Error::PayloadNotStorable(_)
        ));
        assert!(matches!(
            err(Task::from_json("a", r#"{"s": "\ud800"}"#)),
            Error::PayloadNotStorable(_)
        ));
        let big = "x".repeat(DEFAULT_MAX_PAYLOAD);
        assert!(matches!(
            err(Task::new("a", &big)),
            Error::PayloadTooLarge { size, limit } if size == DEFAULT_MAX_PAYLOAD + 2 && limit == DEFAULT_MAX_PAYLOAD
        ));
        assert!(Task::new("a", &big).max_payload(2 << 20).row(now).is_ok());
        assert!(matches!(
            err(Task::new("a", &1).idempotency_key("")),
            Error::BadIdempotencyKey { len: 0 }
        ));
        assert!(matches!(
            err(Task::new("a", &1).idempotency_key("k".repeat(256))),
            Error::BadIdempotencyKey { len: 256 }
        ));
        assert!(matches!(
            err(Task::new("a", &1).idempotency_key("spool:schedule:nightly:x")),
            Error::ReservedIdempotencyKey(key) if key == "spool:schedule:nightly:x"
        ));
        assert!(
            Task::new("a", &1)
                .idempotency_key("spool-1")
                .row(now)
                .is_ok()
        );
        assert!(
            Task::new("a", &1).max_retry(u32::MAX).row(now).is_ok(),
            "every u32 fits the column"
        );
        assert!(matches!(
            err(Task::new("a", &1).run_at(at(0) - Duration::from_secs(1))),
            Error::RunAtOutOfRange
        ));
        assert!(matches!(
            err(Task::new("a", &1).delay(Duration::MAX)),
            Error::RunAtOutOfRange
        ));
    }

    #[test]
    fn messages_say_what_to_do() {
        let now = SystemTime::now();
        let message = |task: Task| task.row(now).unwrap_err().to_string();
        assert!(message(Task::new("a b", &1)).contains("letters, digits, `_` or `-`"));
        assert!(
            message(Task::new("a", &"x".repeat(DEFAULT_MAX_PAYLOAD))).contains("pass a reference")
        );
        assert!(message(Task::from_json("a", "{")).contains("pass one JSON value"));
        assert!(
            message(Task::new("a", &1).idempotency_key(""))
                .contains("derive it from the business row")
        );
    }
}
