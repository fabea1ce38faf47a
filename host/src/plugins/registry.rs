//! Task type → loaded plugin. Readers take a cheap snapshot (`Arc<Plugin>`), so a task keeps
//! the plugin it started with even if the entry is later replaced.
//!
//! A type comes from one of two sources: a file in this host's plugin folder, or a deployment
//! in the shared database (`plugins::deployed`), which every host serves alike. When both name
//! one type, the deployment serves and the folder's file is kept aside (shown as shadowed, and
//! serving again if the deployment is removed): a deploy is a decision for the whole fleet,
//! and a stale file on one host must not make that host run other code than its peers. A
//! deployed type may also have a candidate on trial, which [`Registry::pick`] hands a share of
//! the attempts.
//!
//! The registry also keeps task types apart on disk: a plugin whose folder grants overlap
//! another registered type's, where either grant is writable, is refused ([`Registry::insert`]).
//! The check and the registration happen under one lock, so two types loaded at once cannot
//! both slip past it.

use chrono::{DateTime, Utc};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use super::{LoadError, Policy};
use crate::sandbox::CompiledHandler;
use crate::sandbox::capabilities::GrantedDir;
use crate::sandbox::grants::overlaps;

/// One loaded task type.
pub struct Plugin {
    pub task_type: String,
    /// Hex SHA-256 of the component file: the plugin's version.
    pub version: String,
    /// The component file; for a deployed version, a name for it (`deployment:TYPE@N`).
    pub path: PathBuf,
    /// Where the build came from.
    pub source: Source,
    pub loaded_at: DateTime<Utc>,
    pub policy: Policy,
    pub handler: CompiledHandler,
}

/// Where a loaded build came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// A file in the plugin folder.
    Folder,
    /// Version `number` of the type's deployment in the shared database.
    Deployment { number: u64 },
}

/// A type served from the shared database: its stable version and the candidate on trial.
pub struct Deployed {
    /// The deployment's revision these builds were loaded for.
    pub revision: u64,
    pub stable: Arc<Plugin>,
    pub candidate: Option<Candidate>,
    /// When the candidate's trial began: the window its attempts (and the stable build's
    /// beside them) are counted in.
    pub canary_since: Option<DateTime<Utc>>,
}

/// A candidate version and the share of attempts it runs.
pub struct Candidate {
    pub plugin: Arc<Plugin>,
    /// In percent, 0 to 100.
    pub percent: u8,
}

/// The task types this host can run.
#[derive(Default)]
pub struct Registry {
    /// From the plugin folder.
    plugins: RwLock<HashMap<String, Arc<Plugin>>>,
    /// From the shared database; they take precedence over the folder's.
    deployed: RwLock<HashMap<String, Arc<Deployed>>>,
    /// The last load error per task type (file stem), for the operator to see.
    errors: RwLock<BTreeMap<String, String>>,
    /// Task types whose plugin was removed while serving, and when.
    removed: RwLock<BTreeMap<String, DateTime<Utc>>>,
    /// Task types whose files are being loaded (read, checked, compiled) now, and since when.
    loading: RwLock<BTreeMap<String, DateTime<Utc>>>,
}

/// Marks a task type as loading for as long as it lives (see [`Registry::loading`]).
pub struct LoadingMark<'a> {
    registry: &'a Registry,
    task_type: String,
}

impl Drop for LoadingMark<'_> {
    fn drop(&mut self) {
        self.registry
            .loading
            .write()
            .expect("registry lock")
            .remove(&self.task_type);
    }
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Registry::default()
    }

    /// Registers or replaces a plugin and clears its load error, unless one of its folder
    /// grants overlaps a grant of another registered type where either of the two is writable:
    /// then nothing changes (a version already registered keeps serving) and the error, a
    /// manifest error naming the other type, is returned for the caller to record.
    pub fn insert(&self, plugin: Plugin) -> Result<(), LoadError> {
        let name = plugin.task_type.clone();
        let mut plugins = self.plugins.write().expect("registry lock");
        let deployed = self.deployed.read().expect("registry lock");
        let others = served_grants(&plugins, &deployed);
        let others = others
            .iter()
            .map(|(name, dirs)| (name.as_str(), dirs.as_slice()));
        if let Some(message) = grant_conflict(&name, &plugin.policy.capabilities.dirs, others) {
            return Err(LoadError::Manifest {
                path: plugin.path.with_extension("toml"),
                message,
            });
        }
        self.errors.write().expect("registry lock").remove(&name);
        self.removed.write().expect("registry lock").remove(&name);
        crate::instruments::plugin_loaded(&name);
        plugins.insert(name, Arc::new(plugin));
        Ok(())
    }

    /// Unregisters a task type's folder file (it was removed); returns the plugin it had. A
    /// deployment of the type keeps serving it.
    pub fn remove(&self, task_type: &str) -> Option<Arc<Plugin>> {
        self.errors
            .write()
            .expect("registry lock")
            .remove(task_type);
        let removed = self
            .plugins
            .write()
            .expect("registry lock")
            .remove(task_type);
        let deployed = self
            .deployed
            .read()
            .expect("registry lock")
            .contains_key(task_type);
        if removed.is_some() && !deployed {
            self.removed
                .write()
                .expect("registry lock")
                .insert(task_type.to_string(), Utc::now());
        }
        removed
    }

    /// Task types removed while serving, with the time of removal.
    pub fn removed(&self) -> BTreeMap<String, DateTime<Utc>> {
        self.removed.read().expect("registry lock").clone()
    }

    /// Records that loading a plugin failed; a version already registered keeps serving.
    pub fn record_error(&self, task_type: &str, error: String) {
        crate::instruments::plugin_load_failed(task_type);
        self.errors
            .write()
            .expect("registry lock")
            .insert(task_type.to_string(), error);
    }

    /// Installs or replaces what a deployment serves for its type, unless one of the builds'
    /// folder grants overlaps another served type's where either is writable (see
    /// [`Registry::insert`]); then the type keeps what it served.
    pub fn install_deployed(&self, deployed: Deployed) -> Result<(), LoadError> {
        let name = deployed.stable.task_type.clone();
        let plugins = self.plugins.read().expect("registry lock");
        let mut served = self.deployed.write().expect("registry lock");
        let others = served_grants(&plugins, &served);
        let builds = std::iter::once(&deployed.stable).chain(
            deployed
                .candidate
                .as_ref()
                .map(|candidate| &candidate.plugin),
        );
        for build in builds {
            let others = others
                .iter()
                .map(|(name, dirs)| (name.as_str(), dirs.as_slice()));
            if let Some(message) = grant_conflict(&name, &build.policy.capabilities.dirs, others) {
                return Err(LoadError::Manifest {
                    path: build.path.clone(),
                    message,
                });
            }
        }
        self.errors.write().expect("registry lock").remove(&name);
        self.removed.write().expect("registry lock").remove(&name);
        crate::instruments::plugin_loaded(&name);
        served.insert(name, Arc::new(deployed));
        Ok(())
    }

    /// Stops serving a type's deployment (it was removed); the folder's file for the type,
    /// if any, serves again. Returns what the deployment served.
    pub fn remove_deployed(&self, task_type: &str) -> Option<Arc<Deployed>> {
        let removed = self
            .deployed
            .write()
            .expect("registry lock")
            .remove(task_type);
        let folder = self.plugins.read().expect("registry lock");
        if removed.is_some() && !folder.contains_key(task_type) {
            self.removed
                .write()
                .expect("registry lock")
                .insert(task_type.to_string(), Utc::now());
        }
        removed
    }

    /// What the shared database deploys for a type, as this host loaded it.
    pub fn deployed(&self, task_type: &str) -> Option<Arc<Deployed>> {
        self.deployed
            .read()
            .expect("registry lock")
            .get(task_type)
            .cloned()
    }

    /// Every deployed type this host serves, with the revision it loaded.
    pub fn deployed_revisions(&self) -> BTreeMap<String, u64> {
        self.deployed
            .read()
            .expect("registry lock")
            .iter()
            .map(|(name, deployed)| (name.clone(), deployed.revision))
            .collect()
    }

    /// The plugin folder's build of a type, whether it serves or a deployment shadows it.
    pub fn folder_plugin(&self, task_type: &str) -> Option<Arc<Plugin>> {
        self.plugins
            .read()
            .expect("registry lock")
            .get(task_type)
            .cloned()
    }

    /// The plugin that serves a task type: its deployment's stable version, or else the
    /// folder's file.
    pub fn get(&self, task_type: &str) -> Option<Arc<Plugin>> {
        if let Some(deployed) = self.deployed.read().expect("registry lock").get(task_type) {
            return Some(deployed.stable.clone());
        }
        self.folder_plugin(task_type)
    }

    /// The build one attempt of `task_type` runs: the candidate on trial for its share of the
    /// attempts, when `may_run_candidate` (the caller passes false for an attempt whose
    /// failure would be final, so a trial never makes a dead letter), else what serves.
    pub fn pick(&self, task_type: &str, may_run_candidate: bool) -> Option<Arc<Plugin>> {
        if let Some(deployed) = self.deployed.read().expect("registry lock").get(task_type) {
            if let Some(candidate) = &deployed.candidate
                && may_run_candidate
                && rand::random_range(0..100u8) < candidate.percent
            {
                return Some(candidate.plugin.clone());
            }
            return Some(deployed.stable.clone());
        }
        self.folder_plugin(task_type)
    }

    /// The task types served, sorted.
    pub fn task_types(&self) -> Vec<String> {
        self.plugins()
            .into_iter()
            .map(|plugin| plugin.task_type.clone())
            .collect()
    }

    /// The plugin serving each type (see [`Registry::get`]), sorted by task type.
    pub fn plugins(&self) -> Vec<Arc<Plugin>> {
        let folder = self.plugins.read().expect("registry lock");
        let deployed = self.deployed.read().expect("registry lock");
        let mut plugins: Vec<Arc<Plugin>> = deployed
            .values()
            .map(|deployed| deployed.stable.clone())
            .chain(
                folder
                    .iter()
                    .filter(|(name, _)| !deployed.contains_key(*name))
                    .map(|(_, plugin)| plugin.clone()),
            )
            .collect();
        plugins.sort_by(|a, b| a.task_type.cmp(&b.task_type));
        plugins
    }

    /// Load errors by task type.
    pub fn errors(&self) -> BTreeMap<String, String> {
        self.errors.read().expect("registry lock").clone()
    }

    /// Marks `task_type` as loading from now until the mark is dropped, so the operator sees
    /// a slow compile in progress instead of stale state.
    pub fn mark_loading(&self, task_type: &str) -> LoadingMark<'_> {
        self.loading
            .write()
            .expect("registry lock")
            .insert(task_type.to_string(), Utc::now());
        LoadingMark {
            registry: self,
            task_type: task_type.to_string(),
        }
    }

    /// Task types being loaded now, with the time each load started.
    pub fn loading(&self) -> BTreeMap<String, DateTime<Utc>> {
        self.loading.read().expect("registry lock").clone()
    }
}

/// The folder grants of every build served, by type: the folder's files a deployment does not
/// shadow, and every deployed stable and candidate build.
fn served_grants(
    folder: &HashMap<String, Arc<Plugin>>,
    deployed: &HashMap<String, Arc<Deployed>>,
) -> Vec<(String, Vec<GrantedDir>)> {
    let grants = |plugin: &Plugin| {
        (
            plugin.task_type.clone(),
            plugin.policy.capabilities.dirs.clone(),
        )
    };
    folder
        .values()
        .filter(|plugin| !deployed.contains_key(&plugin.task_type))
        .map(|plugin| grants(plugin))
        .chain(deployed.values().flat_map(|deployed| {
            std::iter::once(grants(&deployed.stable)).chain(
                deployed
                    .candidate
                    .as_ref()
                    .map(|candidate| grants(&candidate.plugin)),
            )
        }))
        .collect()
}

/// The first folder grant of type `task_type` that overlaps a grant of another type among
/// `others` (task type, grants) where either is writable, described for the operator.
fn grant_conflict<'a>(
    task_type: &str,
    dirs: &[GrantedDir],
    others: impl Iterator<Item = (&'a str, &'a [GrantedDir])>,
) -> Option<String> {
    let others: Vec<(&str, &[GrantedDir])> =
        others.filter(|(other, _)| *other != task_type).collect();
    for (i, mine) in dirs.iter().enumerate() {
        for (other, their_dirs) in &others {
            for (j, theirs) in their_dirs.iter().enumerate() {
                if !(mine.writable || theirs.writable) || !overlaps(&mine.host, &theirs.host) {
                    continue;
                }
                let access = |writable: bool| if writable { "writable" } else { "read-only" };
                return Some(format!(
                    "dirs[{i}].host = {:?} ({}) overlaps task type `{}`'s {} grant dirs[{j}].host = {:?}: a folder \
                     one type may write is granted to no other type; give each type its own folder beneath the grants root",
                    mine.host,
                    access(mine.writable),
                    other,
                    access(theirs.writable),
                    theirs.host,
                ));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::grants::GrantsRoot;

    #[test]
    fn a_loading_mark_lasts_as_long_as_the_load() {
        let registry = Registry::new();
        let mark = registry.mark_loading("report");
        assert!(registry.loading().contains_key("report"));
        drop(mark);
        assert!(registry.loading().is_empty());
    }

    #[test]
    fn a_writable_grant_is_shared_with_no_other_type() {
        let dir = tempfile::tempdir().unwrap();
        let root = Arc::new(GrantsRoot::open(dir.path()).unwrap());
        let grant = |host: &str, writable: bool| GrantedDir {
            host: host.into(),
            guest: "/g".into(),
            writable,
            root: root.clone(),
        };
        let writer = vec![grant("shared", true)];
        let reader = vec![grant("reference", false), grant("shared/in", false)];
        let other_reader = vec![grant("reference", false)];
        let neighbour = vec![grant("shared-too", true)];
        let loaded = [
            ("writer", writer.as_slice()),
            ("reader", other_reader.as_slice()),
        ];

        let conflict = grant_conflict("reader", &reader, loaded.iter().copied()).unwrap();
        assert!(conflict.starts_with("dirs[1].host = \"shared/in\" (read-only) overlaps task type `writer`'s writable grant dirs[0].host = \"shared\""), "{conflict}");
        let conflict = grant_conflict(
            "late-writer",
            &[grant("shared/in/x", true)],
            loaded.iter().copied(),
        )
        .unwrap();
        assert!(conflict.contains("`writer`"), "{conflict}");
        let conflict =
            grant_conflict("w2", &[grant("reference", true)], loaded.iter().copied()).unwrap();
        assert!(
            conflict.contains("(writable) overlaps task type `reader`'s read-only grant"),
            "{conflict}"
        );

        assert_eq!(
            grant_conflict("reader2", &other_reader, loaded.iter().copied()),
            None,
            "read-only grants may be shared"
        );
        assert_eq!(
            grant_conflict("neighbour", &neighbour, loaded.iter().copied()),
            None,
            "overlap is by whole names"
        );
        assert_eq!(
            grant_conflict("writer", &writer, loaded.iter().copied()),
            None,
            "a type does not conflict with itself"
        );
    }
}
