//! Finding a task by its idempotency key: one lookup on the unique index
//! `(task_type, idempotency_key)` every backend has. The scheduler's keys name a schedule and a
//! tick ([`crate::schedule::Schedule::idempotency_key`]), so any host, leading or not, can say
//! which task a tick enqueued. One implementation in portable SQL serves every backend.

use async_trait::async_trait;

use super::StoreError;
use super::sql::{Arg, Cells, Portable, Via};
use crate::task::TaskId;

/// Tasks by idempotency key.
#[async_trait]
pub trait KeyLookup {
    /// The task of `task_type` whose idempotency key is exactly `key`, in the live table.
    async fn task_with_key(&self, task_type: &str, key: &str)
    -> Result<Option<TaskId>, StoreError>;
}

#[async_trait]
impl<S: Portable> KeyLookup for S {
    async fn task_with_key(
        &self,
        task_type: &str,
        key: &str,
    ) -> Result<Option<TaskId>, StoreError> {
        let mut statement =
            self.statement("SELECT id FROM async_task WHERE task_type = ? AND idempotency_key = ?");
        statement.bind(Arg::Text(task_type)).bind(Arg::Key(key));
        let row = self.fetch_optional(Via::Reader, &statement).await?;
        row.map(|row| row.int(0)).transpose()
    }
}
