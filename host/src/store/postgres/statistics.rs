//! The task table's first statistics.
//!
//! PostgreSQL plans the claim from the table's statistics, and a new `async_task` has none
//! until autovacuum first analyzes it: up to `autovacuum_naptime` (a minute by default) after
//! enough rows changed. Until then the planner guesses, and a backlog that arrives in a new
//! database drains at less than half the rate it drains at once the table is analyzed (see
//! docs/benchmarks.md). So a host analyzes `async_task` itself, once, when the table holds a
//! backlog and has never been analyzed: after its enqueues added [`BACKLOG`] rows, or when a
//! claim comes back full (which also covers rows an application inserted with its own SQL),
//! checking at most every [`RECHECK`]. Once the table has statistics autovacuum keeps them up
//! to date and this does nothing more.
//!
//! `ANALYZE` takes a lock that conflicts with neither reads nor writes of the table, and works
//! through a transaction-pooling PgBouncer like any other statement.

use sqlx::PgPool;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::store::StoreError;

/// Rows that make a backlog worth analyzing: fewer plan well without statistics.
const BACKLOG: u64 = 1_000;

/// The shortest time between two checks started by full claims.
const RECHECK: Duration = Duration::from_secs(5);

/// Whether the table was never analyzed (by anyone: autovacuum, a person, another host), and
/// whether it holds `$1` ([`BACKLOG`]) rows or more.
const STATE: &str = "SELECT s.last_analyze IS NULL AND s.last_autoanalyze IS NULL, \
        (SELECT count(*) FROM (SELECT 1 FROM async_task LIMIT $1) AS backlog) >= $1 \
     FROM pg_stat_user_tables AS s WHERE s.relid = 'async_task'::regclass";

/// The host's side of the table's first statistics.
#[derive(Default)]
pub struct FirstStatistics {
    /// The table has statistics (analyzed here or elsewhere): nothing more to do.
    settled: AtomicBool,
    /// A check is under way.
    checking: AtomicBool,
    /// Rows this host enqueued since its last check.
    enqueued: AtomicU64,
    last_check: Mutex<Option<Instant>>,
}

impl FirstStatistics {
    /// When the store opens: a database that already holds a backlog but was never analyzed
    /// (restored, or filled before any host ran) gets its statistics now.
    pub fn at_start(self: &Arc<Self>, pool: &PgPool) {
        self.check(pool);
    }

    /// After an enqueue inserted `rows` rows.
    pub fn after_enqueue(self: &Arc<Self>, pool: &PgPool, rows: usize) {
        if self.settled.load(Ordering::Relaxed) {
            return;
        }
        let total = self.enqueued.fetch_add(rows as u64, Ordering::Relaxed) + rows as u64;
        if total >= BACKLOG {
            self.enqueued.store(0, Ordering::Relaxed);
            self.check(pool);
        }
    }

    /// After a claim that took as many rows as it asked for.
    pub fn after_full_claim(self: &Arc<Self>, pool: &PgPool) {
        if self.settled.load(Ordering::Relaxed) {
            return;
        }
        let mut last = self.last_check.lock().unwrap_or_else(|p| p.into_inner());
        if last.is_some_and(|at| at.elapsed() < RECHECK) {
            return;
        }
        *last = Some(Instant::now());
        drop(last);
        self.check(pool);
    }

    /// Checks (and analyzes) in the background, unless a check is under way.
    fn check(self: &Arc<Self>, pool: &PgPool) {
        if self.checking.swap(true, Ordering::AcqRel) {
            return;
        }
        let (this, pool) = (self.clone(), pool.clone());
        tokio::spawn(async move {
            match analyze_if_never_analyzed(&pool).await {
                Ok(settled) => this.settled.store(settled, Ordering::Relaxed),
                Err(error) => tracing::warn!(
                    "cannot give async_task its first statistics (autovacuum will): {error}"
                ),
            }
            this.checking.store(false, Ordering::Release);
        });
    }
}

/// Analyzes the table if it was never analyzed and holds a backlog. True when the table has
/// statistics now (from here or elsewhere), false while it has too few rows to need them.
async fn analyze_if_never_analyzed(pool: &PgPool) -> Result<bool, StoreError> {
    let state: Option<(bool, bool)> = sqlx::query_as(STATE)
        .bind(BACKLOG as i64)
        .fetch_optional(pool)
        .await?;
    match state {
        Some((false, _)) => Ok(true),
        Some((true, true)) => {
            let started = Instant::now();
            sqlx::query("ANALYZE async_task").execute(pool).await?;
            tracing::info!(
                "analyzed async_task, which had a backlog and no statistics yet, in {:?}",
                started.elapsed()
            );
            Ok(true)
        }
        Some((true, false)) | None => Ok(false),
    }
}
