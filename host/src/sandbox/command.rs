//! The second door: plain WASI programs, for any toolchain that builds one (Go with
//! GOOS=wasip1, Zig, C, a Rust wasm32-wasip1 or wasip2 binary …).
//!
//! A program is either a component exporting `wasi:cli/run` or a core module (WASI preview1)
//! exporting `_start`. It gets the task's payload on stdin and writes its result on stdout;
//! exit status 0 means success, anything else is a failure retried per policy with the end of
//! stderr as the reason (a panic or uncaught error recognized there, see
//! [`super::guest_error`], or else its last line). The same fuel, wall-clock, memory and capability rules apply as for
//! components of the handler world (preview1 programs have no outbound HTTP: WASI preview1
//! has no such interface). Host services (effect ledger, key-value, follow-ups) need the
//! handler world. A preview1 module's exit code is reported as is; WASI 0.2's `wasi:cli/run`
//! carries only success or failure, reported as status 0 or 1.

use wasmtime::{Engine, InstancePre, Linker, Module, Store};
use wasmtime_wasi::I32Exit;
use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wasi::p2::pipe::MemoryInputPipe;

use super::guest_error::{self, LastWords};
use super::limits::{AttemptLimiter, Meter};
use super::output::TaskLog;
use super::{CompileError, HostState, RunLimits, apply_limits, describe_error, granted_wasi};
use crate::task::AttemptOutcome;

/// The store state of a preview1 program.
pub struct P1State {
    wasi: WasiP1Ctx,
    limits: AttemptLimiter,
}

/// Whether `bytes` are a core module (version 1) rather than a component.
pub fn is_core_module(bytes: &[u8]) -> bool {
    bytes.len() >= 8 && bytes[..4] == *b"\0asm" && bytes[4..8] == [1, 0, 0, 0]
}

/// A linker with WASI preview1.
pub fn preview1_linker(engine: &Engine) -> wasmtime::Result<Linker<P1State>> {
    let mut linker = Linker::new(engine);
    wasmtime_wasi::p1::add_to_linker_async(&mut linker, |state: &mut P1State| &mut state.wasi)?;
    Ok(linker)
}

/// Checks that a core module is a WASI program: links against preview1 and exports `_start`.
pub fn preview1_pre(
    linker: &Linker<P1State>,
    module: &Module,
) -> Result<InstancePre<P1State>, CompileError> {
    if module.get_export("_start").is_none() {
        return Err(CompileError::WrongWorld(wasmtime::Error::msg(
            "a core module must be a WASI program exporting `_start` (a command, not a library)",
        )));
    }
    linker
        .instantiate_pre(module)
        .map_err(CompileError::WrongWorld)
}

/// How a program's exit becomes an outcome.
fn exit_outcome(
    status: Result<(), wasmtime::Error>,
    stdout: &TaskLog,
    stderr: &TaskLog,
    limits: &RunLimits,
) -> AttemptOutcome {
    let code = match status {
        Ok(()) => 0,
        Err(error) => match error.downcast_ref::<I32Exit>() {
            Some(I32Exit(code)) => *code,
            None => return AttemptOutcome::Crashed(describe_error(&error, limits)),
        },
    };
    if code != 0 {
        let reason = stderr_reason(stderr).unwrap_or_else(|| "no output on stderr".to_string());
        return AttemptOutcome::Retry(format!("the program exited with status {code}: {reason}"));
    }
    let (result, dropped) = stdout.raw();
    if dropped > 0 || result.len() > limits.max_result_bytes {
        return AttemptOutcome::Fail(format!(
            "the program wrote more than {} bytes to stdout (max_result): write large outputs to a granted folder and print a reference",
            limits.max_result_bytes
        ));
    }
    if let Some(at) = result.find('\0') {
        return AttemptOutcome::Fail(format!(
            "the program's output contains a NUL character at byte {at}: a result is text without NUL characters (encode binary data, for instance in base64)"
        ));
    }
    AttemptOutcome::Succeeded(result)
}

/// Why a program failed, by its stderr: a recognized panic or error, or else its last line.
fn stderr_reason(stderr: &TaskLog) -> Option<String> {
    let tail = stderr.tail();
    if let Some(LastWords::Recognized(error)) = guest_error::explain(&tail) {
        return Some(error);
    }
    tail.lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with("[spool"))
        .map(|l| l.chars().take(500).collect())
}

/// Runs a component exporting `wasi:cli/run` whose stdin holds the payload and whose stdout
/// goes to `stdout`.
pub async fn run_command(
    pre: &wasmtime_wasi::p2::bindings::CommandPre<HostState>,
    mut store: Store<HostState>,
    stdout: &TaskLog,
    stderr: &TaskLog,
    limits: &RunLimits,
    meter: &Meter,
) -> AttemptOutcome {
    let command = match pre.instantiate_async(&mut store).await {
        Ok(command) => command,
        Err(error) => return AttemptOutcome::Crashed(describe_error(&error, limits)),
    };
    let status = match command.wasi_cli_run().call_run(&mut store).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(())) => Err(wasmtime::Error::new(I32Exit(1))),
        Err(error) => Err(error),
    };
    meter.read(&store, &store.data().limits, limits.fuel);
    exit_outcome(status, stdout, stderr, limits)
}

/// Runs a preview1 program: instantiate, call `_start`.
pub async fn run_preview1(
    engine: &Engine,
    pre: &InstancePre<P1State>,
    payload: &str,
    stderr: &TaskLog,
    limits: &RunLimits,
    meter: &Meter,
) -> AttemptOutcome {
    let stdout = TaskLog::new(limits.max_result_bytes + 1);
    let wasi = match granted_wasi(limits, stderr) {
        Ok(mut wasi) => {
            wasi.stdin(MemoryInputPipe::new(payload.to_string()))
                .stdout(stdout.stream());
            wasi.build_p1()
        }
        Err(error) => return AttemptOutcome::Crashed(format!("sandbox setup failed: {error:#}")),
    };
    let state = P1State {
        wasi,
        limits: AttemptLimiter::new(limits.memory_bytes),
    };
    let mut store = Store::new(engine, state);
    store.limiter(|state| &mut state.limits);
    if let Err(error) = apply_limits(&mut store, limits) {
        return AttemptOutcome::Crashed(format!("sandbox setup failed: {error:#}"));
    }
    let instance = match pre.instantiate_async(&mut store).await {
        Ok(instance) => instance,
        Err(error) => return AttemptOutcome::Crashed(describe_error(&error, limits)),
    };
    let start = match instance.get_typed_func::<(), ()>(&mut store, "_start") {
        Ok(start) => start,
        Err(error) => {
            return AttemptOutcome::Crashed(format!(
                "the program's `_start` is not callable: {error:#}"
            ));
        }
    };
    let status = start.call_async(&mut store, ()).await;
    meter.read(&store, &store.data().limits, limits.fuel);
    exit_outcome(status, &stdout, stderr, limits)
}

#[cfg(test)]
mod tests {
    use super::is_core_module;

    #[test]
    fn tells_modules_from_components() {
        assert!(is_core_module(b"\0asm\x01\0\0\0rest"));
        assert!(!is_core_module(b"\0asm\x0d\0\x01\0rest"));
        assert!(!is_core_module(b"not wasm"));
    }
}
