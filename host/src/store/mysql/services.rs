//! The host services' tables: the effect ledger, the key-value store per task type, host-wide
//! values (first writer wins) and leadership leases.
//!
//! Keys are VARBINARY and bound as bytes, so they compare exactly as given. Upserts use
//! `ON DUPLICATE KEY UPDATE`, which locks the existing row exclusively before it decides: two
//! hosts inserting the same key at once are serialized, and the second sees the first's row.
//! Its assignments never read another column of the row (MySQL would apply them left to right,
//! each seeing the ones before it); where a decision depends on the stored row, it is a plain
//! `UPDATE … WHERE`, whose condition reads the row as it was.

use chrono::{DateTime, Utc};
use std::time::Duration;

use super::MySqlStore;
use super::rows::{Text, millis};
use crate::store::StoreError;
use crate::task::TaskId;

impl MySqlStore {
    pub(super) async fn is_effect_recorded(
        &self,
        task_type: &str,
        key: &str,
    ) -> Result<bool, StoreError> {
        let row: Option<(i64,)> = sqlx::query_as(
            "SELECT task_id FROM effect_ledger WHERE task_type = ? AND effect_key = ?",
        )
        .bind(task_type)
        .bind(key.as_bytes())
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.is_some())
    }

    pub(super) async fn write_effect(
        &self,
        task_type: &str,
        key: &str,
        task_id: TaskId,
    ) -> Result<(), StoreError> {
        // The first record stays (the assignment keeps the stored value).
        sqlx::query(
            "INSERT INTO effect_ledger (task_type, effect_key, task_id, recorded_at) VALUES (?, ?, ?, ?) \
             ON DUPLICATE KEY UPDATE task_id = task_id",
        )
        .bind(task_type)
        .bind(key.as_bytes())
        .bind(task_id)
        .bind(millis(Utc::now()))
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    pub(super) async fn read_kv(
        &self,
        task_type: &str,
        key: &str,
    ) -> Result<Option<String>, StoreError> {
        let row: Option<(Text,)> =
            sqlx::query_as("SELECT kv_value FROM task_kv WHERE task_type = ? AND kv_key = ?")
                .bind(task_type)
                .bind(key.as_bytes())
                .fetch_optional(&self.pool)
                .await?;
        Ok(row.map(|(Text(value),)| value))
    }

    pub(super) async fn write_kv(
        &self,
        task_type: &str,
        key: &str,
        value: &str,
    ) -> Result<(), StoreError> {
        let now = millis(Utc::now());
        sqlx::query(
            "INSERT INTO task_kv (task_type, kv_key, kv_value, updated_at) VALUES (?, ?, ?, ?) \
             ON DUPLICATE KEY UPDATE kv_value = ?, updated_at = ?",
        )
        .bind(task_type)
        .bind(key.as_bytes())
        .bind(value)
        .bind(now)
        .bind(value)
        .bind(now)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    pub(super) async fn delete_kv(&self, task_type: &str, key: &str) -> Result<bool, StoreError> {
        let outcome = sqlx::query("DELETE FROM task_kv WHERE task_type = ? AND kv_key = ?")
            .bind(task_type)
            .bind(key.as_bytes())
            .execute(&self.pool)
            .await?;
        Ok(outcome.rows_affected() > 0)
    }

    pub(super) async fn first_meta_value(
        &self,
        name: &str,
        value: &str,
    ) -> Result<String, StoreError> {
        // Waits for a concurrent first insert of the same name to commit, then keeps it; so the
        // read after it sees the committed winner.
        sqlx::query("INSERT INTO spool_meta (name, value) VALUES (?, ?) ON DUPLICATE KEY UPDATE name = name")
            .bind(name)
            .bind(value)
            .execute(&self.pool)
            .await?;
        let (Text(stored),): (Text,) =
            sqlx::query_as("SELECT value FROM spool_meta WHERE name = ?")
                .bind(name)
                .fetch_one(&self.pool)
                .await?;
        Ok(stored)
    }

    pub(super) async fn take_or_renew_lead(
        &self,
        role: &str,
        owner: &str,
        now: DateTime<Utc>,
        lease: Duration,
    ) -> Result<String, StoreError> {
        let until = millis(now + crate::task::chrono_duration(lease));
        let mut tx = self.pool.begin().await?;
        // The row exists afterwards (ours if there was none) and is locked by this transaction.
        sqlx::query("INSERT INTO spool_leader (role, owner, expires_at) VALUES (?, ?, ?) ON DUPLICATE KEY UPDATE role = role")
            .bind(role)
            .bind(owner)
            .bind(until)
            .execute(&mut *tx)
            .await?;
        // Renew our own lease, or take over an expired one.
        sqlx::query("UPDATE spool_leader SET owner = ?, expires_at = ? WHERE role = ? AND (owner = ? OR expires_at < ?)")
            .bind(owner)
            .bind(until)
            .bind(role)
            .bind(owner)
            .bind(millis(now))
            .execute(&mut *tx)
            .await?;
        let (Text(leader),): (Text,) =
            sqlx::query_as("SELECT owner FROM spool_leader WHERE role = ?")
                .bind(role)
                .fetch_one(&mut *tx)
                .await?;
        tx.commit().await?;
        Ok(leader)
    }

    pub(super) async fn give_up_lead(&self, role: &str, owner: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM spool_leader WHERE role = ? AND owner = ?")
            .bind(role)
            .bind(owner)
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}
