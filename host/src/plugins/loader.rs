//! Reads plugin files and compiles them into [`Plugin`]s for the registry.

use chrono::Utc;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{Manifest, Plugin, Registry};
use crate::config::Defaults;
use crate::sandbox::grants::GrantsRoot;
use crate::sandbox::{ArtifactCache, CacheUse, Sandbox};

/// Why one plugin file could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{path}: cannot read: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{path}: the file name must be a task type name (letters, digits, `_` or `-`, at most 64 characters) followed by .wasm"
    )]
    BadName { path: PathBuf },
    #[error("{path}: {source}")]
    Compile {
        path: PathBuf,
        source: crate::sandbox::CompileError,
    },
    #[error("{path}: invalid manifest: {message}")]
    Manifest { path: PathBuf, message: String },
    #[error(
        "plugin folder {path} cannot be read: {source}; create it or point --plugins at the folder with your .wasm files"
    )]
    Folder {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Whether `name` is usable as a task type (and so as a file stem).
pub fn is_valid_task_type(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Loads plugins: reads the component and its manifest, hashes, compiles (through the cache).
pub struct PluginLoader {
    pub sandbox: Sandbox,
    pub defaults: Defaults,
    /// The plugin folder.
    pub folder: PathBuf,
    pub cache: Option<ArtifactCache>,
    /// The grants root, opened at start; manifests' folder grants are resolved beneath it.
    pub grants: Arc<GrantsRoot>,
}

impl PluginLoader {
    /// Loads every `*.wasm` in the folder into `registry`, in name order. A file that fails to
    /// load (or whose grants overlap a type loaded before it) is logged and recorded in the
    /// registry's errors; the others still load. Returns the failures.
    pub async fn load_folder(&self, registry: &Registry) -> Result<Vec<LoadError>, LoadError> {
        let entries = std::fs::read_dir(&self.folder).map_err(|source| LoadError::Folder {
            path: self.folder.clone(),
            source,
        })?;
        let mut paths: Vec<PathBuf> = entries
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|path| path.extension().is_some_and(|ext| ext == "wasm") && path.is_file())
            .collect();
        paths.sort();
        let mut failures = Vec::new();
        for path in paths {
            let stem = path
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or_default()
                .to_string();
            match self
                .load(&path, None)
                .await
                .and_then(|plugin| registry.insert(plugin))
            {
                Ok(()) => {}
                Err(error) => {
                    tracing::error!("{error}");
                    registry.record_error(&stem, error.to_string());
                    failures.push(error);
                }
            }
        }
        Ok(failures)
    }

    /// Reads, hashes and compiles one component plus its manifest. When `current` is the same
    /// build (a manifest-only change), its compiled handler is reused.
    pub async fn load(&self, path: &Path, current: Option<&Plugin>) -> Result<Plugin, LoadError> {
        let task_type = path
            .file_stem()
            .and_then(|s| s.to_str())
            .filter(|name| is_valid_task_type(name))
            .ok_or_else(|| LoadError::BadName {
                path: path.to_path_buf(),
            })?
            .to_string();
        let bytes = tokio::fs::read(path)
            .await
            .map_err(|source| LoadError::Read {
                path: path.to_path_buf(),
                source,
            })?;
        let manifest_path = path.with_extension("toml");
        let manifest = match tokio::fs::read_to_string(&manifest_path).await {
            Ok(text) => Manifest::parse(&text).map_err(|message| LoadError::Manifest {
                path: manifest_path.clone(),
                message,
            })?,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Manifest::default(),
            Err(source) => {
                return Err(LoadError::Read {
                    path: manifest_path,
                    source,
                });
            }
        };
        let policy = manifest
            .resolve(&self.defaults, &self.grants)
            .map_err(|message| LoadError::Manifest {
                path: manifest_path.clone(),
                message,
            })?;
        let version = hex::encode(Sha256::digest(&bytes));
        let started = std::time::Instant::now();
        let (handler, cache_use) = match current.filter(|plugin| plugin.version == version) {
            Some(same) => (same.handler.clone(), CacheUse::Hit),
            None => {
                let (sandbox, cache, hash) =
                    (self.sandbox.clone(), self.cache.clone(), version.clone());
                tokio::task::spawn_blocking(move || sandbox.compile(&bytes, &hash, cache.as_ref()))
                    .await
                    .expect("compile task panicked")
                    .map_err(|source| LoadError::Compile {
                        path: path.to_path_buf(),
                        source,
                    })?
            }
        };
        tracing::info!(
            task_type = %task_type,
            version = %&version[..12],
            cache = ?cache_use,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "loaded plugin {}", path.display()
        );
        Ok(Plugin {
            task_type,
            version,
            path: path.to_path_buf(),
            loaded_at: Utc::now(),
            policy,
            handler,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_type_names() {
        assert!(is_valid_task_type("report"));
        assert!(is_valid_task_type("send-email_v2"));
        assert!(!is_valid_task_type(""));
        assert!(!is_valid_task_type("has space"));
        assert!(!is_valid_task_type("dots.not.allowed"));
        assert!(!is_valid_task_type(&"x".repeat(65)));
    }
}
