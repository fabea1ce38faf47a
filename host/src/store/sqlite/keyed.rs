//! Tasks by idempotency key on SQLite, through the read pool.

use async_trait::async_trait;

use super::SqliteStore;
use crate::store::StoreError;
use crate::store::keyed::KeyLookup;
use crate::task::TaskId;

#[async_trait]
impl KeyLookup for SqliteStore {
    async fn task_with_key(
        &self,
        task_type: &str,
        key: &str,
    ) -> Result<Option<TaskId>, StoreError> {
        let row: Option<(i64,)> =
            sqlx::query_as("SELECT id FROM async_task WHERE task_type = ? AND idempotency_key = ?")
                .bind(task_type)
                .bind(key)
                .fetch_optional(&self.reader)
                .await?;
        Ok(row.map(|(id,)| id))
    }
}
