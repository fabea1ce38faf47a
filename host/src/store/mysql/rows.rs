//! Rows as MySQL returns them: the column list every task query selects, status codes,
//! millisecond times, and [`Text`] for the binary-collated text columns. Rows decode into tasks
//! in [`crate::store::rows`], which lets a claim set one unreadable row aside instead of
//! failing the whole batch.

use sqlx::error::BoxDynError;
use sqlx::mysql::{MySqlTypeInfo, MySqlValueRef};
use sqlx::{Decode, MySql, Type};

pub use crate::store::rows::{decode, task, tasks};
use crate::task::Status;

/// The columns of a task, for `SELECT {TASK_COLUMNS} FROM async_task AS t`.
///
/// The payload is cast to text: MySQL sends a JSON column with its own wire type, which the
/// driver does not decode as a string (MariaDB's JSON is LONGTEXT already; the cast is a no-op).
pub const TASK_COLUMNS: &str = "t.id, t.task_type, CAST(t.payload AS CHAR) AS payload, t.status, t.priority, \
     t.retry_count, t.max_retry, t.attempts, t.next_run_at, t.idempotency_key, t.lease_owner, \
     t.lease_expires_at, t.attempted_at, t.finished_at, t.last_error, t.result, t.progress, \
     t.progress_note, t.plugin_version, t.log, t.depth, t.created_at, t.updated_at";

pub use super::super::encoding::{millis, sql_codes_where as codes_where, time_from_millis};

/// The code stored in the `status` column (TINYINT), as on every backend.
pub fn status_code(status: Status) -> i8 {
    super::super::encoding::status_code(status) as i8
}

/// Text from a column with a binary collation (`utf8mb4_bin`, every text column here).
///
/// The server flags such columns as binary, and the driver then refuses to decode them as
/// `String`; this decodes their bytes and checks they are UTF-8.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Text(pub String);

impl Type<MySql> for Text {
    fn type_info() -> MySqlTypeInfo {
        <[u8] as Type<MySql>>::type_info()
    }

    fn compatible(ty: &MySqlTypeInfo) -> bool {
        <[u8] as Type<MySql>>::compatible(ty)
    }
}

impl<'r> Decode<'r, MySql> for Text {
    fn decode(value: MySqlValueRef<'r>) -> Result<Self, BoxDynError> {
        let bytes = <&[u8] as Decode<MySql>>::decode(value)?;
        Ok(Text(std::str::from_utf8(bytes)?.to_owned()))
    }
}

impl From<Text> for String {
    fn from(text: Text) -> String {
        text.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_code_fits_the_tinyint_column() {
        let widened = Status::ALL.map(|status| i64::from(status_code(status)));
        assert_eq!(
            widened,
            Status::ALL.map(super::super::super::encoding::status_code)
        );
    }
}
