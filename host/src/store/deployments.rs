//! Handler builds kept in the shared database, so that one deploy reaches every host: the
//! builds' bytes (`spool_build`), every deployed version of a type (`spool_version`), which
//! version each type serves and which candidate shares its attempts (`spool_deployment`), and
//! the deployment history (`spool_deploy_event`), the compiled code hosts share
//! (`spool_artifact`), and how each build did on each host
//! (`spool_build_tally`, the figures a canary is judged on). The rules of deploying (what may be promoted
//! or rolled back, the canary's verdict) live above the store, in `plugins::deploy`; this
//! module only keeps the rows, and every change is one transaction.
//!
//! One implementation in portable SQL ([`super::sql`]) serves every backend. A change of a
//! deployment is written as:
//! 1. an `UPDATE` of the type's row that sets a fresh `change_id` (and, for a change that
//!    must not race another, only where the row still has the revision the caller read);
//! 2. the statements that depend on that change (the new version row, the history event),
//!    each an `INSERT … SELECT … FROM spool_deployment WHERE change_id = ?`, so they write
//!    nothing unless step 1 applied.
//!
//! On the server databases the `UPDATE` locks the row until commit, and a concurrent change's
//! `UPDATE` then re-reads it, so two changes made from one revision cannot both apply; on SQLite
//! the single writer serializes them. MySQL evaluates an `UPDATE`'s assignments left to right
//! where the others use the old values: no statement here assigns a column from one assigned
//! before it.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::StoreError;
use super::encoding::millis;
use super::sql::{Arg, Cells, Portable, Via, count, stored};

/// The largest piece of a build one statement carries: below every server's default packet
/// limit (MariaDB's is 16 MiB), so builds of any size can be stored.
pub const CHUNK_BYTES: usize = 1 << 20;

/// How long the bytes of a build no version names are kept: long enough for the deploy that
/// stored them to write its version.
pub const UNREFERENCED_BUILD_GRACE: chrono::TimeDelta = chrono::TimeDelta::hours(1);

/// One deployed version of a task type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    pub task_type: String,
    /// From 1, per type, in deploy order.
    pub number: u64,
    /// Hex SHA-256 of the component: the `plugin_version` its attempts record.
    pub digest: String,
    /// The component's size in bytes.
    pub size: u64,
    /// The manifest deployed with it (none: the host's defaults).
    pub manifest: Option<String>,
    pub deployed_at: DateTime<Utc>,
    /// Which right deployed it (`deploy`, `api`, `open`).
    pub deployed_by: String,
    /// The client's address.
    pub origin: Option<String>,
}

/// What one task type serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deployment {
    pub task_type: String,
    /// The highest version number handed out.
    pub last_version: u64,
    /// The version every attempt runs that the candidate does not take; none once removed.
    pub stable: Option<u64>,
    /// The version on trial.
    pub candidate: Option<u64>,
    /// The share of the type's attempts the candidate runs, in percent.
    pub canary_percent: u8,
    /// When the candidate's trial started.
    pub canary_since: Option<DateTime<Utc>>,
    /// Incremented by every change: hosts compare it with what they loaded.
    pub revision: u64,
    pub updated_at: DateTime<Utc>,
}

/// Who made a change: the right it was made with and from where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Actor {
    /// `deploy` (the deploy token), `api` (the API token), `open` (no token is set), or
    /// `leader` (the canary's verdict).
    pub right: String,
    /// The client's address, or the deciding host's id.
    pub origin: Option<String>,
}

/// One entry of the deployment history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeployEvent {
    pub id: i64,
    pub task_type: String,
    pub at: DateTime<Utc>,
    /// `deploy`, `canary`, `promote`, `rollback` or `remove`.
    pub action: String,
    /// The version the change is about.
    pub version: Option<u64>,
    pub actor: Actor,
    /// Why (a verdict's figures, a reason given by hand).
    pub detail: Option<String>,
}

/// How one build of a type did on one host within one window, as that host counted it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildTally {
    pub task_type: String,
    /// The build's SHA-256 (the attempts' `plugin_version`).
    pub digest: String,
    pub host_id: String,
    /// The candidate's trial start the counts belong to, in Unix ms (0 outside a trial).
    pub window_ms: i64,
    pub attempts: u64,
    /// Attempts that ended in a retry, a failure, a crash or a timeout.
    pub failures: u64,
    pub wall_ms_total: u64,
    /// Attempt times in logarithmic buckets, as `plugins::tally` writes them (JSON).
    pub wall_buckets: String,
    pub fuel_total: u64,
    /// The attempts whose fuel is known.
    pub fuel_attempts: u64,
    /// The most memory one attempt used, in bytes.
    pub memory_peak: u64,
}

/// A new version to deploy.
#[derive(Debug, Clone)]
pub struct NewVersion<'a> {
    pub task_type: &'a str,
    /// Hex SHA-256 of `component`; the build is stored under it by [`Deployments::store_build`].
    pub digest: &'a str,
    pub size: u64,
    pub manifest: Option<&'a str>,
    /// `Some(percent)`: the version becomes the candidate for that share of attempts;
    /// `None`: it becomes the stable version at once (and ends any canary).
    pub canary_percent: Option<u8>,
    pub actor: &'a Actor,
    pub detail: Option<&'a str>,
}

/// A change of which versions a type serves, applied only if the type's row still has
/// `expected_revision`.
#[derive(Debug, Clone)]
pub struct DeploymentChange<'a> {
    pub task_type: &'a str,
    pub expected_revision: u64,
    pub stable: Option<u64>,
    pub candidate: Option<u64>,
    pub canary_percent: u8,
    /// `promote`, `rollback` or `remove`.
    pub action: &'a str,
    /// The version the history names.
    pub version: Option<u64>,
    pub actor: &'a Actor,
    pub detail: Option<&'a str>,
}

/// The deployment concern of a store.
#[async_trait]
pub trait Deployments: Send + Sync {
    /// Stores a build's bytes under their digest (kept if already there).
    async fn store_build(&self, digest: &str, component: &[u8]) -> Result<(), StoreError>;

    /// A build's bytes, if stored whole.
    async fn build(&self, digest: &str) -> Result<Option<Vec<u8>>, StoreError>;

    /// Stores a compiled artifact of build `digest` under its shared name (kept if there).
    async fn store_artifact(
        &self,
        name: &str,
        digest: &str,
        contents: &[u8],
    ) -> Result<(), StoreError>;

    /// A compiled artifact by its shared name, if stored whole.
    async fn artifact(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError>;

    /// Records a new version of a type and makes it the stable version or the candidate, in
    /// one transaction with its history event; returns the deployment after it.
    async fn deploy(&self, new: &NewVersion<'_>) -> Result<Deployment, StoreError>;

    /// Applies `change` if the type's revision is still the one expected; returns the
    /// deployment after it, or `None` when another change came first.
    async fn change_deployment(
        &self,
        change: &DeploymentChange<'_>,
    ) -> Result<Option<Deployment>, StoreError>;

    /// Every deployed type, by name.
    async fn deployments(&self) -> Result<Vec<Deployment>, StoreError>;

    /// One type's deployment.
    async fn deployment(&self, task_type: &str) -> Result<Option<Deployment>, StoreError>;

    /// The kept versions of a type, newest first.
    async fn versions(&self, task_type: &str) -> Result<Vec<Version>, StoreError>;

    /// One version of a type.
    async fn version(&self, task_type: &str, number: u64) -> Result<Option<Version>, StoreError>;

    /// The newest `limit` history events of a type, newest first.
    async fn deploy_events(
        &self,
        task_type: &str,
        limit: usize,
    ) -> Result<Vec<DeployEvent>, StoreError>;

    /// Stores hosts' counts, each replacing the same (type, build, host, window) row.
    async fn record_tallies(&self, tallies: &[BuildTally]) -> Result<(), StoreError>;

    /// Every host's counts for a type: within one window, or in all windows.
    async fn tallies(
        &self,
        task_type: &str,
        window_ms: Option<i64>,
    ) -> Result<Vec<BuildTally>, StoreError>;

    /// Forgets counts last written before `before`; returns how many rows.
    async fn prune_tallies(&self, before: DateTime<Utc>) -> Result<u64, StoreError>;

    /// Forgets a type's versions beyond the newest `keep`, except the stable version, the
    /// candidate and every version whose build a live failed task ran (a retry of it runs
    /// the build it failed on only if that is still served, but its record must name a build
    /// one can still fetch); then the bytes of builds no version names any more. Returns the
    /// versions forgotten.
    async fn prune_versions(&self, task_type: &str, keep: usize) -> Result<u64, StoreError>;
}

const VERSION_COLUMNS: &str =
    "task_type, number, digest, size, manifest, deployed_at, deployed_by, origin";

const DEPLOYMENT_COLUMNS: &str = "task_type, last_version, stable_version, candidate_version, \
     canary_percent, canary_since, revision, updated_at";

const EVENT_COLUMNS: &str = "id, task_type, at, action, version, actor, origin, detail";

const TALLY_COLUMNS: &[&str] = &[
    "task_type",
    "digest",
    "host_id",
    "window_ms",
    "attempts",
    "failures",
    "wall_ms_total",
    "wall_buckets",
    "fuel_total",
    "fuel_attempts",
    "memory_peak",
    "updated_at",
];

fn tally_from_row(row: &impl Cells) -> Result<BuildTally, StoreError> {
    Ok(BuildTally {
        task_type: row.text(0)?,
        digest: row.text(1)?,
        host_id: row.text(2)?,
        window_ms: row.int(3)?,
        attempts: count(row.int(4)?),
        failures: count(row.int(5)?),
        wall_ms_total: count(row.int(6)?),
        wall_buckets: row.text(7)?,
        fuel_total: count(row.int(8)?),
        fuel_attempts: count(row.int(9)?),
        memory_peak: count(row.int(10)?),
    })
}

fn time(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap_or_default()
}

fn version_from_row(row: &impl Cells) -> Result<Version, StoreError> {
    Ok(Version {
        task_type: row.text(0)?,
        number: count(row.int(1)?),
        digest: row.text(2)?,
        size: count(row.int(3)?),
        manifest: row.opt_text(4)?,
        deployed_at: time(row.int(5)?),
        deployed_by: row.text(6)?,
        origin: row.opt_text(7)?,
    })
}

fn deployment_from_row(row: &impl Cells) -> Result<Deployment, StoreError> {
    Ok(Deployment {
        task_type: row.text(0)?,
        last_version: count(row.int(1)?),
        stable: row.opt_int(2)?.map(count),
        candidate: row.opt_int(3)?.map(count),
        canary_percent: u8::try_from(row.int(4)?.clamp(0, 100)).unwrap_or(0),
        canary_since: row.opt_int(5)?.map(time),
        revision: count(row.int(6)?),
        updated_at: time(row.int(7)?),
    })
}

fn event_from_row(row: &impl Cells) -> Result<DeployEvent, StoreError> {
    Ok(DeployEvent {
        id: row.int(0)?,
        task_type: row.text(1)?,
        at: time(row.int(2)?),
        action: row.text(3)?,
        version: row.opt_int(4)?.map(count),
        actor: Actor {
            right: row.text(5)?,
            origin: row.opt_text(6)?,
        },
        detail: row.opt_text(7)?,
    })
}

/// A fresh id naming one change of a deployment row.
fn change_id() -> String {
    hex::encode(rand::random::<[u8; 16]>())
}

fn optional(version: Option<u64>) -> Arg<'static> {
    Arg::OptInt(version.map(stored))
}

#[async_trait]
impl<S: Portable> Deployments for S {
    async fn store_build(&self, digest: &str, component: &[u8]) -> Result<(), StoreError> {
        store_chunks(self, "spool_build", ("digest", digest), None, component).await
    }

    async fn build(&self, digest: &str) -> Result<Option<Vec<u8>>, StoreError> {
        read_chunks(self, "spool_build", ("digest", digest)).await
    }

    async fn store_artifact(
        &self,
        name: &str,
        digest: &str,
        contents: &[u8],
    ) -> Result<(), StoreError> {
        store_chunks(
            self,
            "spool_artifact",
            ("name", name),
            Some(digest),
            contents,
        )
        .await
    }

    async fn artifact(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        read_chunks(self, "spool_artifact", ("name", name)).await
    }

    async fn deploy(&self, new: &NewVersion<'_>) -> Result<Deployment, StoreError> {
        let now = millis(Utc::now());
        let change = change_id();
        let mut create = self.statement(&self.dialect().insert_or_keep(
            "INSERT INTO spool_deployment (task_type, updated_at) VALUES (?, ?)",
            "task_type",
        ));
        create.bind(Arg::Text(new.task_type)).bind(Arg::Int(now));
        let mut number = self.statement(
            "UPDATE spool_deployment \
             SET last_version = last_version + 1, revision = revision + 1, change_id = ?, \
                 updated_at = ? \
             WHERE task_type = ?",
        );
        number
            .bind(Arg::Text(&change))
            .bind(Arg::Int(now))
            .bind(Arg::Text(new.task_type));
        let mut version = self.statement(
            "INSERT INTO spool_version \
                 (task_type, number, digest, size, manifest, deployed_at, deployed_by, origin) \
             SELECT task_type, last_version, ?, ?, ?, ?, ?, ? FROM spool_deployment \
             WHERE task_type = ? AND change_id = ?",
        );
        version
            .bind(Arg::Text(new.digest))
            .bind(Arg::Int(stored(new.size)))
            .bind(Arg::OptText(new.manifest))
            .bind(Arg::Int(now))
            .bind(Arg::Text(&new.actor.right))
            .bind(Arg::OptText(new.actor.origin.as_deref()))
            .bind(Arg::Text(new.task_type))
            .bind(Arg::Text(&change));
        let mut place = match new.canary_percent {
            Some(percent) => {
                let mut place = self.statement(
                    "UPDATE spool_deployment \
                     SET candidate_version = last_version, canary_percent = ?, canary_since = ? \
                     WHERE task_type = ? AND change_id = ?",
                );
                place.bind(Arg::Int(i64::from(percent))).bind(Arg::Int(now));
                place
            }
            None => self.statement(
                "UPDATE spool_deployment \
                 SET stable_version = last_version, candidate_version = NULL, \
                     canary_percent = 0, canary_since = NULL \
                 WHERE task_type = ? AND change_id = ?",
            ),
        };
        place
            .bind(Arg::Text(new.task_type))
            .bind(Arg::Text(&change));
        let action = match new.canary_percent {
            Some(_) => "canary",
            None => "deploy",
        };
        let event = event_statement(
            self,
            new.task_type,
            &change,
            now,
            action,
            None,
            new.actor,
            new.detail,
        );
        self.execute_all(&[create, number, version, place, event])
            .await?;
        self.deployment(new.task_type).await?.ok_or_else(|| {
            StoreError::Database(format!("the deployment of {} vanished", new.task_type))
        })
    }

    async fn change_deployment(
        &self,
        change: &DeploymentChange<'_>,
    ) -> Result<Option<Deployment>, StoreError> {
        let now = millis(Utc::now());
        let id = change_id();
        // A new candidate's trial starts now; a kept one keeps its start.
        let mut update = self.statement(
            "UPDATE spool_deployment \
             SET stable_version = ?, candidate_version = ?, canary_percent = ?, \
                 canary_since = CASE WHEN ? IS NULL THEN NULL \
                                     WHEN candidate_version = ? THEN canary_since ELSE ? END, \
                 revision = revision + 1, change_id = ?, updated_at = ? \
             WHERE task_type = ? AND revision = ?",
        );
        update
            .bind(optional(change.stable))
            .bind(optional(change.candidate))
            .bind(Arg::Int(i64::from(change.canary_percent)))
            .bind(optional(change.candidate))
            .bind(optional(change.candidate))
            .bind(Arg::Int(now))
            .bind(Arg::Text(&id))
            .bind(Arg::Int(now))
            .bind(Arg::Text(change.task_type))
            .bind(Arg::Int(stored(change.expected_revision)));
        let event = event_statement(
            self,
            change.task_type,
            &id,
            now,
            change.action,
            Some(change.version),
            change.actor,
            change.detail,
        );
        let changed = self.execute_all(&[update, event]).await?;
        if changed.first().copied().unwrap_or(0) == 0 {
            return Ok(None);
        }
        self.deployment(change.task_type).await
    }

    async fn deployments(&self) -> Result<Vec<Deployment>, StoreError> {
        let read = self.statement(&format!(
            "SELECT {DEPLOYMENT_COLUMNS} FROM spool_deployment ORDER BY task_type"
        ));
        let rows = self.fetch(Via::Writer, &read).await?;
        rows.iter().map(deployment_from_row).collect()
    }

    async fn deployment(&self, task_type: &str) -> Result<Option<Deployment>, StoreError> {
        let mut read = self.statement(&format!(
            "SELECT {DEPLOYMENT_COLUMNS} FROM spool_deployment WHERE task_type = ?"
        ));
        read.bind(Arg::Text(task_type));
        let row = self.fetch_optional(Via::Writer, &read).await?;
        row.as_ref().map(deployment_from_row).transpose()
    }

    async fn versions(&self, task_type: &str) -> Result<Vec<Version>, StoreError> {
        let mut read = self.statement(&format!(
            "SELECT {VERSION_COLUMNS} FROM spool_version WHERE task_type = ? ORDER BY number DESC"
        ));
        read.bind(Arg::Text(task_type));
        let rows = self.fetch(Via::Writer, &read).await?;
        rows.iter().map(version_from_row).collect()
    }

    async fn version(&self, task_type: &str, number: u64) -> Result<Option<Version>, StoreError> {
        let mut read = self.statement(&format!(
            "SELECT {VERSION_COLUMNS} FROM spool_version WHERE task_type = ? AND number = ?"
        ));
        read.bind(Arg::Text(task_type))
            .bind(Arg::Int(stored(number)));
        let row = self.fetch_optional(Via::Writer, &read).await?;
        row.as_ref().map(version_from_row).transpose()
    }

    async fn deploy_events(
        &self,
        task_type: &str,
        limit: usize,
    ) -> Result<Vec<DeployEvent>, StoreError> {
        let mut read = self.statement(&format!(
            "SELECT {EVENT_COLUMNS} FROM spool_deploy_event WHERE task_type = ? \
             ORDER BY id DESC LIMIT ?"
        ));
        read.bind(Arg::Text(task_type)).bind(Arg::Limit(limit));
        let rows = self.fetch(Via::Writer, &read).await?;
        rows.iter().map(event_from_row).collect()
    }

    async fn record_tallies(&self, tallies: &[BuildTally]) -> Result<(), StoreError> {
        let now = millis(Utc::now());
        let values = format!("({})", vec!["?"; TALLY_COLUMNS.len()].join(", "));
        let statements: Vec<_> = tallies
            .iter()
            .map(|tally| {
                let mut write = self.statement(&self.dialect().insert_or_replace(
                    "spool_build_tally",
                    TALLY_COLUMNS,
                    &["task_type", "digest", "host_id", "window_ms"],
                    &values,
                ));
                write
                    .bind(Arg::Text(&tally.task_type))
                    .bind(Arg::Text(&tally.digest))
                    .bind(Arg::Text(&tally.host_id))
                    .bind(Arg::Int(tally.window_ms))
                    .bind(Arg::Int(stored(tally.attempts)))
                    .bind(Arg::Int(stored(tally.failures)))
                    .bind(Arg::Int(stored(tally.wall_ms_total)))
                    .bind(Arg::Text(&tally.wall_buckets))
                    .bind(Arg::Int(stored(tally.fuel_total)))
                    .bind(Arg::Int(stored(tally.fuel_attempts)))
                    .bind(Arg::Int(stored(tally.memory_peak)))
                    .bind(Arg::Int(now));
                write
            })
            .collect();
        if !statements.is_empty() {
            self.execute_all(&statements).await?;
        }
        Ok(())
    }

    async fn tallies(
        &self,
        task_type: &str,
        window_ms: Option<i64>,
    ) -> Result<Vec<BuildTally>, StoreError> {
        let mut read = self.statement(&format!(
            "SELECT {} FROM spool_build_tally WHERE task_type = ?",
            TALLY_COLUMNS.join(", ")
        ));
        read.bind(Arg::Text(task_type));
        if let Some(window) = window_ms {
            read.push(" AND window_ms = ?").bind(Arg::Int(window));
        }
        let rows = self.fetch(Via::Writer, &read).await?;
        rows.iter().map(tally_from_row).collect()
    }

    async fn prune_tallies(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        let mut forget = self.statement("DELETE FROM spool_build_tally WHERE updated_at < ?");
        forget.bind(Arg::Int(millis(before)));
        self.execute(&forget).await
    }

    async fn prune_versions(&self, task_type: &str, keep: usize) -> Result<u64, StoreError> {
        let Some(deployment) = self.deployment(task_type).await? else {
            return Ok(0);
        };
        let newest_dropped = deployment.last_version.saturating_sub(keep as u64);
        let mut forget = self.statement(&format!(
            "DELETE FROM spool_version WHERE task_type = ? AND number <= ? \
             AND number <> ? AND number <> ? \
             AND digest NOT IN (SELECT plugin_version FROM async_task \
                                WHERE status = {failed} AND task_type = ? \
                                AND plugin_version IS NOT NULL)",
            failed = super::encoding::status_code(crate::task::Status::Failed),
        ));
        forget
            .bind(Arg::Text(task_type))
            .bind(Arg::Int(stored(newest_dropped)))
            .bind(Arg::Int(deployment.stable.map_or(0, stored)))
            .bind(Arg::Int(deployment.candidate.map_or(0, stored)))
            .bind(Arg::Text(task_type));
        let forgotten = self.execute(&forget).await?;
        let grace = millis(Utc::now() - UNREFERENCED_BUILD_GRACE);
        for table in ["spool_build", "spool_artifact"] {
            let mut unreferenced = self.statement(&format!(
                "DELETE FROM {table} WHERE created_at < ? \
                 AND digest NOT IN (SELECT digest FROM spool_version) \
                 AND digest NOT IN (SELECT build FROM spool_attempt_record)"
            ));
            unreferenced.bind(Arg::Int(grace));
            self.execute(&unreferenced).await?;
        }
        Ok(forgotten)
    }
}

/// Stores `bytes` in `table` under `key` (column, value) in chunks of [`CHUNK_BYTES`], keeping
/// chunks already there; `digest` fills the table's `digest` column where it is not the key.
///
/// One statement (and so one transaction) per chunk: a build of many megabytes is never one
/// transaction's worth of locks and log, and a store interrupted midway leaves chunks that the
/// next store of the same bytes keeps and completes.
async fn store_chunks<S: Portable>(
    store: &S,
    table: &str,
    key: (&str, &str),
    digest: Option<&str>,
    bytes: &[u8],
) -> Result<(), StoreError> {
    let now = millis(Utc::now());
    let (columns, values) = match digest {
        Some(_) => (format!("{}, digest", key.0), "?, ?"),
        None => (key.0.to_string(), "?"),
    };
    for (index, chunk) in bytes.chunks(CHUNK_BYTES).enumerate() {
        let mut insert = store.statement(&store.dialect().insert_or_keep(
            &format!(
                "INSERT INTO {table} ({columns}, chunk, bytes, created_at) VALUES ({values}, ?, ?, ?)"
            ),
            key.0,
        ));
        insert.bind(Arg::Text(key.1));
        if let Some(digest) = digest {
            insert.bind(Arg::Text(digest));
        }
        insert
            .bind(Arg::Int(index as i64))
            .bind(Arg::Bytes(chunk))
            .bind(Arg::Int(now));
        store.execute(&insert).await?;
    }
    Ok(())
}

/// The bytes stored in `table` under `key`, if every chunk is there.
async fn read_chunks<S: Portable>(
    store: &S,
    table: &str,
    key: (&str, &str),
) -> Result<Option<Vec<u8>>, StoreError> {
    let mut read = store.statement(&format!(
        "SELECT chunk, bytes FROM {table} WHERE {} = ? ORDER BY chunk",
        key.0
    ));
    read.bind(Arg::Text(key.1));
    let rows = store.fetch(Via::Writer, &read).await?;
    if rows.is_empty() {
        return Ok(None);
    }
    let mut bytes = Vec::new();
    for (expected, row) in rows.iter().enumerate() {
        if row.int(0)? != expected as i64 {
            // A chunk is missing: the bytes were only partly stored.
            return Ok(None);
        }
        bytes.extend_from_slice(&row.bytes(1)?);
    }
    Ok(Some(bytes))
}

/// The history event of the change `change`: written only if that change applied. `version`
/// `None` names the version the change handed out (a deploy's new number).
#[allow(clippy::too_many_arguments)]
fn event_statement<'a, S: Portable>(
    store: &S,
    task_type: &'a str,
    change: &'a str,
    now: i64,
    action: &'a str,
    version: Option<Option<u64>>,
    actor: &'a Actor,
    detail: Option<&'a str>,
) -> super::sql::Statement<'a> {
    let number = match version {
        None => "last_version",
        Some(_) => "?",
    };
    let mut event = store.statement(&format!(
        "INSERT INTO spool_deploy_event (task_type, at, action, version, actor, origin, detail) \
         SELECT task_type, ?, ?, {number}, ?, ?, ? FROM spool_deployment \
         WHERE task_type = ? AND change_id = ?"
    ));
    event.bind(Arg::Int(now)).bind(Arg::Text(action));
    if let Some(version) = version {
        event.bind(optional(version));
    }
    event
        .bind(Arg::Text(&actor.right))
        .bind(Arg::OptText(actor.origin.as_deref()))
        .bind(Arg::OptText(detail))
        .bind(Arg::Text(task_type))
        .bind(Arg::Text(change));
    event
}
