//! What hosts sharing one database agree on: host-wide values the first host decides
//! (`spool_meta`), and leadership leases (`spool_leader`) that make one host at a time run the
//! upkeep (`worker/upkeep/leader.rs`). One implementation in portable SQL ([`super::sql`])
//! serves every backend.
//!
//! Each decision is an insert that keeps an existing row, then (for leadership) an `UPDATE …
//! WHERE` whose condition reads the stored row, in one transaction. On the server databases
//! at READ COMMITTED the insert waits for a concurrent insert of the same key to commit and
//! then does nothing, and the update re-reads the row it waited for, so two hosts never both
//! win; on SQLite the single writer serializes them.

use async_trait::async_trait;
use std::time::Duration;

use super::StoreError;
use super::sql::{Arg, Cells, Portable, Via};

/// Host-wide values and leadership.
#[async_trait]
pub trait Coordination: Send + Sync {
    /// Checks that the database answers (a statement on the read connections).
    async fn ping(&self) -> Result<(), StoreError>;

    /// Returns the value stored under `name`, storing `value` first if there is none (the
    /// first host to ask decides; every later caller gets the same answer).
    async fn meta_get_or_insert(&self, name: &str, value: &str) -> Result<String, StoreError>;

    /// The value stored under `name`, if any.
    async fn meta_get(&self, name: &str) -> Result<Option<String>, StoreError>;

    /// Stores `value` under `name`, replacing what was there (the latest writer wins).
    async fn meta_set(&self, name: &str, value: &str) -> Result<(), StoreError>;

    /// Takes or renews the leadership of `role` for `owner` for `lease` from now, if nobody
    /// else holds an unexpired lease on it. Returns the leader after the attempt (`owner` when
    /// it leads). Both the lease's end and the test for an expired one are on the database's
    /// clock, so a host whose clock runs ahead cannot take over from a leader that renews.
    async fn lead(&self, role: &str, owner: &str, lease: Duration) -> Result<String, StoreError>;

    /// Gives up the leadership of `role` if `owner` holds it, so another host takes over at
    /// once instead of after the lease.
    async fn resign(&self, role: &str, owner: &str) -> Result<(), StoreError>;
}

#[async_trait]
impl<S: Portable> Coordination for S {
    async fn ping(&self) -> Result<(), StoreError> {
        self.fetch_one(Via::Reader, &self.statement("SELECT 1"))
            .await
            .map(drop)
    }

    async fn meta_get_or_insert(&self, name: &str, value: &str) -> Result<String, StoreError> {
        // Two statements: an insert that waited for a concurrent host's row cannot read that
        // row in its own snapshot; the read after it, in a new one, can.
        let mut insert = self.statement(
            &self
                .dialect()
                .insert_or_keep("INSERT INTO spool_meta (name, value) VALUES (?, ?)", "name"),
        );
        insert.bind(Arg::Text(name)).bind(Arg::Text(value));
        self.execute(&insert).await?;
        let mut read = self.statement("SELECT value FROM spool_meta WHERE name = ?");
        read.bind(Arg::Text(name));
        self.fetch_one(Via::Writer, &read).await?.text(0)
    }

    async fn meta_get(&self, name: &str) -> Result<Option<String>, StoreError> {
        let mut read = self.statement("SELECT value FROM spool_meta WHERE name = ?");
        read.bind(Arg::Text(name));
        let row = self.fetch_optional(Via::Writer, &read).await?;
        row.map(|row| row.text(0)).transpose()
    }

    async fn meta_set(&self, name: &str, value: &str) -> Result<(), StoreError> {
        let mut write = self.statement(&self.dialect().insert_or_replace(
            "spool_meta",
            &["name", "value"],
            &["name"],
            "(?, ?)",
        ));
        write.bind(Arg::Text(name)).bind(Arg::Text(value));
        self.execute(&write).await?;
        Ok(())
    }

    async fn lead(&self, role: &str, owner: &str, lease: Duration) -> Result<String, StoreError> {
        let lease = super::queue::lease_ms(lease);
        let now = self.dialect().now_ms();
        loop {
            // The row exists afterwards (ours, if there was none).
            let mut insert = self.statement(&self.dialect().insert_or_keep(
                &format!(
                    "INSERT INTO spool_leader (role, owner, expires_at) VALUES (?, ?, {now} + ?)"
                ),
                "role",
            ));
            insert
                .bind(Arg::Text(role))
                .bind(Arg::Text(owner))
                .bind(Arg::Int(lease));
            // Renew our own lease, or take over an expired one.
            let mut take = self.statement(&format!(
                "UPDATE spool_leader SET owner = ?, expires_at = {now} + ? \
                 WHERE role = ? AND (owner = ? OR expires_at < {now})"
            ));
            take.bind(Arg::Text(owner))
                .bind(Arg::Int(lease))
                .bind(Arg::Text(role))
                .bind(Arg::Text(owner));
            // The rows changed are no answer: MySQL counts the rows an upsert or update found,
            // not those it changed. The row says who leads.
            self.execute_all(&[insert, take]).await?;
            let mut read = self.statement("SELECT owner FROM spool_leader WHERE role = ?");
            read.bind(Arg::Text(role));
            if let Some(row) = self.fetch_optional(Via::Writer, &read).await? {
                return row.text(0);
            }
            // The leader resigned between the two: the role is free, ask again.
        }
    }

    async fn resign(&self, role: &str, owner: &str) -> Result<(), StoreError> {
        let mut statement = self.statement("DELETE FROM spool_leader WHERE role = ? AND owner = ?");
        statement.bind(Arg::Text(role)).bind(Arg::Text(owner));
        self.execute(&statement).await?;
        Ok(())
    }
}
