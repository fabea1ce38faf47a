//! The dispatcher: claims due tasks and runs each in the sandbox.
//!
//! One loop per host. Claimed tasks wait in a short *ready queue* and start as slots (the
//! configured concurrency) free. Under a backlog the loop claims ahead of its free slots, as many
//! tasks as it starts in a few milliseconds (`worker/run/ready.rs`), and sends the next claim while
//! the queue still holds work, so a database round trip never stands between a finished attempt
//! and the next start, and one statement claims many rows. Task types whose manifest limits
//! their concurrency or start rate are claimed only within their budget and the free slots, in
//! one statement per such type; all other types share one statement. When a claim comes back
//! short the loop sleeps until an enqueue on this host wakes it, an attempt finishes, a rate
//! limit allows the next start, or the poll interval passes (which covers other hosts'
//! enqueues and scheduled tasks).
//!
//! A slot that finishes an attempt takes the next task from the ready queue itself and runs it
//! on the sandbox runtime, so under a backlog tasks follow each other without a hop through the
//! dispatcher's loop; the loop wakes when the queue runs low, to claim again, or when a slot
//! goes idle.
//!
//! A task in the ready queue is leased to this host and registered in flight like a running
//! one: the lease keeper keeps its lease, a cancel reaches it, and shutdown hands it back. It
//! starts on the plugin version registered when it starts; if its type was paused or removed
//! meanwhile, it is handed back to the queue untouched.
//!
//! Paused task types (`worker/run/paused.rs`) are left out of every claim; their tasks wait pending.
//!
//! Attempts run on the sandbox runtime, a thread pool of their own, so CPU-bound handlers
//! cannot starve the HTTP API on the main runtime.

use chrono::Utc;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

use super::completer::{Update, UpdateSender};
use super::in_flight::{InFlight, InFlightGuard};
use super::rate::RateLimits;
use super::ready::{Depth, Ready, ReadyQueue};
use crate::plugins::registry::Source;
use crate::plugins::tally::Counted;
use crate::plugins::{Plugin, Registry};
use crate::sandbox::{RunLimits, Sandbox, TaskInfo, TaskServices};
use crate::shutdown::{Shutdown, Stage};
use crate::store::history::{AttemptCost, Outcome};
use crate::store::{AttemptId, ClaimRequest, Completion, SharedStore, StoreError};
use crate::task::{AttemptOutcome, Task, cap_snoozes, decide};
use crate::worker::RetryPause;

/// At shutdown, how long a claim already sent may take to come back (its tasks are then
/// registered here and handed back with the rest).
const CLAIM_AT_SHUTDOWN: Duration = Duration::from_secs(5);

/// What the dispatcher needs; built once by the host.
pub struct Dispatcher {
    pub store: SharedStore,
    pub registry: Arc<Registry>,
    pub sandbox: Sandbox,
    /// Where attempts run.
    pub runtime: tokio::runtime::Handle,
    pub updates: UpdateSender,
    /// Host services for handlers.
    pub services: Arc<dyn TaskServices>,
    /// Attempts running here, shared with the API (cancel) and the lease keeper.
    pub in_flight: Arc<InFlight>,
    /// Attempt times, for the API's estimated completion times.
    pub estimates: Arc<crate::worker::run::estimates::Estimates>,
    /// This host's lease owner name.
    pub owner: String,
    pub concurrency: usize,
    pub lease: Duration,
    pub poll_interval: Duration,
    pub shutdown_grace: Duration,
    pub max_result_bytes: usize,
    pub log_bytes: usize,
    /// Enqueues on this host notify it.
    pub wake: Arc<Notify>,
    pub shutdown: Shutdown,
    /// Task types left out of claims (re-read from the store at the poll interval).
    pub paused: Arc<super::paused::PausedTypes>,
    /// How each deployed build did here, for the canary's verdict.
    pub tallies: Arc<super::tallies::BuildTallies>,
    /// Keeps attempt records for `spool replay`.
    pub recorder: Arc<super::recorder::Recorder>,
}

/// One claim statement to make: task types and how many rows at most.
struct ClaimPlan {
    task_types: Vec<String>,
    limit: usize,
    /// For a rate-limited type: its rate, to charge the bucket for what was claimed.
    rate: Option<f64>,
}

/// What one round of claim statements brought back.
struct Claimed {
    tasks: Vec<Ready>,
    /// How many rows the statements asked for in all.
    asked: usize,
    /// Set when a statement failed; the tasks claimed before it are still in `tasks`.
    failure: Option<StoreError>,
    /// How soon a rate-limited type may start its next task, if one waits on its rate.
    rate_wait: Option<Duration>,
}

type ClaimInFlight = Pin<Box<dyn Future<Output = Claimed> + Send>>;

/// Where the dispatcher's loop stands between claims.
enum Phase {
    /// Claims as soon as the ready queue runs low. `backlog`: the last claim came back full,
    /// so more tasks are due than were asked for (the ready queue then holds more ahead).
    MayClaim { backlog: bool },
    /// A claim is under way; its tasks join the ready queue when it returns.
    Claiming(ClaimInFlight),
    /// The last claim came back short: no claim until an enqueue or a finished attempt wakes
    /// the loop, or this long has passed (the poll interval, or sooner for a rate limit).
    Idle(Duration),
    /// A claim failed: no claim before this instant (growing pauses while the database is away).
    BackingOff(tokio::time::Instant),
}

impl Phase {
    /// A reason to claim again (an enqueue, a free slot): ends an idle wait, changes nothing
    /// else.
    fn woken(self) -> Phase {
        match self {
            Phase::Idle(_) => Phase::MayClaim { backlog: false },
            other => other,
        }
    }
}

/// Sleeps until `at`; never ends without one.
async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Sleeps `wait`; never ends without one.
async fn sleep_for(wait: Option<Duration>) {
    match wait {
        Some(wait) => tokio::time::sleep(wait).await,
        None => std::future::pending().await,
    }
}

/// Attempts ending: how many ended so far (for the ready queue's depth), and a signal for the
/// loop when a slot goes idle.
#[derive(Default)]
struct Ended {
    signal: Notify,
    count: AtomicU64,
}

impl Ended {
    /// An attempt ended and its slot goes on with the next ready task.
    fn counted(&self) {
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    /// An attempt ended and its slot is free.
    fn slot_freed(&self) {
        self.counted();
        self.signal.notify_one();
    }

    fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }
}

impl Dispatcher {
    /// Claims and runs tasks until shutdown, then drains: running tasks get the grace period
    /// (or until an immediate shutdown) to finish; the rest are returned to pending.
    pub async fn run(self) {
        let this = Arc::new(self);
        let slots = Arc::new(Semaphore::new(this.concurrency));
        let finished = Arc::new(Ended::default());
        let rates = Arc::new(Mutex::new(RateLimits::default()));
        let mut running = JoinSet::new();
        let mut pause = RetryPause::new();
        let ready = Arc::new(ReadyQueue::default());
        let mut depth = Depth::new(Instant::now(), this.concurrency, this.store.claim_horizon());
        let mut phase = Phase::MayClaim { backlog: false };

        while this.shutdown.stage() == Stage::Running {
            while running.try_join_next().is_some() {}
            this.start_ready(&ready, &slots, &mut running, &finished);

            if let Phase::MayClaim { backlog } = phase {
                let free = slots.available_permits();
                let waiting = ready.len();
                depth.finished(finished.count());
                let ahead = depth.target(Instant::now(), backlog);
                // What `low` below means, for the slots to signal.
                ready.set_low_mark(ahead * 3 / 4);
                // Slots not spoken for by the queue can take limited types too; the rest of
                // the claim is ahead of the slots, for unlimited types only.
                let for_slots = free.saturating_sub(waiting);
                let more_ahead = ahead.saturating_sub(waiting.saturating_sub(free));
                let low = waiting == 0 || waiting * 4 <= ahead * 3;
                if low && for_slots + more_ahead > 0 {
                    phase = Phase::Claiming(Box::pin(this.clone().claim_round(
                        for_slots,
                        for_slots + more_ahead,
                        rates.clone(),
                    )));
                }
            }

            let waiting = !ready.is_empty();
            let may_claim = matches!(phase, Phase::MayClaim { .. });
            // Wake-ups count while the loop may claim or idles; not while a claim is under way
            // (a wake-up then stays stored, `notify_one`, and ends the idle wait that a short
            // claim begins, so an enqueue committed after that claim's snapshot is never left
            // for the poll interval), nor while it backs off after a failed claim.
            let wakeable = matches!(phase, Phase::MayClaim { .. } | Phase::Idle(_));
            let backoff_until = match phase {
                Phase::BackingOff(until) => Some(until),
                _ => None,
            };
            let idle_for = match phase {
                Phase::Idle(wait) => Some(wait),
                _ => None,
            };
            let claim = async {
                match &mut phase {
                    Phase::Claiming(claim) => claim.await,
                    _ => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                _ = this.shutdown.reached(Stage::Graceful) => break,
                claimed = claim => {
                    let Claimed { tasks, asked, failure, rate_wait } = claimed;
                    let short = tasks.len() < asked;
                    ready.extend(tasks);
                    phase = if let Some(error) = failure {
                        let wait = pause.next();
                        tracing::warn!("claiming tasks failed: {error}; retrying in {wait:?}");
                        Phase::BackingOff(tokio::time::Instant::now() + wait)
                    } else {
                        pause.reset();
                        let backlog = !short && asked > 0;
                        if backlog {
                            Phase::MayClaim { backlog }
                        } else {
                            Phase::Idle(rate_wait.map_or(this.poll_interval, |w| w.min(this.poll_interval)))
                        }
                    };
                }
                permit = slots.clone().acquire_owned(), if waiting => drop(permit),
                () = sleep_until(backoff_until) => phase = Phase::MayClaim { backlog: false },
                _ = this.wake.notified(), if wakeable => phase = phase.woken(),
                _ = finished.signal.notified(), if wakeable && !waiting => phase = phase.woken(),
                _ = ready.low(), if may_claim => {}
                () = sleep_for(idle_for) => phase = Phase::MayClaim { backlog: false },
            }
        }
        if let Phase::Claiming(claim) = phase {
            // Whatever it claimed is registered in flight, so the drain hands it back.
            let _ = tokio::time::timeout(CLAIM_AT_SHUTDOWN, claim).await;
        }
        this.drain(running).await;
    }

    /// Starts queued tasks in the free slots. A task whose type was paused or removed since it
    /// was claimed is handed back to the queue instead.
    fn start_ready(
        self: &Arc<Self>,
        ready: &Arc<ReadyQueue>,
        slots: &Arc<Semaphore>,
        running: &mut JoinSet<()>,
        finished: &Arc<Ended>,
    ) {
        while !ready.is_empty() {
            let Ok(permit) = slots.clone().try_acquire_owned() else {
                break;
            };
            let Some(first) = self.next_runnable(ready) else {
                break;
            };
            let slot = self
                .clone()
                .slot(first, permit, ready.clone(), finished.clone());
            running.spawn_on(slot, &self.runtime);
        }
    }

    /// Takes the next queued task whose type is still registered and not paused, with its
    /// plugin; the ones before it that are not are handed back.
    fn next_runnable(self: &Arc<Self>, ready: &ReadyQueue) -> Option<(Ready, Arc<Plugin>)> {
        let mut hand_back = Vec::new();
        let mut next = None;
        while let Some(task) = ready.pop() {
            // An attempt whose failure would be final runs the stable build: a candidate on
            // trial costs a retry at most, never a dead letter.
            let may_run_candidate = task.task.retry_count < task.task.max_retry;
            match self.registry.pick(&task.task.task_type, may_run_candidate) {
                Some(plugin) if !self.paused.contains(&task.task.task_type) => {
                    next = Some((task, plugin));
                    break;
                }
                _ => hand_back.push(AttemptId::of(&task.task)),
            }
        }
        if !hand_back.is_empty() {
            for attempt in &hand_back {
                self.in_flight.finish(*attempt);
            }
            let this = self.clone();
            tokio::spawn(async move { this.hand_back(&hand_back).await });
        }
        next
    }

    /// One slot at work: runs `first`, then the next ready task, until the queue is empty or
    /// the host stops; the slot is free again when this returns.
    async fn slot(
        self: Arc<Self>,
        first: (Ready, Arc<Plugin>),
        permit: OwnedSemaphorePermit,
        ready: Arc<ReadyQueue>,
        finished: Arc<Ended>,
    ) {
        let mut next = Some(first);
        while let Some((Ready { task, cancelled }, plugin)) = next {
            self.clone().attempt(task, plugin, cancelled).await;
            next = if self.shutdown.stage() == Stage::Running {
                self.next_runnable(&ready)
            } else {
                None
            };
            if next.is_some() {
                finished.counted();
            }
        }
        drop(permit);
        finished.slot_freed();
    }

    /// Returns claimed tasks that will not run here to pending, untouched.
    async fn hand_back(&self, attempts: &[AttemptId]) {
        if let Err(error) = self.store.release(&self.owner, attempts).await {
            // Their leases expire and the rescuer returns them; nothing is lost.
            tracing::warn!(
                tasks = attempts.len(),
                "handing back tasks of a type paused or removed since the claim failed: {error}"
            );
        }
    }

    /// One round of claim statements: limited types within `for_slots`, all of them within
    /// `total`.
    async fn claim_round(
        self: Arc<Self>,
        for_slots: usize,
        total: usize,
        rates: Arc<Mutex<RateLimits>>,
    ) -> Claimed {
        self.paused
            .refresh_if_stale(&*self.store, self.poll_interval)
            .await;
        let (plans, rate_wait) = self.plan(for_slots, total, &mut rates.lock().expect("rate lock"));
        let (tasks, asked, failure) = self.claim(total, &plans, &rates).await;
        Claimed {
            tasks,
            asked,
            failure,
            rate_wait,
        }
    }

    /// Splits a claim into statements: one per task type with a concurrency or rate limit
    /// (within its budget and `for_slots`), then one for all other types (up to `total`). Also
    /// returns how soon a rate-limited type may start its next task, if one is waiting on its
    /// rate.
    fn plan(
        &self,
        for_slots: usize,
        total: usize,
        rates: &mut RateLimits,
    ) -> (Vec<ClaimPlan>, Option<Duration>) {
        let now = Instant::now();
        let mut limited = Vec::new();
        let mut unlimited = Vec::new();
        let mut rate_wait: Option<Duration> = None;
        for plugin in self.registry.plugins() {
            if self.paused.contains(&plugin.task_type) {
                continue;
            }
            let policy = &plugin.policy;
            if policy.concurrency.is_none() && policy.rate.is_none() {
                unlimited.push(plugin.task_type.clone());
                continue;
            }
            let mut budget = for_slots;
            if let Some(max) = policy.concurrency {
                budget =
                    budget.min(max.saturating_sub(self.in_flight.running_of(&plugin.task_type)));
            }
            if let Some(rate) = policy.rate {
                let available = rates.available(&plugin.task_type, rate, now);
                if available == 0 {
                    let next = rates.next_start_in(&plugin.task_type, rate, now);
                    rate_wait = Some(rate_wait.map_or(next, |w| w.min(next)));
                }
                budget = budget.min(available);
            }
            if budget > 0 {
                limited.push(ClaimPlan {
                    task_types: vec![plugin.task_type.clone()],
                    limit: budget,
                    rate: policy.rate,
                });
            }
        }
        if !unlimited.is_empty() {
            limited.push(ClaimPlan {
                task_types: unlimited,
                limit: total,
                rate: None,
            });
        }
        (limited, rate_wait)
    }

    /// Runs the claim statements, at most `total` rows in all; registers each task in flight
    /// (with the signal that cancels it). Returns the tasks, how many rows were asked for, and
    /// the error of a statement that failed (the tasks claimed before it still come back, so
    /// the caller runs them).
    async fn claim(
        &self,
        total: usize,
        plans: &[ClaimPlan],
        rates: &Mutex<RateLimits>,
    ) -> (Vec<Ready>, usize, Option<StoreError>) {
        let mut claimed = Vec::new();
        let mut asked = 0;
        for plan in plans {
            let limit = plan.limit.min(total.saturating_sub(asked));
            if limit == 0 {
                continue;
            }
            asked += limit;
            let request = ClaimRequest {
                owner: self.owner.clone(),
                limit,
                task_types: plan.task_types.clone(),
                now: Utc::now(),
                lease: self.lease,
            };
            let tasks = match self.store.claim(&request).await {
                Ok(tasks) => tasks,
                Err(error) => return (claimed, asked, Some(error)),
            };
            if let (Some(rate), Some(task)) = (plan.rate, tasks.first()) {
                rates.lock().expect("rate lock").take(
                    &task.task_type,
                    rate,
                    tasks.len(),
                    Instant::now(),
                );
            }
            // A type unregistered meanwhile is handed back when its task reaches a slot.
            claimed.extend(tasks.into_iter().map(|task| Ready {
                cancelled: self.in_flight.start(AttemptId::of(&task), &task.task_type),
                task,
            }));
        }
        (claimed, asked, None)
    }

    /// Runs one attempt and hands its outcome to the completer.
    async fn attempt(self: Arc<Self>, task: Task, plugin: Arc<Plugin>, cancelled: Arc<Notify>) {
        let attempt_id = AttemptId::of(&task);
        // Unregisters the attempt however this function ends, a panic included.
        let in_flight = InFlightGuard::new(self.in_flight.clone(), attempt_id);
        let info = TaskInfo {
            id: task.id as u64,
            task_type: task.task_type.clone(),
            attempt: task.attempt(),
            max_attempts: task.max_attempts(),
            idempotency_key: task.idempotency_key.clone(),
            depth: task.depth,
        };
        let policy = &plugin.policy;
        let limits = RunLimits {
            fuel: policy.fuel,
            timeout: policy.timeout,
            memory_bytes: policy.memory_bytes,
            max_result_bytes: self.max_result_bytes,
            log_bytes: self.log_bytes,
            capabilities: policy.capabilities.clone(),
            tape: super::recorder::Recorder::tape_for(&plugin),
        };
        let payload = task.payload.to_string();
        let due_for = task.attempted_at.unwrap_or_else(Utc::now) - task.next_run_at;
        crate::instruments::attempt_started(&task.task_type, due_for.to_std().unwrap_or_default());
        let started = Instant::now();
        let run = self.sandbox.run(
            &plugin.handler,
            info.clone(),
            &payload,
            &limits,
            self.services.clone(),
        );
        let attempt = tokio::select! {
            attempt = run => attempt,
            _ = cancelled.notified() => {
                // The task was cancelled (its row already says so); dropping the run stopped
                // the guest. Nothing to record.
                tracing::info!(task_id = task.id, task_type = %task.task_type, "running attempt interrupted: the task was cancelled");
                crate::instruments::attempt_cancelled(&task.task_type);
                in_flight.finish();
                return;
            }
        };
        let ran = started.elapsed();
        self.estimates.record(&task.task_type, ran);
        let cost = AttemptCost {
            wall_ms: u64::try_from(ran.as_millis()).unwrap_or(u64::MAX),
            fuel_used: attempt.fuel_used,
            peak_memory: attempt.peak_memory,
        };
        // A snooze past the type's `max_snoozes` in a row counts as a failed attempt.
        let outcome = match attempt.outcome {
            snooze @ AttemptOutcome::Snooze(_) => {
                let in_a_row = self.store.snoozes(task.id).await.unwrap_or(0);
                cap_snoozes(snooze, in_a_row, policy.max_snoozes)
            }
            other => other,
        };
        let ended = Outcome::of(&outcome);
        let (result, error) = outcome.result_and_error();
        let transition = decide(
            task.retry_count,
            task.max_retry,
            outcome,
            &policy.backoff,
            Utc::now(),
            rand::random::<f64>(),
        );
        crate::instruments::attempt_ended(
            &task.task_type,
            &plugin.version,
            crate::instruments::outcome(transition.status, transition.error.is_some()),
            &cost,
        );
        tracing::debug!(
            task_id = task.id,
            task_type = %task.task_type,
            attempt = task.attempt(),
            status = %transition.status,
            elapsed_ms = cost.wall_ms,
            "attempt finished"
        );
        if let Some(error) = &transition.error {
            tracing::info!(task_id = task.id, task_type = %task.task_type, attempt = task.attempt(), next = %transition.status, "attempt failed: {error}");
        }
        // A deployed build is counted in the trial window its type is in now (0 outside a
        // trial); a folder build has no trial.
        let deployed = matches!(plugin.source, Source::Deployment { .. });
        let window = if deployed {
            self.registry
                .deployed(&task.task_type)
                .and_then(|deployed| deployed.canary_since)
                .map_or(0, |since| since.timestamp_millis())
        } else {
            0
        };
        self.tallies.count(
            &task.task_type,
            &plugin.version,
            window,
            deployed,
            Counted {
                failed: matches!(
                    ended,
                    Outcome::Retry | Outcome::Fail | Outcome::Crashed | Outcome::TimedOut
                ),
                wall_ms: cost.wall_ms,
                fuel: cost.fuel_used,
                memory: cost.peak_memory,
            },
        );
        let mut record = None;
        if let Some(tape) = &limits.tape {
            let ended = super::recorder::Ended {
                info: &info,
                payload: &payload,
                outcome: ended,
                result,
                error,
                fuel_used: cost.fuel_used,
                limits: &limits,
            };
            record = self.recorder.record(&plugin, tape, ended).await;
        }
        let completion = Completion {
            id: task.id,
            owner: self.owner.clone(),
            attempt: task.attempts,
            transition,
            outcome: ended,
            plugin_version: Some(plugin.version.clone()),
            log: (!attempt.log.is_empty()).then_some(attempt.log),
            cost: Some(cost),
            finished_at: Utc::now(),
            record,
        };
        // Off the in-flight list before the completion is queued: shutdown releases only tasks
        // whose outcome will never be written.
        in_flight.finish();
        if self
            .updates
            .send(Update::Finished(completion))
            .await
            .is_err()
        {
            tracing::error!(
                task_id = task.id,
                "the completer stopped before this attempt could be recorded; the task will be rescued"
            );
        }
    }

    /// Waits for running attempts within the grace period, then stops the rest and returns
    /// their tasks to pending without counting the attempt.
    async fn drain(&self, mut running: JoinSet<()>) {
        let count = running.len();
        if count > 0 {
            tracing::info!(running = count, grace = ?self.shutdown_grace, "waiting for running tasks to finish");
        }
        let all_done = async { while running.join_next().await.is_some() {} };
        tokio::select! {
            _ = all_done => {}
            _ = tokio::time::sleep(self.shutdown_grace) => {}
            _ = self.shutdown.reached(Stage::Immediate) => {}
        }
        running.abort_all();
        while running.join_next().await.is_some() {}
        let unfinished = self.in_flight.drain();
        if unfinished.is_empty() {
            return;
        }
        let mut pause = RetryPause::new();
        for _ in 0..5 {
            match self.store.release(&self.owner, &unfinished).await {
                Ok(released) => {
                    tracing::info!(released, "returned unfinished tasks to the queue");
                    return;
                }
                Err(error) => {
                    tracing::warn!("returning unfinished tasks failed: {error}");
                    tokio::time::sleep(pause.next()).await;
                }
            }
        }
        tracing::error!(tasks = ?unfinished, "could not return unfinished tasks; their leases will expire and the rescuer will run them again");
    }
}
