//! The scheduler: enqueues the ticks of periodic tasks ([`crate::schedule`]): spool.toml's
//! `[[schedule]]` tables and those of every loaded plugin's manifest (read from the registry on
//! every pass, so they come and go with hot reloads). Maintenance: it runs only while this
//! host leads ([`super::leader`]).
//!
//! Exactly once across hosts, even when two briefly both believe they lead: every tick's task
//! carries an idempotency key made of the schedule's identity and the tick's time
//! ([`crate::schedule::Schedule::idempotency_key`]), so the database inserts it once, whoever
//! asks, and a second enqueue returns the first one's task.
//!
//! Ticks before a schedule existed never run: the first host to see a schedule (with its
//! current expression) stores when, in the hosts' shared values (`spool_meta`, through
//! [`crate::store::coordination::Coordination::meta_get_or_insert`]), and every host starts from there. After
//! downtime only the latest missed tick is enqueued ([`crate::schedule::due`]), once.
//!
//! A schedule of a type that no host has a plugin for still enqueues: its tasks wait, pending,
//! like any task of an unknown type, and run when the plugin arrives (the leader cannot know
//! which types other hosts have). Manifest schedules come from the leader's own plugin folder,
//! so hosts sharing a database are expected to carry the same plugins.

use chrono::{DateTime, Utc};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

use super::leader::Leadership;
use crate::plugins::Registry;
use crate::schedule::{Schedule, Source, due};
use crate::shutdown::{Shutdown, Stage};
use crate::store::{SharedStore, StoreError};
use crate::task::{NewTask, TaskId};
use crate::worker::RetryPause;

/// The longest the scheduler sleeps between passes: how soon it sees a plugin's new schedule.
pub const MAX_NAP: Duration = Duration::from_secs(1);

/// A schedule's identity: where it is declared, its task type and its name.
pub type ScheduleId = (Source, String, String);

/// What this host knows of one schedule.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Known {
    /// The timing [`crate::schedule::Timing::fingerprint`] that `first_seen` belongs to.
    pub fingerprint: String,
    /// When any host first saw the schedule with that timing.
    pub first_seen: Option<DateTime<Utc>>,
    /// The latest tick this host enqueued, or found already enqueued by another host.
    pub last_tick: Option<DateTime<Utc>>,
    /// That tick's task.
    pub last_task: Option<TaskId>,
}

/// What this host knows of every schedule it has worked, shared with the API.
#[derive(Debug, Default)]
pub struct ScheduleBoard {
    known: Mutex<HashMap<ScheduleId, Known>>,
}

impl ScheduleBoard {
    /// What is known of a schedule.
    pub fn get(&self, id: &ScheduleId) -> Option<Known> {
        self.lock().get(id).cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ScheduleId, Known>> {
        self.known.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Every schedule: spool.toml's, then each loaded plugin's, by task type and name.
pub fn all_schedules(configured: &[Schedule], registry: &Registry) -> Vec<Schedule> {
    let mut all: Vec<Schedule> = configured.to_vec();
    for plugin in registry.plugins() {
        all.extend(plugin.policy.schedules.iter().map(|spec| Schedule {
            source: Source::Manifest,
            task_type: plugin.task_type.clone(),
            spec: spec.clone(),
        }));
    }
    all
}

/// The scheduler service.
pub struct Scheduler {
    pub store: SharedStore,
    /// The loaded plugins: their manifests' schedules, priorities and retry budgets.
    pub registry: Arc<Registry>,
    /// Schedules from spool.toml.
    pub configured: Vec<Schedule>,
    /// Retries of a scheduled task whose schedule and type's manifest say nothing.
    pub default_max_retry: u32,
    pub leadership: Arc<Leadership>,
    /// Woken when a tick enqueued a task.
    pub wake: Arc<Notify>,
    pub board: Arc<ScheduleBoard>,
    pub shutdown: Shutdown,
}

impl Scheduler {
    /// One pass at `now`: enqueues the due tick of every schedule, in one transaction.
    /// Returns how many tasks were new (the others had been enqueued already, by any host).
    pub async fn run_once(&self, now: DateTime<Utc>) -> Result<usize, StoreError> {
        let mut tasks = Vec::new();
        let mut ticks = Vec::new();
        let mut ticked = Vec::new();
        for schedule in all_schedules(&self.configured, &self.registry) {
            let first_seen = self.first_seen(&schedule, now).await?;
            let id = schedule.id();
            let last = match self.board.get(&id).and_then(|k| k.last_tick) {
                Some(last) => Some(last),
                None => self.stored_last_tick(&schedule).await?,
            };
            let after = last.map_or(first_seen, |last| last.max(first_seen));
            if let Some(tick) = due(&schedule.spec.timing, after, now) {
                tasks.push(self.task_for(&schedule, tick));
                ticks.push((id, tick));
                ticked.push(schedule);
            }
        }
        if tasks.is_empty() {
            return Ok(0);
        }
        let enqueued = self.store.enqueue(tasks).await?;
        for (schedule, (_, tick)) in ticked.iter().zip(&ticks) {
            let millis = tick.timestamp_millis().to_string();
            self.store
                .meta_set(&schedule.last_tick_name(), &millis)
                .await?;
        }
        let mut new = 0;
        let mut board = self.board.lock();
        for ((id, tick), enqueued) in ticks.into_iter().zip(enqueued) {
            if !enqueued.duplicate {
                new += 1;
                tracing::info!(
                    task_type = %id.1,
                    schedule = %id.2,
                    tick = %crate::schedule::tick_text(tick),
                    task_id = enqueued.task.id,
                    "enqueued a scheduled task"
                );
            }
            let known = board.entry(id).or_default();
            known.last_tick = Some(tick);
            known.last_task = Some(enqueued.task.id);
        }
        drop(board);
        if new > 0 {
            self.wake.notify_one();
        }
        Ok(new)
    }

    /// The latest tick of the schedule any host enqueued, as kept in the database (none before
    /// its first tick, or when the stored value is unreadable).
    async fn stored_last_tick(
        &self,
        schedule: &Schedule,
    ) -> Result<Option<DateTime<Utc>>, StoreError> {
        let stored = self.store.meta_get(&schedule.last_tick_name()).await?;
        Ok(stored.and_then(|text| {
            let tick = text.parse::<i64>().ok().and_then(DateTime::from_timestamp_millis);
            if tick.is_none() {
                tracing::warn!(value = %text, "the stored last tick of a schedule is unreadable; ignoring it");
            }
            tick
        }))
    }

    /// When the schedule (with its current timing) was first seen by any host: stored by the
    /// first host to ask, `now` if that is this one.
    async fn first_seen(
        &self,
        schedule: &Schedule,
        now: DateTime<Utc>,
    ) -> Result<DateTime<Utc>, StoreError> {
        let id = schedule.id();
        let fingerprint = schedule.spec.timing.fingerprint();
        if let Some(known) = self.board.get(&id)
            && known.fingerprint == fingerprint
            && let Some(first_seen) = known.first_seen
        {
            return Ok(first_seen);
        }
        let stored = self
            .store
            .meta_get_or_insert(
                &schedule.first_seen_name(),
                &now.timestamp_millis().to_string(),
            )
            .await?;
        let first_seen = stored
            .parse::<i64>()
            .ok()
            .and_then(DateTime::from_timestamp_millis)
            .unwrap_or_else(|| {
                tracing::warn!(value = %stored, "the stored first-seen time of a schedule is unreadable; counting from now");
                now
            });
        let mut board = self.board.lock();
        let known = board.entry(id).or_default();
        known.fingerprint = fingerprint;
        known.first_seen = Some(first_seen);
        Ok(first_seen)
    }

    /// The task of one tick: due at the tick, with the schedule's priority and retries, else
    /// the type's manifest's (if loaded here), else the defaults.
    fn task_for(&self, schedule: &Schedule, tick: DateTime<Utc>) -> NewTask {
        let policy = self
            .registry
            .get(&schedule.task_type)
            .map(|plugin| (plugin.policy.priority, plugin.policy.max_retry));
        NewTask {
            task_type: schedule.task_type.clone(),
            payload: schedule.spec.payload.clone(),
            priority: schedule.spec.priority.or(policy.map(|p| p.0)).unwrap_or(0),
            max_retry: schedule
                .spec
                .max_retry
                .or(policy.map(|p| p.1))
                .unwrap_or(self.default_max_retry),
            run_at: tick,
            idempotency_key: Some(schedule.idempotency_key(tick)),
            depth: 0,
        }
    }

    /// How long until the next tick of any schedule (at most [`MAX_NAP`]).
    fn until_next_tick(&self, now: DateTime<Utc>) -> Duration {
        all_schedules(&self.configured, &self.registry)
            .iter()
            .filter_map(|s| s.spec.timing.next_after(now))
            .map(|next| (next - now).to_std().unwrap_or_default())
            .min()
            .map_or(MAX_NAP, |wait| wait.min(MAX_NAP))
            // Wake just past the tick, never before it.
            + Duration::from_millis(2)
    }

    /// Enqueues ticks while this host leads, until shutdown begins.
    pub async fn run(self) {
        let mut leading = self.leadership.subscribe();
        let mut pause = RetryPause::new();
        loop {
            let nap = if self.leadership.is_leader() {
                match self.run_once(Utc::now()).await {
                    Ok(_) => {
                        pause.reset();
                        self.until_next_tick(Utc::now())
                    }
                    Err(error) => {
                        tracing::warn!(
                            "enqueueing scheduled tasks failed: {error}; will try again"
                        );
                        pause.next()
                    }
                }
            } else {
                MAX_NAP
            };
            tokio::select! {
                _ = tokio::time::sleep(nap) => {}
                Ok(()) = leading.changed() => {}
                _ = self.shutdown.reached(Stage::Graceful) => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::{ScheduleEntry, check_entries};

    fn utc(text: &str) -> DateTime<Utc> {
        text.parse().unwrap()
    }

    fn configured(text: &str) -> Vec<Schedule> {
        #[derive(serde::Deserialize)]
        struct File {
            schedule: Vec<ScheduleEntry>,
        }
        let entries = toml::from_str::<File>(text).unwrap().schedule;
        check_entries(&entries, Source::Config, utc("2026-01-01T00:00:00Z"))
            .unwrap()
            .into_iter()
            .map(|(task_type, spec)| Schedule {
                source: Source::Config,
                task_type: task_type.unwrap(),
                spec,
            })
            .collect()
    }

    fn scheduler(store: SharedStore, schedules: &[Schedule]) -> Scheduler {
        Scheduler {
            store,
            registry: Arc::new(Registry::new()),
            configured: schedules.to_vec(),
            default_max_retry: 3,
            leadership: Arc::new(Leadership::default()),
            wake: Arc::new(Notify::new()),
            board: Arc::new(ScheduleBoard::default()),
            shutdown: Shutdown::new(),
        }
    }

    async fn sqlite(dir: &tempfile::TempDir) -> SharedStore {
        let url = format!("sqlite://{}", dir.path().join("spool.db").display());
        crate::store::open(&url).await.unwrap()
    }

    async fn keys(store: &SharedStore) -> Vec<String> {
        let tasks = store
            .list(&crate::store::TaskFilter {
                limit: 1000,
                ..Default::default()
            })
            .await
            .unwrap();
        let mut keys: Vec<String> = tasks
            .into_iter()
            .map(|t| t.idempotency_key.unwrap_or_default())
            .collect();
        keys.sort();
        keys
    }

    #[tokio::test]
    async fn two_schedulers_on_one_database_enqueue_each_tick_once() {
        let dir = tempfile::tempdir().unwrap();
        let store = sqlite(&dir).await;
        let schedules = configured(
            "[[schedule]]\ntask_type = \"sweep\"\nevery = \"1m\"\npayload = { deep = true }\npriority = 4",
        );
        // Two hosts that both believe they lead, with their own memories.
        let a = scheduler(store.clone(), &schedules);
        let b = scheduler(store.clone(), &schedules);
        let start = utc("2026-03-01T10:00:30Z");
        assert_eq!(
            a.run_once(start).await.unwrap(),
            0,
            "first seen: no past tick"
        );
        assert_eq!(b.run_once(start).await.unwrap(), 0);
        let tick = utc("2026-03-01T10:01:00Z");
        let at = utc("2026-03-01T10:01:00.200Z");
        let (first, second) = tokio::join!(a.run_once(at), b.run_once(at));
        assert_eq!(first.unwrap() + second.unwrap(), 1, "one task for the tick");
        assert_eq!(
            a.run_once(at).await.unwrap() + b.run_once(at).await.unwrap(),
            0
        );
        let id = ("sweep".to_string(), "default".to_string());
        let known_a = a
            .board
            .get(&(Source::Config, id.0.clone(), id.1.clone()))
            .unwrap();
        let known_b = b.board.get(&(Source::Config, id.0, id.1)).unwrap();
        assert_eq!(known_a.last_tick, Some(tick));
        assert_eq!(
            known_a.last_task, known_b.last_task,
            "both know the one task"
        );
        let task = store
            .get(known_a.last_task.unwrap())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(task.task_type, "sweep");
        assert_eq!(task.priority, 4);
        assert_eq!(task.next_run_at, tick);
        assert_eq!(task.payload, serde_json::json!({"deep": true}));
        assert_eq!(
            keys(&store).await,
            ["spool:schedule:config:default:2026-03-01T10:01:00.000Z"]
        );
    }

    #[tokio::test]
    async fn a_restart_after_missed_ticks_enqueues_the_latest_once() {
        let dir = tempfile::tempdir().unwrap();
        let store = sqlite(&dir).await;
        let schedules = configured("[[schedule]]\ntask_type = \"sweep\"\nevery = \"1m\"");
        let before = scheduler(store.clone(), &schedules);
        before.run_once(utc("2026-03-01T10:00:30Z")).await.unwrap();
        assert_eq!(
            before.run_once(utc("2026-03-01T10:01:00Z")).await.unwrap(),
            1
        );
        // The host stops; five ticks pass; a new process (no memory) starts.
        let after = scheduler(store.clone(), &schedules);
        assert_eq!(
            after.run_once(utc("2026-03-01T10:06:10Z")).await.unwrap(),
            1
        );
        assert_eq!(
            after.run_once(utc("2026-03-01T10:06:50Z")).await.unwrap(),
            0
        );
        assert_eq!(
            keys(&store).await,
            [
                "spool:schedule:config:default:2026-03-01T10:01:00.000Z",
                "spool:schedule:config:default:2026-03-01T10:06:00.000Z",
            ]
        );
        // A changed expression is a new schedule: no tick before the change runs.
        let changed = configured("[[schedule]]\ntask_type = \"sweep\"\ncron = \"30 * * * * *\"");
        let edited = scheduler(store.clone(), &changed);
        assert_eq!(
            edited.run_once(utc("2026-03-01T10:07:40Z")).await.unwrap(),
            0
        );
        assert_eq!(
            edited.run_once(utc("2026-03-01T10:08:31Z")).await.unwrap(),
            1
        );
    }

    #[tokio::test]
    async fn a_restart_never_runs_a_tick_again_whose_task_was_archived_and_purged() {
        use crate::store::archive::ArchiveBatch;
        let dir = tempfile::tempdir().unwrap();
        let store = sqlite(&dir).await;
        let schedules = configured("[[schedule]]\ntask_type = \"bill\"\nevery = \"1m\"");
        let before = scheduler(store.clone(), &schedules);
        before.run_once(utc("2026-03-01T10:00:30Z")).await.unwrap();
        assert_eq!(
            before.run_once(utc("2026-03-01T10:01:00Z")).await.unwrap(),
            1
        );
        // The tick's task ends, is archived and purged: its idempotency key is free again.
        let filter = crate::store::TaskFilter {
            limit: 10,
            ..Default::default()
        };
        let id = store.list(&filter).await.unwrap()[0].id;
        let later = Utc::now() + chrono::Duration::days(1);
        store.cancel(id, Utc::now()).await.unwrap();
        let batch = ArchiveBatch {
            statuses: vec![crate::task::Status::Cancelled],
            finished_before: later,
            limit: 10,
            now: Utc::now(),
        };
        assert_eq!(store.archive_batch(&batch).await.unwrap().total(), 1);
        assert_eq!(store.purge_archive_batch(later, 10).await.unwrap(), 1);
        // A new process (no memory) in the same period enqueues nothing, and the next tick once.
        let after = scheduler(store.clone(), &schedules);
        assert_eq!(
            after.run_once(utc("2026-03-01T10:01:40Z")).await.unwrap(),
            0,
            "the last tick is kept in the database"
        );
        assert_eq!(
            after.run_once(utc("2026-03-01T10:02:00Z")).await.unwrap(),
            1
        );
    }
}
