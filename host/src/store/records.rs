//! Attempt records for `spool replay` (`spool_attempt_record`): one per recorded attempt, the
//! tape's JSON ([`crate::sandbox::tape::Recording`]) with the build that ran, written once for
//! every backend in portable SQL.
//!
//! A record is written by the host that ran the attempt, after the attempt ended and before its
//! completion is queued, in a statement of its own: a record is evidence for a person, not
//! part of the task's state, so the queue's hot path (the completion batch) does not carry
//! it. A host killed between the two leaves a record of an attempt the history then shows as
//! rescued. Each write also drops the records of the same task from attempt 2 up to the
//! attempt minus [`super::history::KEPT_ATTEMPTS`], the attempt history's bound.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::StoreError;
use super::encoding::millis;
use super::history::trim_up_to;
use super::sql::{Arg, Cells, Portable, Via};
use crate::task::TaskId;

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
    /// Keeps the record of `attempt` of task `task` (replacing one already there).
    async fn save_record(
        &self,
        task: TaskId,
        attempt: u32,
        build: &str,
        record: &str,
        truncated: bool,
    ) -> Result<(), StoreError>;

    /// The record of one attempt, if kept.
    async fn record(&self, task: TaskId, attempt: u32) -> Result<Option<StoredRecord>, StoreError>;

    /// The task's kept records without their contents, oldest attempt first.
    async fn records(&self, task: TaskId) -> Result<Vec<StoredRecord>, StoreError>;
}

#[async_trait]
impl<S: Portable> AttemptRecords for S {
    async fn save_record(
        &self,
        task: TaskId,
        attempt: u32,
        build: &str,
        record: &str,
        truncated: bool,
    ) -> Result<(), StoreError> {
        let columns = [
            "task_id",
            "attempt",
            "build",
            "record",
            "bytes",
            "truncated",
            "recorded_at",
        ];
        let mut save = self.statement(&self.dialect().insert_or_replace(
            "spool_attempt_record",
            &columns,
            &["task_id", "attempt"],
            "(?, ?, ?, ?, ?, ?, ?)",
        ));
        save.bind(Arg::Int(task))
            .bind(Arg::Int(i64::from(attempt)))
            .bind(Arg::Text(build))
            .bind(Arg::Text(record))
            .bind(Arg::Int(i64::try_from(record.len()).unwrap_or(i64::MAX)))
            .bind(Arg::Int(i64::from(truncated)))
            .bind(Arg::Int(millis(Utc::now())));
        let mut statements = vec![save];
        if let Some(up_to) = trim_up_to(attempt) {
            let mut trim = self.statement(
                "DELETE FROM spool_attempt_record WHERE task_id = ? AND attempt BETWEEN 2 AND ?",
            );
            trim.bind(Arg::Int(task)).bind(Arg::Int(i64::from(up_to)));
            statements.push(trim);
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
