//! The portable SQL layer: statements written once for every backend, spelled per database by
//! a [`Dialect`], run through a [`Portable`] backend, and read back through neutral [`Cells`].
//!
//! Most of what the store asks of a database is the same SQL on SQLite, PostgreSQL and
//! MySQL/MariaDB up to a few spellings: placeholders (`$1` or `?`), membership in a list of ids
//! (`= ANY($1)`, `IN (SELECT value FROM json_each(?))`, `IN (?, ?, …)`), substring search
//! (`strpos`, `instr`, `LOCATE`), byte lengths, insert-or-keep and insert-or-replace, index hints (`INDEXED
//! BY`, none, `FORCE INDEX`), text concatenation and how an insert hands back its id. A
//! [`Statement`] is built from text with `?` for each value; the dialect renders placeholders
//! and the small differences, and the backend binds the neutral [`Arg`]s to its driver's types.
//!
//! The statements that make up the hot path (enqueue, claim, completion) and the writes that
//! differ in substance (archive moves, attempt history) are not written here: each backend
//! keeps them in its own files, unchanged, on its own driver types. The portable layer is for
//! everything else (reads, the host services' tables, leadership, control, statistics,
//! alerts), where one
//! rendering of a short string and one dynamic dispatch per statement cost nothing next to the
//! round trip. Rows come back as the driver's own row type; [`Cells`] reads a column by
//! position or name into a neutral value (`i64` for every integer width, `String` for every
//! text encoding), so one decoder per shape serves every backend, including the hot path's
//! task rows ([`super::rows`]).
//!
//! Why text and a small trait rather than one `impl<DB: sqlx::Database>`: a generic
//! implementation needs a higher-ranked bound for every type it binds or decodes on every
//! backend, and the per-type differences (PostgreSQL's SMALLINT status, MySQL's unsigned
//! counters and binary-collated text) leak into every signature. Here those differences live
//! in one `Cells` implementation per driver, and a fourth backend implements [`Portable`] (four
//! methods) and [`Dialect`] instead of satisfying a wall of bounds.

use async_trait::async_trait;

use super::StoreError;

/// A value bound to a portable statement.
#[derive(Debug, Clone, Copy)]
pub enum Arg<'a> {
    Int(i64),
    OptInt(Option<i64>),
    Text(&'a str),
    OptText(Option<&'a str>),
    /// Text kept in a binary column where the database has them (MySQL's `VARBINARY`
    /// idempotency and effect keys); plain text elsewhere.
    Key(&'a str),
    /// A text searched for in what handlers wrote (errors), as the database can hold it
    /// (PostgreSQL's texts cannot hold NUL).
    Search(&'a str),
    /// A row count for `LIMIT` (unsigned where the database wants it so).
    Limit(usize),
    /// A list of ids, rendered by [`Dialect::any_id`].
    Ids(&'a [i64]),
    /// Bytes (a `BLOB`, `BYTEA` or `MEDIUMBLOB` column).
    Bytes(&'a [u8]),
}

/// Which connection a statement runs on. SQLite reads through a pool of read-only connections
/// beside its single writer; a read that must see a write committed a moment ago (the host
/// services' tables) goes through the writer. The server databases have one pool for both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    Reader,
    Writer,
}

/// How a backend spells what the portable statements need.
pub trait Dialect: Send + Sync {
    /// The placeholder of the `n`th value (from 1).
    fn placeholder(&self, n: usize) -> String;

    /// What follows `FROM table` to make the planner use `index` (empty where the planner
    /// needs no help).
    fn use_index(&self, index: &str) -> String;

    /// `column` is one of the ids bound at the placeholders `next` hands out (`count` ids).
    fn any_id(&self, column: &str, count: usize, next: &mut dyn FnMut() -> String) -> String;

    /// Whether `haystack` contains the text at the placeholder `needle` (case-sensitive).
    fn contains(&self, haystack: &str, needle: &str) -> String;

    /// The texts concatenated.
    fn concat(&self, parts: &[&str]) -> String {
        parts.join(" || ")
    }

    /// `insert` (an `INSERT … VALUES …`) that leaves an existing row with the same `key`
    /// alone. PostgreSQL's `ON CONFLICT` clause, which SQLite reads too.
    fn insert_or_keep(&self, insert: &str, key: &str) -> String {
        let _ = key;
        format!("{insert} ON CONFLICT DO NOTHING")
    }

    /// `INSERT INTO table (columns) VALUES rows` that replaces the row with the same `key`: an
    /// upsert that sets the other columns, in the `ON CONFLICT` form PostgreSQL and SQLite share.
    fn insert_or_replace(&self, table: &str, columns: &[&str], key: &[&str], rows: &str) -> String {
        let updates: Vec<String> = columns
            .iter()
            .filter(|c| !key.contains(c))
            .map(|c| format!("{c} = excluded.{c}"))
            .collect();
        format!(
            "INSERT INTO {table} ({}) VALUES {rows} ON CONFLICT ({}) DO UPDATE SET {}",
            columns.join(", "),
            key.join(", "),
            updates.join(", ")
        )
    }

    /// The most values one statement may bind.
    fn max_binds(&self) -> usize;

    /// The task columns in the order [`super::rows::task`] reads them, for `FROM async_task`.
    fn task_columns(&self) -> &'static str;

    /// The database's clock as Unix milliseconds, one value for the whole statement. Every
    /// lease end (task leases and leadership) is written and compared on it, so hosts whose
    /// clocks disagree still agree on when a lease runs out (docs/guarantees.md).
    fn now_ms(&self) -> &'static str;
}

/// A statement under construction: text with `?` for each value, and the values.
pub struct Statement<'a> {
    dialect: &'a dyn Dialect,
    sql: String,
    args: Vec<Arg<'a>>,
    placeholders: usize,
}

impl<'a> Statement<'a> {
    pub fn new(dialect: &'a dyn Dialect, sql: &str) -> Self {
        let mut statement = Statement {
            dialect,
            sql: String::with_capacity(sql.len() + 64),
            args: Vec::new(),
            placeholders: 0,
        };
        statement.push(sql);
        statement
    }

    /// Appends text; each `?` in it is the placeholder of the next value bound.
    pub fn push(&mut self, sql: &str) -> &mut Self {
        let mut parts = sql.split('?');
        if let Some(first) = parts.next() {
            self.sql.push_str(first);
        }
        for part in parts {
            let next = self.next_placeholder();
            self.sql.push_str(&next);
            self.sql.push_str(part);
        }
        self
    }

    /// Adds the values of the placeholders pushed so far, in order.
    pub fn bind(&mut self, arg: Arg<'a>) -> &mut Self {
        self.args.push(arg);
        self
    }

    /// Appends ` AND column` being one of `ids`.
    pub fn and_any_id(&mut self, column: &str, ids: &'a [i64]) -> &mut Self {
        let dialect = self.dialect;
        let mut used = 0;
        let mut first = self.placeholders;
        let condition = dialect.any_id(column, ids.len(), &mut || {
            first += 1;
            used += 1;
            dialect.placeholder(first)
        });
        self.placeholders += used;
        self.sql.push_str(" AND ");
        self.sql.push_str(&condition);
        if used == 1 {
            self.args.push(Arg::Ids(ids));
        } else {
            self.args.extend(ids.iter().map(|id| Arg::Int(*id)));
        }
        self
    }

    /// Appends raw text, with no placeholders in it.
    pub fn push_raw(&mut self, sql: &str) -> &mut Self {
        self.sql.push_str(sql);
        self
    }

    /// The dialect the statement is spelled in.
    pub fn dialect(&self) -> &'a dyn Dialect {
        self.dialect
    }

    /// The next placeholder, for a value bound later with [`Statement::bind`].
    pub fn next_placeholder(&mut self) -> String {
        self.placeholders += 1;
        self.dialect.placeholder(self.placeholders)
    }

    pub fn sql(&self) -> &str {
        &self.sql
    }

    pub fn args(&self) -> &[Arg<'a>] {
        debug_assert_eq!(
            self.placeholders,
            self.args.len(),
            "a placeholder without its value in {}",
            self.sql
        );
        &self.args
    }
}

/// A row read back by position (or by name, where a statement selects `*`): every integer
/// width as `i64`, every text encoding as `String`.
pub trait Cells {
    /// An integer column of any width and sign, as stored.
    fn opt_int<I: Column>(&self, column: I) -> Result<Option<i64>, StoreError>;
    fn opt_text<I: Column>(&self, column: I) -> Result<Option<String>, StoreError>;
    fn opt_bytes<I: Column>(&self, column: I) -> Result<Option<Vec<u8>>, StoreError>;

    fn bytes<I: Column>(&self, column: I) -> Result<Vec<u8>, StoreError> {
        self.opt_bytes(column)?.ok_or_else(|| null_column(column))
    }

    fn int<I: Column>(&self, column: I) -> Result<i64, StoreError> {
        self.opt_int(column)?.ok_or_else(|| null_column(column))
    }

    fn text<I: Column>(&self, column: I) -> Result<String, StoreError> {
        self.opt_text(column)?.ok_or_else(|| null_column(column))
    }
}

fn null_column(column: impl Column) -> StoreError {
    StoreError::Database(format!("column {column:?} is NULL where a value belongs"))
}

/// A column of a row: its position, or its name.
pub trait Column:
    sqlx::ColumnIndex<sqlx::sqlite::SqliteRow>
    + sqlx::ColumnIndex<sqlx::postgres::PgRow>
    + sqlx::ColumnIndex<sqlx::mysql::MySqlRow>
    + rusqlite::RowIndex
    + std::fmt::Debug
    + Copy
{
}

impl Column for usize {}
impl Column for &str {}

/// A backend that runs portable statements.
#[async_trait]
pub trait Portable: Send + Sync + 'static {
    type Row: Cells + Send + Sync;

    fn dialect(&self) -> &'static dyn Dialect;

    /// Runs a statement and returns its rows.
    async fn fetch(
        &self,
        via: Via,
        statement: &Statement<'_>,
    ) -> Result<Vec<Self::Row>, StoreError>;

    /// Runs a statement and returns how many rows it changed.
    async fn execute(&self, statement: &Statement<'_>) -> Result<u64, StoreError>;

    /// Runs statements in one transaction, in order; returns the rows each changed.
    async fn execute_all(&self, statements: &[Statement<'_>]) -> Result<Vec<u64>, StoreError>;

    /// Runs an `INSERT` of one row and returns the id the database assigned it.
    async fn insert_id(&self, statement: &Statement<'_>) -> Result<i64, StoreError>;

    /// A statement in this backend's dialect.
    fn statement<'a>(&self, sql: &str) -> Statement<'a> {
        Statement::new(self.dialect(), sql)
    }

    /// The first row of a statement, if any.
    async fn fetch_optional(
        &self,
        via: Via,
        statement: &Statement<'_>,
    ) -> Result<Option<Self::Row>, StoreError> {
        Ok(self.fetch(via, statement).await?.into_iter().next())
    }

    /// The one row a statement returns (an aggregate).
    async fn fetch_one(
        &self,
        via: Via,
        statement: &Statement<'_>,
    ) -> Result<Self::Row, StoreError> {
        self.fetch_optional(via, statement)
            .await?
            .ok_or_else(|| StoreError::Database(format!("no row from {}", statement.sql())))
    }
}

/// Implements [`Portable`] for an sqlx backend: `$store` has an inherent
/// `fn pool(&self, via: Via) -> &sqlx::Pool<_>` and its module a `fn bind(query, args)` that
/// binds the neutral [`Arg`]s to the driver's types. `insert_id` says how an insert hands back
/// its id: `returning` (`… RETURNING id`) or `last_insert_id` (the driver's OK packet).
/// A macro rather than a generic impl for the reason the module's doc gives.
macro_rules! sqlx_portable {
    ($store:ty, $row:ty, $dialect:expr, insert_id = $insert_id:ident) => {
        #[async_trait::async_trait]
        impl $crate::store::sql::Portable for $store {
            type Row = $row;

            fn dialect(&self) -> &'static dyn $crate::store::sql::Dialect {
                &$dialect
            }

            async fn fetch(
                &self,
                via: $crate::store::sql::Via,
                statement: &$crate::store::sql::Statement<'_>,
            ) -> Result<Vec<$row>, $crate::store::StoreError> {
                Ok(bind(sqlx::query(statement.sql()), statement.args())
                    .fetch_all(self.pool(via))
                    .await?)
            }

            async fn execute(
                &self,
                statement: &$crate::store::sql::Statement<'_>,
            ) -> Result<u64, $crate::store::StoreError> {
                Ok(bind(sqlx::query(statement.sql()), statement.args())
                    .execute(self.pool($crate::store::sql::Via::Writer))
                    .await?
                    .rows_affected())
            }

            async fn execute_all(
                &self,
                statements: &[$crate::store::sql::Statement<'_>],
            ) -> Result<Vec<u64>, $crate::store::StoreError> {
                let mut tx = self.pool($crate::store::sql::Via::Writer).begin().await?;
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

            async fn insert_id(
                &self,
                statement: &$crate::store::sql::Statement<'_>,
            ) -> Result<i64, $crate::store::StoreError> {
                sqlx_portable!(@insert_id $insert_id, self, statement)
            }
        }
    };
    (@insert_id returning, $self:ident, $statement:ident) => {{
        use $crate::store::sql::Cells;
        let sql = format!("{} RETURNING id", $statement.sql());
        bind(sqlx::query(&sql), $statement.args())
            .fetch_one($self.pool($crate::store::sql::Via::Writer))
            .await?
            .int(0)
    }};
    (@insert_id last_insert_id, $self:ident, $statement:ident) => {{
        let outcome = bind(sqlx::query($statement.sql()), $statement.args())
            .execute($self.pool($crate::store::sql::Via::Writer))
            .await?;
        Ok(i64::try_from(outcome.last_insert_id()).unwrap_or(i64::MAX))
    }};
}
pub(crate) use sqlx_portable;

/// A count as read back: below zero reads as zero.
pub fn count(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// A count as bound: BIGINT everywhere.
pub fn stored(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Numbered;

    impl Dialect for Numbered {
        fn placeholder(&self, n: usize) -> String {
            format!("${n}")
        }
        fn use_index(&self, _: &str) -> String {
            String::new()
        }
        fn any_id(&self, column: &str, _: usize, next: &mut dyn FnMut() -> String) -> String {
            format!("{column} = ANY({})", next())
        }
        fn contains(&self, haystack: &str, needle: &str) -> String {
            format!("strpos({haystack}, {needle}) > 0")
        }
        fn insert_or_keep(&self, insert: &str, _: &str) -> String {
            format!("{insert} ON CONFLICT DO NOTHING")
        }
        fn insert_or_replace(&self, _: &str, _: &[&str], _: &[&str], _: &str) -> String {
            String::new()
        }
        fn max_binds(&self) -> usize {
            10
        }
        fn task_columns(&self) -> &'static str {
            "*"
        }
        fn now_ms(&self) -> &'static str {
            "0"
        }
    }

    struct Questions;

    impl Dialect for Questions {
        fn placeholder(&self, _: usize) -> String {
            "?".into()
        }
        fn use_index(&self, _: &str) -> String {
            String::new()
        }
        fn any_id(&self, column: &str, count: usize, next: &mut dyn FnMut() -> String) -> String {
            let listed: Vec<String> = (0..count).map(|_| next()).collect();
            format!("{column} IN ({})", listed.join(", "))
        }
        fn contains(&self, haystack: &str, needle: &str) -> String {
            format!("LOCATE({needle}, {haystack}) > 0")
        }
        fn insert_or_keep(&self, insert: &str, _: &str) -> String {
            insert.into()
        }
        fn insert_or_replace(&self, _: &str, _: &[&str], _: &[&str], _: &str) -> String {
            String::new()
        }
        fn max_binds(&self) -> usize {
            10
        }
        fn task_columns(&self) -> &'static str {
            "*"
        }
        fn now_ms(&self) -> &'static str {
            "0"
        }
    }

    #[test]
    fn placeholders_are_numbered_in_order_and_lists_take_one_or_many() {
        let ids = [4, 5];
        let mut statement = Statement::new(&Numbered, "SELECT 1 WHERE a = ? AND b < ?");
        statement.bind(Arg::Int(1)).bind(Arg::Int(2));
        statement.and_any_id("id", &ids).push(" AND c = ?");
        statement.bind(Arg::Text("x"));
        assert_eq!(
            statement.sql(),
            "SELECT 1 WHERE a = $1 AND b < $2 AND id = ANY($3) AND c = $4"
        );
        assert_eq!(statement.args().len(), 4);

        let mut statement = Statement::new(&Questions, "SELECT 1 WHERE a = ?");
        statement.bind(Arg::Int(1)).and_any_id("id", &ids);
        assert_eq!(statement.sql(), "SELECT 1 WHERE a = ? AND id IN (?, ?)");
        assert_eq!(statement.args().len(), 3);
    }
}
