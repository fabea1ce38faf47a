// Temporary local harness (not committed): runs tests/store/contract.rs against MariaDB.
#[path = "../../tests/store/contract.rs"]
mod contract;
#[path = "../../tests/store/explain_mysql.rs"]
mod explain_mysql;

use spool::store::SharedStore;
use sqlx::Connection;

pub struct Fixture {
    pub store: SharedStore,
    pub url: String,
}

impl Fixture {
    pub async fn another_host(&self) -> SharedStore {
        spool::store::open(&self.url)
            .await
            .expect("the database opens again")
    }
}

pub async fn fresh(_backend: spool::store::Backend) -> Option<Fixture> {
    let base = std::env::var("SPOOL_TEST_MYSQL_URL").ok()?;
    let name = format!("scratch_{:016x}", rand::random::<u64>());
    let mut conn = sqlx::MySqlConnection::connect(&base).await.unwrap();
    sqlx::Executor::execute(&mut conn, format!("CREATE DATABASE {name}").as_str())
        .await
        .unwrap();
    let (prefix, _) = base.rsplit_once('/').unwrap();
    let url = format!("{prefix}/{name}");
    let store = spool::store::open(&url)
        .await
        .unwrap_or_else(|e| panic!("opening {url}: {e}"));
    Some(Fixture { store, url })
}

macro_rules! run {
    ($($test:ident),* $(,)?) => {
        $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $test() {
            let Some(fixture) = fresh(spool::store::Backend::MySql).await else { return };
            contract::$test(&fixture).await;
            fixture.store.close().await;
        })*
    };
}

run!(
    claims_by_priority_then_due_time_then_id,
    claims_only_the_types_asked_for_and_only_due_tasks,
    concurrent_claims_never_share_a_task,
    completion_only_applies_to_the_current_claim,
    a_late_result_never_lands_on_a_newer_claim,
    rescue_counts_the_attempt_and_fails_when_none_are_left,
    leases_extend_only_for_the_claimed_attempt_and_release_is_uncounted,
    idempotency_keys_dedupe_within_and_across_batches,
    large_batches_keep_their_order,
    payloads_and_texts_round_trip,
    retry_and_cancel_respect_the_state_machine,
    progress_is_kept_for_running_tasks_only,
    counts_and_backlog_views_agree,
    listing_filters_and_pages_newest_first,
    effects_and_kv_are_per_task_type_and_durable,
    meta_keeps_the_first_value,
    one_leader_at_a_time_with_takeover_after_expiry,
);
