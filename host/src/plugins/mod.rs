//! The plugin folder: which task types exist and which compiled handler serves each.
//!
//! `report.wasm` in the folder registers task type `report`; an optional `report.toml` beside
//! it (the [`manifest`]) sets that type's [`policy`] over the host's defaults. The [`registry`] maps task types to loaded
//! plugins; the [`loader`] reads and compiles files; the [`watcher`] keeps the registry in step
//! with the folder while the host serves; [`deployed`] does the same for the builds deployed
//! through the shared database, which every host serves alike.

pub mod deployed;
pub mod loader;
pub mod manifest;
pub mod policy;
pub mod registry;
pub mod rollout;
pub mod tally;
pub mod watcher;

pub use loader::{LoadError, PluginLoader};
pub use manifest::Manifest;
pub use policy::{Defaults, Policy};
pub use registry::{Plugin, Registry};
