//! The INSERT on each database: [`Database`], implemented for SQLite, PostgreSQL and
//! MySQL/MariaDB (each behind its cargo feature), and sealed: these three are what a Spool
//! host serves.
//!
//! Every database inserts the same columns (see [`columns`]) and answers a known idempotency
//! key with the existing task's id, leaving that row alone. The keys table (`async_task_key`)
//! holds a key for as long as its task exists, archived tasks included: PostgreSQL and MySQL
//! look the key up there first; SQLite when the table refuses the insert (see its `insert`).
//! Then:
//!
//! - SQLite and PostgreSQL: `INSERT … ON CONFLICT DO NOTHING RETURNING id`. No row back means
//!   the key exists; a `SELECT` then reads its id. (`ON CONFLICT DO NOTHING` skips only unique
//!   conflicts: a NOT NULL or CHECK violation still fails, unlike `INSERT OR IGNORE`.) On
//!   PostgreSQL a concurrent transaction inserting the same key makes this one wait for it;
//!   under READ COMMITTED the `SELECT` then sees its row; under REPEATABLE READ and
//!   SERIALIZABLE PostgreSQL reports a serialization failure, which the application retries.
//! - MySQL/MariaDB: `INSERT … ON DUPLICATE KEY UPDATE id = id`, which changes nothing on a
//!   duplicate. Its answer carries the new id for an insert and 0 for a duplicate (no
//!   `RETURNING` on MySQL, and sqlx's `CLIENT_FOUND_ROWS` makes the affected-row count 1 in both
//!   cases, so the id is the signal). The `SELECT` for a duplicate's id is a locking read
//!   (`FOR UPDATE`): it sees the latest committed row, not the transaction's REPEATABLE READ
//!   snapshot, and the INSERT already holds that row's lock.

use std::future::Future;

use crate::task::Row;
use crate::{Enqueued, Error};

mod sealed {
    /// Only the databases a Spool host serves implement [`super::Database`].
    pub trait Sealed {}
}

/// A database [`enqueue`](crate::enqueue) writes to: `sqlx::Sqlite`, `sqlx::Postgres` and
/// `sqlx::MySql` (MySQL 8.0+ and MariaDB 10.6+), each behind the cargo feature of the same
/// name. Sealed: it cannot be implemented outside this crate.
///
/// `sqlx::Any` is not one: its driver-independent types cannot express the per-database
/// statements (`RETURNING` on two databases, `ON DUPLICATE KEY` on the third).
pub trait Database: sqlx::Database + sealed::Sealed {
    /// Inserts one checked row on `conn`.
    #[doc(hidden)]
    fn insert<'a>(
        conn: &'a mut Self::Connection,
        row: &'a Row<'a>,
    ) -> impl Future<Output = Result<Enqueued, Error>> + Send + 'a;
}

/// One value of the INSERT.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Value<'a> {
    Text(&'a str),
    /// JSON text (PostgreSQL casts it, so `json`, `jsonb` and `text` columns all take it).
    Json(&'a str),
    BigInt(i64),
    Int(i32),
}

/// The columns a row sets, in statement order. Type, payload and the three times always; the
/// optional ones only when the task sets them, so that the table's defaults apply otherwise,
/// exactly as for a plain `INSERT INTO async_task (task_type, payload)` by hand. The times
/// are written, not left to the defaults, so that `delay` and the enqueue time come from the
/// same clock.
fn columns<'a>(row: &Row<'a>) -> Vec<(&'static str, Value<'a>)> {
    let mut columns = vec![
        ("task_type", Value::Text(row.task_type)),
        ("payload", Value::Json(row.payload)),
        ("next_run_at", Value::BigInt(row.next_run_at)),
        ("created_at", Value::BigInt(row.now)),
        ("updated_at", Value::BigInt(row.now)),
    ];
    if let Some(priority) = row.priority {
        columns.push(("priority", Value::Int(priority)));
    }
    if let Some(max_retry) = row.max_retry {
        columns.push(("max_retry", Value::BigInt(i64::from(max_retry))));
    }
    if let Some(key) = row.idempotency_key {
        columns.push(("idempotency_key", Value::Text(key)));
    }
    columns
}

/// `INSERT INTO async_task (…) VALUES (…)` with the database's placeholders (`placeholder`
/// gets the 1-based position and the value).
fn insert_statement(
    columns: &[(&str, Value<'_>)],
    placeholder: impl Fn(usize, &Value<'_>) -> String,
) -> String {
    let names: Vec<&str> = columns.iter().map(|(name, _)| *name).collect();
    let values: Vec<String> = columns
        .iter()
        .enumerate()
        .map(|(i, (_, value))| placeholder(i + 1, value))
        .collect();
    format!(
        "INSERT INTO async_task ({}) VALUES ({})",
        names.join(", "),
        values.join(", ")
    )
}

/// Binds the columns' values to a query, in order.
macro_rules! bind_columns {
    ($query:expr, $columns:expr) => {{
        let mut query = $query;
        for (_, value) in $columns {
            query = match *value {
                Value::Text(text) | Value::Json(text) => query.bind(text),
                Value::BigInt(number) => query.bind(number),
                Value::Int(number) => query.bind(number),
            };
        }
        query
    }};
}

/// The answer for a key that already exists: its task's id, read with `lookup` (binds: task
/// type, key).
macro_rules! existing_task {
    ($conn:expr, $lookup:expr, $row:expr) => {{
        let Some(key) = $row.idempotency_key else {
            // Only a unique conflict skips the insert, and only the key is unique.
            return Err(Error::Database(sqlx::Error::Protocol(
                "the database inserted no row and reported no conflict".into(),
            )));
        };
        let id: Option<i64> = sqlx::query_scalar($lookup)
            .bind($row.task_type)
            .bind(key)
            .fetch_optional(&mut *$conn)
            .await?;
        match id {
            Some(id) => Ok(Enqueued {
                id,
                duplicate: true,
            }),
            None => Err(Error::DuplicateNotVisible {
                task_type: $row.task_type.to_string(),
                key: key.to_string(),
            }),
        }
    }};
}

/// Returns the answer for a key a task already holds, live or archived, from the keys table
/// `async_task_key` (binds: task type, key), which keeps a key until its task is purged: the
/// live table's unique index forgets it when the task is archived, and the insert would fail.
macro_rules! return_if_key_is_held {
    ($conn:expr, $lookup:expr, $row:expr) => {
        if let Some(key) = $row.idempotency_key {
            let held: Option<i64> = sqlx::query_scalar($lookup)
                .bind($row.task_type)
                .bind(key)
                .fetch_optional(&mut *$conn)
                .await?;
            if let Some(id) = held {
                return Ok(Enqueued {
                    id,
                    duplicate: true,
                });
            }
        }
    };
}

#[cfg(feature = "sqlite")]
impl sealed::Sealed for sqlx::Sqlite {}

#[cfg(feature = "sqlite")]
impl Database for sqlx::Sqlite {
    async fn insert<'a>(
        conn: &'a mut sqlx::SqliteConnection,
        row: &'a Row<'a>,
    ) -> Result<Enqueued, Error> {
        let columns = columns(row);
        let sql = format!(
            "{} ON CONFLICT DO NOTHING RETURNING id",
            insert_statement(&columns, |_, _| "?".into())
        );
        // Insert first, and look the key up only when the keys table refused it: a read before
        // the insert would make this transaction a reader that cannot become the writer while
        // another one writes (SQLite answers BUSY at once instead of waiting its turn). A
        // refused statement is undone alone; the transaction goes on.
        let inserted = bind_columns!(sqlx::query_scalar(&sql), &columns)
            .fetch_optional(&mut *conn)
            .await;
        let id: Option<i64> = match inserted {
            Err(error) if error.to_string().contains("async_task_key") => {
                return_if_key_is_held!(
                    conn,
                    "SELECT task_id FROM async_task_key WHERE task_type = ? AND idempotency_key = ?",
                    row
                );
                return Err(error.into());
            }
            other => other?,
        };
        match id {
            Some(id) => Ok(Enqueued {
                id,
                duplicate: false,
            }),
            None => existing_task!(
                conn,
                "SELECT id FROM async_task WHERE task_type = ? AND idempotency_key = ?",
                row
            ),
        }
    }
}

#[cfg(feature = "postgres")]
impl sealed::Sealed for sqlx::Postgres {}

#[cfg(feature = "postgres")]
impl Database for sqlx::Postgres {
    async fn insert<'a>(
        conn: &'a mut sqlx::PgConnection,
        row: &'a Row<'a>,
    ) -> Result<Enqueued, Error> {
        return_if_key_is_held!(
            conn,
            "SELECT CAST(task_id AS BIGINT) FROM async_task_key WHERE task_type = $1 AND idempotency_key = $2",
            row
        );
        let columns = columns(row);
        // sqlx sends a Rust string as `text`, which PostgreSQL does not assign to a `jsonb`
        // or `json` column by itself; cast through `json` (which keeps the text as given
        // where the column stores text).
        let placeholder = |n: usize, value: &Value<'_>| match value {
            Value::Json(_) => format!("CAST(${n} AS JSON)"),
            _ => format!("${n}"),
        };
        let sql = format!(
            "{} ON CONFLICT DO NOTHING RETURNING CAST(id AS BIGINT)",
            insert_statement(&columns, placeholder)
        );
        let id: Option<i64> = bind_columns!(sqlx::query_scalar(&sql), &columns)
            .fetch_optional(&mut *conn)
            .await?;
        match id {
            Some(id) => Ok(Enqueued {
                id,
                duplicate: false,
            }),
            None => existing_task!(
                conn,
                "SELECT CAST(id AS BIGINT) FROM async_task WHERE task_type = $1 AND idempotency_key = $2",
                row
            ),
        }
    }
}

#[cfg(feature = "mysql")]
impl sealed::Sealed for sqlx::MySql {}

#[cfg(feature = "mysql")]
impl Database for sqlx::MySql {
    async fn insert<'a>(
        conn: &'a mut sqlx::MySqlConnection,
        row: &'a Row<'a>,
    ) -> Result<Enqueued, Error> {
        return_if_key_is_held!(
            conn,
            "SELECT CAST(task_id AS SIGNED) FROM async_task_key WHERE task_type = ? AND idempotency_key = ?",
            row
        );
        let columns = columns(row);
        let sql = format!(
            "{} ON DUPLICATE KEY UPDATE id = id",
            insert_statement(&columns, |_, _| "?".into())
        );
        let done = bind_columns!(sqlx::query(&sql), &columns)
            .execute(&mut *conn)
            .await?;
        match i64::try_from(done.last_insert_id()) {
            Ok(id) if id > 0 => Ok(Enqueued {
                id,
                duplicate: false,
            }),
            _ => existing_task!(
                conn,
                "SELECT CAST(id AS SIGNED) FROM async_task WHERE task_type = ? AND idempotency_key = ? FOR UPDATE",
                row
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(priority: Option<i32>, key: Option<&'static str>) -> Row<'static> {
        Row {
            task_type: "report",
            payload: "{}",
            priority,
            max_retry: None,
            next_run_at: 2,
            now: 1,
            idempotency_key: key,
        }
    }

    #[test]
    fn statements_name_only_the_columns_the_task_sets() {
        let plain = columns(&row(None, None));
        assert_eq!(
            insert_statement(&plain, |_, _| "?".into()),
            "INSERT INTO async_task (task_type, payload, next_run_at, created_at, updated_at) VALUES (?, ?, ?, ?, ?)"
        );
        let keyed = columns(&row(Some(7), Some("k")));
        let postgres = insert_statement(&keyed, |n, value| match value {
            Value::Json(_) => format!("CAST(${n} AS JSON)"),
            _ => format!("${n}"),
        });
        assert_eq!(
            postgres,
            "INSERT INTO async_task (task_type, payload, next_run_at, created_at, updated_at, priority, idempotency_key) \
             VALUES ($1, CAST($2 AS JSON), $3, $4, $5, $6, $7)"
        );
        assert_eq!(keyed[5].1, Value::Int(7));
        assert_eq!(keyed[6].1, Value::Text("k"));
    }
}
