//! How many tasks the dispatcher claims ahead of its free slots.
//!
//! Under a backlog a claim statement costs about the same whether it takes 8 rows or 100, so
//! claiming only the free slots makes the database round trip, and the hand-offs around it,
//! the price of every few tasks. Instead the dispatcher keeps a small *ready queue*: tasks
//! claimed (leased to this host, kept alive by the lease keeper like running ones) that start
//! as soon as a slot frees, without a round trip, while the next claim is already on its way.
//!
//! The queue is kept short in *time*, not in rows: its depth is the number of tasks this host
//! starts in [`HORIZON`], measured as it runs, so a host draining ten thousand no-op tasks a
//! second claims a hundred or two at a time while a host whose tasks take seconds claims hardly
//! more than its free slots. That bounds what queued tasks can cost: another host never finds a
//! task it could run sitting leased here for longer than about the horizon, and a task of
//! higher priority enqueued meanwhile waits at most about that long behind the queue.
//!
//! Only task types without a concurrency or rate limit are claimed ahead; limited types are
//! claimed within their budget when slots are free, as before.

use std::time::{Duration, Instant};

/// How much work, in time, the ready queue holds at most.
pub const HORIZON: Duration = Duration::from_millis(20);
/// Most tasks claimed ahead of the free slots.
pub const MAX_AHEAD: usize = 200;
/// How often the start rate is re-estimated.
const WINDOW: Duration = Duration::from_millis(25);
/// A window ends early once this many slots' worth of attempts started in it (and at least
/// [`EARLY_AFTER`] passed), so a host that starts draining a backlog of short tasks learns its
/// rate within a few milliseconds instead of a whole window. The first claim fills every slot
/// at once, so fewer starts than twice the slots say nothing about the rate.
const EARLY_SLOTS: usize = 2;
const EARLY_AFTER: Duration = Duration::from_millis(1);
/// Weight of the newest window in the start rate.
const SMOOTHING: f64 = 0.3;

/// The ready queue's target depth, from the rate at which this host starts attempts.
#[derive(Debug)]
pub struct Depth {
    /// Attempts started per second, smoothed over windows.
    rate: f64,
    window_start: Instant,
    started_in_window: u64,
    /// Starts that end a window early (twice the slots).
    early_starts: u64,
}

impl Depth {
    /// A host with `slots` attempts at once, starting now.
    pub fn new(now: Instant, slots: usize) -> Self {
        Depth {
            rate: 0.0,
            window_start: now,
            started_in_window: 0,
            early_starts: (EARLY_SLOTS * slots.max(1)) as u64,
        }
    }

    /// Counts attempts just started.
    pub fn started(&mut self, count: usize) {
        self.started_in_window += count as u64;
    }

    /// How many tasks to hold ready beyond the free slots. `backlog` says the last claim came
    /// back full (more tasks are due than were asked for); without one nothing is claimed
    /// ahead. Before any rate is known, `bootstrap` (half the slots) gets the rate measured.
    pub fn target(&mut self, now: Instant, backlog: bool, bootstrap: usize) -> usize {
        let elapsed = now.saturating_duration_since(self.window_start);
        let early = self.started_in_window >= self.early_starts && elapsed >= EARLY_AFTER;
        if elapsed >= WINDOW || early {
            let measured = self.started_in_window as f64 / elapsed.as_secs_f64();
            self.rate = if self.rate == 0.0 {
                measured
            } else {
                SMOOTHING * measured + (1.0 - SMOOTHING) * self.rate
            };
            self.window_start = now;
            self.started_in_window = 0;
        }
        if !backlog {
            return 0;
        }
        if self.rate == 0.0 {
            return bootstrap.min(MAX_AHEAD);
        }
        ((self.rate * HORIZON.as_secs_f64()).ceil() as usize).min(MAX_AHEAD)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_at(rate_per_sec: u64, windows: u32) -> (Depth, Instant) {
        let start = Instant::now();
        let mut depth = Depth::new(start, 16);
        let mut now = start;
        for _ in 0..windows {
            now += WINDOW;
            depth.started((rate_per_sec * WINDOW.as_millis() as u64 / 1000) as usize);
            depth.target(now, true, 8);
        }
        (depth, now)
    }

    #[test]
    fn no_backlog_claims_nothing_ahead() {
        let (mut depth, now) = run_at(10_000, 10);
        assert_eq!(depth.target(now, false, 8), 0);
    }

    #[test]
    fn before_a_rate_is_known_half_the_slots_are_claimed_ahead() {
        let now = Instant::now();
        assert_eq!(Depth::new(now, 16).target(now, true, 8), 8);
    }

    #[test]
    fn fast_tasks_fill_the_horizon_up_to_the_cap() {
        // 4,000 starts a second for 20 ms: 80 tasks.
        let (mut depth, now) = run_at(4_000, 20);
        assert_eq!(depth.target(now, true, 8), 80);
        let (mut depth, now) = run_at(100_000, 20);
        assert_eq!(depth.target(now, true, 8), MAX_AHEAD);
    }

    #[test]
    fn a_fast_start_is_measured_before_the_window_ends() {
        let start = Instant::now();
        let mut depth = Depth::new(start, 16);
        // The first claim fills the 16 slots at once: no rate yet.
        depth.started(16);
        assert_eq!(depth.target(start + Duration::from_millis(2), true, 8), 8);
        // 32 more within 2 ms: 16,000 a second, known long before 25 ms.
        let mut depth = Depth::new(start, 16);
        depth.started(32);
        assert_eq!(
            depth.target(start + Duration::from_millis(2), true, 8),
            MAX_AHEAD
        );
    }

    #[test]
    fn slow_tasks_are_hardly_claimed_ahead() {
        // 40 starts a second (16 slots, tasks of 400 ms): one task ahead.
        let (mut depth, now) = run_at(40, 40);
        assert_eq!(depth.target(now, true, 8), 1);
    }

    #[test]
    fn the_rate_follows_a_slowdown() {
        let (mut depth, mut now) = run_at(10_000, 20);
        assert_eq!(depth.target(now, true, 8), MAX_AHEAD);
        for _ in 0..40 {
            now += WINDOW;
            depth.started(1);
            depth.target(now, true, 8);
        }
        assert!(depth.target(now, true, 8) <= 2);
    }
}
