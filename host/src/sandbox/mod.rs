//! The WebAssembly sandbox: the only module that touches wasmtime.
//!
//! It compiles handler components ([`Sandbox::compile`], through the on-disk [`cache`]) and
//! runs one attempt of a task in a fresh instance ([`Sandbox::run`]), so no state leaks from one
//! task to the next. Every attempt is confined:
//! - **fuel** bounds its computation: a busy loop ends with "fuel exhausted";
//! - **wall-clock time**: an epoch deadline traps guest code that runs too long, and the whole
//!   call (instantiation and host calls such as a WASI sleep included) is abandoned at the
//!   timeout. One ticker thread per engine advances the epoch;
//! - **memory**: all of an attempt's linear memories and tables together are capped, and so is
//!   how many it may create ([`limits`]); growing past the cap traps;
//! - **capabilities**: WASI with nothing granted unless the plugin's manifest says so: folders
//!   mapped read-only or read-write, named environment variables, outbound HTTP (wasi:http) to
//!   listed hosts only. Sockets stay closed. All of WASI p2 is linked, so components from any
//!   toolchain instantiate, and access is denied at run time. Folders live beneath the
//!   operator's grants root and are opened for each attempt without following any symbolic
//!   link; the guest gets exactly the directory opened ([`grants`]);
//! - **output**: stdout, stderr and `log` calls go to a bounded task log ([`output`]), and a
//!   guest that traps or exits with a failure is explained by the end of its output, read per
//!   language ([`guest_error`]: an exception's type, message and frames, a panic's text);
//!   results are bounded too, and so is every string a guest hands back: a `retry` or `fail`
//!   message is read from guest memory only up to its bound, and any one host call (or the
//!   result) may make the host copy at most a little more than the largest value it accepts
//!   (wasmtime's hostcall fuel). Guest text is stored with its control characters escaped
//!   ([`text`]).
//!
//! Instances come from wasmtime's pooling allocator by default: memories, tables and async
//! stacks are reserved once and reused, which made instantiate + call of a no-op handler
//! about 3× cheaper than mapping them per attempt (see docs/benchmarks.md).
//!
//! Handlers run as futures that yield every [`FUEL_YIELD_INTERVAL`] units of fuel, so many
//! attempts interleave on few threads, and dropping the future (cancel, shutdown) stops the
//! guest at its next yield. A store whose call was interrupted is dropped, never reused.

pub mod cache;
pub mod capabilities;
mod command;
pub mod grants;
pub mod guest_error;
mod host_api;
mod http;
pub mod limits;
pub mod output;
pub mod tape;
pub mod text;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use wasmtime::component::{ComponentExportIndex, HasSelf, Lift, Linker, ResourceTable};
use wasmtime::{Engine, Store, Trap};
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use crate::task::AttemptOutcome;
pub use cache::{ArtifactCache, CacheKey, CacheUse};
use capabilities::Capabilities;
pub use host_api::{FollowUp, ServiceError, TaskServices};
use limits::{AttemptLimiter, MAX_INSTANCES, MAX_MEMORIES, MAX_TABLES, MemoryLimit, Meter};
use output::TaskLog;
use text::{GuestText, MAX_MESSAGE_BYTES, clean_reason};

mod bindings {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "handler",
        imports: { default: async | trappable },
        exports: { default: async },
    });
}

use bindings::spool::task::types::TaskInfo as WitTaskInfo;

/// The handler world's `failure`, lifted with its messages bounded while they are read.
#[derive(wasmtime::component::ComponentType, Lift)]
#[component(variant)]
enum GuestFailure {
    #[component(name = "retry")]
    Retry(GuestText<MAX_MESSAGE_BYTES>),
    #[component(name = "fail")]
    Fail(GuestText<MAX_MESSAGE_BYTES>),
    #[component(name = "snooze")]
    Snooze(u32),
}

/// Extra room in the hostcall fuel beyond the largest value a host call accepts.
const HOSTCALL_SLACK: usize = 64 << 10;

/// Fuel between two yields to the async executor: small enough that a busy handler gives up
/// its thread every few tens of microseconds, large enough that yielding costs nothing visible.
pub const FUEL_YIELD_INTERVAL: u64 = 50_000;
/// How often the epoch advances; the granularity of the wall-clock limit on guest code.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Errors compiling a handler.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    /// The bytes are not a WebAssembly component (a core module, a truncated file, not wasm).
    #[error("not a valid WebAssembly component: {0:#}")]
    Invalid(wasmtime::Error),
    /// A component, but not one that implements Spool's handler world.
    #[error(
        "the component does not implement the spool:task/handler world ({0:#}); build it against wit/handler.wit"
    )]
    WrongWorld(wasmtime::Error),
}

/// Errors setting up the sandbox.
#[derive(Debug, thiserror::Error)]
#[error("could not set up the WebAssembly engine: {0:#}")]
pub struct EngineError(wasmtime::Error);

/// Limits and grants for one attempt.
#[derive(Debug, Clone)]
pub struct RunLimits {
    /// Fuel (roughly, WebAssembly instructions) the attempt may burn.
    pub fuel: u64,
    /// Wall-clock time the attempt may take.
    pub timeout: Duration,
    /// Bytes of linear memory the instance may grow to.
    pub memory_bytes: usize,
    /// Largest result accepted.
    pub max_result_bytes: usize,
    /// Bytes of output kept in the task log.
    pub log_bytes: usize,
    /// What the guest may reach.
    pub capabilities: Capabilities,
    /// Records the attempt's inputs, or answers them from a record ([`tape`]); none: the
    /// world answers and nothing is kept.
    pub tape: Option<Arc<tape::Tape>>,
}

/// What the handler learns about its task (kept in an attempt's record as it was).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TaskInfo {
    pub id: u64,
    pub task_type: String,
    pub attempt: u32,
    pub max_attempts: u32,
    pub idempotency_key: Option<String>,
    /// How many follow-ups deep the task is (the host's to know: it bounds the follow-ups
    /// the attempt may enqueue, and is not part of the guest's `task-info`).
    pub depth: u32,
}

/// How an attempt ended, with what it printed.
#[derive(Debug, Clone)]
pub struct Attempt {
    pub outcome: AttemptOutcome,
    pub log: String,
    /// Fuel the attempt consumed (not known when the attempt ran past its wall-clock limit;
    /// see [`limits::Meter`]).
    pub fuel_used: Option<u64>,
    /// The most memory the attempt held at once, all its linear memories and tables (0 when
    /// the attempt ran past its wall-clock limit).
    pub peak_memory: u64,
}

/// A compiled handler, validated and ready to instantiate: a component of the handler world,
/// or a plain WASI program (see [`command`]).
#[derive(Clone)]
pub struct CompiledHandler {
    kind: HandlerKind,
}

#[derive(Clone)]
enum HandlerKind {
    World(bindings::HandlerPre<HostState>, ComponentExportIndex),
    Command(wasmtime_wasi::p2::bindings::CommandPre<HostState>),
    Preview1(wasmtime::InstancePre<command::P1State>),
}

impl CompiledHandler {
    /// Which door the handler uses: `handler` (the Spool world), `wasi-command` (a component
    /// exporting wasi:cli/run) or `wasi-preview1` (a core module with `_start`).
    pub fn kind(&self) -> &'static str {
        match self.kind {
            HandlerKind::World(..) => "handler",
            HandlerKind::Command(_) => "wasi-command",
            HandlerKind::Preview1(_) => "wasi-preview1",
        }
    }
}

/// The per-attempt state a wasmtime `Store` carries.
pub struct HostState {
    wasi: WasiCtx,
    http: WasiHttpCtx,
    http_hooks: http::AllowList,
    table: ResourceTable,
    limits: AttemptLimiter,
    task: host_api::AttemptContext,
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for HostState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.http_hooks,
        }
    }
}

/// Advances the engine's epoch until the last sandbox clone is dropped.
struct EpochTicker {
    stop: Arc<AtomicBool>,
}

impl EpochTicker {
    fn start(engine: &Engine) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let (engine, flag) = (engine.weak(), stop.clone());
        std::thread::Builder::new()
            .name("spool-epoch".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    match engine.upgrade() {
                        Some(engine) => engine.increment_epoch(),
                        None => return,
                    }
                }
            })
            .expect("spawn the epoch ticker thread");
        EpochTicker { stop }
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The engine and linker shared by every handler.
#[derive(Clone)]
pub struct Sandbox {
    engine: Engine,
    linker: Arc<Linker<HostState>>,
    p1_linker: Arc<wasmtime::Linker<command::P1State>>,
    _ticker: Arc<EpochTicker>,
}

/// How the engine allocates instances.
#[derive(Debug, Clone, Copy, Default)]
pub struct SandboxOptions {
    /// Use wasmtime's pooling allocator with room for this many instances at once (memories,
    /// tables and async stacks are then reused instead of mapped for every attempt); `None`
    /// allocates on demand.
    pub pool_slots: Option<u32>,
    /// With pooling: the largest linear memory any plugin may grow to.
    pub pool_max_memory: usize,
}

impl SandboxOptions {
    /// The options a host runs with: with `pooling`, one pool slot per attempt that can run at
    /// once (`concurrency`), and any plugin may grow up to the wasm32 maximum (4 GiB) within the
    /// pool, its manifest's cap being enforced per attempt; without, on-demand allocation.
    pub fn for_host(pooling: bool, concurrency: usize) -> SandboxOptions {
        SandboxOptions {
            pool_slots: pooling.then(|| u32::try_from(concurrency).unwrap_or(u32::MAX)),
            pool_max_memory: 4 << 30,
        }
    }
}

/// Bytes of each pooled linear memory kept mapped between attempts (reset by zeroing).
const KEEP_RESIDENT_MEMORY: usize = 1 << 20;
/// Bytes of each pooled table kept mapped between attempts.
const KEEP_RESIDENT_TABLE: usize = 64 << 10;

impl Sandbox {
    /// Creates the engine (fuel and epochs on, on-demand allocation) and links WASI p2,
    /// wasi:http and the host imports.
    pub fn new() -> Result<Self, EngineError> {
        Sandbox::with_options(SandboxOptions::default())
    }

    /// Like [`Sandbox::new`], with allocation options.
    pub fn with_options(options: SandboxOptions) -> Result<Self, EngineError> {
        let mut config = wasmtime::Config::new();
        config.consume_fuel(true);
        config.epoch_interruption(true);
        config.wasm_component_model(true);
        if let Some(slots) = options.pool_slots {
            // Room for `slots` attempts that each use the most one attempt may: whatever its
            // components declare, no task type can take the slots another needs.
            let (instances, memories, tables) =
                (MAX_INSTANCES as u32, MAX_MEMORIES as u32, MAX_TABLES as u32);
            let mut pool = wasmtime::PoolingAllocationConfig::new();
            pool.total_component_instances(slots)
                .total_core_instances(slots.saturating_mul(instances))
                .total_memories(slots.saturating_mul(memories))
                .total_tables(slots.saturating_mul(tables))
                .total_stacks(slots)
                .max_core_instances_per_component(instances)
                .max_memories_per_component(memories)
                .max_tables_per_component(tables)
                .max_memory_size(options.pool_max_memory);
            // Reset a finished attempt's memories and tables by zeroing the pages it touched
            // (found with Linux's PAGEMAP_SCAN where the kernel has it) instead of `madvise`,
            // which unmapped them: every attempt then paid page faults to map them again and a
            // TLB shootdown across cores. The no-op drain's CPU per task fell from 139 to 90 µs
            // (docs/benchmarks.md).
            pool.linear_memory_keep_resident(KEEP_RESIDENT_MEMORY)
                .table_keep_resident(KEEP_RESIDENT_TABLE)
                .pagemap_scan(wasmtime::Enabled::Auto);
            config.allocation_strategy(wasmtime::InstanceAllocationStrategy::Pooling(pool));
        }
        let engine = Engine::new(&config).map_err(EngineError)?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(EngineError)?;
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker).map_err(EngineError)?;
        bindings::Handler::add_to_linker::<_, HasSelf<_>>(&mut linker, |state: &mut HostState| {
            state
        })
        .map_err(EngineError)?;
        let p1_linker = command::preview1_linker(&engine).map_err(EngineError)?;
        let ticker = Arc::new(EpochTicker::start(&engine));
        Ok(Sandbox {
            engine,
            linker: Arc::new(linker),
            p1_linker: Arc::new(p1_linker),
            _ticker: ticker,
        })
    }

    /// The compiled-code cache under `root` for this engine.
    pub fn artifact_cache(&self, root: &std::path::Path, key: CacheKey) -> ArtifactCache {
        ArtifactCache::new(root, &self.engine, key)
    }

    /// Compiles a component or core module (or loads it from `cache`) and checks that it is a
    /// handler Spool can run: a component of the handler world, a component exporting
    /// `wasi:cli/run`, or a core module with `_start`. CPU-heavy on a cache miss: call it off
    /// the async executor.
    pub fn compile(
        &self,
        bytes: &[u8],
        version: &str,
        cache: Option<&ArtifactCache>,
    ) -> Result<(CompiledHandler, CacheUse), CompileError> {
        if command::is_core_module(bytes) {
            let (module, used) = self.load::<wasmtime::Module>(bytes, version, cache)?;
            let pre = command::preview1_pre(&self.p1_linker, &module)?;
            return Ok((
                CompiledHandler {
                    kind: HandlerKind::Preview1(pre),
                },
                used,
            ));
        }
        let (component, used) =
            self.load::<wasmtime::component::Component>(bytes, version, cache)?;
        let instance_pre = self
            .linker
            .instantiate_pre(&component)
            .map_err(CompileError::WrongWorld)?;
        let kind = match bindings::HandlerPre::new(instance_pre.clone()) {
            Ok(pre) => {
                let handle = component.get_export_index(None, "handle").ok_or_else(|| {
                    CompileError::WrongWorld(wasmtime::Error::msg("no `handle` export"))
                })?;
                HandlerKind::World(pre, handle)
            }
            Err(world_error) => match wasmtime_wasi::p2::bindings::CommandPre::new(instance_pre) {
                Ok(pre) => HandlerKind::Command(pre),
                Err(_) => return Err(CompileError::WrongWorld(world_error)),
            },
        };
        Ok((CompiledHandler { kind }, used))
    }

    fn load<A: cache::Artifact>(
        &self,
        bytes: &[u8],
        version: &str,
        cache: Option<&ArtifactCache>,
    ) -> Result<(A, CacheUse), CompileError> {
        match cache {
            Some(cache) => cache
                .load_or_compile(&self.engine, version, bytes)
                .map_err(CompileError::Invalid),
            None => Ok((
                A::compile(&self.engine, bytes).map_err(CompileError::Invalid)?,
                CacheUse::Off,
            )),
        }
    }

    /// Runs one attempt in a fresh instance and reports how it ended. Never fails: traps,
    /// fuel exhaustion, timeouts and setup errors become [`AttemptOutcome::Crashed`].
    pub async fn run(
        &self,
        handler: &CompiledHandler,
        task: TaskInfo,
        payload: &str,
        limits: &RunLimits,
        services: Arc<dyn TaskServices>,
    ) -> Attempt {
        let log = TaskLog::new(limits.log_bytes);
        let meter = Meter::default();
        let call = async {
            match &handler.kind {
                HandlerKind::World(pre, handle) => {
                    match self.build_store(&task, limits, services, &log, None) {
                        Ok(mut store) => {
                            let outcome =
                                call_handler(pre, handle, &mut store, task, payload, limits).await;
                            meter.read(&store, &store.data().limits, limits.fuel);
                            outcome
                        }
                        Err(error) => {
                            AttemptOutcome::Crashed(format!("sandbox setup failed: {error:#}"))
                        }
                    }
                }
                HandlerKind::Command(pre) => {
                    let stdout = TaskLog::new(limits.max_result_bytes + 1);
                    match self.build_store(&task, limits, services, &log, Some((payload, &stdout)))
                    {
                        Ok(store) => {
                            command::run_command(pre, store, &stdout, &log, limits, &meter).await
                        }
                        Err(error) => {
                            AttemptOutcome::Crashed(format!("sandbox setup failed: {error:#}"))
                        }
                    }
                }
                HandlerKind::Preview1(pre) => {
                    command::run_preview1(&self.engine, pre, payload, &log, limits, &meter).await
                }
            }
        };
        let outcome = match tokio::time::timeout(limits.timeout, call).await {
            Ok(outcome) => outcome,
            Err(_) => AttemptOutcome::Crashed(timed_out(limits.timeout)),
        };
        let tail = log.tail();
        let log = log.contents();
        // Every message is bounded and cleaned here, whichever door it came through.
        let outcome = match outcome {
            AttemptOutcome::Crashed(reason) => {
                AttemptOutcome::Crashed(clean_reason(&with_last_words(reason, &tail)))
            }
            AttemptOutcome::Retry(message) => AttemptOutcome::Retry(clean_reason(&message)),
            AttemptOutcome::Fail(message) => AttemptOutcome::Fail(clean_reason(&message)),
            other => other,
        };
        Attempt {
            outcome,
            log,
            fuel_used: meter.fuel_used(),
            peak_memory: meter.peak_memory(),
        }
    }

    fn build_store(
        &self,
        task: &TaskInfo,
        limits: &RunLimits,
        services: Arc<dyn TaskServices>,
        log: &TaskLog,
        command_io: Option<(&str, &TaskLog)>,
    ) -> wasmtime::Result<Store<HostState>> {
        let mut wasi = granted_wasi(limits, log)?;
        let services: Arc<dyn TaskServices> = match &limits.tape {
            Some(tape) => Arc::new(tape::TapedServices {
                tape: tape.clone(),
                live: (!tape.is_replay()).then_some(services),
            }),
            None => services,
        };
        if let Some((payload, stdout)) = command_io {
            wasi.stdin(wasmtime_wasi::p2::pipe::MemoryInputPipe::new(
                payload.to_string(),
            ));
            wasi.stdout(stdout.stream());
        }
        let state = HostState {
            wasi: wasi.build(),
            http: WasiHttpCtx::new(),
            http_hooks: http::AllowList::new(
                limits.capabilities.clone(),
                log.clone(),
                limits.tape.clone(),
            ),
            table: ResourceTable::new(),
            limits: AttemptLimiter::new(limits.memory_bytes),
            task: host_api::AttemptContext::new(
                task.id,
                task.task_type.clone(),
                services,
                log.clone(),
                limits.capabilities.enqueue.clone(),
                task.depth,
            ),
        };
        let mut store = Store::new(&self.engine, state);
        store.limiter(|state| &mut state.limits);
        store.set_hostcall_fuel(hostcall_fuel(limits));
        apply_limits(&mut store, limits)?;
        Ok(store)
    }
}

/// WASI with exactly the manifest's grants; stdout and stderr go to the task log.
fn granted_wasi(limits: &RunLimits, log: &TaskLog) -> wasmtime::Result<WasiCtxBuilder> {
    let mut wasi = WasiCtxBuilder::new();
    wasi.stdout(log.stream()).stderr(log.stream());
    for (i, dir) in limits.capabilities.dirs.iter().enumerate() {
        let perms = if dir.writable {
            FsPerms::ReadWrite
        } else {
            FsPerms::ReadOnly
        };
        let opened = dir.open().map_err(|error| {
            wasmtime::Error::msg(format!(
                "folder grant dirs[{i}] ({} as {}): {error}",
                dir.host.display(),
                dir.guest
            ))
        })?;
        grants::preopen(&mut wasi, &opened, &dir.guest, perms)?;
    }
    for (name, value) in &limits.capabilities.env {
        wasi.env(name, value);
    }
    if let Some(tape) = &limits.tape {
        wasi.wall_clock(tape::TapedWallClock(tape.clone()))
            .monotonic_clock(tape::TapedMonotonicClock {
                tape: tape.clone(),
                start: std::time::Instant::now(),
            })
            .secure_random(tape::TapedRandom::new(
                tape.clone(),
                tape::RandomSource::Secure,
            ))
            .insecure_random(tape::TapedRandom::new(
                tape.clone(),
                tape::RandomSource::Insecure,
            ))
            .insecure_random_seed(tape.insecure_seed());
    }
    Ok(wasi)
}

/// The most bytes one host call (or the handler's result) may make the host copy out of the
/// guest: a little more than the largest value any of them accepts. Anything larger fails the
/// call before it is copied.
fn hostcall_fuel(limits: &RunLimits) -> usize {
    limits
        .max_result_bytes
        .max(host_api::MAX_VALUE_BYTES)
        .max(limits.capabilities.enqueue.max_bytes)
        .saturating_add(HOSTCALL_SLACK)
}

/// Fuel, yielding and the epoch deadline of one attempt.
fn apply_limits<T>(store: &mut Store<T>, limits: &RunLimits) -> wasmtime::Result<()> {
    store.set_fuel(limits.fuel)?;
    store.fuel_async_yield_interval(Some(FUEL_YIELD_INTERVAL))?;
    let ticks = (limits.timeout.as_millis() / EPOCH_TICK.as_millis()).max(1) as u64 + 1;
    store.set_epoch_deadline(ticks);
    store.epoch_deadline_trap();
    Ok(())
}

/// Instantiates the handler and calls `handle`, mapping every ending to an outcome.
async fn call_handler(
    pre: &bindings::HandlerPre<HostState>,
    handle: &ComponentExportIndex,
    store: &mut Store<HostState>,
    task: TaskInfo,
    payload: &str,
    limits: &RunLimits,
) -> AttemptOutcome {
    let info = WitTaskInfo {
        id: task.id,
        task_type: task.task_type,
        attempt: task.attempt,
        max_attempts: task.max_attempts,
        idempotency_key: task.idempotency_key,
    };
    let instance = match pre.instance_pre().instantiate_async(&mut *store).await {
        Ok(instance) => instance,
        Err(error) => return AttemptOutcome::Crashed(describe_error(&error, limits)),
    };
    let func = match instance.get_func(&mut *store, handle) {
        Some(func) => func,
        None => return AttemptOutcome::Crashed("the component has no `handle` export".into()),
    };
    // The result string is lifted whole (within the hostcall fuel, see [`hostcall_fuel`]),
    // failure messages only up to their bound.
    let typed = match func.typed::<(&WitTaskInfo, &str), (Result<String, GuestFailure>,)>(&*store) {
        Ok(typed) => typed,
        Err(error) => {
            return AttemptOutcome::Crashed(format!("`handle` has an unexpected type: {error:#}"));
        }
    };
    let call = typed.call_async(&mut *store, (&info, payload)).await;
    match call {
        Ok((Ok(result),)) if result.len() > limits.max_result_bytes => {
            result_too_large(result.len().to_string(), limits)
        }
        Ok((Ok(result),)) if result.contains('\0') => AttemptOutcome::Fail(format!(
            "the result contains a NUL character at byte {}: a result is text without NUL characters (encode binary data, for instance in base64)",
            result.find('\0').unwrap_or_default()
        )),
        Ok((Ok(result),)) => AttemptOutcome::Succeeded(result),
        Ok((Err(GuestFailure::Retry(message)),)) => AttemptOutcome::Retry(message.cleaned()),
        Ok((Err(GuestFailure::Fail(message)),)) => AttemptOutcome::Fail(message.cleaned()),
        Ok((Err(GuestFailure::Snooze(seconds)),)) => {
            AttemptOutcome::Snooze(Duration::from_secs(u64::from(seconds)))
        }
        Err(error) if is_hostcall_fuel(&error) => result_too_large("more than that".into(), limits),
        Err(error) => AttemptOutcome::Crashed(describe_error(&error, limits)),
    }
}

fn result_too_large(size: String, limits: &RunLimits) -> AttemptOutcome {
    AttemptOutcome::Fail(format!(
        "the result is {size} bytes; the limit is {} (max_result): write large outputs to a granted folder and return a reference",
        limits.max_result_bytes
    ))
}

/// Whether wasmtime refused to copy a value out of the guest because it passed the hostcall
/// fuel (see [`hostcall_fuel`]).
fn is_hostcall_fuel(error: &wasmtime::Error) -> bool {
    format!("{error:#}").contains("too much data is being copied between the host and the guest")
}

/// Adds what the guest said last to a crash reason: a guest that throws or panics prints its
/// error to stderr just before it traps, and that error is what a person needs to see.
/// Only a guest that stopped itself (a panic or abort ends in `unreachable`) is explained by an
/// error recognized in its output; after any other ending (fuel, time, memory) an error it
/// printed earlier is not the cause, and its last lines are shown as they are.
fn with_last_words(reason: String, tail: &str) -> String {
    let words = if reason.starts_with(PANICKED) {
        guest_error::explain(tail)
    } else {
        guest_error::output_lines(tail)
    };
    guest_error::LastWords::with_reason(words, &reason)
}

/// The reason of a trap on `unreachable`: how panics and aborts end in every language.
const PANICKED: &str = "trap: the handler panicked or hit unreachable code";

fn timed_out(timeout: Duration) -> String {
    format!(
        "timed out: the attempt ran longer than its wall-clock limit of {timeout:?} and was stopped"
    )
}

/// Turns a wasmtime error from instantiation or a call into a message for `last_error`.
fn describe_error(error: &wasmtime::Error, limits: &RunLimits) -> String {
    match error.downcast_ref::<Trap>() {
        Some(Trap::OutOfFuel) => format!(
            "fuel exhausted: the handler used its whole budget of {} fuel units (the per-task \
             computation limit) and was stopped",
            limits.fuel
        ),
        Some(Trap::Interrupt) => timed_out(limits.timeout),
        Some(Trap::StackOverflow) => {
            "stack overflow: the handler recursed too deeply and was stopped".to_string()
        }
        Some(Trap::UnreachableCodeReached) => PANICKED.to_string(),
        Some(Trap::MemoryOutOfBounds) => out_of_bounds(error),
        Some(trap) => format!("trap: {trap}"),
        None => match error.downcast_ref::<MemoryLimit>() {
            Some(limit) => limit.to_string(),
            None if is_memory_limit(error) => format!(
                "memory limit: the handler tried to grow its memory past {} bytes and was stopped",
                limits.memory_bytes
            ),
            None if is_hostcall_fuel(error) => format!(
                "a host call handed over more than {} bytes and was refused: handler error: {error:#}",
                hostcall_fuel(limits)
            ),
            None => format!("handler error: {error:#}"),
        },
    }
}

/// An out-of-bounds access, with its address when wasmtime knows it. Near the bottom of memory
/// (or just below it, wrapped around) the likely cause is a shadow stack that overflowed: the
/// guest's own stack in linear memory, which wasmtime cannot see growing.
fn out_of_bounds(error: &wasmtime::Error) -> String {
    let Some((address, size)) = memory_fault(error) else {
        return format!("trap: {}", Trap::MemoryOutOfBounds);
    };
    let mut text = format!(
        "trap: {} at address {address:#x} (linear memory is {size:#x} bytes)",
        Trap::MemoryOutOfBounds
    );
    if is_near_the_bottom(address) {
        text.push_str(STACK_OVERFLOW_HINT);
    }
    text
}

/// What a fault near the bottom of memory most likely means.
const STACK_OVERFLOW_HINT: &str = "; the address is at the bottom of memory, often a stack overflow inside the handler: raise its stack size or reduce recursion";

/// How far from address 0 (either way) a fault counts as being at the bottom of memory: the
/// guest's stack sits there when it is laid out first, and a stack pointer stepping below 0
/// wraps around to the top of the 32-bit address space (an access's static offset can carry
/// it just past 4 GiB).
const BOTTOM_BYTES: u64 = 64 << 10;

fn is_near_the_bottom(address: u64) -> bool {
    let wrapped = address & 0xffff_ffff;
    address < (1 << 32) + BOTTOM_BYTES
        && !(BOTTOM_BYTES..(1 << 32) - BOTTOM_BYTES).contains(&wrapped)
}

/// The wasm address and memory size of a memory fault, from the context wasmtime adds to the
/// trap ("memory fault at wasm address 0x... in linear memory of size 0x...").
fn memory_fault(error: &wasmtime::Error) -> Option<(u64, u64)> {
    error.chain().find_map(|cause| {
        let text = cause.to_string();
        let rest = text.strip_prefix("memory fault at wasm address 0x")?;
        let (address, rest) = rest.split_once(" in linear memory of size 0x")?;
        let size = rest.split(|c: char| !c.is_ascii_hexdigit()).next()?;
        Some((
            u64::from_str_radix(address, 16).ok()?,
            u64::from_str_radix(size, 16).ok()?,
        ))
    })
}

fn is_memory_limit(error: &wasmtime::Error) -> bool {
    let text = format!("{error:#}");
    text.contains("forcing trap when growing memory") || text.contains("memory minimum size")
}

#[cfg(test)]
mod tests {
    use super::{is_near_the_bottom, with_last_words};

    #[test]
    fn faults_near_address_zero_are_at_the_bottom() {
        assert!(is_near_the_bottom(0x10));
        assert!(is_near_the_bottom(0xffff_fff0), "below 0, wrapped around");
        assert!(!is_near_the_bottom(0x20_0000));
        assert!(
            is_near_the_bottom(0x1_0000_0000),
            "a real fault of a C stack overflow"
        );
        assert!(!is_near_the_bottom(0x1_2000_0000));
        assert!(!is_near_the_bottom(0x8000_0000));
    }

    #[test]
    fn crash_reasons_lead_with_the_guests_error() {
        let log = "working\nthread '<unnamed>' panicked at src/lib.rs:9:9:\nboom\nnote: run with `RUST_BACKTRACE=1`\n[spool: 10 more bytes of output were dropped]\n";
        let reason = with_last_words(super::PANICKED.into(), log);
        assert_eq!(
            reason,
            format!("panicked at src/lib.rs:9:9: boom; {}", super::PANICKED)
        );
        assert_eq!(
            with_last_words("trap: unreachable".into(), "step 1\nstep 2\n"),
            "trap: unreachable; last output: step 1 | step 2"
        );
        assert_eq!(
            with_last_words("fuel exhausted".into(), ""),
            "fuel exhausted"
        );
        assert_eq!(
            with_last_words(
                "fuel exhausted".into(),
                "panic: earlier, caught\nstill working\n"
            ),
            "fuel exhausted; last output: panic: earlier, caught | still working",
            "an error printed before the guest was stopped is not its cause"
        );
    }
}
