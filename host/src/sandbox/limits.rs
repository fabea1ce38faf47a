//! What one attempt may allocate: memory per attempt, not per linear memory.
//!
//! A component may define several linear memories and tables (one per core module it
//! instantiates). [`AttemptLimiter`] caps their *total*: every memory's size plus every
//! table's elements (at [`TABLE_ELEMENT_BYTES`] each) count against the attempt's `memory`
//! budget, so a guest declaring eight 200 MiB memories under a 256 MiB cap fails to start
//! instead of taking 1.6 GiB. It also caps how many instances, memories and tables one attempt
//! may create, with the same numbers the pooling allocator reserves per component
//! ([`MAX_INSTANCES`], [`MAX_MEMORIES`], [`MAX_TABLES`]), so no guest can make the host reserve
//! address space for thousands of memories either.
//!
//! The pooling allocator is sized so that `concurrency` attempts, each using the most a
//! component may, always fit at once (see [`super::Sandbox::with_options`]): the dispatcher runs
//! at most that many attempts, so the instances of one task type can never exhaust the pool
//! and leave another type's attempts unable to start.

use std::sync::atomic::{AtomicU64, Ordering};

use wasmtime::{ResourceLimiter, Store};

/// Core instances one attempt may create (a component instantiates one per core module).
pub const MAX_INSTANCES: usize = 64;
/// Linear memories one attempt may define.
pub const MAX_MEMORIES: usize = 8;
/// Tables one attempt may define.
pub const MAX_TABLES: usize = 16;
/// What a table element costs, for the budget: wasmtime stores a pointer per element.
pub const TABLE_ELEMENT_BYTES: usize = std::mem::size_of::<usize>();

/// The error that stops a guest at its memory budget.
#[derive(Debug, thiserror::Error)]
#[error(
    "memory limit: the handler tried to use {wanted} bytes of memory (all its linear memories and tables together), past its limit of {budget} bytes (`memory`), and was stopped"
)]
pub struct MemoryLimit {
    pub wanted: usize,
    pub budget: usize,
}

/// What an attempt used, read from its store once the guest stopped (returned, trapped or ran
/// out of fuel). An attempt stopped at its wall-clock limit is dropped mid-call and reads as
/// unknown: its fuel is `None`, its peak memory 0.
#[derive(Debug)]
pub struct Meter {
    /// `u64::MAX` until read.
    fuel_used: AtomicU64,
    peak_memory: AtomicU64,
}

impl Default for Meter {
    fn default() -> Self {
        Meter {
            fuel_used: AtomicU64::new(u64::MAX),
            peak_memory: AtomicU64::new(0),
        }
    }
}

impl Meter {
    /// Reads the fuel left of `budget` and the memory `limiter` counted. Memories and tables
    /// only grow, so what they hold when the guest stops is its peak.
    pub fn read<T>(&self, store: &Store<T>, limiter: &AttemptLimiter, budget: u64) {
        if let Ok(left) = store.get_fuel() {
            self.fuel_used
                .store(budget.saturating_sub(left), Ordering::Relaxed);
        }
        self.peak_memory
            .store(limiter.used() as u64, Ordering::Relaxed);
    }

    /// The fuel used, if it was read.
    pub fn fuel_used(&self) -> Option<u64> {
        Some(self.fuel_used.load(Ordering::Relaxed)).filter(|fuel| *fuel != u64::MAX)
    }

    /// The peak memory in bytes (0 if it was not read).
    pub fn peak_memory(&self) -> u64 {
        self.peak_memory.load(Ordering::Relaxed)
    }
}

/// Counts an attempt's memories and tables against one budget.
#[derive(Debug)]
pub struct AttemptLimiter {
    budget: usize,
    used: usize,
    /// The growth last allowed, taken back if wasmtime could not perform it.
    pending: usize,
}

impl AttemptLimiter {
    /// A limiter allowing `budget` bytes in all.
    pub fn new(budget: usize) -> Self {
        AttemptLimiter {
            budget,
            used: 0,
            pending: 0,
        }
    }

    /// Bytes in use: every memory's size and every table's elements.
    pub fn used(&self) -> usize {
        self.used
    }

    fn grow(&mut self, extra: usize) -> wasmtime::Result<bool> {
        let wanted = self.used.saturating_add(extra);
        if wanted > self.budget {
            return Err(MemoryLimit {
                wanted,
                budget: self.budget,
            }
            .into());
        }
        self.used = wanted;
        self.pending = extra;
        Ok(true)
    }

    fn undo(&mut self) {
        self.used -= std::mem::take(&mut self.pending);
    }
}

impl ResourceLimiter for AttemptLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if maximum.is_some_and(|max| desired > max) {
            return Ok(false);
        }
        self.grow(desired.saturating_sub(current))
    }

    fn memory_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.undo();
        Err(error.context("growing a linear memory failed"))
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if maximum.is_some_and(|max| desired > max) {
            return Ok(false);
        }
        self.grow(
            desired
                .saturating_sub(current)
                .saturating_mul(TABLE_ELEMENT_BYTES),
        )
    }

    fn table_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.undo();
        Err(error.context("growing a table failed"))
    }

    fn instances(&self) -> usize {
        MAX_INSTANCES
    }

    fn tables(&self) -> usize {
        MAX_TABLES
    }

    fn memories(&self) -> usize {
        MAX_MEMORIES
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memories_and_tables_share_one_budget() {
        let mut limiter = AttemptLimiter::new(10 << 20);
        for _ in 0..4 {
            assert!(limiter.memory_growing(0, 2 << 20, None).unwrap());
        }
        assert_eq!(limiter.used(), 8 << 20);
        assert!(limiter.table_growing(0, 1000, Some(20_000)).unwrap());
        let error = limiter.memory_growing(0, 2 << 20, None).unwrap_err();
        let limit = error.downcast_ref::<MemoryLimit>().unwrap();
        assert_eq!(limit.budget, 10 << 20);
        assert!(
            error
                .to_string()
                .contains("all its linear memories and tables together"),
            "{error}"
        );
        assert!(limiter.memory_growing(2 << 20, 3 << 20, None).unwrap());
    }

    #[test]
    fn growth_past_a_maximum_is_refused_and_failures_are_taken_back() {
        let mut limiter = AttemptLimiter::new(1 << 20);
        assert!(
            !limiter
                .memory_growing(0, 128 << 10, Some(64 << 10))
                .unwrap()
        );
        assert_eq!(limiter.used(), 0);
        assert!(limiter.memory_growing(0, 64 << 10, None).unwrap());
        assert!(
            limiter
                .memory_grow_failed(wasmtime::Error::msg("no room"))
                .is_err()
        );
        assert_eq!(limiter.used(), 0);
        assert!(limiter.table_growing(0, usize::MAX, None).is_err());
    }
}
