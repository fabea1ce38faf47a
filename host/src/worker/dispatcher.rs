//! The dispatcher: claims due tasks and runs each in the sandbox.
//!
//! One loop per host. It claims at most as many tasks as it has free slots (the configured
//! concurrency), so no task waits leased on a busy host. Task types whose manifest limits
//! their concurrency or start rate are claimed first, each within its own budget, in one
//! statement per such type; all other types share one statement. When a claim comes back
//! short the loop sleeps until an enqueue on this host wakes it, an attempt finishes, a rate
//! limit allows the next start, or the poll interval passes (which covers other hosts'
//! enqueues and scheduled tasks).
//!
//! Paused task types (`worker/paused.rs`) are left out of every claim; their tasks wait pending.
//!
//! Attempts run on the sandbox runtime, a thread pool of their own, so CPU-bound handlers
//! cannot starve the HTTP API on the main runtime.

use chrono::Utc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

use super::RetryPause;
use super::completer::{Update, UpdateSender};
use super::in_flight::{InFlight, InFlightGuard};
use super::rate::RateLimits;
use crate::plugins::{Plugin, Registry};
use crate::sandbox::{RunLimits, Sandbox, TaskInfo, TaskServices};
use crate::shutdown::{Shutdown, Stage};
use crate::store::history::Outcome;
use crate::store::{AttemptId, ClaimRequest, Completion, SharedStore, StoreError};
use crate::task::{AttemptOutcome, Task, cap_snoozes, decide};

/// Under a backlog, how long to wait for more slots to free before claiming with fewer.
const BACKLOG_GATHER: Duration = Duration::from_millis(5);

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
    pub estimates: Arc<crate::worker::estimates::Estimates>,
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
}

/// One claim statement to make: task types and how many rows at most.
struct ClaimPlan {
    task_types: Vec<String>,
    limit: usize,
    /// For a rate-limited type: its rate, to charge the bucket for what was claimed.
    rate: Option<f64>,
}

impl Dispatcher {
    /// Claims and runs tasks until shutdown, then drains: running tasks get the grace period
    /// (or until an immediate shutdown) to finish; the rest are returned to pending.
    pub async fn run(self) {
        let this = Arc::new(self);
        let slots = Arc::new(Semaphore::new(this.concurrency));
        let finished = Arc::new(Notify::new());
        let rates = Mutex::new(RateLimits::default());
        let mut running = JoinSet::new();
        let mut pause = RetryPause::new();
        // Under a backlog (the last claim filled every free slot) wait for half the slots to
        // free before claiming again: one statement then claims many rows instead of one row
        // per finished task. With no backlog, claim as soon as one slot is free.
        let backlog_batch = (this.concurrency / 2).max(1);
        let mut backlog = false;

        while this.shutdown.stage() == Stage::Running {
            while running.try_join_next().is_some() {}

            if slots.available_permits() == 0 {
                tokio::select! {
                    permit = slots.clone().acquire_owned() => drop(permit),
                    _ = this.shutdown.reached(Stage::Graceful) => break,
                }
                continue;
            }
            if backlog && slots.available_permits() < backlog_batch {
                // Bounded, so long-running attempts cannot hold back the free slots.
                tokio::select! {
                    permits = slots.clone().acquire_many_owned(backlog_batch as u32) => drop(permits),
                    _ = tokio::time::sleep(BACKLOG_GATHER) => {}
                    _ = this.shutdown.reached(Stage::Graceful) => break,
                }
            }
            this.paused
                .refresh_if_stale(&*this.store, this.poll_interval)
                .await;
            let free = slots.available_permits();
            let (plans, rate_wait) = this.plan(free, &mut rates.lock().expect("rate lock"));
            // A claim that fails midway still hands back what earlier statements claimed: those
            // tasks are leased to this host and run now, never left to wait for a rescue.
            let (claimed, failure) = this.claim(free, &plans, &rates).await;
            if let Some(error) = failure {
                for (task, plugin, cancelled) in claimed {
                    let permit = slots
                        .clone()
                        .try_acquire_owned()
                        .expect("claimed no more than the free slots");
                    running.spawn_on(
                        this.clone()
                            .attempt(task, plugin, cancelled, permit, finished.clone()),
                        &this.runtime,
                    );
                }
                let wait = pause.next();
                tracing::warn!("claiming tasks failed: {error}; retrying in {wait:?}");
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = this.shutdown.reached(Stage::Graceful) => break,
                }
                continue;
            }
            pause.reset();
            let short = claimed.len() < free;
            backlog = !short;
            for (task, plugin, cancelled) in claimed {
                let permit = slots
                    .clone()
                    .try_acquire_owned()
                    .expect("claimed no more than the free slots");
                let attempt =
                    this.clone()
                        .attempt(task, plugin, cancelled, permit, finished.clone());
                running.spawn_on(attempt, &this.runtime);
            }
            if short {
                let wait = rate_wait.map_or(this.poll_interval, |w| w.min(this.poll_interval));
                tokio::select! {
                    _ = this.wake.notified() => {}
                    _ = finished.notified() => {}
                    _ = tokio::time::sleep(wait) => {}
                    _ = this.shutdown.reached(Stage::Graceful) => break,
                }
            }
        }
        this.drain(running).await;
    }

    /// Splits the free slots into claim statements: one per task type with a concurrency or
    /// rate limit (within its budget), then one for all other types. Also returns how soon a
    /// rate-limited type may start its next task, if one is waiting on its rate.
    fn plan(&self, free: usize, rates: &mut RateLimits) -> (Vec<ClaimPlan>, Option<Duration>) {
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
            let mut budget = free;
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
                limit: free,
                rate: None,
            });
        }
        (limited, rate_wait)
    }

    /// Runs the claim statements within the free slots; pairs each task with its plugin and
    /// registers it in flight (with the signal that cancels it). When a statement fails, the
    /// tasks claimed so far come back with the error, so the caller runs them.
    async fn claim(
        &self,
        free: usize,
        plans: &[ClaimPlan],
        rates: &Mutex<RateLimits>,
    ) -> (Vec<(Task, Arc<Plugin>, Arc<Notify>)>, Option<StoreError>) {
        let mut claimed = Vec::new();
        for plan in plans {
            let limit = plan.limit.min(free.saturating_sub(claimed.len()));
            if limit == 0 {
                continue;
            }
            let request = ClaimRequest {
                owner: self.owner.clone(),
                limit,
                task_types: plan.task_types.clone(),
                now: Utc::now(),
                lease: self.lease,
            };
            let tasks = match self.store.claim(&request).await {
                Ok(tasks) => tasks,
                Err(error) => return (claimed, Some(error)),
            };
            if let (Some(rate), Some(task)) = (plan.rate, tasks.first()) {
                rates.lock().expect("rate lock").take(
                    &task.task_type,
                    rate,
                    tasks.len(),
                    Instant::now(),
                );
            }
            let mut orphans = Vec::new();
            for task in tasks {
                match self.registry.get(&task.task_type) {
                    Some(plugin) => {
                        let cancelled = self.in_flight.start(AttemptId::of(&task), &task.task_type);
                        claimed.push((task, plugin, cancelled));
                    }
                    // Unregistered between planning and claiming: hand it back untouched.
                    None => orphans.push(AttemptId::of(&task)),
                }
            }
            if !orphans.is_empty()
                && let Err(error) = self.store.release(&self.owner, &orphans).await
            {
                // Their leases expire and the rescuer returns them; nothing is lost.
                tracing::warn!(
                    tasks = orphans.len(),
                    "handing back tasks of a type removed meanwhile failed: {error}"
                );
            }
        }
        (claimed, None)
    }

    /// Runs one attempt and hands its outcome to the completer.
    async fn attempt(
        self: Arc<Self>,
        task: Task,
        plugin: Arc<Plugin>,
        cancelled: Arc<Notify>,
        permit: OwnedSemaphorePermit,
        finished: Arc<Notify>,
    ) {
        let attempt_id = AttemptId::of(&task);
        // Unregisters the attempt however this function ends, a panic included.
        let in_flight = InFlightGuard::new(self.in_flight.clone(), attempt_id);
        let info = TaskInfo {
            id: task.id as u64,
            task_type: task.task_type.clone(),
            attempt: task.attempt(),
            max_attempts: task.max_attempts(),
            idempotency_key: task.idempotency_key.clone(),
        };
        let policy = &plugin.policy;
        let limits = RunLimits {
            fuel: policy.fuel,
            timeout: policy.timeout,
            memory_bytes: policy.memory_bytes,
            max_result_bytes: self.max_result_bytes,
            log_bytes: self.log_bytes,
            capabilities: policy.capabilities.clone(),
        };
        let payload = task.payload.to_string();
        let due_for = task.attempted_at.unwrap_or_else(Utc::now) - task.next_run_at;
        crate::instruments::attempt_started(&task.task_type, due_for.to_std().unwrap_or_default());
        let started = Instant::now();
        let run = self.sandbox.run(
            &plugin.handler,
            info,
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
                drop(permit);
                finished.notify_one();
                return;
            }
        };
        self.estimates.record(&task.task_type, started.elapsed());
        // A snooze past the type's `max_snoozes` in a row counts as a failed attempt.
        let outcome = match attempt.outcome {
            snooze @ AttemptOutcome::Snooze(_) => {
                let in_a_row = self.store.snoozes(task.id).await.unwrap_or(0);
                cap_snoozes(snooze, in_a_row, policy.max_snoozes)
            }
            other => other,
        };
        let ended = Outcome::of(&outcome);
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
            crate::instruments::outcome(transition.status, transition.error.is_some()),
            started.elapsed(),
            attempt.fuel_used,
        );
        tracing::debug!(
            task_id = task.id,
            task_type = %task.task_type,
            attempt = task.attempt(),
            status = %transition.status,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "attempt finished"
        );
        if let Some(error) = &transition.error {
            tracing::info!(task_id = task.id, task_type = %task.task_type, attempt = task.attempt(), next = %transition.status, "attempt failed: {error}");
        }
        let completion = Completion {
            id: task.id,
            owner: self.owner.clone(),
            attempt: task.attempts,
            transition,
            outcome: ended,
            plugin_version: Some(plugin.version.clone()),
            log: (!attempt.log.is_empty()).then_some(attempt.log),
            finished_at: Utc::now(),
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
        drop(permit);
        finished.notify_one();
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
