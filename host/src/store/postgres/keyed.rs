//! Tasks by idempotency key on PostgreSQL.

use async_trait::async_trait;

use super::PgStore;
use crate::store::StoreError;
use crate::store::keyed::KeyLookup;
use crate::task::TaskId;

#[async_trait]
impl KeyLookup for PgStore {
    async fn task_with_key(
        &self,
        task_type: &str,
        key: &str,
    ) -> Result<Option<TaskId>, StoreError> {
        let row: Option<(i64,)> = sqlx::query_as(
            "SELECT id FROM async_task WHERE task_type = $1 AND idempotency_key = $2",
        )
        .bind(task_type)
        .bind(key)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|(id,)| id))
    }
}
