//! PostgreSQL's spelling of the portable statements ([`crate::store::sql`]), and how it runs
//! them on the pool.

use sqlx::postgres::{PgArguments, PgRow};
use sqlx::{Column as _, Postgres, Row, Type, query::Query};

use super::PgStore;
use super::rows::{storable, task_columns};
use crate::store::StoreError;
use crate::store::sql::{Arg, Cells, Column, Dialect, Via, sqlx_portable};

/// The server's clock as Unix milliseconds: the time the statement began, the same for every
/// row it touches. `statement_timestamp()` is stable within a statement, so a comparison with
/// it can walk an index (the volatile `spool_now_ms()` of the column defaults could not).
macro_rules! db_now_ms {
    () => {
        "(floor(extract(epoch FROM statement_timestamp()) * 1000))::bigint"
    };
}
pub(super) use db_now_ms;

/// PostgreSQL's dialect: `$n` placeholders, lists bound as arrays, no index hints (the
/// planner has statistics), upserts with `ON CONFLICT`.
pub struct PgDialect;

impl Dialect for PgDialect {
    fn placeholder(&self, n: usize) -> String {
        format!("${n}")
    }

    fn use_index(&self, _index: &str) -> String {
        String::new()
    }

    fn any_id(&self, column: &str, _count: usize, next: &mut dyn FnMut() -> String) -> String {
        format!("{column} = ANY({})", next())
    }

    fn contains(&self, haystack: &str, needle: &str) -> String {
        format!("strpos({haystack}, {needle}) > 0")
    }

    fn max_binds(&self) -> usize {
        u16::MAX as usize
    }

    fn task_columns(&self) -> &'static str {
        task_columns!()
    }

    fn now_ms(&self) -> &'static str {
        db_now_ms!()
    }
}

fn bind<'q>(
    mut query: Query<'q, Postgres, PgArguments>,
    args: &[Arg<'q>],
) -> Query<'q, Postgres, PgArguments> {
    for arg in args {
        query = match *arg {
            Arg::Int(n) => query.bind(n),
            Arg::OptInt(n) => query.bind(n),
            Arg::Text(text) | Arg::Key(text) => query.bind(text),
            Arg::OptText(text) => query.bind(text),
            Arg::Search(text) => query.bind(storable(text).into_owned()),
            Arg::Bytes(bytes) => query.bind(bytes),
            Arg::Limit(n) => query.bind(i64::try_from(n).unwrap_or(i64::MAX)),
            Arg::Ids(ids) => query.bind(ids),
        };
    }
    query
}

impl Cells for PgRow {
    fn opt_int<I: Column>(&self, column: I) -> Result<Option<i64>, StoreError> {
        let kind = self.try_column(column)?.type_info();
        Ok(if <i16 as Type<Postgres>>::compatible(kind) {
            self.try_get::<Option<i16>, _>(column)?.map(i64::from)
        } else if <i32 as Type<Postgres>>::compatible(kind) {
            self.try_get::<Option<i32>, _>(column)?.map(i64::from)
        } else {
            self.try_get(column)?
        })
    }

    fn opt_text<I: Column>(&self, column: I) -> Result<Option<String>, StoreError> {
        Ok(self.try_get(column)?)
    }

    fn opt_bytes<I: Column>(&self, column: I) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.try_get(column)?)
    }
}

impl PgStore {
    /// The pool a portable statement runs on.
    fn pool(&self, _via: Via) -> &sqlx::PgPool {
        &self.pool
    }
}

sqlx_portable!(PgStore, PgRow, PgDialect, insert_id = returning);
