//! The batch completer: commits finished attempts many per transaction.
//!
//! Every running task sends its [`Completion`] (and any progress reports) into one channel; the
//! completer writes whatever has accumulated while the previous write was in flight. Under load
//! batches grow and the per-task cost of a commit shrinks; when idle a lone completion is
//! written at once, with no timer delay. A failed write is retried with a growing pause and
//! the batch kept, so a database that goes away for a while loses nothing.

use std::collections::HashMap;
use std::time::Duration;
use tokio::sync::mpsc;

use super::RetryPause;
use crate::shutdown::{Shutdown, Stage};
use crate::store::{Completion, ProgressUpdate, SharedStore};

/// Most updates written in one transaction.
pub const MAX_BATCH: usize = 2_000;
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
            self.write(&completions, &progress).await;
        }
    }

    /// Writes one batch, retrying while the database fails.
    async fn write(&self, completions: &[Completion], progress: &[ProgressUpdate]) {
        let mut pause = RetryPause::new();
        let mut given_up_at = None;
        loop {
            let result = async {
                self.store.record_progress(progress).await?;
                self.store.complete(completions).await
            }
            .await;
            match result {
                Ok(changed) => {
                    if let Some(finished) = &self.finished {
                        finished.publish(completions.iter().map(|c| c.id));
                    }
                    let stale = completions.len() as u64 - changed.min(completions.len() as u64);
                    if stale > 0 {
                        tracing::debug!(
                            stale,
                            "completions for tasks no longer leased here (cancelled or rescued) were discarded"
                        );
                    }
                    return;
                }
                Err(error) => {
                    if self.shutdown.stage() == Stage::Immediate {
                        let since = *given_up_at.get_or_insert_with(std::time::Instant::now);
                        if since.elapsed() > GIVE_UP_AFTER_SHUTDOWN {
                            tracing::error!(
                                lost = completions.len(),
                                "{error}; giving up on these completions at shutdown: their leases will expire and the tasks run again"
                            );
                            return;
                        }
                    }
                    let wait = pause.next();
                    tracing::warn!(
                        batch = completions.len(),
                        "completing tasks failed: {error}; retrying in {wait:?}"
                    );
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }
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
    (completions, latest.into_values().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

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
