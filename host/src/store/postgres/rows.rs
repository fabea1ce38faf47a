//! Rows of `async_task` as PostgreSQL returns them, and the translation between the database's
//! representation (status codes, Unix milliseconds, BIGINT counters) and the task model.

use std::borrow::Cow;

pub(super) use crate::store::rows::TaskRow;
use crate::task::Status;

/// The columns every statement returning tasks selects, in [`TaskRow`]'s shape. `payload` is a
/// `json` column and comes back as its text.
macro_rules! task_columns {
    () => {
        "id, task_type, payload::text AS payload, status, priority, retry_count, max_retry, \
         attempts, next_run_at, idempotency_key, lease_owner, lease_expires_at, attempted_at, \
         finished_at, last_error, result, progress, progress_note, plugin_version, log, depth, \
         created_at, updated_at"
    };
}
pub(super) use task_columns;

pub(super) use super::super::encoding::millis;

/// The code stored in the `status` column (SMALLINT; the same codes on every backend).
pub(super) fn status_code(status: Status) -> i16 {
    super::super::encoding::status_code(status) as i16
}

/// One column of a batch, bound as an array for `UNNEST`: `value` of each item.
pub(super) fn column<'a, T, U>(items: &'a [T], value: impl Fn(&'a T) -> U) -> Vec<U> {
    items.iter().map(value).collect()
}

/// The codes of the states satisfying a state-machine rule (e.g. [`Status::can_retry`]), bound
/// as a `smallint[]`.
pub(super) fn codes_where(rule: fn(Status) -> bool) -> Vec<i16> {
    super::super::encoding::codes_where(rule)
        .into_iter()
        .map(|c| c as i16)
        .collect()
}

/// A text a handler produced (result, error, log, progress note), as PostgreSQL can store it.
/// A PostgreSQL string cannot hold the NUL character, and one NUL in a handler's output must
/// not make a whole completion batch fail on every retry: it is stored as U+FFFD (the
/// replacement character) instead.
pub(super) fn storable(text: &str) -> Cow<'_, str> {
    if text.contains('\0') {
        Cow::Owned(text.replace('\0', "\u{FFFD}"))
    } else {
        Cow::Borrowed(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_codes_fit_the_smallint_column() {
        let wide = super::super::super::encoding::codes_where(Status::can_retry);
        let narrow: Vec<i64> = codes_where(Status::can_retry)
            .into_iter()
            .map(i64::from)
            .collect();
        assert_eq!(narrow, wide);
        let widened = Status::ALL.map(|status| i64::from(status_code(status)));
        assert_eq!(
            widened,
            Status::ALL.map(super::super::super::encoding::status_code)
        );
    }

    #[test]
    fn handler_texts_lose_only_their_nul_characters() {
        assert!(matches!(storable("line ✓\n"), Cow::Borrowed("line ✓\n")));
        assert_eq!(storable("a\0b\0"), "a\u{FFFD}b\u{FFFD}");
    }
}
