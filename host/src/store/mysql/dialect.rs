//! MySQL's and MariaDB's spelling of the portable statements ([`crate::store::sql`]), and how
//! they run on the pool. Text columns have a binary collation, so text reads back through
//! [`Text`]; keys live in `VARBINARY` columns and are bound as bytes.

use std::sync::LazyLock;

use sqlx::mysql::{MySqlArguments, MySqlRow};
use sqlx::{Column as _, MySql, Row, Type, query::Query};

use super::MySqlStore;
use super::rows::{TASK_COLUMNS, Text};
use crate::store::StoreError;
use crate::store::sql::{Arg, Cells, Column, Dialect, Via, sqlx_portable};

/// The server's clock as Unix milliseconds, from the statement's start (both functions answer
/// for that one instant): whole seconds from `UNIX_TIMESTAMP()`, which no session time zone
/// changes, and the milliseconds from the current time's fraction, as the column defaults
/// compute it (migration 0001). Signed, so it reads back as an `i64`.
pub(super) const DB_NOW_MS: &str =
    "CAST(UNIX_TIMESTAMP() * 1000 + MICROSECOND(CURRENT_TIMESTAMP(6)) DIV 1000 AS SIGNED)";

/// MySQL's dialect: `?` placeholders, lists spelled out one placeholder per id, indexes named
/// with `FORCE INDEX`, `CONCAT` for text, upserts with `ON DUPLICATE KEY UPDATE`.
pub struct MySqlDialect;

/// [`TASK_COLUMNS`] for a statement on `async_task` without the `t` alias.
static PLAIN_TASK_COLUMNS: LazyLock<String> = LazyLock::new(|| TASK_COLUMNS.replace("t.", ""));

impl Dialect for MySqlDialect {
    fn placeholder(&self, _n: usize) -> String {
        "?".into()
    }

    fn use_index(&self, index: &str) -> String {
        match index {
            // No partial indexes: the failed rows by time are read through the listing index
            // (migration 0008), which the planner finds by itself.
            "async_task_failed_at" => String::new(),
            _ => format!("FORCE INDEX ({index})"),
        }
    }

    fn any_id(&self, column: &str, count: usize, next: &mut dyn FnMut() -> String) -> String {
        let listed: Vec<String> = (0..count).map(|_| next()).collect();
        format!("{column} IN ({})", listed.join(", "))
    }

    fn contains(&self, haystack: &str, needle: &str) -> String {
        // The column's collation (utf8mb4_bin) decides: case-sensitive, as on every backend.
        format!("LOCATE({needle}, {haystack}) > 0")
    }

    fn concat(&self, parts: &[&str]) -> String {
        format!("CONCAT({})", parts.join(", "))
    }

    fn insert_or_keep(&self, insert: &str, key: &str) -> String {
        // A no-op update on a duplicate: the existing row stays as it is.
        format!("{insert} ON DUPLICATE KEY UPDATE {key} = {key}")
    }

    fn insert_or_replace(
        &self,
        table: &str,
        columns: &[&str],
        _key: &[&str],
        rows: &str,
    ) -> String {
        format!(
            "REPLACE INTO {table} ({}) VALUES {rows}",
            columns.join(", ")
        )
    }

    fn max_binds(&self) -> usize {
        u16::MAX as usize
    }

    fn task_columns(&self) -> &'static str {
        PLAIN_TASK_COLUMNS.as_str()
    }

    fn now_ms(&self) -> &'static str {
        DB_NOW_MS
    }
}

fn bind<'q>(
    mut query: Query<'q, MySql, MySqlArguments>,
    args: &[Arg<'q>],
) -> Query<'q, MySql, MySqlArguments> {
    for arg in args {
        query = match *arg {
            Arg::Int(n) => query.bind(n),
            Arg::OptInt(n) => query.bind(n),
            Arg::Text(text) | Arg::Search(text) => query.bind(text),
            Arg::OptText(text) => query.bind(text),
            Arg::Key(key) => query.bind(key.as_bytes()),
            Arg::Bytes(bytes) => query.bind(bytes),
            Arg::Limit(n) => query.bind(u64::try_from(n).unwrap_or(u64::MAX)),
            Arg::Ids(ids) => {
                for id in ids {
                    query = query.bind(*id);
                }
                query
            }
        };
    }
    query
}

impl Cells for MySqlRow {
    fn opt_int<I: Column>(&self, column: I) -> Result<Option<i64>, StoreError> {
        let kind = self.try_column(column)?.type_info();
        if <u64 as Type<MySql>>::compatible(kind) {
            let value: Option<u64> = self.try_get(column)?;
            return value
                .map(|n| {
                    i64::try_from(n)
                        .map_err(|_| StoreError::Database(format!("column {column:?} holds {n}")))
                })
                .transpose();
        }
        Ok(self.try_get(column)?)
    }

    fn opt_text<I: Column>(&self, column: I) -> Result<Option<String>, StoreError> {
        Ok(self.try_get::<Option<Text>, _>(column)?.map(|t| t.0))
    }

    fn opt_bytes<I: Column>(&self, column: I) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.try_get(column)?)
    }
}

impl MySqlStore {
    /// The pool a portable statement runs on.
    fn pool(&self, _via: Via) -> &sqlx::MySqlPool {
        &self.pool
    }
}

sqlx_portable!(
    MySqlStore,
    MySqlRow,
    MySqlDialect,
    insert_id = last_insert_id
);
