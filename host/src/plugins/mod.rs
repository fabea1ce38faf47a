//! The plugin folder: which task types exist and which compiled handler serves each.
//!
//! `report.wasm` in the folder registers task type `report`; an optional `report.toml` beside
//! it (the [`manifest`]) sets that type's policy. The [`registry`] maps task types to loaded
//! plugins; the [`loader`] reads the folder and compiles what it finds.

pub mod loader;
pub mod manifest;
pub mod registry;

pub use loader::{load_folder, LoadError};
pub use manifest::{Manifest, Policy};
pub use registry::{Plugin, Registry};
