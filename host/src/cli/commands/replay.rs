//! `spool replay TASK [--attempt N] [--build FILE.wasm] [--verbose]`: fetches an attempt's
//! record and its build through a host's API, runs the attempt on this machine in the sandbox
//! a host uses with every host call answered from the record ([`crate::sandbox::tape`]), and
//! prints the log, the outcome and the result. Nothing is sent anywhere: no database is
//! written, no HTTP request leaves. Fails (exit 1) when the replayed attempt did not succeed.

use anyhow::{Context, Result, bail};
use std::sync::Arc;
use std::time::Duration;

use crate::cli::args::ReplayArgs;
use crate::sandbox::capabilities::{Capabilities, EnqueueGrant};
use crate::sandbox::tape::{
    BodyEnd, Call, HttpAnswer, RECORD_FORMAT, Recording, Tape, TapedServices,
};
use crate::sandbox::{RunLimits, Sandbox};
use crate::store::history::Outcome;
use crate::task::AttemptOutcome;

pub async fn replay(args: ReplayArgs) -> Result<()> {
    let client = args.client.client();
    let attempt = match args.attempt {
        Some(attempt) => attempt,
        None => {
            let listed = client.records(args.task).await?;
            match listed.records.last() {
                Some(latest) => latest.attempt,
                None => bail!(
                    "task {} has no recorded attempt: its type keeps records of the attempts its manifest's `record` asks for (\"failed\" by default, \"all\", or \"none\"), and this task had none of them",
                    args.task
                ),
            }
        }
    };
    let recording = client.record(args.task, attempt).await?;
    if recording.format != RECORD_FORMAT {
        bail!(
            "the record is in format {}, this spool replays format {RECORD_FORMAT}: use the spool version of the host that recorded it",
            recording.format
        );
    }
    let (bytes, build_name) = match &args.build {
        Some(path) => (
            std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?,
            path.display().to_string(),
        ),
        None => (
            client.build(&recording.build).await?,
            format!(
                "build {}",
                &recording.build[..12.min(recording.build.len())]
            ),
        ),
    };
    if args.verbose {
        eprintln!(
            "task {} attempt {} ({}), {} recorded calls{}:",
            recording.task.id,
            recording.task.attempt,
            recording.task.task_type,
            recording.calls.len(),
            if recording.truncated {
                ", truncated"
            } else {
                ""
            }
        );
        for (i, call) in recording.calls.iter().enumerate() {
            eprintln!("  {:>4}  {}", i + 1, describe(call));
        }
    }
    let sandbox = Sandbox::new().context("cannot start the sandbox")?;
    let version = {
        use sha2::{Digest, Sha256};
        hex::encode(Sha256::digest(&bytes))
    };
    let compiled = {
        let bytes = bytes.clone();
        let sandbox = sandbox.clone();
        tokio::task::spawn_blocking(move || sandbox.compile(&bytes, &version, None))
            .await?
            .map_err(|error| anyhow::anyhow!("{build_name} does not load: {error}"))?
            .0
    };
    let tape = Tape::replaying(&recording);
    let replayed = run(&sandbox, &compiled, &recording, tape.clone()).await;
    print_outcome(&recording, &tape, &replayed, &build_name)
}

/// Runs the attempt against the tape: the recorded task, payload, environment and limits; no
/// folder grants (file contents are not recorded); outbound HTTP answered from the record.
async fn run(
    sandbox: &Sandbox,
    handler: &crate::sandbox::CompiledHandler,
    recording: &Recording,
    tape: Arc<Tape>,
) -> Replayed {
    let info = recording.task.clone();
    // Every follow-up the record shows was allowed when it was recorded.
    let allow: Vec<String> = recording
        .calls
        .iter()
        .filter_map(|call| match call {
            Call::Service { name, subject, .. } if name == "enqueue" => Some(subject.clone()),
            _ => None,
        })
        .collect();
    let limits = RunLimits {
        fuel: recording.limits.fuel,
        timeout: Duration::from_millis(recording.limits.timeout_ms),
        memory_bytes: recording.limits.memory_bytes,
        max_result_bytes: recording.limits.max_result_bytes,
        log_bytes: recording.limits.log_bytes,
        capabilities: Capabilities {
            env: recording.env.clone(),
            enqueue: EnqueueGrant {
                allow,
                max_tasks: u32::MAX,
                max_bytes: usize::MAX / 2,
                max_depth: u32::MAX,
                min_priority: i32::MIN,
                max_priority: i32::MAX,
            },
            ..Capabilities::default()
        },
        tape: Some(tape.clone()),
    };
    let services = Arc::new(TapedServices { tape, live: None });
    let attempt = sandbox
        .run(handler, info, &recording.payload, &limits, services)
        .await;
    Replayed {
        outcome: attempt.outcome,
        log: attempt.log,
        fuel_used: attempt.fuel_used,
    }
}

/// How the replayed attempt ended.
struct Replayed {
    outcome: AttemptOutcome,
    log: String,
    fuel_used: Option<u64>,
}

fn describe(call: &Call) -> String {
    match call {
        Call::WallClock { secs, nanos } => format!("wall clock → {secs}.{nanos:09}"),
        Call::MonotonicClock { ns } => format!("monotonic clock → {ns} ns"),
        Call::Random { source, hex } => format!("{source:?} random → {hex}").to_lowercase(),
        Call::Service {
            name,
            subject,
            answer,
        } => format!("{name}({subject:?}) → {answer:?}"),
        Call::Http(exchange) => format!(
            "{} → {}",
            exchange.describe(),
            http_answer(&exchange.answer)
        ),
    }
}

/// A recorded HTTP answer in one line.
fn http_answer(answer: &HttpAnswer) -> String {
    match answer {
        HttpAnswer::Pending => "no answer before the attempt ended".into(),
        HttpAnswer::Failed { error } => format!("error {error:?}"),
        HttpAnswer::Response {
            status, body, end, ..
        } => {
            let end = match end {
                BodyEnd::Complete => String::new(),
                BodyEnd::Open => ", not read to its end".into(),
                BodyEnd::Truncated => ", cut at record_max".into(),
                BodyEnd::Failed(error) => format!(", then error {error:?}"),
            };
            format!("{status}, {} body bytes{end}", body.0.len())
        }
    }
}

fn print_outcome(
    recording: &Recording,
    tape: &Tape,
    replayed: &Replayed,
    build_name: &str,
) -> Result<()> {
    let (outcome, log) = (&replayed.outcome, &replayed.log);
    if !log.is_empty() {
        eprintln!("--- log ---\n{}", log.trim_end());
    }
    let ended = Outcome::of(outcome);
    let (result, error) = outcome.result_and_error();
    let report = tape.report();
    eprintln!(
        "replayed task {} attempt {} with {build_name}: {ended} ({} of {} recorded calls answered)",
        recording.task.id, recording.task.attempt, report.answered, report.recorded
    );
    let fuel = match (replayed.fuel_used, recording.fuel_used) {
        (Some(now), Some(then)) if now == then => format!("fuel used {now}, as recorded"),
        (Some(now), Some(then)) => format!("fuel used {now}; the recorded attempt used {then}"),
        (Some(now), None) => format!("fuel used {now}"),
        (None, _) => "fuel not counted".into(),
    };
    match &report.diverged {
        Some(problem) => eprintln!("diverged from the record at {problem}"),
        None if ended.as_str() == recording.outcome
            && result == recording.result
            && error == recording.error =>
        {
            eprintln!(
                "reproduced: the recorded attempt ended the same way ({}); {fuel}",
                recording.outcome
            )
        }
        None => eprintln!(
            "not reproduced: the recorded attempt ended {} with {}",
            recording.outcome,
            recording
                .error
                .as_deref()
                .or(recording.result.as_deref())
                .unwrap_or("nothing")
        ),
    }
    if let Some(result) = &result {
        println!("{result}");
    }
    match error {
        None => Ok(()),
        Some(error) => bail!("the replayed attempt ended {ended}: {error}"),
    }
}
