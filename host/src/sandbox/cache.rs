//! The compiled-code cache: components compiled once, kept on disk by content hash, so a
//! restart or the re-deploy of a build seen before loads in milliseconds instead of compiling.
//!
//! Safety rules, because loading compiled code means running it:
//! - only artifacts Spool wrote itself are ever loaded, from a folder Spool owns (never the
//!   user's plugin folder);
//! - an artifact is written under a temporary name and renamed into place, so it is complete
//!   or absent, and it is never modified afterwards (it is memory-mapped while in use);
//! - artifacts live under a subfolder named after the engine's compatibility hash (wasmtime
//!   version and settings), so a new build of Spool never loads an old build's code;
//! - an artifact that fails to load is deleted and the component compiled afresh.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use wasmtime::component::Component;
use wasmtime::{Engine, Module};

/// What can be cached: components, and core modules (plain WASI preview1 programs).
pub trait Artifact: Sized {
    /// File extension of the cached artifact.
    const EXTENSION: &'static str;
    fn compile(engine: &Engine, bytes: &[u8]) -> wasmtime::Result<Self>;
    fn serialize(&self) -> wasmtime::Result<Vec<u8>>;
    /// # Safety
    /// `path` must hold bytes this cache wrote with [`Artifact::serialize`].
    unsafe fn deserialize_file(engine: &Engine, path: &Path) -> wasmtime::Result<Self>;
}

impl Artifact for Component {
    const EXTENSION: &'static str = "cwasm";
    fn compile(engine: &Engine, bytes: &[u8]) -> wasmtime::Result<Self> {
        Component::new(engine, bytes)
    }
    fn serialize(&self) -> wasmtime::Result<Vec<u8>> {
        Component::serialize(self)
    }
    unsafe fn deserialize_file(engine: &Engine, path: &Path) -> wasmtime::Result<Self> {
        // SAFETY: forwarded from the caller.
        unsafe { Component::deserialize_file(engine, path) }
    }
}

impl Artifact for Module {
    const EXTENSION: &'static str = "cwasm-module";
    fn compile(engine: &Engine, bytes: &[u8]) -> wasmtime::Result<Self> {
        Module::new(engine, bytes)
    }
    fn serialize(&self) -> wasmtime::Result<Vec<u8>> {
        Module::serialize(self)
    }
    unsafe fn deserialize_file(engine: &Engine, path: &Path) -> wasmtime::Result<Self> {
        // SAFETY: forwarded from the caller.
        unsafe { Module::deserialize_file(engine, path) }
    }
}

/// Where compiled components of one engine configuration live.
#[derive(Debug, Clone)]
pub struct ArtifactCache {
    dir: PathBuf,
}

/// Whether a component came from the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheUse {
    /// Loaded from a cached artifact.
    Hit,
    /// Compiled (and, if possible, stored for next time).
    Compiled,
    /// Compiled; no cache is configured.
    Off,
}

impl ArtifactCache {
    /// The cache for `engine` under `root`.
    pub fn new(root: &Path, engine: &Engine) -> Self {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        ArtifactCache { dir: root.join(format!("{:016x}", hasher.finish())) }
    }

    /// Loads the artifact with content hash `version`, compiling and storing it on a miss.
    pub fn load_or_compile<A: Artifact>(
        &self,
        engine: &Engine,
        version: &str,
        bytes: &[u8],
    ) -> wasmtime::Result<(A, CacheUse)> {
        let path = self.dir.join(format!("{version}.{}", A::EXTENSION));
        if path.exists() {
            // SAFETY: the file was written by `store` below, in a folder only Spool writes,
            // renamed into place complete and never modified afterwards; wasmtime checks that
            // it was produced by a compatible engine.
            match unsafe { A::deserialize_file(engine, &path) } {
                Ok(component) => return Ok((component, CacheUse::Hit)),
                Err(error) => {
                    tracing::warn!("cached artifact {} is unusable ({error:#}); compiling again", path.display());
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
        let artifact = A::compile(engine, bytes)?;
        if let Err(error) = self.store(&artifact, &path) {
            tracing::warn!("could not cache the compiled plugin in {}: {error}", self.dir.display());
        }
        Ok((artifact, CacheUse::Compiled))
    }

    fn store<A: Artifact>(&self, artifact: &A, path: &Path) -> std::io::Result<()> {
        let serialized = artifact.serialize().map_err(std::io::Error::other)?;
        std::fs::create_dir_all(&self.dir)?;
        let partial = path.with_extension(format!("partial-{}-{:x}", std::process::id(), rand::random::<u32>()));
        std::fs::write(&partial, serialized)?;
        std::fs::rename(&partial, path)
    }
}
