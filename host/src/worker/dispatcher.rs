//! The dispatcher: claims due tasks and runs each in the sandbox.
//!
//! One loop per host. It claims at most as many tasks as it has free slots (the configured
//! concurrency), in one statement per batch, so no task waits leased on a busy host. When a
//! claim comes back short it sleeps until an enqueue on this host wakes it, a slot frees, or
//! the poll interval passes (which covers other hosts' enqueues and scheduled tasks).
//!
//! Attempts run on the sandbox runtime, a thread pool of their own, so CPU-bound handlers
//! cannot starve the HTTP API on the main runtime.

use chrono::Utc;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

use super::completer::{Update, UpdateSender};
use super::RetryPause;
use crate::plugins::Registry;
use crate::sandbox::{RunLimits, Sandbox, TaskEvents, TaskInfo};
use crate::shutdown::{Shutdown, Stage};
use crate::store::{ClaimRequest, Completion, ProgressUpdate, SharedStore};
use crate::task::{decide, Task, TaskId};

/// What the dispatcher needs; built once by the host.
pub struct Dispatcher {
    pub store: SharedStore,
    pub registry: Arc<Registry>,
    pub sandbox: Sandbox,
    /// Where attempts run.
    pub runtime: tokio::runtime::Handle,
    pub updates: UpdateSender,
    /// This host's lease owner name.
    pub owner: String,
    pub concurrency: usize,
    pub lease: Duration,
    pub poll_interval: Duration,
    pub shutdown_grace: Duration,
    /// Enqueues on this host notify it.
    pub wake: Arc<Notify>,
    pub shutdown: Shutdown,
}

/// Sends a handler's progress reports to the completer without ever blocking the guest.
struct ProgressReporter(UpdateSender);

impl TaskEvents for ProgressReporter {
    fn progress(&self, task_id: u64, percent: u8, note: String) {
        // Progress is advisory: under extreme back-pressure a report may be dropped.
        let _ = self.0.try_send(Update::Progress(ProgressUpdate { id: task_id as i64, percent, note }));
    }
}

impl Dispatcher {
    /// Claims and runs tasks until shutdown, then drains: running tasks get the grace period
    /// (or until an immediate shutdown) to finish; the rest are returned to pending.
    pub async fn run(self) {
        let this = Arc::new(self);
        let slots = Arc::new(Semaphore::new(this.concurrency));
        let in_flight: Arc<Mutex<HashSet<TaskId>>> = Arc::default();
        let mut running = JoinSet::new();
        let mut pause = RetryPause::new();
        let events: Arc<dyn TaskEvents> = Arc::new(ProgressReporter(this.updates.clone()));

        while this.shutdown.stage() == Stage::Running {
            // Reap finished attempts so the JoinSet does not grow.
            while running.try_join_next().is_some() {}

            let free = slots.available_permits();
            if free == 0 {
                tokio::select! {
                    permit = slots.clone().acquire_owned() => drop(permit),
                    _ = this.shutdown.reached(Stage::Graceful) => break,
                }
                continue;
            }
            let request = ClaimRequest {
                owner: this.owner.clone(),
                limit: free,
                task_types: this.registry.task_types(),
                now: Utc::now(),
                lease: this.lease,
            };
            let claimed = match this.store.claim(&request).await {
                Ok(tasks) => {
                    pause.reset();
                    tasks
                }
                Err(error) => {
                    let wait = pause.next();
                    tracing::warn!("claiming tasks failed: {error}; retrying in {wait:?}");
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {}
                        _ = this.shutdown.reached(Stage::Graceful) => break,
                    }
                    continue;
                }
            };
            let short = claimed.len() < free;
            for task in claimed {
                let permit = slots.clone().try_acquire_owned().expect("claimed no more than the free slots");
                in_flight.lock().expect("in-flight lock").insert(task.id);
                let attempt = this.clone().attempt(task, permit, in_flight.clone(), events.clone());
                running.spawn_on(attempt, &this.runtime);
            }
            if short {
                tokio::select! {
                    _ = this.wake.notified() => {}
                    _ = tokio::time::sleep(this.poll_interval) => {}
                    _ = this.shutdown.reached(Stage::Graceful) => break,
                }
            }
        }
        this.drain(running, in_flight).await;
    }

    /// Runs one attempt and hands its outcome to the completer.
    async fn attempt(
        self: Arc<Self>,
        task: Task,
        permit: OwnedSemaphorePermit,
        in_flight: Arc<Mutex<HashSet<TaskId>>>,
        events: Arc<dyn TaskEvents>,
    ) {
        let Some(plugin) = self.registry.get(&task.task_type) else {
            // Unregistered between claim and start: hand it back untouched.
            in_flight.lock().expect("in-flight lock").remove(&task.id);
            if let Err(error) = self.store.release(&self.owner, &[task.id]).await {
                tracing::warn!(task_id = task.id, "releasing a task of an unregistered type failed: {error}");
            }
            return;
        };
        let info = TaskInfo {
            id: task.id as u64,
            task_type: task.task_type.clone(),
            attempt: task.attempt(),
            max_attempts: task.max_attempts(),
            idempotency_key: task.idempotency_key.clone(),
        };
        let limits = RunLimits { fuel: plugin.policy.fuel, memory_bytes: plugin.policy.memory_bytes };
        let payload = task.payload.to_string();
        let started = std::time::Instant::now();
        let outcome = self.sandbox.run(&plugin.handler, info, &payload, limits, events).await;
        let transition = decide(
            task.retry_count,
            task.max_retry,
            outcome,
            &plugin.policy.backoff,
            Utc::now(),
            rand::random::<f64>(),
        );
        tracing::debug!(
            task_id = task.id,
            task_type = %task.task_type,
            attempt = task.attempt(),
            status = %transition.status,
            elapsed_ms = started.elapsed().as_millis() as u64,
            error = transition.error.as_deref().unwrap_or(""),
            "attempt finished"
        );
        if let Some(error) = &transition.error {
            tracing::info!(task_id = task.id, task_type = %task.task_type, attempt = task.attempt(), next = %transition.status, "attempt failed: {error}");
        }
        let completion = Completion {
            id: task.id,
            owner: self.owner.clone(),
            claimed_retry_count: task.retry_count,
            transition,
            plugin_version: Some(plugin.version.clone()),
            finished_at: Utc::now(),
        };
        // Off the in-flight list before the completion is queued: shutdown releases only tasks
        // whose outcome will never be written.
        in_flight.lock().expect("in-flight lock").remove(&task.id);
        if self.updates.send(Update::Finished(completion)).await.is_err() {
            tracing::error!(task_id = task.id, "the completer stopped before this attempt could be recorded; the task will be rescued");
        }
        drop(permit);
    }

    /// Waits for running attempts within the grace period, then stops the rest and returns
    /// their tasks to pending without counting the attempt.
    async fn drain(&self, mut running: JoinSet<()>, in_flight: Arc<Mutex<HashSet<TaskId>>>) {
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
        let unfinished: Vec<TaskId> = in_flight.lock().expect("in-flight lock").drain().collect();
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
