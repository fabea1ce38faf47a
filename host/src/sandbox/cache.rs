//! The compiled-code cache: components compiled once, kept on disk by content hash, so a
//! restart or the re-deploy of a build seen before loads in milliseconds instead of compiling.
//!
//! Loading a compiled artifact means running its machine code, so the host loads only artifacts
//! it can prove it wrote itself:
//! - every artifact carries an HMAC-SHA256 tag over its name and bytes, keyed with a secret
//!   that only the host knows ([`CacheKey`], kept in the task database, which no guest can
//!   reach: folder grants never overlap the database or this cache). A file planted or altered
//!   by anyone without the key fails verification, is deleted, and the component is compiled
//!   afresh from its source;
//! - the file is read into memory once, verified, and deserialized from that same memory, so
//!   it cannot be swapped between the check and the load; it is opened without following
//!   symlinks and must be a regular file;
//! - an artifact is written under a temporary name and renamed into place, so it is complete
//!   or absent;
//! - artifacts live under a subfolder named after the engine's compatibility hash (wasmtime
//!   version and settings), so a new build of Spool never loads an old build's code.
//!
//! Hosts that share a database share the key, so an artifact one host compiled verifies on
//! every other: [`ArtifactCache::exported`] hands a cached file (tag included) to be stored in
//! the database, and [`ArtifactCache::import`] installs one read from there, after checking its
//! tag and that it was made by the same engine configuration, so a fleet compiles each
//! deployed build once.
//!
//! HMAC with a host-local key rather than a plain hash list: a hash list would itself be a
//! file an intruder could rewrite, while a tag cannot be forged without the key. `hmac` and
//! `sha2` are the RustCrypto implementations, the ones the ecosystem audits and relies on.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::hash::{Hash, Hasher};
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use wasmtime::component::Component;
use wasmtime::{Engine, Module};

/// Bytes of the authentication tag appended to every artifact.
const TAG_BYTES: usize = 32;

/// The secret that authenticates cached artifacts.
#[derive(Clone)]
pub struct CacheKey([u8; 32]);

impl CacheKey {
    /// A key from its hex form (64 hex digits), as the host keeps it.
    pub fn from_hex(hex_key: &str) -> Option<CacheKey> {
        let bytes = hex::decode(hex_key.trim()).ok()?;
        Some(CacheKey(bytes.try_into().ok()?))
    }

    /// A new random key, in hex.
    pub fn generate_hex() -> String {
        hex::encode(rand::random::<[u8; 32]>())
    }

    /// A random key known to nobody: artifacts stored with it are usable only by this process.
    pub fn ephemeral() -> CacheKey {
        CacheKey(rand::random())
    }

    fn tag(&self, name: &str, bytes: &[u8]) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes any key length");
        mac.update(&(name.len() as u64).to_le_bytes());
        mac.update(name.as_bytes());
        mac.update(bytes);
        mac
    }
}

impl std::fmt::Debug for CacheKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CacheKey(..)")
    }
}

/// What can be cached: components, and core modules (plain WASI preview1 programs).
pub trait Artifact: Sized {
    /// File extension of the cached artifact.
    const EXTENSION: &'static str;
    fn compile(engine: &Engine, bytes: &[u8]) -> wasmtime::Result<Self>;
    fn serialize(&self) -> wasmtime::Result<Vec<u8>>;
    /// # Safety
    /// `bytes` must be what [`Artifact::serialize`] produced with a compatible engine.
    unsafe fn deserialize(engine: &Engine, bytes: &[u8]) -> wasmtime::Result<Self>;
}

impl Artifact for Component {
    const EXTENSION: &'static str = "cwasm";
    fn compile(engine: &Engine, bytes: &[u8]) -> wasmtime::Result<Self> {
        Component::new(engine, bytes)
    }
    fn serialize(&self) -> wasmtime::Result<Vec<u8>> {
        Component::serialize(self)
    }
    unsafe fn deserialize(engine: &Engine, bytes: &[u8]) -> wasmtime::Result<Self> {
        // SAFETY: forwarded from the caller.
        unsafe { Component::deserialize(engine, bytes) }
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
    unsafe fn deserialize(engine: &Engine, bytes: &[u8]) -> wasmtime::Result<Self> {
        // SAFETY: forwarded from the caller.
        unsafe { Module::deserialize(engine, bytes) }
    }
}

/// Where compiled components of one engine configuration live.
#[derive(Debug, Clone)]
pub struct ArtifactCache {
    dir: PathBuf,
    key: CacheKey,
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

/// Why a cached file was not loaded.
#[derive(Debug, thiserror::Error)]
enum Refused {
    #[error("cannot read it: {0}")]
    Io(#[from] std::io::Error),
    #[error("it is not a regular file")]
    NotAFile,
    #[error("its authentication tag does not match: it was not written by this host")]
    Forged,
    #[error("it does not deserialize: {0:#}")]
    Unusable(wasmtime::Error),
}

impl ArtifactCache {
    /// The cache for `engine` under `root`, authenticated with `key`.
    pub fn new(root: &Path, engine: &Engine, key: CacheKey) -> Self {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        ArtifactCache {
            dir: root.join(format!("{:016x}", hasher.finish())),
            key,
        }
    }

    /// The name the artifact of `bytes` (content hash `version`) goes by among hosts:
    /// `ENGINE/VERSION.EXT`, where ENGINE names the engine configuration that compiled it.
    pub fn shared_name(&self, version: &str, bytes: &[u8]) -> String {
        let extension = if super::command::is_core_module(bytes) {
            <Module as Artifact>::EXTENSION
        } else {
            <Component as Artifact>::EXTENSION
        };
        format!("{}/{version}.{extension}", self.engine_name())
    }

    fn engine_name(&self) -> String {
        self.dir
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    /// Where this host keeps the file of a shared name, if the name is of its engine.
    fn local_path(&self, shared_name: &str) -> Option<PathBuf> {
        let (engine, name) = shared_name.split_once('/')?;
        (engine == self.engine_name() && !name.contains('/')).then(|| self.dir.join(name))
    }

    /// Whether this host has the file of a shared name (without reading it).
    pub fn has(&self, shared_name: &str) -> bool {
        self.local_path(shared_name)
            .is_some_and(|path| std::fs::symlink_metadata(path).is_ok_and(|m| m.is_file()))
    }

    /// The cached file (artifact and tag) of a shared name, if this host has it.
    pub fn exported(&self, shared_name: &str) -> Option<Vec<u8>> {
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(self.local_path(shared_name)?)
            .ok()?;
        let mut contents = Vec::new();
        file.read_to_end(&mut contents).ok()?;
        Some(contents)
    }

    /// Installs a file another host exported, once its tag verifies under this host's key and
    /// its name is of this engine configuration; then [`ArtifactCache::load_or_compile`] loads
    /// it instead of compiling. Refused (and nothing written) otherwise.
    pub fn import(&self, shared_name: &str, contents: &[u8]) -> Result<(), String> {
        let (engine, name) = shared_name
            .split_once('/')
            .filter(|(_, name)| !name.contains('/') && !name.starts_with('.'))
            .ok_or_else(|| format!("`{shared_name}` is not an artifact name"))?;
        if engine != self.engine_name() {
            return Err(format!(
                "`{shared_name}` was compiled by another engine configuration"
            ));
        }
        if contents.len() < TAG_BYTES {
            return Err(format!("`{shared_name}` is too short to carry a tag"));
        }
        let (artifact, tag) = contents.split_at(contents.len() - TAG_BYTES);
        self.key
            .tag(name, artifact)
            .verify_slice(tag)
            .map_err(|_| format!("`{shared_name}`: {}", Refused::Forged))?;
        std::fs::create_dir_all(&self.dir).map_err(|e| e.to_string())?;
        let path = self.dir.join(name);
        write_whole(&path, contents).map_err(|e| e.to_string())
    }

    /// Loads the artifact with content hash `version`, compiling and storing it on a miss or
    /// when the cached file cannot be proven to be this host's own.
    pub fn load_or_compile<A: Artifact>(
        &self,
        engine: &Engine,
        version: &str,
        bytes: &[u8],
    ) -> wasmtime::Result<(A, CacheUse)> {
        let name = format!("{version}.{}", A::EXTENSION);
        let path = self.dir.join(&name);
        if std::fs::symlink_metadata(&path).is_ok() {
            match self.load::<A>(engine, &name, &path) {
                Ok(artifact) => return Ok((artifact, CacheUse::Hit)),
                Err(refused) => {
                    tracing::warn!(
                        "not loading cached artifact {}: {refused}; compiling again",
                        path.display()
                    );
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
        let artifact = A::compile(engine, bytes)?;
        if let Err(error) = self.store(&artifact, &name, &path) {
            tracing::warn!(
                "could not cache the compiled plugin in {}: {error}",
                self.dir.display()
            );
        }
        Ok((artifact, CacheUse::Compiled))
    }

    fn load<A: Artifact>(&self, engine: &Engine, name: &str, path: &Path) -> Result<A, Refused> {
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)?;
        if !file.metadata()?.is_file() {
            return Err(Refused::NotAFile);
        }
        let mut contents = Vec::new();
        file.read_to_end(&mut contents)?;
        if contents.len() < TAG_BYTES {
            return Err(Refused::Forged);
        }
        let (artifact, tag) = contents.split_at(contents.len() - TAG_BYTES);
        self.key
            .tag(name, artifact)
            .verify_slice(tag)
            .map_err(|_| Refused::Forged)?;
        // SAFETY: the bytes carry a valid tag under the host's secret key, so this host wrote
        // them with `Artifact::serialize`; they are deserialized from the memory that was
        // verified, and wasmtime checks that a compatible engine produced them.
        unsafe { A::deserialize(engine, artifact) }.map_err(Refused::Unusable)
    }

    fn store<A: Artifact>(&self, artifact: &A, name: &str, path: &Path) -> std::io::Result<()> {
        let mut serialized = artifact.serialize().map_err(std::io::Error::other)?;
        let tag = self.key.tag(name, &serialized).finalize().into_bytes();
        serialized.extend_from_slice(&tag);
        std::fs::create_dir_all(&self.dir)?;
        write_whole(path, &serialized)
    }
}

/// Writes `contents` to `path` under a temporary name and renames it into place, so the file
/// is whole or absent.
fn write_whole(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    let partial = path.with_extension(format!(
        "partial-{}-{:x}",
        std::process::id(),
        rand::random::<u32>()
    ));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&partial)
        .and_then(|mut file| std::io::Write::write_all(&mut file, contents))?;
    std::fs::rename(&partial, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine() -> Engine {
        Engine::default()
    }

    #[test]
    fn a_stored_artifact_loads_and_a_tampered_one_is_recompiled() {
        let dir = tempfile::tempdir().unwrap();
        let engine = engine();
        let key = CacheKey::ephemeral();
        let cache = ArtifactCache::new(dir.path(), &engine, key.clone());
        let wasm = wat_bytes();
        let (_, first) = cache
            .load_or_compile::<Module>(&engine, "v1", &wasm)
            .unwrap();
        let (_, second) = cache
            .load_or_compile::<Module>(&engine, "v1", &wasm)
            .unwrap();
        assert_eq!((first, second), (CacheUse::Compiled, CacheUse::Hit));

        // Flip one byte of the machine code: the tag no longer matches.
        let path = cache.dir.join("v1.cwasm-module");
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[100] ^= 0xff;
        std::fs::write(&path, &bytes).unwrap();
        let (_, after_tamper) = cache
            .load_or_compile::<Module>(&engine, "v1", &wasm)
            .unwrap();
        assert_eq!(after_tamper, CacheUse::Compiled);
        assert_eq!(
            cache
                .load_or_compile::<Module>(&engine, "v1", &wasm)
                .unwrap()
                .1,
            CacheUse::Hit
        );
    }

    #[test]
    fn an_exported_artifact_imports_on_a_host_with_the_same_key_only() {
        let engine = engine();
        let key = CacheKey::ephemeral();
        let wasm = wat_bytes();
        let (first, second, stranger) = (
            tempfile::tempdir().unwrap(),
            tempfile::tempdir().unwrap(),
            tempfile::tempdir().unwrap(),
        );
        let here = ArtifactCache::new(first.path(), &engine, key.clone());
        here.load_or_compile::<Module>(&engine, "v1", &wasm)
            .unwrap();
        let name = here.shared_name("v1", &wasm);
        assert!(name.ends_with("/v1.cwasm-module"), "{name}");
        assert!(here.has(&name));
        let file = here.exported(&name).unwrap();

        let there = ArtifactCache::new(second.path(), &engine, key.clone());
        there.import(&name, &file).unwrap();
        let (_, used) = there
            .load_or_compile::<Module>(&engine, "v1", &wasm)
            .unwrap();
        assert_eq!(used, CacheUse::Hit, "loaded, not compiled");

        // Another key, an altered file, another engine's name or a path: refused, nothing written.
        let other = ArtifactCache::new(stranger.path(), &engine, CacheKey::ephemeral());
        assert!(
            other
                .import(&name, &file)
                .unwrap_err()
                .contains("not written by this host")
        );
        let mut altered = file.clone();
        altered[64] ^= 1;
        assert!(there.import(&name, &altered).is_err());
        assert!(
            there
                .import("0000000000000000/v1.cwasm-module", &file)
                .is_err()
        );
        assert!(there.import(&format!("{name}/../x"), &file).is_err());
        assert!(
            !stranger
                .path()
                .join(name.split('/').next().unwrap())
                .join("v1.cwasm-module")
                .exists()
        );
        assert_eq!(here.exported("elsewhere/v1.cwasm-module"), None);
        assert!(!here.has("elsewhere/v1.cwasm-module"));
    }

    #[test]
    fn another_key_or_another_name_does_not_verify() {
        let dir = tempfile::tempdir().unwrap();
        let engine = engine();
        let wasm = wat_bytes();
        let mine = ArtifactCache::new(dir.path(), &engine, CacheKey::ephemeral());
        mine.load_or_compile::<Module>(&engine, "v1", &wasm)
            .unwrap();
        // An artifact written with a key the host does not hold (an attacker's) is refused.
        let theirs = ArtifactCache::new(dir.path(), &engine, CacheKey::ephemeral());
        assert_eq!(
            theirs
                .load_or_compile::<Module>(&engine, "v1", &wasm)
                .unwrap()
                .1,
            CacheUse::Compiled
        );
        // A valid artifact copied under another version's name is refused too.
        std::fs::copy(
            theirs.dir.join("v1.cwasm-module"),
            theirs.dir.join("v2.cwasm-module"),
        )
        .unwrap();
        assert_eq!(
            theirs
                .load_or_compile::<Module>(&engine, "v2", &wasm)
                .unwrap()
                .1,
            CacheUse::Compiled
        );
    }

    #[test]
    fn a_symlink_in_the_cache_is_never_followed() {
        let dir = tempfile::tempdir().unwrap();
        let engine = engine();
        let cache = ArtifactCache::new(dir.path(), &engine, CacheKey::ephemeral());
        let wasm = wat_bytes();
        cache
            .load_or_compile::<Module>(&engine, "v1", &wasm)
            .unwrap();
        let elsewhere = dir.path().join("elsewhere.bin");
        std::fs::rename(cache.dir.join("v1.cwasm-module"), &elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, cache.dir.join("v1.cwasm-module")).unwrap();
        assert_eq!(
            cache
                .load_or_compile::<Module>(&engine, "v1", &wasm)
                .unwrap()
                .1,
            CacheUse::Compiled
        );
        assert!(
            !std::fs::symlink_metadata(cache.dir.join("v1.cwasm-module"))
                .unwrap()
                .file_type()
                .is_symlink()
        );
    }

    #[test]
    fn keys_round_trip_through_hex() {
        let hex_key = CacheKey::generate_hex();
        assert!(CacheKey::from_hex(&hex_key).is_some());
        assert!(CacheKey::from_hex("abcd").is_none());
        assert!(CacheKey::from_hex("not hex").is_none());
    }

    /// `(module (func (export "answer") (result i32) i32.const 42))`, encoded by hand.
    fn wat_bytes() -> Vec<u8> {
        let mut wasm = b"\0asm\x01\0\0\0".to_vec();
        wasm.extend_from_slice(&[0x01, 0x05, 0x01, 0x60, 0x00, 0x01, 0x7f]); // type: () -> i32
        wasm.extend_from_slice(&[0x03, 0x02, 0x01, 0x00]); // one function of that type
        wasm.extend_from_slice(&[0x07, 0x0a, 0x01, 0x06]); // export "answer"
        wasm.extend_from_slice(b"answer");
        wasm.extend_from_slice(&[0x00, 0x00]);
        wasm.extend_from_slice(&[0x0a, 0x06, 0x01, 0x04, 0x00, 0x41, 0x2a, 0x0b]); // i32.const 42
        wasm
    }
}
