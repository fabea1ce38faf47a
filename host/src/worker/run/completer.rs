//! The batch completer: commits finished attempts many per transaction.
//!
//! Every running task sends its [`Completion`] (and any progress reports) into one channel; the
//! completer writes whatever has accumulated while the previous write was in flight. Under load
//! batches grow and the per-task cost of a commit shrinks; when idle a lone completion is
//! written at once, with no timer delay. A write that fails because the database is away is
//! retried with a growing pause and the batch kept, so an outage loses nothing.
//!
//! No batch carries more than [`MAX_BATCH_BYTES`] of task data (results, logs and errors,
//! counted as they travel, escaped as JSON), so many large results never make one huge
//! transaction. A batch the database *refuses* (an error waiting cannot fix) is split in halves
//! and each half written on its own, down to single completions; a completion the database
//! refuses even alone is a poison row: its task is failed with a reason saying so, without the
//! refused data, instead of being retried for ever while every other task waits behind it.

use std::collections::HashMap;
use std::ops::Range;
use std::time::Duration;
use tokio::sync::mpsc;

use crate::shutdown::{Shutdown, Stage};
use crate::store::{Completion, ProgressUpdate, SharedStore, StoreError};
use crate::task::Status;
use crate::worker::RetryPause;

/// Most updates written in one transaction.
pub const MAX_BATCH: usize = 2_000;
/// Most bytes of task data (results, logs and errors as escaped JSON text) in one transaction;
/// a single completion larger than this is written alone.
pub const MAX_BATCH_BYTES: usize = 16 << 20;
/// Room in the channel; a full channel makes tasks wait, which slows claiming (back-pressure).
pub const CHANNEL_CAPACITY: usize = 10_000;
/// After an immediate shutdown, how long a failing database is retried before the remaining
/// completions are given up (their tasks are then rescued and run again: at-least-once).
pub const GIVE_UP_AFTER_SHUTDOWN: Duration = Duration::from_secs(10);

/// What running tasks report.
#[derive(Debug)]
pub enum Update {
    /// An attempt finished.
    Finished(Completion),
    /// A handler reported progress; only the latest per task is written.
    Progress(ProgressUpdate),
}

/// The sending side, cloned into every running task.
pub type UpdateSender = mpsc::Sender<Update>;

/// The batch completer service.
pub struct Completer {
    store: SharedStore,
    receiver: mpsc::Receiver<Update>,
    shutdown: Shutdown,
    /// Told the ids of every committed batch (API requests waiting on a task listen).
    finished: Option<std::sync::Arc<super::finished::Finished>>,
}

impl Completer {
    /// A completer and the sender tasks report to. The completer ends when every sender is gone.
    pub fn new(store: SharedStore, shutdown: Shutdown) -> (Completer, UpdateSender) {
        let (sender, receiver) = mpsc::channel(CHANNEL_CAPACITY);
        (
            Completer {
                store,
                receiver,
                shutdown,
                finished: None,
            },
            sender,
        )
    }

    /// Publishes the ids of every committed batch to `finished`.
    pub fn publish_to(mut self, finished: std::sync::Arc<super::finished::Finished>) -> Self {
        self.finished = Some(finished);
        self
    }

    /// Writes updates until every sender is dropped and the channel is drained.
    pub async fn run(mut self) {
        let mut buffer = Vec::with_capacity(MAX_BATCH);
        while self.receiver.recv_many(&mut buffer, MAX_BATCH).await > 0 {
            let (completions, progress) = split(std::mem::take(&mut buffer));
            self.write_progress(&progress).await;
            for range in by_bytes(&completions, MAX_BATCH_BYTES) {
                self.write(&completions[range]).await;
            }
        }
    }

    /// Writes progress reports, retrying while the database is away. Progress is advisory:
    /// reports the database refuses are dropped rather than holding up completions.
    async fn write_progress(&self, progress: &[ProgressUpdate]) {
        if let Err(error) = self.retrying(Part::Progress(progress)).await {
            tracing::warn!(
                reports = progress.len(),
                "progress reports were refused and dropped: {error}"
            );
        }
    }

    /// Writes completions, halving whatever the database refuses and failing the tasks of
    /// completions it refuses alone.
    async fn write(&self, completions: &[Completion]) {
        let poison = write_splitting(completions, &mut StoreWriter(self)).await;
        for (index, error) in poison {
            let refused = &completions[index];
            let failed = poisoned(refused, &error);
            tracing::error!(
                task_id = refused.id,
                "the database refused this attempt's outcome ({error}); the task is failed instead"
            );
            if let Err(error) = self
                .retrying(Part::Completions(std::slice::from_ref(&failed)))
                .await
            {
                tracing::error!(
                    task_id = refused.id,
                    "the database refused even the failure of this task ({error}); its lease will expire and the rescuer counts the attempt"
                );
            }
        }
    }

    /// Writes `part` until it succeeds or fails in a way waiting cannot fix (returned); while
    /// the database is away, retries with a growing pause (giving up
    /// [`GIVE_UP_AFTER_SHUTDOWN`] into an immediate shutdown).
    async fn retrying(&self, part: Part<'_>) -> Result<(), StoreError> {
        let count = part.len();
        if count == 0 {
            return Ok(());
        }
        let mut pause = RetryPause::new();
        let mut given_up_at = None;
        loop {
            let result = match part {
                Part::Progress(updates) => self.store.record_progress(updates).await.map(|()| 0),
                Part::Completions(completions) => self.store.complete(completions).await,
            };
            match result {
                Ok(changed) => {
                    if let Part::Completions(completions) = part {
                        if let Some(finished) = &self.finished {
                            finished.publish(completions.iter().map(|c| c.id));
                        }
                        let stale = count as u64 - changed.min(count as u64);
                        if stale > 0 {
                            tracing::debug!(
                                stale,
                                "completions for tasks no longer leased here (cancelled or rescued) were discarded"
                            );
                        }
                    }
                    return Ok(());
                }
                Err(error) if refused(&error) => return Err(error),
                Err(error) => {
                    if self.shutdown.stage() == Stage::Immediate {
                        let since = *given_up_at.get_or_insert_with(std::time::Instant::now);
                        if since.elapsed() > GIVE_UP_AFTER_SHUTDOWN {
                            tracing::error!(
                                lost = count,
                                "{error}; giving up on these updates at shutdown: their leases will expire and the tasks run again"
                            );
                            return Ok(());
                        }
                    }
                    let wait = pause.next();
                    tracing::warn!(
                        batch = count,
                        "writing finished attempts failed: {error}; retrying in {wait:?}"
                    );
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }
}

/// One write of the completer.
#[derive(Clone, Copy)]
enum Part<'a> {
    Progress(&'a [ProgressUpdate]),
    Completions(&'a [Completion]),
}

impl Part<'_> {
    fn len(&self) -> usize {
        match self {
            Part::Progress(updates) => updates.len(),
            Part::Completions(completions) => completions.len(),
        }
    }
}

/// Writes completions; an error means the database refused them (see [`write_splitting`]).
trait CompletionWriter {
    fn write(&mut self, part: &[Completion])
    -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// The completer's store, retried while the database is away.
struct StoreWriter<'a>(&'a Completer);

impl CompletionWriter for StoreWriter<'_> {
    fn write(
        &mut self,
        part: &[Completion],
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.0.retrying(Part::Completions(part))
    }
}

/// Whether the database refused a write for a reason waiting does not fix (as opposed to
/// being away, busy or closing).
fn refused(error: &StoreError) -> bool {
    matches!(error, StoreError::Database(_) | StoreError::Corrupt { .. })
}

/// What a completion weighs in a batch: its texts as escaped JSON (a control character takes
/// six bytes there), plus the fixed fields.
pub fn weight(completion: &Completion) -> usize {
    fn escaped(text: &Option<String>) -> usize {
        text.as_deref().map_or(0, |text| {
            text.chars()
                .map(|c| match c {
                    '"' | '\\' => 2,
                    c if (c as u32) < 0x20 => 6,
                    c => c.len_utf8(),
                })
                .sum()
        })
    }
    let t = &completion.transition;
    256 + escaped(&t.result) + escaped(&t.error) + escaped(&completion.log)
}

/// Splits completions into consecutive runs of at most `max_bytes` (by [`weight`]); a
/// completion heavier than that is a run of its own.
fn by_bytes(completions: &[Completion], max_bytes: usize) -> Vec<Range<usize>> {
    let mut runs = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, completion) in completions.iter().enumerate() {
        let w = weight(completion);
        if i > start && bytes + w > max_bytes {
            runs.push(start..i);
            (start, bytes) = (i, 0);
        }
        bytes += w;
    }
    if start < completions.len() {
        runs.push(start..completions.len());
    }
    runs
}

/// Writes `batch` with `write`, which returns an error only when the database refused the
/// part it was given. A refused part is halved and each half written again; a single refused
/// completion is returned (its index in `batch`, and the error), for its task to be failed.
async fn write_splitting(
    batch: &[Completion],
    writer: &mut impl CompletionWriter,
) -> Vec<(usize, StoreError)> {
    let mut poison = Vec::new();
    let mut parts: Vec<Range<usize>> = Vec::new();
    parts.push(0..batch.len());
    while let Some(part) = parts.pop() {
        if part.is_empty() {
            continue;
        }
        match writer.write(&batch[part.clone()]).await {
            Ok(()) => {}
            Err(error) if part.len() == 1 => poison.push((part.start, error)),
            Err(error) => {
                tracing::warn!(
                    batch = part.len(),
                    "the database refused a batch of finished attempts ({error}); writing it in halves"
                );
                let middle = part.start + part.len() / 2;
                parts.push(middle..part.end);
                parts.push(part.start..middle);
            }
        }
    }
    poison
}

/// The completion that fails the task of a completion the database refused: no result and no
/// log (they may be what was refused), and a reason naming the refusal.
fn poisoned(refused: &Completion, error: &StoreError) -> Completion {
    let mut reason = format!(
        "the database refused to store this attempt's outcome ({error}); the task is failed instead of retried"
    );
    reason.truncate(
        (0..=crate::sandbox::text::MAX_MESSAGE_BYTES.min(reason.len()))
            .rev()
            .find(|&end| reason.is_char_boundary(end))
            .unwrap_or(0),
    );
    let mut failed = refused.clone();
    // A dead letter schedules no retry: `retry_count` stays as the claim found it, so the
    // retry a failed attempt was about to schedule is taken back.
    if refused.transition.status == Status::Pending && refused.transition.error.is_some() {
        failed.transition.retry_count = failed.transition.retry_count.saturating_sub(1);
    }
    failed.outcome = crate::store::history::Outcome::Fail;
    failed.transition.status = Status::Failed;
    failed.transition.next_run_at = None;
    failed.transition.result = None;
    failed.transition.error = Some(reason);
    failed.log = None;
    failed
}

/// Separates completions from progress, keeping only each task's latest progress.
fn split(updates: Vec<Update>) -> (Vec<Completion>, Vec<ProgressUpdate>) {
    let mut completions = Vec::new();
    let mut latest: HashMap<i64, ProgressUpdate> = HashMap::new();
    for update in updates {
        match update {
            Update::Finished(completion) => completions.push(completion),
            Update::Progress(progress) => {
                latest.insert(progress.id, progress);
            }
        }
    }
    // In task id order, the order every batch takes its row locks in (`in_lock_order`).
    completions.sort_by_key(|c| c.id);
    let mut progress: Vec<ProgressUpdate> = latest.into_values().collect();
    progress.sort_by_key(|p| p.id);
    (completions, progress)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::Transition;
    use chrono::Utc;

    fn completion(id: i64, result: &str) -> Completion {
        Completion {
            id,
            owner: "host".into(),
            attempt: 1,
            transition: Transition {
                status: Status::Done,
                retry_count: 0,
                next_run_at: None,
                result: Some(result.into()),
                error: None,
            },
            outcome: crate::store::history::Outcome::Done,
            plugin_version: None,
            log: None,
            cost: None,
            finished_at: Utc::now(),
            record: None,
        }
    }

    #[test]
    fn weight_counts_text_as_escaped_json() {
        assert_eq!(weight(&completion(1, "abc")), 256 + 3);
        assert_eq!(weight(&completion(1, "\u{1}\u{0}")), 256 + 12);
        assert_eq!(weight(&completion(1, "\"é")), 256 + 4);
    }

    #[test]
    fn batches_stop_at_their_byte_cap() {
        let big = "x".repeat(1000);
        let completions: Vec<Completion> = (0..10).map(|i| completion(i, &big)).collect();
        let runs = by_bytes(&completions, 3 * weight(&completions[0]));
        assert_eq!(runs, [0..3, 3..6, 6..9, 9..10]);
        let control = "\u{1}".repeat(1000);
        let heavy = vec![
            completion(1, "a"),
            completion(2, &control),
            completion(3, "b"),
        ];
        assert_eq!(
            by_bytes(&heavy, 2000),
            [0..1, 1..2, 2..3],
            "alone when over the cap"
        );
        assert!(by_bytes(&[], 10).is_empty());
    }

    #[tokio::test]
    async fn a_refused_batch_is_halved_down_to_the_poison_row() {
        let batch: Vec<Completion> = (0..64)
            .map(|i| completion(i, if i == 37 { "poison" } else { "{}" }))
            .collect();
        /// Refuses any part holding a completion whose result is `poison`.
        #[derive(Default)]
        struct Picky {
            written: Vec<i64>,
            calls: usize,
        }
        impl CompletionWriter for Picky {
            fn write(
                &mut self,
                part: &[Completion],
            ) -> impl Future<Output = Result<(), StoreError>> + Send {
                self.calls += 1;
                let outcome = if part
                    .iter()
                    .any(|c| c.transition.result.as_deref() == Some("poison"))
                {
                    Err(StoreError::Database("string or blob too big".into()))
                } else {
                    self.written.extend(part.iter().map(|c| c.id));
                    Ok(())
                };
                std::future::ready(outcome)
            }
        }
        let mut picky = Picky::default();
        let poison = write_splitting(&batch, &mut picky).await;
        assert_eq!(poison.len(), 1);
        assert_eq!(poison[0].0, 37);
        picky.written.sort();
        assert_eq!(
            picky.written,
            (0..64).filter(|&i| i != 37).collect::<Vec<_>>()
        );
        assert_eq!(
            picky.calls,
            1 + 2 * 6,
            "a refusal costs two writes per halving"
        );
        let failed = poisoned(&batch[37], &poison[0].1);
        assert_eq!(failed.transition.status, Status::Failed);
        assert_eq!(failed.transition.result, None);
        assert!(
            failed
                .transition
                .error
                .as_deref()
                .unwrap()
                .starts_with("the database refused to store this attempt's outcome (database error: string or blob too big)"),
            "{failed:?}"
        );
    }

    #[test]
    fn only_errors_waiting_cannot_fix_are_refusals() {
        assert!(refused(&StoreError::Database("too big".into())));
        assert!(!refused(&StoreError::Unavailable("gone".into())));
        assert!(!refused(&StoreError::Closed));
    }

    #[test]
    fn keeps_the_latest_progress_per_task() {
        let progress = |id, percent| {
            Update::Progress(ProgressUpdate {
                id,
                percent,
                note: String::new(),
            })
        };
        let (completions, progress) = split(vec![progress(1, 10), progress(2, 5), progress(1, 60)]);
        assert!(completions.is_empty());
        let mut by_task: Vec<(i64, u8)> = progress.iter().map(|p| (p.id, p.percent)).collect();
        by_task.sort();
        assert_eq!(by_task, [(1, 60), (2, 5)]);
    }
}
