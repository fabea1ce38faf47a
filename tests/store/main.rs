//! The store contract: one behaviour suite, run unchanged against every backend.
//!
//! Each test is an async function taking a fresh, empty store; the macro at the bottom runs it
//! on SQLite (a temporary file), PostgreSQL and MariaDB/MySQL (a fresh database on the servers
//! `cargo xtask test` starts; without them, outside CI, the server variants are skipped).

#[path = "../e2e/servers.rs"]
#[allow(dead_code)]
mod servers;

mod contract;
mod explain;
mod explain_mysql;
mod statistics;
mod stats;

/// What `servers` needs from the end-to-end tests' helpers.
mod util {
    /// The repository root.
    pub fn repo_root() -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .unwrap()
            .to_path_buf()
    }
}

use spool::store::{Backend, SharedStore};

/// A fresh store and what keeps its database alive.
pub struct Fixture {
    pub store: SharedStore,
    pub backend: Backend,
    pub url: String,
    _dir: Option<tempfile::TempDir>,
}

impl Fixture {
    /// Opens a second, independent handle on the same database (another host).
    pub async fn another_host(&self) -> SharedStore {
        spool::store::open(&self.url)
            .await
            .expect("the database opens again")
    }
}

/// A fresh store on `backend`, or None when that server is not configured here.
pub async fn fresh(backend: Backend) -> Option<Fixture> {
    let (url, dir) = match backend {
        Backend::Sqlite => {
            let dir = tempfile::tempdir().unwrap();
            (
                format!("sqlite://{}", dir.path().join("tasks.db").display()),
                Some(dir),
            )
        }
        Backend::Postgres => {
            servers::url(servers::Backend::Postgres)?;
            (servers::fresh_database(servers::Backend::Postgres), None)
        }
        Backend::MySql => {
            servers::url(servers::Backend::MySql)?;
            (servers::fresh_database(servers::Backend::MySql), None)
        }
    };
    let store = spool::store::open(&url)
        .await
        .unwrap_or_else(|e| panic!("opening {url}: {e}"));
    Some(Fixture {
        store,
        backend,
        url,
        _dir: dir,
    })
}

/// Runs each named test of [`contract`] (or of the module named before a colon, invoked inside
/// that module: `on_every_backend!(control: a, b)`) once per backend.
macro_rules! on_every_backend {
    ($($test:ident),* $(,)?) => {
        on_every_backend!(contract: $($test),*);
    };
    ($suite:ident: $($test:ident),* $(,)?) => {
        mod sqlite {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $test() {
                let fixture = crate::fresh(spool::store::Backend::Sqlite).await.unwrap();
                crate::$suite::$test(&fixture).await;
                fixture.store.close().await;
            })*
        }
        mod postgres {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $test() {
                let Some(fixture) = crate::fresh(spool::store::Backend::Postgres).await else { return };
                crate::$suite::$test(&fixture).await;
                fixture.store.close().await;
                crate::servers::drop_database(&fixture.url);
            })*
        }
        mod mysql {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $test() {
                let Some(fixture) = crate::fresh(spool::store::Backend::MySql).await else { return };
                crate::$suite::$test(&fixture).await;
                fixture.store.close().await;
                crate::servers::drop_database(&fixture.url);
            })*
        }
    };
}

on_every_backend!(
    claims_by_priority_then_due_time_then_id,
    claims_only_the_types_asked_for_and_only_due_tasks,
    concurrent_claims_never_share_a_task,
    claims_and_completions_from_many_callers_on_one_store,
    completion_only_applies_to_the_current_claim,
    a_late_result_never_lands_on_a_newer_claim,
    rescue_counts_the_attempt_and_fails_when_none_are_left,
    leases_extend_only_for_the_claimed_attempt_and_release_is_uncounted,
    a_completion_batch_and_a_lease_extension_on_the_same_rows_never_deadlock,
    idempotency_keys_dedupe_within_and_across_batches,
    a_follow_up_keeps_its_depth,
    large_batches_keep_their_order,
    payloads_and_texts_round_trip,
    retry_and_cancel_respect_the_state_machine,
    progress_is_kept_for_running_tasks_only,
    counts_and_backlog_views_agree,
    listing_filters_and_pages_newest_first,
    effects_and_kv_are_per_task_type_and_durable,
    kv_usage_effect_retention_and_snoozes_in_a_row,
    meta_keeps_the_first_value,
    meta_set_replaces_and_every_host_reads_it,
    one_leader_at_a_time_with_takeover_after_expiry,
    stats_backlog_counts_states_and_ages_the_queue_head,
    stats_finished_between_counts_outcomes_and_attempt_times,
    stats_history_round_trips_replaces_and_prunes,
);

mod alerts;
mod archive;
mod control;
mod database;
mod deployments;
mod history;
mod keyed;
