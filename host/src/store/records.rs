//! Attempt records for `spool replay` (`spool_attempt_record`): one per recorded attempt, the
//! tape's JSON ([`crate::sandbox::tape::Recording`]) with the build that ran, written once for
//! every backend in portable SQL.
//!
//! A record travels with its attempt's completion ([`crate::store::Completion::record`]): the
//! completion writer's batch writes the batch's records first, in one multi-row statement per
//! 100 records (PostgreSQL and MariaDB, here), or on SQLite's writer thread in the same
//! transaction as the completions (`sqlite/completion.rs`, with this module's statement), then
//! the completions. So a record is there by the time its task shows the attempt ended, and
//! keeping records costs a statement per batch rather than a transaction per attempt. A record is evidence for a person, not part of the task's state: a batch whose
//! records the database refuses is logged and its completions still apply. Each write also
//! drops the records of the same task from attempt 2 up to the attempt minus
//! [`super::history::KEPT_ATTEMPTS`], the attempt history's bound.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::Completion;
use super::StoreError;
use super::encoding::millis;
use super::history::trim_up_to;
use super::sql::{Arg, Cells, Dialect, Portable, Via};
use crate::task::TaskId;

/// The columns a record is saved with, in the order [`save_sql`] binds them.
const SAVE_COLUMNS: [&str; 7] = [
    "task_id",
    "attempt",
    "build",
    "record",
    "bytes",
    "truncated",
    "recorded_at",
];

/// Saves `rows` records (replacing any already there): per row, the values of
/// [`SAVE_COLUMNS`] in order, each a `?`.
pub fn save_sql(dialect: &dyn Dialect, rows: usize) -> String {
    let row = format!("({})", vec!["?"; SAVE_COLUMNS.len()].join(", "));
    dialect.insert_or_replace(
        "spool_attempt_record",
        &SAVE_COLUMNS,
        &["task_id", "attempt"],
        &vec![row; rows].join(", "),
    )
}

/// Drops a task's records from attempt 2 up to the second value
/// ([`super::history::trim_up_to`]): the first value is the task's id.
pub const TRIM: &str =
    "DELETE FROM spool_attempt_record WHERE task_id = ? AND attempt BETWEEN 2 AND ?";

/// The most records one multi-row statement writes (fewer where the backend binds fewer
/// values).
const RECORDS_PER_STATEMENT: usize = 100;

/// The most record bytes one statement carries (a larger record goes alone): well inside
/// MariaDB's default 16 MiB packet.
const BYTES_PER_STATEMENT: usize = 4 << 20;

/// `records` in runs of at most `most` records and [`BYTES_PER_STATEMENT`] bytes.
fn chunks<'a, 'r>(
    records: &'a [(TaskId, u32, &'r NewRecord)],
    most: usize,
) -> Vec<&'a [(TaskId, u32, &'r NewRecord)]> {
    let mut runs = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, (_, _, record)) in records.iter().enumerate() {
        let full =
            i - start == most || (i > start && bytes + record.json.len() > BYTES_PER_STATEMENT);
        if full {
            runs.push(&records[start..i]);
            (start, bytes) = (i, 0);
        }
        bytes += record.json.len();
    }
    if start < records.len() {
        runs.push(&records[start..]);
    }
    runs
}

/// An attempt's record as its completion carries it.
#[derive(Debug, Clone, PartialEq)]
pub struct NewRecord {
    /// Hex SHA-256 of the build that ran.
    pub build: String,
    /// The record as JSON.
    pub json: String,
    pub truncated: bool,
}

/// Writes the records a completion batch carries, before its completions. A refusal is
/// logged: the completions apply all the same.
pub async fn save_batch_records<S: AttemptRecords + ?Sized>(store: &S, batch: &[Completion]) {
    let records: Vec<(TaskId, u32, &NewRecord)> = batch
        .iter()
        .filter_map(|c| c.record.as_deref().map(|record| (c.id, c.attempt, record)))
        .collect();
    if records.is_empty() {
        return;
    }
    if let Err(error) = store.save_records(&records).await {
        tracing::warn!(
            records = records.len(),
            "attempt records were not kept: {error}"
        );
    }
}

/// One stored record.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredRecord {
    pub attempt: u32,
    /// Hex SHA-256 of the build that ran.
    pub build: String,
    /// The record as JSON (absent in listings).
    pub record: Option<String>,
    pub bytes: u64,
    pub truncated: bool,
    pub recorded_at: DateTime<Utc>,
}

/// Writing and reading attempt records.
#[async_trait]
pub trait AttemptRecords {
    /// Keeps the records of these attempts (replacing any already there).
    async fn save_records(&self, records: &[(TaskId, u32, &NewRecord)]) -> Result<(), StoreError>;

    /// The record of one attempt, if kept.
    async fn record(&self, task: TaskId, attempt: u32) -> Result<Option<StoredRecord>, StoreError>;

    /// The task's kept records without their contents, oldest attempt first.
    async fn records(&self, task: TaskId) -> Result<Vec<StoredRecord>, StoreError>;
}

#[async_trait]
impl<S: Portable> AttemptRecords for S {
    async fn save_records(&self, records: &[(TaskId, u32, &NewRecord)]) -> Result<(), StoreError> {
        let now = millis(Utc::now());
        let most =
            (self.dialect().max_binds() / SAVE_COLUMNS.len()).clamp(1, RECORDS_PER_STATEMENT);
        let mut statements = Vec::new();
        for chunk in chunks(records, most) {
            let mut save = self.statement(&save_sql(self.dialect(), chunk.len()));
            for (task, attempt, record) in chunk {
                save.bind(Arg::Int(*task))
                    .bind(Arg::Int(i64::from(*attempt)))
                    .bind(Arg::Text(&record.build))
                    .bind(Arg::Text(&record.json))
                    .bind(Arg::Int(
                        i64::try_from(record.json.len()).unwrap_or(i64::MAX),
                    ))
                    .bind(Arg::Int(i64::from(record.truncated)))
                    .bind(Arg::Int(now));
            }
            statements.push(save);
        }
        for (task, attempt, _) in records {
            if let Some(up_to) = trim_up_to(*attempt) {
                let mut trim = self.statement(TRIM);
                trim.bind(Arg::Int(*task)).bind(Arg::Int(i64::from(up_to)));
                statements.push(trim);
            }
        }
        self.execute_all(&statements).await?;
        Ok(())
    }

    async fn record(&self, task: TaskId, attempt: u32) -> Result<Option<StoredRecord>, StoreError> {
        let mut read = self.statement(
            "SELECT attempt, build, bytes, truncated, recorded_at, record \
             FROM spool_attempt_record WHERE task_id = ? AND attempt = ?",
        );
        read.bind(Arg::Int(task)).bind(Arg::Int(i64::from(attempt)));
        let row = self.fetch_optional(Via::Reader, &read).await?;
        row.map(|row| stored_from_row(task, &row, true)).transpose()
    }

    async fn records(&self, task: TaskId) -> Result<Vec<StoredRecord>, StoreError> {
        let mut read = self.statement(
            "SELECT attempt, build, bytes, truncated, recorded_at \
             FROM spool_attempt_record WHERE task_id = ? ORDER BY attempt",
        );
        read.bind(Arg::Int(task));
        let rows = self.fetch(Via::Reader, &read).await?;
        rows.iter()
            .map(|row| stored_from_row(task, row, false))
            .collect()
    }
}

fn stored_from_row(
    task: TaskId,
    row: &impl Cells,
    with_record: bool,
) -> Result<StoredRecord, StoreError> {
    let corrupt = |reason: String| StoreError::Corrupt { id: task, reason };
    let attempt = row.int(0)?;
    Ok(StoredRecord {
        attempt: u32::try_from(attempt)
            .map_err(|_| corrupt(format!("record attempt {attempt} is out of range")))?,
        build: row.text(1)?,
        bytes: u64::try_from(row.int(2)?).unwrap_or(0),
        truncated: row.int(3)? != 0,
        recorded_at: super::encoding::time_from_millis(task, row.int(4)?)?,
        record: if with_record {
            Some(row.text(5)?)
        } else {
            None
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_go_in_runs_bounded_by_count_and_bytes() {
        let small = NewRecord {
            build: "b".into(),
            json: "x".repeat(1000),
            truncated: false,
        };
        let big = NewRecord {
            json: "x".repeat(3 << 20),
            ..small.clone()
        };
        let records: Vec<_> = (0..250).map(|i| (i, 1, &small)).collect();
        let sizes: Vec<usize> = chunks(&records, 100).iter().map(|r| r.len()).collect();
        assert_eq!(sizes, [100, 100, 50]);
        let mixed = [(1, 1, &big), (2, 1, &big), (3, 1, &small), (4, 1, &big)];
        let sizes: Vec<usize> = chunks(&mixed, 100).iter().map(|r| r.len()).collect();
        assert_eq!(sizes, [1, 2, 1]);
        assert!(chunks(&[], 100).is_empty());
    }
}
