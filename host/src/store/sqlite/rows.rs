//! Task rows as the writer thread reads them (through rusqlite, not sqlx): rusqlite's rows
//! answer [`Cells`], so they decode into the neutral [`TaskRow`] by the one reader every
//! backend uses.

use rusqlite::Row;

use crate::store::StoreError;
use crate::store::rows::TaskRow;
use crate::store::sql::{Cells, Column};

impl Cells for Row<'_> {
    fn opt_int<I: Column>(&self, column: I) -> Result<Option<i64>, StoreError> {
        Ok(self.get(column)?)
    }

    fn opt_text<I: Column>(&self, column: I) -> Result<Option<String>, StoreError> {
        Ok(self.get(column)?)
    }

    fn opt_bytes<I: Column>(&self, column: I) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.get(column)?)
    }
}

/// Every `async_task` row a statement returns.
pub(super) fn task_rows(mut rows: rusqlite::Rows<'_>) -> Result<Vec<TaskRow>, StoreError> {
    let mut read = Vec::new();
    while let Some(row) = rows.next()? {
        read.push(TaskRow::read(row)?);
    }
    Ok(read)
}
