//! SQLite's spelling of the portable statements ([`crate::store::sql`]), and how it runs them:
//! reads on the read-only pool (or the writer, for a read that must see the last write), writes
//! and transactions on the single writer.

use sqlx::Row;
use sqlx::sqlite::{SqliteArguments, SqliteRow};
use sqlx::{Sqlite, query::Query};

use super::SqliteStore;
use crate::store::StoreError;
use crate::store::sql::{Arg, Cells, Column, Dialect, Via, sqlx_portable};

/// SQLite's dialect: numbered placeholders (`?1`), lists as JSON through `json_each`, indexes
/// pinned with `INDEXED BY` (no table statistics, see the module doc).
pub struct SqliteDialect;

impl Dialect for SqliteDialect {
    fn placeholder(&self, n: usize) -> String {
        format!("?{n}")
    }

    fn use_index(&self, index: &str) -> String {
        format!("INDEXED BY {index}")
    }

    fn any_id(&self, column: &str, _count: usize, next: &mut dyn FnMut() -> String) -> String {
        format!("{column} IN (SELECT value FROM json_each({}))", next())
    }

    fn contains(&self, haystack: &str, needle: &str) -> String {
        format!("instr({haystack}, {needle}) > 0")
    }

    fn max_binds(&self) -> usize {
        // The historical default of SQLITE_MAX_VARIABLE_NUMBER; newer builds allow more.
        999
    }

    fn task_columns(&self) -> &'static str {
        "*"
    }

    fn now_ms(&self) -> &'static str {
        // The machine's clock, which every host of one SQLite file shares.
        "CAST(unixepoch('subsec') * 1000 AS INTEGER)"
    }
}

fn bind<'q>(
    mut query: Query<'q, Sqlite, SqliteArguments<'q>>,
    args: &[Arg<'q>],
) -> Query<'q, Sqlite, SqliteArguments<'q>> {
    for arg in args {
        query = match *arg {
            Arg::Int(n) => query.bind(n),
            Arg::OptInt(n) => query.bind(n),
            Arg::Text(text) | Arg::Key(text) | Arg::Search(text) => query.bind(text),
            Arg::OptText(text) => query.bind(text),
            Arg::Bytes(bytes) => query.bind(bytes),
            Arg::Limit(n) => query.bind(i64::try_from(n).unwrap_or(i64::MAX)),
            Arg::Ids(ids) => query.bind(serde_json::to_string(ids).unwrap_or_default()),
        };
    }
    query
}

impl Cells for SqliteRow {
    fn opt_int<I: Column>(&self, column: I) -> Result<Option<i64>, StoreError> {
        Ok(self.try_get(column)?)
    }

    fn opt_text<I: Column>(&self, column: I) -> Result<Option<String>, StoreError> {
        Ok(self.try_get(column)?)
    }

    fn opt_bytes<I: Column>(&self, column: I) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.try_get(column)?)
    }
}

impl SqliteStore {
    /// The pool a portable statement runs on.
    fn pool(&self, via: Via) -> &sqlx::SqlitePool {
        match via {
            Via::Reader => &self.reader,
            Via::Writer => &self.writer,
        }
    }
}

sqlx_portable!(SqliteStore, SqliteRow, SqliteDialect, insert_id = returning);
