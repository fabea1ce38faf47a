//! How task values are written into the table, the same on every backend: status codes, times,
//! and the words the store itself writes into rows. Each backend binds these in its own column
//! types (SQLite INTEGER, PostgreSQL SMALLINT/BIGINT, MySQL TINYINT/BIGINT).

use chrono::{DateTime, Utc};

use super::StoreError;
use crate::task::{Status, TaskId};

/// The `last_error` of an attempt the rescuer took back.
pub const LEASE_EXPIRED: &str = "lease expired: the host running this attempt stopped (crashed or was killed) before it finished";

/// The code stored in the `status` column (the essay's TINYINT).
pub fn status_code(status: Status) -> i64 {
    match status {
        Status::Pending => 0,
        Status::Running => 1,
        Status::Done => 2,
        Status::Failed => 3,
        Status::Cancelled => 4,
    }
}

/// The status a stored code stands for, if any.
pub fn status_from_code(code: i64) -> Option<Status> {
    Status::ALL
        .into_iter()
        .find(|status| status_code(*status) == code)
}

/// The codes of the states satisfying a state-machine rule (e.g. [`Status::can_retry`]): the
/// rules live in [`Status`]; the store only translates them.
pub fn codes_where(rule: fn(Status) -> bool) -> Vec<i64> {
    Status::ALL
        .into_iter()
        .filter(|s| rule(*s))
        .map(status_code)
        .collect()
}

/// The same codes as an SQL list, `(3, 4)`, for backends that inline them.
pub fn sql_codes_where(rule: fn(Status) -> bool) -> String {
    let codes: Vec<String> = codes_where(rule).iter().map(i64::to_string).collect();
    format!("({})", codes.join(", "))
}

/// Counts per state from `SELECT status, COUNT(*) … GROUP BY status` rows; unknown codes are
/// left out.
pub fn counts_from_codes(rows: impl IntoIterator<Item = (i64, i64)>) -> super::StatusCounts {
    let mut counts = super::StatusCounts::default();
    for (code, count) in rows {
        let count = u64::try_from(count).unwrap_or(0);
        match status_from_code(code) {
            Some(Status::Pending) => counts.pending = count,
            Some(Status::Running) => counts.running = count,
            Some(Status::Done) => counts.done = count,
            Some(Status::Failed) => counts.failed = count,
            Some(Status::Cancelled) => counts.cancelled = count,
            None => {}
        }
    }
    counts
}

/// A time as stored: Unix milliseconds, UTC.
pub fn millis(time: DateTime<Utc>) -> i64 {
    time.timestamp_millis()
}

/// A stored time read back; out of range is a corrupt row.
pub fn time_from_millis(id: TaskId, ms: i64) -> Result<DateTime<Utc>, StoreError> {
    DateTime::from_timestamp_millis(ms).ok_or_else(|| StoreError::Corrupt {
        id,
        reason: format!("timestamp {ms} is out of range"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_codes_round_trip_and_rules_translate() {
        for status in Status::ALL {
            assert_eq!(status_from_code(status_code(status)), Some(status));
        }
        assert_eq!(status_from_code(9), None);
        assert_eq!(codes_where(Status::can_retry), [3, 4]);
        assert_eq!(sql_codes_where(Status::can_retry), "(3, 4)");
        assert_eq!(sql_codes_where(Status::can_cancel), "(0, 1)");
    }

    #[test]
    fn counts_map_codes_to_states() {
        let counts = counts_from_codes([(0, 5), (2, 7), (3, 1), (9, 4)]);
        assert_eq!(
            (
                counts.pending,
                counts.running,
                counts.done,
                counts.failed,
                counts.cancelled
            ),
            (5, 0, 7, 1, 0)
        );
    }

    #[test]
    fn times_are_milliseconds_and_out_of_range_is_corrupt() {
        let time = DateTime::from_timestamp_millis(1_800_000_000_123).unwrap();
        assert_eq!(time_from_millis(1, millis(time)).unwrap(), time);
        assert!(matches!(
            time_from_millis(7, i64::MAX),
            Err(StoreError::Corrupt { id: 7, .. })
        ));
    }
}
