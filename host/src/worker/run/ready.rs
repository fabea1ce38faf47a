//! How many tasks the dispatcher claims ahead of its free slots.
//!
//! Under a backlog a claim statement costs about the same whether it takes 8 rows or 100, so
//! claiming only the free slots makes the database round trip, and the hand-offs around it,
//! the price of every few tasks. Instead the dispatcher keeps a small *ready queue*: tasks
//! claimed (leased to this host, kept alive by the lease keeper like running ones) that start
//! as soon as a slot frees, without a round trip, while the next claim is already on its way.
//!
//! The queue is kept short in *time*, not in rows: its depth is the number of attempts this
//! host finishes in the horizon (the rate at which a queued task would get its slot), measured
//! as it runs; the horizon is [`HORIZON`], 20 ms, or longer where a store asks for it
//! ([`crate::store::queue::Queue::claim_horizon`]: 60 ms on MySQL, whose claims cost more). So a
//! host draining ten thousand no-op tasks a second claims a hundred or two at a time while a
//! host whose tasks take longer than the horizon claims nothing ahead, and nothing is claimed
//! ahead before an attempt has finished. That bounds what queued tasks can
//! cost: another host never finds a task it could run sitting leased here for longer than
//! about the horizon, and a task of higher priority enqueued meanwhile waits at most about that
//! long behind the queue.
//!
//! Only task types without a concurrency or rate limit are claimed ahead; limited types are
//! claimed within their budget when slots are free, as before.
//!
//! The queue itself ([`ReadyQueue`]) is shared: the dispatcher fills it, and a slot that
//! finishes an attempt takes its next task from it directly, on the sandbox runtime, so under
//! a backlog a task goes from one attempt to the next without waking the dispatcher's loop.
//! The dispatcher is woken only when the queue falls to its low mark, a quarter below its
//! depth, to send the next claim: the claim then has about 15 ms of queued work to come back
//! in. Half the depth was too late on 2 cores: a claim waits behind the completion batch in
//! the database's single writer, and slots ran dry before almost every claim returned.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

use crate::task::Task;

/// How much work, in time, the ready queue holds at most, unless the store asks for a longer
/// horizon ([`crate::store::queue::Queue::claim_horizon`]). The store owns the figure because a
/// backend's claim cost decides it.
pub const HORIZON: Duration = crate::store::DEFAULT_CLAIM_HORIZON;
/// Most tasks claimed ahead of the free slots (at 2 cores a no-op drain reaches about 600; the
/// cap only bounds memory and claim size on faster machines).
pub const MAX_AHEAD: usize = 1000;
/// How often the finish rate is re-estimated.
const WINDOW: Duration = Duration::from_millis(25);
/// Weight of a newest window of full length in the finish rate; a longer gap weighs more (a
/// rate last measured seconds ago says nothing about now), a shorter one less.
const SMOOTHING: f64 = 0.3;
/// A window ends early once this many slots' worth of attempts finished in it (and at least
/// [`EARLY_AFTER`] passed), so a host that starts draining a backlog of short tasks learns its
/// rate within a few milliseconds instead of a whole window.
const EARLY_SLOTS: usize = 2;
const EARLY_AFTER: Duration = Duration::from_millis(1);

/// The ready queue's target depth, from the rate at which this host finishes attempts (the
/// rate at which a queued task would get its slot).
#[derive(Debug)]
pub struct Depth {
    /// Attempts finished per second, smoothed over windows.
    rate: f64,
    window_start: Instant,
    finished_in_window: u64,
    /// Finished attempts counted so far (the dispatcher's running total).
    seen: u64,
    /// Finishes that end a window early (twice the slots).
    early_finishes: u64,
    /// How much work the queue holds.
    horizon: Duration,
}

impl Depth {
    /// A host with `slots` attempts at once, starting now, holding `horizon` of work ready.
    pub fn new(now: Instant, slots: usize, horizon: Duration) -> Self {
        Depth {
            horizon,
            rate: 0.0,
            window_start: now,
            finished_in_window: 0,
            seen: 0,
            early_finishes: (EARLY_SLOTS * slots.max(1)) as u64,
        }
    }

    /// Takes the running total of attempts finished on this host.
    pub fn finished(&mut self, total: u64) {
        self.finished_in_window += total.saturating_sub(self.seen);
        self.seen = self.seen.max(total);
    }

    /// How many tasks to hold ready beyond the free slots: as many as finish in the horizon,
    /// rounded down, at most [`MAX_AHEAD`]. `backlog` says the last claim came back full (more
    /// tasks are due than were asked for); without one nothing is claimed ahead, nor before
    /// any attempt finished: a task claimed ahead then could wait a whole attempt.
    pub fn target(&mut self, now: Instant, backlog: bool) -> usize {
        let elapsed = now.saturating_duration_since(self.window_start);
        let early = self.finished_in_window >= self.early_finishes && elapsed >= EARLY_AFTER;
        if elapsed >= WINDOW || early {
            let measured = self.finished_in_window as f64 / elapsed.as_secs_f64();
            let windows = elapsed.as_secs_f64() / WINDOW.as_secs_f64();
            let weight = 1.0 - (1.0 - SMOOTHING).powf(windows);
            self.rate = if self.rate == 0.0 {
                measured
            } else {
                weight * measured + (1.0 - weight) * self.rate
            };
            self.window_start = now;
            self.finished_in_window = 0;
        }
        if !backlog {
            return 0;
        }
        ((self.rate * self.horizon.as_secs_f64()).floor() as usize).min(MAX_AHEAD)
    }
}

/// A task claimed and leased here, waiting for a slot.
pub struct Ready {
    pub task: Task,
    /// Notified when the task is cancelled (it may be before it starts).
    pub cancelled: Arc<Notify>,
}

/// Claimed tasks in claim order, shared by the dispatcher and the slots.
#[derive(Default)]
pub struct ReadyQueue {
    tasks: Mutex<VecDeque<Ready>>,
    /// The dispatcher wants to claim again once this many tasks or fewer are left.
    low_mark: AtomicUsize,
    /// Tells the dispatcher the queue fell to its low mark.
    low: Notify,
}

impl ReadyQueue {
    fn tasks(&self) -> std::sync::MutexGuard<'_, VecDeque<Ready>> {
        self.tasks.lock().expect("ready queue lock")
    }

    pub fn extend(&self, tasks: impl IntoIterator<Item = Ready>) {
        self.tasks().extend(tasks);
    }

    /// The next task, signalling the dispatcher when what is left is at the low mark or below.
    pub fn pop(&self) -> Option<Ready> {
        let mut tasks = self.tasks();
        let next = tasks.pop_front()?;
        if tasks.len() <= self.low_mark.load(Ordering::Relaxed) {
            self.low.notify_one();
        }
        Some(next)
    }

    pub fn len(&self) -> usize {
        self.tasks().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn set_low_mark(&self, tasks: usize) {
        self.low_mark.store(tasks, Ordering::Relaxed);
    }

    /// Resolves when a task is taken and at most the low mark is left (or was, since the last
    /// wait: the signal is kept).
    pub async fn low(&self) {
        self.low.notified().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A depth after `windows` full windows finishing `rate_per_sec`.
    fn run_at(rate_per_sec: u64, windows: u32) -> (Depth, Instant) {
        let start = Instant::now();
        let mut depth = Depth::new(start, 16, HORIZON);
        let mut now = start;
        let mut total = 0;
        for _ in 0..windows {
            now += WINDOW;
            total += rate_per_sec * WINDOW.as_millis() as u64 / 1000;
            depth.finished(total);
            depth.target(now, true);
        }
        (depth, now)
    }

    #[test]
    fn no_backlog_claims_nothing_ahead() {
        let (mut depth, now) = run_at(10_000, 10);
        assert_eq!(depth.target(now, false), 0);
    }

    #[test]
    fn nothing_is_claimed_ahead_before_an_attempt_finished() {
        let now = Instant::now();
        let mut depth = Depth::new(now, 16, HORIZON);
        assert_eq!(depth.target(now + Duration::from_secs(1), true), 0);
    }

    #[test]
    fn fast_tasks_fill_the_horizon_up_to_the_cap() {
        // 4,000 finishes a second for 20 ms: 80 tasks.
        let (mut depth, now) = run_at(4_000, 20);
        assert_eq!(depth.target(now, true), 80);
        let (mut depth, now) = run_at(100_000, 20);
        assert_eq!(depth.target(now, true), MAX_AHEAD);
    }

    #[test]
    fn a_longer_horizon_holds_more_of_the_same_rate() {
        // 16,000 finishes a second, known after 2 ms: 320 tasks in 20 ms, 960 in 60 ms.
        let start = Instant::now();
        let mut depth = Depth::new(start, 16, 3 * HORIZON);
        depth.finished(32);
        assert_eq!(depth.target(start + Duration::from_millis(2), true), 960);
    }

    #[test]
    fn a_fast_start_is_measured_before_the_window_ends() {
        let start = Instant::now();
        let mut depth = Depth::new(start, 16, HORIZON);
        // The first claim's 16 tasks finished within 2 ms: not yet enough to go by.
        depth.finished(16);
        assert_eq!(depth.target(start + Duration::from_millis(2), true), 0);
        // 32 within 2 ms: 16,000 a second, known long before 25 ms (320 in 20 ms).
        let mut depth = Depth::new(start, 16, HORIZON);
        depth.finished(32);
        assert_eq!(depth.target(start + Duration::from_millis(2), true), 320);
    }

    #[test]
    fn slow_tasks_are_not_claimed_ahead() {
        // 40 finishes a second (16 slots, tasks of 400 ms): none finishes within 20 ms.
        let (mut depth, now) = run_at(40, 40);
        assert_eq!(depth.target(now, true), 0);
    }

    #[test]
    fn the_rate_follows_a_slowdown() {
        let (mut depth, mut now) = run_at(10_000, 20);
        assert_eq!(depth.target(now, true), 200);
        let mut total = depth.seen;
        for _ in 0..40 {
            now += WINDOW;
            total += 1;
            depth.finished(total);
            depth.target(now, true);
        }
        assert_eq!(depth.target(now, true), 0);
    }

    fn queued(id: i64) -> Ready {
        Ready {
            task: Task::sample(id),
            cancelled: Arc::new(Notify::new()),
        }
    }

    /// Whether the low signal is stored (without waiting).
    fn signalled(queue: &ReadyQueue) -> bool {
        use std::future::Future;
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        std::pin::pin!(queue.low()).poll(&mut cx).is_ready()
    }

    #[test]
    fn the_queue_signals_only_when_it_falls_to_its_low_mark() {
        let queue = ReadyQueue::default();
        queue.extend((1..=5).map(queued));
        queue.set_low_mark(2);
        assert_eq!(queue.pop().map(|r| r.task.id), Some(1));
        assert!(!signalled(&queue), "4 left, above the mark");
        queue.pop();
        assert!(!signalled(&queue), "3 left, above the mark");
        queue.pop();
        assert!(signalled(&queue), "2 left: at the mark");
        queue.pop();
        queue.pop();
        assert!(queue.pop().is_none());
        assert!(queue.is_empty());
    }

    #[test]
    fn a_long_attempt_after_a_fast_drain_forgets_the_old_rate() {
        // Fast tasks, then one attempt of 1.5 s during which nothing finished.
        let (mut depth, now) = run_at(10_000, 20);
        assert_eq!(depth.target(now + Duration::from_millis(1500), true), 0);
    }
}
