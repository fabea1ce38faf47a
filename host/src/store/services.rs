//! The host services' tables, which handlers reach through the host: the effect ledger (an
//! effect recorded done is never repeated, `docs/guarantees.md`) and the key-value store of
//! each task type. One implementation in portable SQL ([`super::sql`]) serves every backend.
//!
//! Reads go through the writer ([`Via::Writer`]): a handler that records an effect or writes
//! a key and reads it back a moment later must see its own write, which SQLite's read pool may
//! not yet. Keys are bound as [`Arg::Key`] (bytes in MySQL's `VARBINARY` columns), so they
//! compare exactly as given on every backend.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::StoreError;
use super::encoding::millis;
use super::sql::{Arg, Cells, Portable, Via, count};
use crate::task::TaskId;

/// What a task type keeps in its key-value store.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KvUsage {
    pub keys: u64,
    /// Bytes of keys and values together.
    pub bytes: u64,
}

/// The effect ledger and the key-value store.
#[async_trait]
pub trait HostServices: Send + Sync {
    /// Whether the effect `key` of `task_type` was recorded as done.
    async fn effect_done(&self, task_type: &str, key: &str) -> Result<bool, StoreError>;

    /// Records the effect `key` of `task_type` as done (committed before returning). A second
    /// record of the same key keeps the first.
    async fn record_effect(
        &self,
        task_type: &str,
        key: &str,
        task_id: TaskId,
    ) -> Result<(), StoreError>;

    /// Forgets the effects of `task_type` recorded before `before`; returns how many.
    async fn prune_effects(
        &self,
        task_type: &str,
        before: DateTime<Utc>,
    ) -> Result<u64, StoreError>;

    /// Reads a key of a task type's key-value store.
    async fn kv_get(&self, task_type: &str, key: &str) -> Result<Option<String>, StoreError>;

    /// Writes a key of a task type's key-value store.
    async fn kv_set(&self, task_type: &str, key: &str, value: &str) -> Result<(), StoreError>;

    /// Deletes a key; true when it existed.
    async fn kv_delete(&self, task_type: &str, key: &str) -> Result<bool, StoreError>;

    /// What a task type keeps in its key-value store: how many keys, and the bytes of its keys
    /// and values together (as UTF-8).
    async fn kv_usage(&self, task_type: &str) -> Result<KvUsage, StoreError>;
}

#[async_trait]
impl<S: Portable> HostServices for S {
    async fn effect_done(&self, task_type: &str, key: &str) -> Result<bool, StoreError> {
        let mut statement =
            self.statement("SELECT 1 FROM effect_ledger WHERE task_type = ? AND effect_key = ?");
        statement.bind(Arg::Text(task_type)).bind(Arg::Key(key));
        Ok(self
            .fetch_optional(Via::Writer, &statement)
            .await?
            .is_some())
    }

    async fn record_effect(
        &self,
        task_type: &str,
        key: &str,
        task_id: TaskId,
    ) -> Result<(), StoreError> {
        // Autocommitted: committed (and durable as the database's settings make commits) on
        // return.
        let mut statement = self.statement(&self.dialect().insert_or_keep(
            "INSERT INTO effect_ledger (task_type, effect_key, task_id, recorded_at) \
             VALUES (?, ?, ?, ?)",
            "task_id",
        ));
        statement
            .bind(Arg::Text(task_type))
            .bind(Arg::Key(key))
            .bind(Arg::Int(task_id))
            .bind(Arg::Int(millis(Utc::now())));
        self.execute(&statement).await?;
        Ok(())
    }

    async fn prune_effects(
        &self,
        task_type: &str,
        before: DateTime<Utc>,
    ) -> Result<u64, StoreError> {
        let mut statement =
            self.statement("DELETE FROM effect_ledger WHERE task_type = ? AND recorded_at < ?");
        statement
            .bind(Arg::Text(task_type))
            .bind(Arg::Int(millis(before)));
        self.execute(&statement).await
    }

    async fn kv_get(&self, task_type: &str, key: &str) -> Result<Option<String>, StoreError> {
        let mut statement =
            self.statement("SELECT kv_value FROM task_kv WHERE task_type = ? AND kv_key = ?");
        statement.bind(Arg::Text(task_type)).bind(Arg::Key(key));
        match self.fetch_optional(Via::Writer, &statement).await? {
            Some(row) => Ok(Some(row.text(0)?)),
            None => Ok(None),
        }
    }

    async fn kv_set(&self, task_type: &str, key: &str, value: &str) -> Result<(), StoreError> {
        let mut statement = self.statement(&self.dialect().insert_or_replace(
            "task_kv",
            &["task_type", "kv_key", "kv_value", "updated_at"],
            &["task_type", "kv_key"],
            "(?, ?, ?, ?)",
        ));
        statement
            .bind(Arg::Text(task_type))
            .bind(Arg::Key(key))
            .bind(Arg::Text(value))
            .bind(Arg::Int(millis(Utc::now())));
        self.execute(&statement).await?;
        Ok(())
    }

    async fn kv_delete(&self, task_type: &str, key: &str) -> Result<bool, StoreError> {
        let mut statement =
            self.statement("DELETE FROM task_kv WHERE task_type = ? AND kv_key = ?");
        statement.bind(Arg::Text(task_type)).bind(Arg::Key(key));
        Ok(self.execute(&statement).await? > 0)
    }

    async fn kv_usage(&self, task_type: &str) -> Result<KvUsage, StoreError> {
        // Kept with every write by triggers on task_kv (the kv_usage migrations).
        let mut statement =
            self.statement("SELECT kv_keys, kv_bytes FROM task_kv_usage WHERE task_type = ?");
        statement.bind(Arg::Text(task_type));
        Ok(match self.fetch_optional(Via::Writer, &statement).await? {
            Some(row) => KvUsage {
                keys: count(row.int(0)?),
                bytes: count(row.int(1)?),
            },
            None => KvUsage { keys: 0, bytes: 0 },
        })
    }
}
