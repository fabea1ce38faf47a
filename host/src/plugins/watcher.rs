//! Watches the plugin folder while the host serves, and keeps the registry in step with it.
//!
//! Events are debounced per task type: a file is (re)loaded once nothing has touched it for
//! the debounce period, so a build tool that writes a component in several steps triggers one
//! load. A new or replaced `NAME.wasm` (or its `NAME.toml`) is loaded off the dispatch path and
//! swapped in atomically: attempts already running keep the plugin they started with, new
//! claims get the new one. A file that does not load, a half-copied one included, leaves the
//! serving version in place and its error in the registry (`GET /plugins`); the next change
//! to it is tried again. A removed `NAME.wasm` unregisters the type; its pending tasks stay
//! pending until a plugin for it returns.
//!
//! A file being written is never loaded half-way: once a component or manifest is written to
//! in place (a `cp`, an editor's save), its type waits until the writer closes the file, however
//! long the writer pauses, and the loader checks again that no process still has it open for
//! writing (see [`super::loader`]). A file renamed or linked into place is complete and loads
//! after the debounce.
//!
//! The `notify` crate is the ecosystem's cross-platform file watcher (inotify on Linux).

use notify::event::{AccessKind, AccessMode, ModifyKind};
use notify::{EventKind, RecursiveMode, Watcher as _};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::Registry;
use super::loader::{LoadError, PluginLoader};
use crate::shutdown::{Shutdown, Stage};
use crate::store::SharedStore;
use crate::store::control::TaskSelection;
use crate::task::Status;
use spool_rules::names::is_valid_task_type;

/// Quiet time after the last event on a file before it is loaded.
pub const DEFAULT_DEBOUNCE: Duration = Duration::from_millis(50);

/// The plugin-folder watcher service.
pub struct FolderWatcher {
    pub folder: PathBuf,
    pub loader: Arc<PluginLoader>,
    pub registry: Arc<Registry>,
    pub store: SharedStore,
    pub debounce: Duration,
    pub shutdown: Shutdown,
}

/// A watch on the folder, established before the initial load so that no change between the
/// load and the start of the watcher's loop is missed.
pub struct FolderWatch {
    _watcher: notify::RecommendedWatcher,
    events: mpsc::UnboundedReceiver<(Change, PathBuf)>,
}

/// What happened to a file in the plugin folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    /// Written to in place: the writer may not be done.
    Written,
    /// Closed after writing: the writer is done.
    Closed,
    /// Its metadata changed (permissions, times): says nothing about a writer.
    Touched,
    /// Anything else: created, renamed, removed. A new file at that name.
    Replaced,
}

impl Change {
    /// The change an event is, if it matters: our own reads of a file must not trigger a reload.
    fn of(kind: &EventKind) -> Option<Change> {
        match kind {
            EventKind::Access(AccessKind::Close(AccessMode::Write)) => Some(Change::Closed),
            EventKind::Access(_) => None,
            EventKind::Modify(ModifyKind::Data(_)) => Some(Change::Written),
            EventKind::Modify(ModifyKind::Metadata(_)) => Some(Change::Touched),
            // Created: complete (a hard link), or about to be written (then a data change
            // follows at once).
            _ => Some(Change::Replaced),
        }
    }
}

impl FolderWatch {
    /// Starts receiving change events for `folder`.
    pub fn establish(folder: &Path) -> Result<FolderWatch, notify::Error> {
        let (sender, events) = mpsc::unbounded_channel::<(Change, PathBuf)>();
        let mut watcher =
            notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
                if let Ok(event) = event
                    && let Some(change) = Change::of(&event.kind)
                {
                    for path in event.paths {
                        let _ = sender.send((change, path));
                    }
                }
            })?;
        watcher.watch(folder, RecursiveMode::NonRecursive)?;
        Ok(FolderWatch {
            _watcher: watcher,
            events,
        })
    }
}

/// The task type a changed path belongs to, if it is a component or a manifest.
fn task_type_of(path: &Path) -> Option<String> {
    let extension = path.extension()?.to_str()?;
    if extension != "wasm" && extension != "toml" {
        return None;
    }
    let stem = path.file_stem()?.to_str()?;
    is_valid_task_type(stem).then(|| stem.to_string())
}

impl FolderWatcher {
    /// Applies the folder's changes until shutdown. Task types are synced independently: a
    /// slow compile of one type never holds up another type's load, manifest change or
    /// removal. One type has at most one sync at a time; a change that arrives during it is
    /// applied by another sync right after, which sees the folder as it is then.
    pub async fn run(self, watch: FolderWatch) {
        let FolderWatch {
            _watcher,
            mut events,
        } = watch;
        tracing::info!(folder = %self.folder.display(), "watching the plugin folder for changes");
        let this = Arc::new(self);

        let mut due: HashMap<String, Instant> = HashMap::new();
        // Names of files written to in place and not yet closed: their types wait for the close.
        let mut writing: HashSet<std::ffi::OsString> = HashSet::new();
        let mut syncs = SyncsInFlight::default();
        loop {
            let next = due.values().min().copied();
            tokio::select! {
                event = events.recv() => match event {
                    Some((change, path)) => {
                        if let (Some(task_type), Some(name)) = (task_type_of(&path), path.file_name()) {
                            match change {
                                Change::Written => {
                                    writing.insert(name.to_owned());
                                }
                                Change::Closed | Change::Replaced => {
                                    writing.remove(name);
                                }
                                Change::Touched => {}
                            }
                            due.insert(task_type, Instant::now() + this.debounce);
                        }
                    }
                    None => return,
                },
                _ = sleep_until(next) => {
                    let now = Instant::now();
                    let ready: Vec<String> = due.iter().filter(|(_, at)| **at <= now).map(|(t, _)| t.clone()).collect();
                    for task_type in ready {
                        due.remove(&task_type);
                        let being_written = ["wasm", "toml"].iter().any(|extension| {
                            writing.contains(std::ffi::OsStr::new(&format!("{task_type}.{extension}")))
                        });
                        if being_written {
                            tracing::debug!(task_type, "a plugin file is being written; it loads once closed");
                            continue;
                        }
                        syncs.request(&this, task_type);
                    }
                }
                Some(finished) = syncs.running.join_next_with_id(), if !syncs.running.is_empty() => {
                    let id = match finished {
                        Ok((id, ())) => id,
                        Err(error) => {
                            tracing::error!("a plugin load failed unexpectedly: {error}");
                            error.id()
                        }
                    };
                    syncs.finished(&this, id);
                }
                _ = this.shutdown.reached(Stage::Graceful) => return,
            }
        }
    }

    /// Brings one task type in line with the folder: load, replace, or unregister.
    pub async fn sync(&self, task_type: &str) {
        let wasm = self.folder.join(format!("{task_type}.wasm"));
        if !wasm.exists() {
            self.unregister(task_type, &wasm).await;
            return;
        }
        let current = self.registry.get(task_type);
        let loading = self.registry.mark_loading(task_type);
        let loaded = self
            .loader
            .load(&wasm, current.as_deref())
            .await
            .and_then(|plugin| {
                let version = plugin.version.clone();
                self.registry.insert(plugin).map(|()| version)
            });
        drop(loading);
        match loaded {
            Ok(version) => {
                let replaced = current.map(|old| old.version.clone());
                tracing::info!(
                    task_type,
                    version = %&version[..12],
                    replaced = replaced.as_deref().map(|v| &v[..12]).unwrap_or("none"),
                    "plugin loaded"
                );
            }
            // Removed while it was being read: that is a removal, not a broken file.
            Err(_) if !wasm.exists() => self.unregister(task_type, &wasm).await,
            // Its writer closing it brings another event, and the load then.
            Err(LoadError::BeingWritten { path }) => {
                tracing::debug!(task_type, "{} is still being written", path.display());
            }
            Err(error) => {
                tracing::error!("{error}; the previous version (if any) keeps serving");
                self.registry.record_error(task_type, error.to_string());
            }
        }
    }

    /// Unregisters a task type whose component is gone; its tasks wait.
    async fn unregister(&self, task_type: &str, wasm: &Path) {
        if self.registry.remove(task_type).is_some() {
            let pending = self
                .store
                .counts_by_type(&TaskSelection {
                    task_type: Some(task_type.to_string()),
                    ..TaskSelection::in_state(Status::Pending)
                })
                .await
                .ok()
                .and_then(|m| m.get(task_type).map(|c| c.pending))
                .unwrap_or(0);
            tracing::warn!(
                task_type,
                pending,
                "{} was removed: task type `{task_type}` is unregistered; its pending tasks stay pending until a plugin for it is added again",
                wasm.display()
            );
        }
    }
}

/// The syncs running now, one per task type at most, and the types changed again meanwhile.
#[derive(Default)]
struct SyncsInFlight {
    running: JoinSet<()>,
    busy: HashMap<tokio::task::Id, String>,
    again: HashSet<String>,
}

impl SyncsInFlight {
    /// Starts a sync of `task_type`, or queues one for when its current sync ends.
    fn request(&mut self, watcher: &Arc<FolderWatcher>, task_type: String) {
        if self.busy.values().any(|busy| *busy == task_type) {
            self.again.insert(task_type);
            return;
        }
        let (watcher, name) = (watcher.clone(), task_type.clone());
        let handle = self.running.spawn(async move { watcher.sync(&name).await });
        self.busy.insert(handle.id(), task_type);
    }

    /// Records that a sync ended; starts the queued one, if any.
    fn finished(&mut self, watcher: &Arc<FolderWatcher>, id: tokio::task::Id) {
        if let Some(task_type) = self.busy.remove(&id)
            && self.again.remove(&task_type)
        {
            self.request(watcher, task_type);
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_components_and_manifests_matter() {
        assert_eq!(
            task_type_of(Path::new("/p/report.wasm")).as_deref(),
            Some("report")
        );
        assert_eq!(
            task_type_of(Path::new("/p/report.toml")).as_deref(),
            Some("report")
        );
        assert_eq!(task_type_of(Path::new("/p/report.wasm.partial")), None);
        assert_eq!(task_type_of(Path::new("/p/.report.wasm.swp")), None);
        assert_eq!(task_type_of(Path::new("/p/notes.txt")), None);
        assert_eq!(task_type_of(Path::new("/p/bad name.wasm")), None);
    }
}
