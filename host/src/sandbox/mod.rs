//! The WebAssembly sandbox: the only module that touches wasmtime.
//!
//! It compiles handler components ([`Sandbox::compile`]) and runs one attempt of a task in a
//! fresh instance ([`Sandbox::run`]), so no state leaks from one task to the next. Every attempt
//! gets:
//! - a fuel budget, the per-task timeout that a busy loop cannot escape: when it runs out the
//!   attempt ends with "fuel exhausted" and the task is retried like any failure;
//! - a memory cap on its linear memories and tables;
//! - WASI with nothing granted: no files, no environment, no network, no inherited stdio
//!   (clocks and randomness work); the whole of WASI p2 is linked so components from any
//!   toolchain instantiate, and access is denied at run time;
//! - the host imports of the handler world (`log`, `progress`), see [`host_api`].
//!
//! Handlers run as futures that yield every [`FUEL_YIELD_INTERVAL`] units of fuel, so many
//! attempts interleave on few threads, and dropping the future stops the guest at once.

mod host_api;

use std::sync::Arc;
use std::time::Duration;

use wasmtime::component::{Component, HasSelf, Linker, ResourceTable};
use wasmtime::{Engine, Store, StoreLimits, StoreLimitsBuilder, Trap};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use crate::task::AttemptOutcome;
pub use host_api::{LogLevel, TaskEvents};

mod bindings {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "handler",
        exports: { default: async },
    });
}

use bindings::spool::task::types::Failure as WitFailure;
use bindings::spool::task::types::TaskInfo as WitTaskInfo;

/// Fuel between two yields to the async executor: small enough that a busy handler gives up
/// its thread every few tens of microseconds, large enough that yielding costs nothing visible.
pub const FUEL_YIELD_INTERVAL: u64 = 50_000;

/// Errors compiling a handler.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    /// The bytes are not a WebAssembly component (a core module, a truncated file, not wasm).
    #[error("not a valid WebAssembly component: {0:#}")]
    Invalid(wasmtime::Error),
    /// A component, but not one that implements Spool's handler world.
    #[error("the component does not implement the spool:task/handler world ({0:#}); build it against wit/handler.wit")]
    WrongWorld(wasmtime::Error),
}

/// Errors setting up the sandbox.
#[derive(Debug, thiserror::Error)]
#[error("could not set up the WebAssembly engine: {0:#}")]
pub struct EngineError(wasmtime::Error);

/// Limits for one attempt.
#[derive(Debug, Clone, Copy)]
pub struct RunLimits {
    /// Fuel (roughly, WebAssembly instructions) the attempt may burn.
    pub fuel: u64,
    /// Bytes of linear memory the instance may grow to.
    pub memory_bytes: usize,
}

/// What the handler learns about its task.
#[derive(Debug, Clone)]
pub struct TaskInfo {
    pub id: u64,
    pub task_type: String,
    pub attempt: u32,
    pub max_attempts: u32,
    pub idempotency_key: Option<String>,
}

/// A compiled handler, validated against the handler world and ready to instantiate.
#[derive(Clone)]
pub struct CompiledHandler {
    pre: bindings::HandlerPre<HostState>,
}

/// The per-attempt state a wasmtime `Store` carries.
pub struct HostState {
    wasi: WasiCtx,
    table: ResourceTable,
    limits: StoreLimits,
    events: host_api::TaskContext,
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

/// The engine and linker shared by every handler.
#[derive(Clone)]
pub struct Sandbox {
    engine: Engine,
    linker: Arc<Linker<HostState>>,
}

impl Sandbox {
    /// Creates the engine (fuel metering on) and links WASI p2 and the host imports.
    pub fn new() -> Result<Self, EngineError> {
        let mut config = wasmtime::Config::new();
        config.consume_fuel(true);
        config.wasm_component_model(true);
        let engine = Engine::new(&config).map_err(EngineError)?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(EngineError)?;
        bindings::Handler::add_to_linker::<_, HasSelf<_>>(&mut linker, |state: &mut HostState| state)
            .map_err(EngineError)?;
        Ok(Sandbox { engine, linker: Arc::new(linker) })
    }

    /// Compiles a component and checks that it implements the handler world. CPU-heavy: call
    /// it off the async executor (for example in `spawn_blocking`).
    pub fn compile(&self, bytes: &[u8]) -> Result<CompiledHandler, CompileError> {
        let component = Component::new(&self.engine, bytes).map_err(CompileError::Invalid)?;
        let instance_pre =
            self.linker.instantiate_pre(&component).map_err(CompileError::WrongWorld)?;
        let pre = bindings::HandlerPre::new(instance_pre).map_err(CompileError::WrongWorld)?;
        Ok(CompiledHandler { pre })
    }

    /// Runs one attempt in a fresh instance and reports how it ended. Never fails: traps, fuel
    /// exhaustion and instantiation errors become [`AttemptOutcome::Crashed`] with the reason.
    pub async fn run(
        &self,
        handler: &CompiledHandler,
        task: TaskInfo,
        payload: &str,
        limits: RunLimits,
        events: Arc<dyn TaskEvents>,
    ) -> AttemptOutcome {
        let state = HostState {
            wasi: WasiCtx::builder().build(),
            table: ResourceTable::new(),
            limits: StoreLimitsBuilder::new()
                .memory_size(limits.memory_bytes)
                .trap_on_grow_failure(true)
                .build(),
            events: host_api::TaskContext::new(task.id, task.task_type.clone(), events),
        };
        let mut store = Store::new(&self.engine, state);
        store.limiter(|state| &mut state.limits);
        if let Err(error) = store.set_fuel(limits.fuel) {
            return AttemptOutcome::Crashed(format!("sandbox setup failed: {error:#}"));
        }
        if let Err(error) = store.fuel_async_yield_interval(Some(FUEL_YIELD_INTERVAL)) {
            return AttemptOutcome::Crashed(format!("sandbox setup failed: {error:#}"));
        }
        let info = WitTaskInfo {
            id: task.id,
            task_type: task.task_type,
            attempt: task.attempt,
            max_attempts: task.max_attempts,
            idempotency_key: task.idempotency_key,
        };
        let instance = match handler.pre.instantiate_async(&mut store).await {
            Ok(instance) => instance,
            Err(error) => return AttemptOutcome::Crashed(describe_error(&error, limits)),
        };
        match instance.call_handle(&mut store, &info, payload).await {
            Ok(Ok(result)) => AttemptOutcome::Succeeded(result),
            Ok(Err(WitFailure::Retry(message))) => AttemptOutcome::Retry(message),
            Ok(Err(WitFailure::Fail(message))) => AttemptOutcome::Fail(message),
            Ok(Err(WitFailure::Snooze(seconds))) => {
                AttemptOutcome::Snooze(Duration::from_secs(u64::from(seconds)))
            }
            Err(error) => AttemptOutcome::Crashed(describe_error(&error, limits)),
        }
    }
}

/// Turns a wasmtime error from instantiation or a call into a message for `last_error`.
fn describe_error(error: &wasmtime::Error, limits: RunLimits) -> String {
    match error.downcast_ref::<Trap>() {
        Some(Trap::OutOfFuel) => format!(
            "fuel exhausted: the handler used its whole budget of {} fuel units (the per-task \
             time limit) and was stopped",
            limits.fuel
        ),
        Some(Trap::StackOverflow) => "stack overflow: the handler recursed too deeply".to_string(),
        Some(Trap::UnreachableCodeReached) => {
            format!("trap: the handler panicked or hit unreachable code ({error:#})")
        }
        Some(trap) => format!("trap: {trap} ({error:#})"),
        None if is_memory_limit(error) => format!(
            "memory limit: the handler tried to grow its memory past {} bytes ({error:#})",
            limits.memory_bytes
        ),
        None => format!("handler error: {error:#}"),
    }
}

fn is_memory_limit(error: &wasmtime::Error) -> bool {
    let text = format!("{error:#}");
    text.contains("memory") && (text.contains("limit") || text.contains("grow"))
}
