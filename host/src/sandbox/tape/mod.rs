//! Recording an attempt's inputs and answering a replay from them: the tape.
//!
//! Everything an attempt sees from outside comes through a host call: the task info and the
//! payload (stdin, for a WASI program), the manifest's environment, the wall and monotonic
//! clocks, random bytes (secure and insecure, and the insecure seed) and the Spool services
//! (effect ledger, key-value store, follow-up enqueues). While recording, the [`Tape`] keeps each
//! call with the answer the guest got, in order; while replaying, it answers each call from the
//! record instead of the world, and notes the first call where the guest asked something else
//! than the record holds. With the same build and the same answers, wasmtime runs the guest to
//! the same end, fuel included: nothing else reaches it.
//!
//! Outbound HTTP goes on the tape too ([`exchange`]): each request (method, URL, headers, with
//! credentials and the manifest's secrets redacted) and its response (status, headers, the body
//! as far as the guest read it) or its error; a replay answers from the record and sends
//! nothing.
//!
//! What a record does not hold: files under a folder grant (a replay runs without them), the
//! bodies of outbound requests, and what the guest sends out (logs, progress) other than
//! through the calls above.
//!
//! A record is bounded ([`Tape::recording`]'s `max` bytes of calls): past it the record is
//! marked truncated and a replay stops there with that message.

mod exchange;
mod services;
mod wasi;

pub use exchange::{BodyEnd, Exchange, Failure, HttpAnswer, HttpBody, REDACTED, ReplayedBody};
pub use services::TapedServices;
pub use wasi::{TapedMonotonicClock, TapedRandom, TapedWallClock};

use rand::RngCore;
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use super::TaskInfo;

/// The version of the record format a host writes; a replay refuses other versions.
pub const RECORD_FORMAT: u32 = 1;

/// Which random source a call read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RandomSource {
    Secure,
    Insecure,
}

/// How a Spool service answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Answer {
    /// A yes or no (`effect-done`, `kv-delete`).
    Flag(bool),
    /// A value or none (`kv-get`).
    Value(Option<String>),
    /// Done, nothing to say (`record-effect`, `kv-set`).
    Done,
    /// A follow-up's id, or the error the guest got.
    Enqueued(Result<u64, String>),
    /// The database did not answer: the guest trapped on it.
    Unavailable(String),
    /// The call passed one of the type's limits: the guest trapped on it.
    Refused(String),
}

/// One host call and the answer the guest got.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "call", rename_all = "snake_case")]
pub enum Call {
    WallClock {
        secs: u64,
        nanos: u32,
    },
    MonotonicClock {
        ns: u64,
    },
    Random {
        source: RandomSource,
        hex: String,
    },
    /// A Spool service: its name (`kv-get`, …) and what it was asked about (a key, or the
    /// follow-up's task type).
    Service {
        name: String,
        subject: String,
        answer: Answer,
    },
    /// An outbound HTTP request and its answer.
    Http(Exchange),
}

impl Call {
    /// The call as a person reads it, for divergence reports.
    pub fn describe(&self) -> String {
        match self {
            Call::WallClock { .. } => "a wall-clock read".into(),
            Call::MonotonicClock { .. } => "a monotonic-clock read".into(),
            Call::Random { source, hex } => {
                format!("{} random bytes ({:?})", hex.len() / 2, source).to_lowercase()
            }
            Call::Service { name, subject, .. } => format!("{name}({subject:?})"),
            Call::Http(exchange) => exchange.describe(),
        }
    }
}

/// The limits the recorded attempt ran under, which a replay applies again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedLimits {
    pub fuel: u64,
    pub timeout_ms: u64,
    pub memory_bytes: usize,
    pub max_result_bytes: usize,
    pub log_bytes: usize,
}

/// Everything a replay needs besides the build: the attempt's inputs in order, and how it
/// ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Recording {
    pub format: u32,
    /// The build that ran (hex SHA-256, the attempt's `plugin_version`).
    pub build: String,
    pub task: TaskInfo,
    pub payload: String,
    pub limits: RecordedLimits,
    /// The manifest's environment, as the guest saw it.
    pub env: Vec<(String, String)>,
    /// What `wasi:random/insecure-seed` answered.
    pub insecure_seed: String,
    pub calls: Vec<Call>,
    /// The record stopped at its bound: calls after the last one kept were not recorded.
    pub truncated: bool,
    /// How the attempt ended (`done`, `retry`, `fail`, `snooze`, `crashed`, `timed_out`).
    pub outcome: String,
    /// Its result (for `done`) or its error.
    pub result: Option<String>,
    pub error: Option<String>,
    pub fuel_used: Option<u64>,
}

enum Mode {
    Recording {
        max: usize,
        used: usize,
    },
    Replaying {
        cursor: usize,
        /// The first call the guest made that the record does not hold.
        diverged: Option<String>,
    },
}

struct State {
    mode: Mode,
    calls: Vec<Call>,
    truncated: bool,
}

/// The record of one attempt being written, or being replayed.
pub struct Tape {
    state: Mutex<State>,
    insecure_seed: u128,
    /// Values a record keeps as [`REDACTED`] (the manifest's secrets).
    secrets: Vec<String>,
}

impl std::fmt::Debug for Tape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.lock();
        f.debug_struct("Tape")
            .field("replay", &matches!(state.mode, Mode::Replaying { .. }))
            .field("calls", &state.calls.len())
            .field("truncated", &state.truncated)
            .finish()
    }
}

/// What a replay saw of its record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayReport {
    /// Calls answered from the record.
    pub answered: usize,
    /// Calls in the record.
    pub recorded: usize,
    /// The first call the guest made that the record does not hold, if any.
    pub diverged: Option<String>,
}

impl Tape {
    /// A tape that records up to `max` bytes of calls, with `secrets` redacted.
    pub fn recording(max: usize, secrets: Vec<String>) -> Arc<Tape> {
        Arc::new(Tape {
            state: Mutex::new(State {
                mode: Mode::Recording { max, used: 0 },
                calls: Vec::new(),
                truncated: false,
            }),
            insecure_seed: rand::random(),
            secrets,
        })
    }

    /// A tape that answers from `recording`.
    pub fn replaying(recording: &Recording) -> Arc<Tape> {
        Arc::new(Tape {
            state: Mutex::new(State {
                mode: Mode::Replaying {
                    cursor: 0,
                    diverged: None,
                },
                calls: recording.calls.clone(),
                truncated: recording.truncated,
            }),
            insecure_seed: recording.insecure_seed.parse().unwrap_or(0),
            secrets: Vec::new(),
        })
    }

    pub fn insecure_seed(&self) -> u128 {
        self.insecure_seed
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Whether this tape answers from a record.
    pub fn is_replay(&self) -> bool {
        matches!(self.lock().mode, Mode::Replaying { .. })
    }

    /// Keeps `call` while recording, unless the record is full (then it is marked truncated).
    fn keep(&self, call: Call) {
        self.keep_at(call);
    }

    /// [`Tape::keep`], returning where the call was kept.
    fn keep_at(&self, call: Call) -> Option<usize> {
        let mut state = self.lock();
        let State {
            mode,
            calls,
            truncated,
        } = &mut *state;
        let Mode::Recording { max, used } = mode else {
            return None;
        };
        if *truncated {
            return None;
        }
        let size = serde_json::to_string(&call).map_or(0, |text| text.len());
        if *used + size > *max {
            *truncated = true;
            return None;
        }
        *used += size;
        calls.push(call);
        Some(calls.len() - 1)
    }

    /// Changes the HTTP exchange kept at `slot` by `change`, which adds `added` bytes; past
    /// the record's bound its body is cut there instead, and the record marked truncated.
    fn http_update(&self, slot: usize, added: usize, change: impl FnOnce(&mut Exchange)) {
        let mut state = self.lock();
        let State {
            mode,
            calls,
            truncated,
        } = &mut *state;
        let (Mode::Recording { max, used }, Some(Call::Http(exchange))) =
            (mode, calls.get_mut(slot))
        else {
            return;
        };
        if added > 0 && (*truncated || *used + added > *max) {
            *truncated = true;
            if let HttpAnswer::Response { end, .. } = &mut exchange.answer
                && *end == BodyEnd::Open
            {
                *end = BodyEnd::Truncated;
            }
            return;
        }
        *used += added;
        change(exchange);
    }

    /// The number (from 1) of the call a replay answers next.
    fn next_number(&self) -> usize {
        match &self.lock().mode {
            Mode::Replaying { cursor, .. } => cursor + 1,
            Mode::Recording { .. } => 0,
        }
    }

    /// Notes that the replay left the record, unless it had before.
    fn diverge(&self, problem: String) {
        if let Mode::Replaying { diverged, .. } = &mut self.lock().mode {
            diverged.get_or_insert(problem);
        }
    }

    /// The recorded answer to the next call, if the record holds this call next (`pick`
    /// returns the answer of a matching call). Otherwise the divergence is noted and the
    /// error says where and how.
    fn next<T>(&self, asked: &str, pick: impl FnOnce(&Call) -> Option<T>) -> Result<T, String> {
        let mut state = self.lock();
        let State {
            mode,
            calls,
            truncated,
        } = &mut *state;
        let Mode::Replaying { cursor, diverged } = mode else {
            return Err("the tape is recording, not replaying".into());
        };
        let number = *cursor + 1;
        let problem = match calls.get(*cursor) {
            _ if diverged.is_some() => {
                return Err(diverged.clone().unwrap_or_default());
            }
            Some(call) => match pick(call) {
                Some(answer) => {
                    *cursor += 1;
                    return Ok(answer);
                }
                None => format!(
                    "call {number}: the guest asked {asked}; the record has {}",
                    call.describe()
                ),
            },
            None if *truncated => truncated_at(number),
            None => format!("call {number}: the guest asked {asked}; the record has no more calls"),
        };
        *diverged = Some(problem.clone());
        Err(problem)
    }

    /// The calls recorded so far, and whether the record was cut at its bound.
    pub fn calls(&self) -> (Vec<Call>, bool) {
        let state = self.lock();
        (state.calls.clone(), state.truncated)
    }

    /// How the replay went.
    pub fn report(&self) -> ReplayReport {
        let state = self.lock();
        let (answered, diverged) = match &state.mode {
            Mode::Replaying { cursor, diverged } => (*cursor, diverged.clone()),
            Mode::Recording { .. } => (0, None),
        };
        ReplayReport {
            answered,
            recorded: state.calls.len(),
            diverged,
        }
    }

    /// Reads the wall clock, or its recorded value (on divergence the last recorded time,
    /// so the guest sees time stand still rather than jump).
    fn wall_clock(&self) -> Duration {
        if self.is_replay() {
            let answer = self.next("a wall-clock read", |call| match call {
                Call::WallClock { secs, nanos } => Some(Duration::new(*secs, *nanos)),
                _ => None,
            });
            return answer.unwrap_or_else(|_| self.last_wall_clock());
        }
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        self.keep(Call::WallClock {
            secs: now.as_secs(),
            nanos: now.subsec_nanos(),
        });
        now
    }

    fn last_wall_clock(&self) -> Duration {
        let state = self.lock();
        state
            .calls
            .iter()
            .rev()
            .find_map(|call| match call {
                Call::WallClock { secs, nanos } => Some(Duration::new(*secs, *nanos)),
                _ => None,
            })
            .unwrap_or_default()
    }

    fn monotonic_clock(&self, start: Instant) -> u64 {
        if self.is_replay() {
            let answer = self.next("a monotonic-clock read", |call| match call {
                Call::MonotonicClock { ns } => Some(*ns),
                _ => None,
            });
            return answer.unwrap_or_else(|_| {
                let state = self.lock();
                state
                    .calls
                    .iter()
                    .rev()
                    .find_map(|call| match call {
                        Call::MonotonicClock { ns } => Some(*ns),
                        _ => None,
                    })
                    .unwrap_or(0)
            });
        }
        let ns = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.keep(Call::MonotonicClock { ns });
        ns
    }

    fn random(&self, source: RandomSource, real: &mut rand::rngs::StdRng, dst: &mut [u8]) {
        if self.is_replay() {
            let asked = format!("{} random bytes ({source:?})", dst.len()).to_lowercase();
            let answer = self.next(&asked, |call| match call {
                Call::Random { source: s, hex } if *s == source && hex.len() == dst.len() * 2 => {
                    hex::decode(hex).ok()
                }
                _ => None,
            });
            match answer {
                Ok(bytes) => dst.copy_from_slice(&bytes),
                Err(_) => dst.fill(0),
            }
            return;
        }
        real.fill_bytes(dst);
        self.keep(Call::Random {
            source,
            hex: hex::encode(&*dst),
        });
    }
}

/// What a replay reports where its record was cut at its bound.
fn truncated_at(number: usize) -> String {
    format!(
        "call {number}: the record was truncated here (it reached record_max); the replay stops at this point"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::host_api::{ServiceError, TaskServices};
    use rand::SeedableRng;

    fn recording(calls: Vec<Call>, truncated: bool) -> Recording {
        Recording {
            format: RECORD_FORMAT,
            build: "b".into(),
            task: TaskInfo {
                id: 1,
                task_type: "t".into(),
                attempt: 1,
                max_attempts: 3,
                idempotency_key: None,
                depth: 0,
            },
            payload: "{}".into(),
            limits: RecordedLimits {
                fuel: 1,
                timeout_ms: 1,
                memory_bytes: 1,
                max_result_bytes: 1,
                log_bytes: 1,
            },
            env: vec![],
            insecure_seed: "7".into(),
            calls,
            truncated,
            outcome: "done".into(),
            result: None,
            error: None,
            fuel_used: None,
        }
    }

    #[test]
    fn a_recording_keeps_calls_in_order_up_to_its_bound() {
        let tape = Tape::recording(120, Vec::new());
        let first = tape.wall_clock();
        let mut real = rand::rngs::StdRng::seed_from_u64(1);
        let mut bytes = [0; 4];
        tape.random(RandomSource::Secure, &mut real, &mut bytes);
        for _ in 0..10 {
            tape.wall_clock();
        }
        let (calls, truncated) = tape.calls();
        assert!(truncated, "{calls:?}");
        assert_eq!(
            calls[0],
            Call::WallClock {
                secs: first.as_secs(),
                nanos: first.subsec_nanos()
            }
        );
        assert_eq!(
            calls[1],
            Call::Random {
                source: RandomSource::Secure,
                hex: hex::encode(bytes)
            }
        );
        let size: usize = calls
            .iter()
            .map(|c| serde_json::to_string(c).unwrap().len())
            .sum();
        assert!(size <= 120);
    }

    #[test]
    fn a_replay_answers_from_the_record_and_names_the_first_divergence() {
        let calls = vec![
            Call::WallClock { secs: 5, nanos: 6 },
            Call::Random {
                source: RandomSource::Insecure,
                hex: "0102".into(),
            },
            Call::MonotonicClock { ns: 99 },
        ];
        let tape = Tape::replaying(&recording(calls, false));
        assert_eq!(tape.insecure_seed(), 7);
        assert_eq!(tape.wall_clock(), Duration::new(5, 6));
        let mut real = rand::rngs::StdRng::seed_from_u64(1);
        let mut bytes = [9; 2];
        tape.random(RandomSource::Insecure, &mut real, &mut bytes);
        assert_eq!(bytes, [1, 2]);
        // The guest reads the wall clock where the record has a monotonic read.
        assert_eq!(tape.wall_clock(), Duration::new(5, 6), "time stands still");
        let report = tape.report();
        assert_eq!((report.answered, report.recorded), (2, 3));
        assert_eq!(
            report.diverged.as_deref(),
            Some(
                "call 3: the guest asked a wall-clock read; the record has a monotonic-clock read"
            )
        );
    }

    #[test]
    fn a_replay_past_the_end_or_the_truncation_says_which() {
        let ended = Tape::replaying(&recording(vec![], false));
        ended.wall_clock();
        assert_eq!(
            ended.report().diverged.as_deref(),
            Some("call 1: the guest asked a wall-clock read; the record has no more calls")
        );
        let cut = Tape::replaying(&recording(vec![], true));
        cut.wall_clock();
        assert!(
            cut.report()
                .diverged
                .unwrap()
                .contains("the record was truncated here (it reached record_max)")
        );
    }

    #[tokio::test]
    async fn services_replay_their_answers_and_their_failures() {
        let calls = vec![
            Call::Service {
                name: "kv-get".into(),
                subject: "rate".into(),
                answer: Answer::Value(Some("3".into())),
            },
            Call::Service {
                name: "effect-done".into(),
                subject: "mail:1".into(),
                answer: Answer::Unavailable("database away".into()),
            },
        ];
        let tape = Tape::replaying(&recording(calls, false));
        let services = TapedServices {
            tape: tape.clone(),
            live: None,
        };
        assert_eq!(
            services.kv_get("t", "rate").await.unwrap(),
            Some("3".into())
        );
        assert!(matches!(
            services.effect_done("t", "mail:1").await,
            Err(ServiceError::Unavailable(m)) if m == "database away"
        ));
        let diverged = services.kv_get("t", "other").await.unwrap_err().to_string();
        assert!(
            diverged.contains(
                "call 3: the guest asked kv-get(\"other\"); the record has no more calls"
            ),
            "{diverged}"
        );
    }
}
