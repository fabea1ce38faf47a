//! SQLite's spelling of the portable statements ([`crate::store::sql`]), and how it runs them:
//! reads on the read-only pool (or the writer, for a read that must see the last write), writes
//! and transactions on the single writer.

use async_trait::async_trait;
use sqlx::Row;
use sqlx::sqlite::{SqliteArguments, SqliteRow};
use sqlx::{Sqlite, query::Query};

use super::SqliteStore;
use crate::store::StoreError;
use crate::store::sql::{Arg, Cells, Column, Dialect, Portable, Statement, Via};

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

    fn byte_length_sum(&self, columns: &[&str]) -> String {
        let lengths: Vec<String> = columns
            .iter()
            .map(|c| format!("LENGTH(CAST({c} AS BLOB))"))
            .collect();
        format!("COALESCE(SUM({}), 0)", lengths.join(" + "))
    }

    fn insert_or_keep(&self, insert: &str, _key: &str) -> String {
        format!("{insert} ON CONFLICT DO NOTHING")
    }

    fn insert_or_replace(
        &self,
        table: &str,
        columns: &[&str],
        _key: &[&str],
        rows: &str,
    ) -> String {
        format!(
            "INSERT OR REPLACE INTO {table} ({}) VALUES {rows}",
            columns.join(", ")
        )
    }

    fn max_binds(&self) -> usize {
        // The historical default of SQLITE_MAX_VARIABLE_NUMBER; newer builds allow more.
        999
    }

    fn task_columns(&self) -> &'static str {
        "*"
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
            Arg::Limit(n) => query.bind(i64::try_from(n).unwrap_or(i64::MAX)),
            Arg::Ids(ids) => query.bind(serde_json::to_string(ids).unwrap_or_default()),
        };
    }
    query
}

impl Cells for SqliteRow {
    fn int<I: Column>(&self, column: I) -> Result<i64, StoreError> {
        Ok(self.try_get(column)?)
    }

    fn opt_int<I: Column>(&self, column: I) -> Result<Option<i64>, StoreError> {
        Ok(self.try_get(column)?)
    }

    fn text<I: Column>(&self, column: I) -> Result<String, StoreError> {
        Ok(self.try_get(column)?)
    }

    fn opt_text<I: Column>(&self, column: I) -> Result<Option<String>, StoreError> {
        Ok(self.try_get(column)?)
    }
}

#[async_trait]
impl Portable for SqliteStore {
    type Row = SqliteRow;

    fn dialect(&self) -> &'static dyn Dialect {
        &SqliteDialect
    }

    async fn fetch(
        &self,
        via: Via,
        statement: &Statement<'_>,
    ) -> Result<Vec<SqliteRow>, StoreError> {
        let pool = match via {
            Via::Reader => &self.reader,
            Via::Writer => &self.writer,
        };
        Ok(bind(sqlx::query(statement.sql()), statement.args())
            .fetch_all(pool)
            .await?)
    }

    async fn execute(&self, statement: &Statement<'_>) -> Result<u64, StoreError> {
        Ok(bind(sqlx::query(statement.sql()), statement.args())
            .execute(&self.writer)
            .await?
            .rows_affected())
    }

    async fn execute_all(&self, statements: &[Statement<'_>]) -> Result<Vec<u64>, StoreError> {
        let mut tx = self.writer.begin().await?;
        let mut changed = Vec::with_capacity(statements.len());
        for statement in statements {
            let outcome = bind(sqlx::query(statement.sql()), statement.args())
                .execute(&mut *tx)
                .await?;
            changed.push(outcome.rows_affected());
        }
        tx.commit().await?;
        Ok(changed)
    }

    async fn insert_id(&self, statement: &Statement<'_>) -> Result<i64, StoreError> {
        let sql = format!("{} RETURNING id", statement.sql());
        let row = bind(sqlx::query(&sql), statement.args())
            .fetch_one(&self.writer)
            .await?;
        row.int(0)
    }
}
