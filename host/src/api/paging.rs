//! Byte-bounded paging of task listings (`GET /tasks`): a page ends at its `limit` or once its
//! tasks' data reaches [`PAGE_BYTES`], and rows are read from the store a few at a time so that
//! a listing never holds much more than [`READ_BYTES`] of rows, however large each may be.

use crate::config::Config;
use crate::store::{Store, StoreError, TaskFilter};
use crate::task::{Task, TaskId};

/// Default and largest page of a listing, in tasks.
pub const DEFAULT_PAGE: usize = 50;
pub const MAX_PAGE: usize = 1000;
/// A listing page stops taking tasks once their payloads, results, logs and errors would pass
/// this many bytes (a page holds at least one task, however large).
pub const PAGE_BYTES: usize = 4 << 20;
/// Tasks are read from the database a few at a time while a page fills, so that a listing
/// holds about this many bytes of rows at once even when every row is as large as allowed.
const READ_BYTES: usize = 16 << 20;
/// What an attempt's error and progress note may add to a row, beyond payload, result and log.
const ROW_EXTRA_BYTES: usize = 64 << 10;

/// The most a row may weigh on a host with this configuration.
pub fn largest_row(config: &Config) -> usize {
    config.max_payload
        + config.max_result
        + crate::sandbox::output::DEFAULT_LOG_LIMIT
        + ROW_EXTRA_BYTES
}

/// Reads the page `filter` selects (`filter.limit` tasks at most, newest first), in reads of
/// as many rows as fit [`READ_BYTES`] were each `largest_row` bytes; returns the page and,
/// when more tasks follow, the id to continue before.
pub async fn read_page(
    store: &dyn Store,
    mut filter: TaskFilter,
    largest_row: usize,
) -> Result<(Vec<Task>, Option<TaskId>), StoreError> {
    let limit = filter.limit;
    let per_read = (READ_BYTES / largest_row).clamp(1, limit);
    let mut page: Vec<Task> = Vec::new();
    let mut bytes = 0;
    let more = 'fill: loop {
        filter.limit = per_read.min(limit - page.len());
        let tasks = store.list(&filter).await?;
        let exhausted = tasks.len() < filter.limit;
        for task in tasks {
            let size = data_bytes(&task);
            if !page.is_empty() && bytes + size > PAGE_BYTES {
                break 'fill true;
            }
            bytes += size;
            filter.before_id = Some(task.id);
            page.push(task);
        }
        if exhausted {
            break false;
        }
        if page.len() == limit {
            break true;
        }
    };
    let next_before = if more {
        page.last().map(|t| t.id)
    } else {
        None
    };
    Ok((page, next_before))
}

/// What a task's data weighs in a listing: its payload (as JSON), result, log, error and
/// progress note.
fn data_bytes(task: &Task) -> usize {
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut payload = Counter(0);
    let _ = serde_json::to_writer(&mut payload, &task.payload);
    let text = |field: &Option<String>| field.as_ref().map_or(0, String::len);
    payload.0
        + text(&task.result)
        + text(&task.log)
        + text(&task.last_error)
        + text(&task.progress_note)
}
