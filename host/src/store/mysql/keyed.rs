//! Tasks by idempotency key on MySQL/MariaDB (the key is VARBINARY: compared byte for byte).

use async_trait::async_trait;

use super::MySqlStore;
use crate::store::StoreError;
use crate::store::keyed::KeyLookup;
use crate::task::TaskId;

#[async_trait]
impl KeyLookup for MySqlStore {
    async fn task_with_key(
        &self,
        task_type: &str,
        key: &str,
    ) -> Result<Option<TaskId>, StoreError> {
        let row: Option<(i64,)> =
            sqlx::query_as("SELECT id FROM async_task WHERE task_type = ? AND idempotency_key = ?")
                .bind(task_type)
                .bind(key.as_bytes())
                .fetch_optional(&self.pool)
                .await?;
        Ok(row.map(|(id,)| id))
    }
}
