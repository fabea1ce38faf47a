//! Task type → loaded plugin. Readers take a cheap snapshot (`Arc<Plugin>`), so a task keeps
//! the plugin it started with even if the entry is later replaced.

use chrono::{DateTime, Utc};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use super::Policy;
use crate::sandbox::CompiledHandler;

/// One loaded task type.
pub struct Plugin {
    pub task_type: String,
    /// Hex SHA-256 of the component file: the plugin's version.
    pub version: String,
    pub path: PathBuf,
    pub loaded_at: DateTime<Utc>,
    pub policy: Policy,
    pub handler: CompiledHandler,
}

/// The task types this host can run.
#[derive(Default)]
pub struct Registry {
    plugins: RwLock<HashMap<String, Arc<Plugin>>>,
    /// The last load error per task type (file stem), for the operator to see.
    errors: RwLock<BTreeMap<String, String>>,
    /// Task types whose plugin was removed while serving, and when.
    removed: RwLock<BTreeMap<String, DateTime<Utc>>>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Registry::default()
    }

    /// Registers or replaces a plugin and clears its load error.
    pub fn insert(&self, plugin: Plugin) {
        let name = plugin.task_type.clone();
        self.errors.write().expect("registry lock").remove(&name);
        self.removed.write().expect("registry lock").remove(&name);
        self.plugins.write().expect("registry lock").insert(name, Arc::new(plugin));
    }

    /// Unregisters a task type (its file was removed); returns the plugin it had.
    pub fn remove(&self, task_type: &str) -> Option<Arc<Plugin>> {
        self.errors.write().expect("registry lock").remove(task_type);
        let removed = self.plugins.write().expect("registry lock").remove(task_type);
        if removed.is_some() {
            self.removed.write().expect("registry lock").insert(task_type.to_string(), Utc::now());
        }
        removed
    }

    /// Task types removed while serving, with the time of removal.
    pub fn removed(&self) -> BTreeMap<String, DateTime<Utc>> {
        self.removed.read().expect("registry lock").clone()
    }

    /// Records that loading a plugin failed; a version already registered keeps serving.
    pub fn record_error(&self, task_type: &str, error: String) {
        self.errors.write().expect("registry lock").insert(task_type.to_string(), error);
    }

    /// The plugin for a task type.
    pub fn get(&self, task_type: &str) -> Option<Arc<Plugin>> {
        self.plugins.read().expect("registry lock").get(task_type).cloned()
    }

    /// The registered task types, sorted.
    pub fn task_types(&self) -> Vec<String> {
        let mut names: Vec<String> =
            self.plugins.read().expect("registry lock").keys().cloned().collect();
        names.sort();
        names
    }

    /// Every registered plugin, sorted by task type.
    pub fn plugins(&self) -> Vec<Arc<Plugin>> {
        let mut plugins: Vec<Arc<Plugin>> =
            self.plugins.read().expect("registry lock").values().cloned().collect();
        plugins.sort_by(|a, b| a.task_type.cmp(&b.task_type));
        plugins
    }

    /// Load errors by task type.
    pub fn errors(&self) -> BTreeMap<String, String> {
        self.errors.read().expect("registry lock").clone()
    }
}
