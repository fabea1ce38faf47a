//! Starts a host: opens the store, loads the plugin folder, starts the background services and
//! the HTTP API, and stops them all in order when the shutdown signal says so.
//!
//! Stop order matters for "nothing is lost": the API stops taking requests, the dispatcher
//! stops claiming and drains (finish or release), then the completer writes the last
//! completions, and only then the database is closed.

use std::net::SocketAddr;
use std::sync::Arc;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::api::{self, AppState};
use crate::config::Config;
use crate::plugins::deployed::DeploymentSync;
use crate::plugins::watcher::{DEFAULT_DEBOUNCE, FolderWatch, FolderWatcher};
use crate::plugins::{self, PluginLoader, Registry};
use crate::sandbox::grants::{GrantsRoot, Trusted};
use crate::sandbox::{self, Sandbox};
use crate::shutdown::{Shutdown, Stage};
use crate::store::{self, SharedStore, StoreError};
use crate::worker::run::completer::Completer;
use crate::worker::run::dispatcher::Dispatcher;
use crate::worker::run::in_flight::InFlight;
use crate::worker::run::lease_keeper::LeaseKeeper;
use crate::worker::run::services::StoreServices;
use crate::worker::supervisor::{ServiceFailures, supervise};
use crate::worker::upkeep::leader::{Elector, Leadership};
use crate::worker::upkeep::rescuer::Rescuer;

/// Where the compiled-code cache key is kept in the store's host-wide values.
const CACHE_KEY_NAME: &str = "compiled-code-cache-key";

/// Why a host could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot open the task database: {0}")]
    Store(#[from] StoreError),
    #[error(transparent)]
    Engine(#[from] sandbox::EngineError),
    #[error(transparent)]
    Plugins(#[from] plugins::LoadError),
    #[error("cannot listen on {addr}: {source}; choose another address with --listen")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot start the sandbox thread pool: {0}")]
    Runtime(std::io::Error),
    #[error("{0}")]
    Grants(String),
}

/// A host that is serving.
pub struct RunningHost {
    /// The address the API listens on (the real port when configured with port 0).
    pub addr: SocketAddr,
    /// The name this host writes into leases.
    pub host_id: String,
    shutdown: Shutdown,
    stopped: JoinHandle<()>,
    failures: Arc<ServiceFailures>,
}

impl RunningHost {
    /// The signal that stops this host: escalate once for a graceful stop, twice for immediate.
    pub fn shutdown(&self) -> &Shutdown {
        &self.shutdown
    }

    /// Resolves when the host has stopped and everything is written. An error names the
    /// services whose failure stopped the host (the process should exit non-zero).
    pub async fn stopped(self) -> Result<(), String> {
        let _ = self.stopped.await;
        let failures = self.failures.all();
        if failures.is_empty() {
            Ok(())
        } else {
            Err(failures.into_values().collect::<Vec<_>>().join("; "))
        }
    }
}

/// A name unique to this process: host name, process id and a random suffix.
fn host_id() -> String {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "host".into());
    format!(
        "{name}-{}-{:04x}",
        std::process::id(),
        rand::random::<u16>()
    )
}

/// Starts a host with `config`, in three steps: [`open`] the database, the sandbox and the
/// grants root; [`load`] the plugin folder; [`spawn`] the services and the API. A host that
/// cannot do one of them stops there with what went wrong, having started nothing.
pub async fn start(config: Config) -> Result<RunningHost, StartError> {
    let config = Arc::new(config);
    let host_id = host_id();
    // Process-wide, once: what GET /metrics renders (crate::instruments).
    crate::instruments::install();
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|source| StartError::Bind {
            addr: config.listen,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| StartError::Bind {
        addr: config.listen,
        source,
    })?;
    // The grants root first: a refusal there needs no database to be told.
    let grants = grants_root(&config)?;
    let store = wait_for_database(&config, &listener).await?;
    let opened = open(&config, grants, store).await?;
    let loaded = load(&config, &opened.store, &opened.loader).await?;
    let shutdown = Shutdown::new();
    let failures = Arc::new(ServiceFailures::default());
    let stopped = spawn(
        config.clone(),
        &host_id,
        opened,
        loaded,
        listener,
        &shutdown,
        &failures,
    )
    .await?;
    tracing::info!(%addr, host_id = %host_id, concurrency = config.concurrency, database = %store::describe_url(&config.database_url), "serving");
    Ok(RunningHost {
        addr,
        host_id,
        shutdown,
        stopped,
        failures,
    })
}

/// What a host works with: the store, the sandbox, and the loader that compiles plugins into it.
struct Opened {
    store: SharedStore,
    sandbox: Sandbox,
    loader: Arc<PluginLoader>,
}

/// Opens the store (applying migrations), waiting while the database does not answer: a host
/// started before its database (a machine booting, a server restarting) serves `GET /health`
/// 503 on its address meanwhile ([`api::waiting`]) and tries again with growing pauses (up to
/// 5 s), instead of exiting so that its supervisor restarts it in a loop. An error that waiting
/// cannot fix (a wrong URL, a refused password, a failed migration) stops the start.
async fn wait_for_database(
    config: &Config,
    listener: &tokio::net::TcpListener,
) -> Result<SharedStore, StartError> {
    let (opened, stop_waiting) = tokio::sync::oneshot::channel::<()>();
    let opening = async {
        let mut pause = crate::worker::RetryPause::new();
        let mut tries = 0u32;
        let result = loop {
            match store::open(&config.database_url).await {
                Ok(store) => {
                    if tries > 0 {
                        tracing::info!("the task database answers; starting");
                    }
                    break Ok(store);
                }
                Err(error) if error.is_transient() => {
                    tries += 1;
                    let wait = pause.next();
                    tracing::warn!(
                        database = %store::describe_url(&config.database_url),
                        tries,
                        "the task database does not answer ({error}); trying again in {wait:?}, \
                         GET /health answers 503 meanwhile"
                    );
                    tokio::time::sleep(wait).await;
                }
                Err(error) => break Err(StartError::from(error)),
            }
        };
        drop(opened);
        result
    };
    let waiting = api::server::serve_borrowed(
        listener,
        api::waiting::router(store::describe_url(&config.database_url)),
        api::server::Limits::new(config),
        async {
            let _ = stop_waiting.await;
        },
    );
    let (store, ()) = tokio::join!(opening, waiting);
    store
}

/// Opens the grants root apart from what the host trusts (the plugin folder, the cache, the
/// database file): folder grants are opened beneath it on every attempt.
fn grants_root(config: &Config) -> Result<Arc<GrantsRoot>, StartError> {
    // Opened once, before anything else: folder grants are opened beneath it on every attempt.
    let database_file = config.sqlite_file();
    let mut trusted = vec![
        Trusted::Folder {
            setting: "plugins",
            path: &config.plugins,
        },
        Trusted::Folder {
            setting: "cache_dir",
            path: &config.cache_dir,
        },
    ];
    trusted.extend(database_file.as_deref().map(|path| Trusted::File {
        setting: "database_url",
        path,
    }));
    Ok(Arc::new(
        GrantsRoot::open_apart(&config.grants_root, &trusted).map_err(StartError::Grants)?,
    ))
}

/// Opens the sandbox, and reads the compiled-code cache key from the database.
async fn open(
    config: &Config,
    grants: Arc<GrantsRoot>,
    store: SharedStore,
) -> Result<Opened, StartError> {
    let sandbox = Sandbox::with_options(sandbox::SandboxOptions::for_host(
        config.pooling,
        config.concurrency,
    ))?;
    // The secret that authenticates compiled code in the cache lives in the database, out of
    // reach of every guest; the first host to start on a database chooses it.
    let cache_key = store
        .meta_get_or_insert(CACHE_KEY_NAME, &sandbox::CacheKey::generate_hex())
        .await?;
    let cache_key = sandbox::CacheKey::from_hex(&cache_key).ok_or_else(|| {
        StoreError::Database(format!("the stored `{CACHE_KEY_NAME}` is not 64 hex digits; delete that row of spool_meta to make a new one"))
    })?;
    let loader = Arc::new(PluginLoader {
        cache: Some(sandbox.artifact_cache(&config.cache_dir, cache_key)),
        sandbox: sandbox.clone(),
        defaults: config.defaults(),
        folder: config.plugins.clone(),
        grants,
        max_bytes: config.max_plugin_size,
        compile_slots: PluginLoader::compile_slots(),
    });
    Ok(Opened {
        store,
        sandbox,
        loader,
    })
}

/// The task types the plugin folder and the deployments register, the watch that keeps them
/// in step with the folder, and the sync that keeps them in step with the deployments.
struct Loaded {
    registry: Arc<Registry>,
    watch: Option<FolderWatch>,
    deployments: DeploymentSync,
}

/// Loads the plugin folder, then what is deployed through the database (which takes
/// precedence, `plugins::registry`). The watch is set up first, so a change made while loading
/// is seen and applied afterwards. A plugin folder that does not exist is no error when the
/// database deploys types: such a host serves only what is deployed.
async fn load(
    config: &Config,
    store: &SharedStore,
    loader: &Arc<PluginLoader>,
) -> Result<Loaded, StartError> {
    let registry = Arc::new(Registry::new());
    let deployments = DeploymentSync::new(store.clone(), loader.clone(), registry.clone());
    deployments.sync().await?;
    let deployed = registry.task_types().len();
    let folder_exists = config.plugins.exists();
    let watch = match FolderWatch::establish(&config.plugins) {
        Ok(watch) => Some(watch),
        Err(_) if !folder_exists && deployed > 0 => None,
        Err(error) => {
            tracing::error!(folder = %config.plugins.display(), "cannot watch the plugin folder ({error}); plugins change only on restart");
            None
        }
    };
    let failures = match loader.load_folder(&registry).await {
        Ok(failures) => failures,
        Err(_) if !folder_exists && deployed > 0 => {
            tracing::info!(folder = %config.plugins.display(), deployed, "no plugin folder; serving the types deployed through the database");
            Vec::new()
        }
        Err(error) => return Err(error.into()),
    };
    if registry.task_types().is_empty() {
        tracing::warn!(
            folder = %config.plugins.display(),
            failed = failures.len(),
            "no task types are loaded: add NAME.wasm handler components to the plugin folder, or deploy one (spool deploy)"
        );
    }
    Ok(Loaded {
        registry,
        watch,
        deployments,
    })
}

/// Builds every service of the host, spawns them and the API server on `listener`, and
/// returns the task that stops them in order once `shutdown` reaches its graceful stage.
async fn spawn(
    config: Arc<Config>,
    host_id: &str,
    opened: Opened,
    loaded: Loaded,
    listener: tokio::net::TcpListener,
    shutdown: &Shutdown,
    failures: &Arc<ServiceFailures>,
) -> Result<JoinHandle<()>, StartError> {
    let Opened {
        store,
        sandbox,
        loader,
    } = opened;
    let Loaded {
        registry,
        watch,
        deployments,
    } = loaded;
    let host_id = host_id.to_string();
    // Attempts run on their own threads so CPU-bound handlers cannot starve the API.
    let sandbox_threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2);
    let sandbox_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(sandbox_threads)
        .thread_name("spool-sandbox")
        .enable_all()
        .build()
        .map_err(StartError::Runtime)?;

    let wake = Arc::new(Notify::new());
    // Enqueues by other hosts and by application SQL wake this host at once where the database
    // can notify (PostgreSQL); elsewhere the poll interval covers them.
    if store.watch_enqueues(wake.clone()) {
        tracing::info!("woken by the database on every enqueue, from any host or application");
    }
    let in_flight = Arc::new(InFlight::default());
    let tallies = Arc::new(crate::worker::run::tallies::BuildTallies::default());
    let paused = Arc::new(crate::worker::run::paused::PausedTypes::default());
    let estimates = Arc::new(crate::worker::run::estimates::Estimates::default());
    let finished = Arc::new(crate::worker::run::finished::Finished::default());
    let (completer, updates) = Completer::new(store.clone(), shutdown.clone());
    let completer = completer.publish_to(finished.clone());
    // One group commit for every enqueue of this host: the API's and the handlers' follow-ups.
    let enqueuer = crate::enqueue::Enqueuer::start(store.clone());
    let services = Arc::new(StoreServices {
        store: store.clone(),
        enqueuer: enqueuer.clone(),
        registry: registry.clone(),
        updates: updates.clone(),
        wake: wake.clone(),
        max_payload_bytes: config.max_payload,
    });
    let dispatcher = Dispatcher {
        store: store.clone(),
        registry: registry.clone(),
        sandbox,
        runtime: sandbox_runtime.handle().clone(),
        updates,
        services,
        in_flight: in_flight.clone(),
        estimates: estimates.clone(),
        owner: host_id.clone(),
        concurrency: config.concurrency,
        lease: config.lease,
        poll_interval: config.poll_interval,
        shutdown_grace: config.shutdown_grace,
        max_result_bytes: config.max_result,
        log_bytes: sandbox::output::DEFAULT_LOG_LIMIT,
        wake: wake.clone(),
        shutdown: shutdown.clone(),
        paused: paused.clone(),
        tallies: tallies.clone(),
        recorder: Arc::new(crate::worker::run::recorder::Recorder::new(store.clone())),
    };
    let lease_keeper = LeaseKeeper {
        store: store.clone(),
        owner: host_id.clone(),
        lease: config.lease,
        interval: config.heartbeat_interval(),
        in_flight: in_flight.clone(),
        shutdown: shutdown.clone(),
    };
    let watcher = FolderWatcher {
        folder: config.plugins.clone(),
        loader,
        registry: registry.clone(),
        store: store.clone(),
        debounce: DEFAULT_DEBOUNCE,
        shutdown: shutdown.clone(),
    };
    let leadership = Arc::new(Leadership::default());
    let elector = Elector {
        store: store.clone(),
        owner: host_id.clone(),
        lease: config.lease,
        leadership: leadership.clone(),
        shutdown: shutdown.clone(),
    };
    // Elected before serving, so a single host leads (and rescues) from its first moment.
    elector.run_once().await;
    let rescuer = Rescuer {
        store: store.clone(),
        interval: config.rescue_interval,
        wake: wake.clone(),
        leadership: leadership.clone(),
        shutdown: shutdown.clone(),
        registry: registry.clone(),
    };
    // Alerts: every host checks itself; the leader checks the task table (crate::alerts).
    let alerts = Arc::new(crate::alerts::Alerts::new(
        config.alerts.clone(),
        store.clone(),
        host_id.clone(),
    ));
    let alert_service = crate::alerts::service::AlertService {
        alerts: alerts.clone(),
        store: store.clone(),
        registry: registry.clone(),
        leadership: leadership.clone(),
        database: store::describe_url(&config.database_url),
        shutdown: shutdown.clone(),
    };
    // The backlog history behind GET /stats, sampled by the leader (crate::worker::upkeep::sampler).
    let sampler = crate::worker::upkeep::sampler::Sampler {
        store: store.clone(),
        interval: config.stats_interval,
        leadership: leadership.clone(),
        shutdown: shutdown.clone(),
    };
    // Retention: finished tasks move to the archive, on the leader (crate::worker::upkeep::archiver).
    let archiver = config
        .retention()
        .map(|retention| crate::worker::upkeep::archiver::Archiver {
            store: store.clone(),
            retention,
            interval: config.archive_interval,
            leadership: leadership.clone(),
            shutdown: shutdown.clone(),
        });
    // Periodic tasks, enqueued by the leader (crate::worker::upkeep::scheduler).
    let schedule_board = Arc::new(crate::worker::upkeep::scheduler::ScheduleBoard::default());
    let scheduler = crate::worker::upkeep::scheduler::Scheduler {
        store: store.clone(),
        registry: registry.clone(),
        configured: config.schedules.clone(),
        default_max_retry: config.max_retry,
        leadership: leadership.clone(),
        wake: wake.clone(),
        board: schedule_board.clone(),
        shutdown: shutdown.clone(),
    };
    // Canary trials, judged by the leader; a rollback goes to the alert channels.
    let (verdicts, mut verdicts_in) = tokio::sync::mpsc::unbounded_channel();
    let canary = crate::worker::upkeep::canary::CanaryJudge {
        store: store.clone(),
        rules: config.canary_rules(),
        host_id: host_id.clone(),
        leadership: leadership.clone(),
        shutdown: shutdown.clone(),
        verdicts,
    };
    let canary_alerts = {
        let (alerts, host_id) = (alerts.clone(), host_id.clone());
        let dashboard = config.alerts.dashboard_url.clone();
        async move {
            while let Some(verdict) = verdicts_in.recv().await {
                if verdict.action == "rollback" {
                    let alert = crate::alerts::message::Alert::canary_rolled_back(
                        &verdict.task_type,
                        verdict.version,
                        &verdict.detail,
                        &host_id,
                        &dashboard,
                        verdict.at,
                    );
                    alerts.send(&alert).await;
                }
            }
        }
    };
    // Deployments: at once where the database notifies (PostgreSQL), else at the poll interval.
    let deploy_wake = Arc::new(Notify::new());
    store.watch_deployments(deploy_wake.clone());
    let database = Arc::new(crate::worker::database_watch::DatabaseState::default());
    let database_watch = tokio::spawn(
        crate::worker::database_watch::DatabaseWatch {
            store: store.clone(),
            state: database.clone(),
            shutdown: shutdown.clone(),
        }
        .run(),
    );
    let app = api::router(Arc::new(AppState {
        store: store.clone(),
        registry,
        config: config.clone(),
        wake,
        host_id: host_id.clone(),
        enqueuer,
        in_flight,
        estimates,
        tallies: tallies.clone(),
        leadership,
        failures: failures.clone(),
        finished,
        shutdown: shutdown.clone(),
        schedules: schedule_board,
        stats: Arc::default(),
        paused,
        alerts,
        database: database.clone(),
        health: api::reuse::Reused::new(api::health::COUNTS_TTL),
        loader: deployments.loader.clone(),
        deploy_wake: deploy_wake.clone(),
    }));

    let api_shutdown = shutdown.clone();
    let limits = api::server::Limits::new(&config);
    let server = tokio::spawn(async move {
        let stop = async move { api_shutdown.reached(Stage::Graceful).await };
        api::server::serve(listener, app, limits, stop).await;
    });
    let completer = supervise(
        "completer",
        tokio::spawn(completer.run()),
        failures.clone(),
        shutdown.clone(),
    );
    let lease_keeper = tokio::spawn(lease_keeper.run());
    let rescuer = tokio::spawn(rescuer.run());
    let scheduler = tokio::spawn(scheduler.run());
    let archiver = archiver.map(|archiver| tokio::spawn(archiver.run()));
    let sampler = tokio::spawn(sampler.run());
    let alert_service = tokio::spawn(alert_service.run());
    let elector = tokio::spawn(elector.run());
    let tallies = tokio::spawn(tallies.run(store.clone(), host_id.clone(), shutdown.clone()));
    let canary = tokio::spawn(canary.run());
    let canary_alerts = tokio::spawn(canary_alerts);
    let dispatcher = supervise(
        "dispatcher",
        tokio::spawn(dispatcher.run()),
        failures.clone(),
        shutdown.clone(),
    );
    let watcher = tokio::spawn(async move {
        if let Some(watch) = watch {
            watcher.run(watch).await;
        }
    });
    let deployments =
        tokio::spawn(deployments.run(deploy_wake, config.poll_interval, shutdown.clone()));

    let stopping = shutdown.clone();
    let stopped = tokio::spawn(async move {
        stopping.reached(Stage::Graceful).await;
        tracing::info!("shutting down: no new tasks are claimed");
        let _ = dispatcher.await;
        let _ = completer.await;
        stopping.request(Stage::Immediate);
        let _ = lease_keeper.await;
        let _ = rescuer.await;
        let _ = scheduler.await;
        if let Some(archiver) = archiver {
            let _ = archiver.await;
        }
        let _ = sampler.await;
        let _ = alert_service.await;
        let _ = elector.await;
        let _ = canary.await;
        let _ = tallies.await;
        canary_alerts.abort();
        let _ = watcher.await;
        let _ = deployments.await;
        let _ = server.await;
        let _ = database_watch.await;
        store.close().await;
        sandbox_runtime.shutdown_background();
        tracing::info!("stopped; every task is either finished or back in the queue");
    });

    Ok(stopped)
}
