//! Reads plugin files and compiles them into [`Plugin`]s for the registry.
//!
//! Only regular files are read (a symbolic link to one is followed): a FIFO, a device or a
//! socket named `NAME.wasm` or `NAME.toml` is refused with a load error before it is opened for
//! reading, so it can neither hang the host nor feed it endless bytes. A component may be at
//! most `max_plugin_size` bytes and a manifest [`MAX_MANIFEST_BYTES`]; a larger file is refused
//! without being read whole. A file that some process still has open for writing (a copy in
//! progress) is not loaded: the load waits for the writer to close it (the watcher sees the
//! close), so a half-copied component never becomes a version, even one that happens to be a
//! valid module.

use chrono::Utc;
use sha2::{Digest, Sha256};
use spool_rules::names::is_valid_task_type;
use std::fs::File;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::registry::Source;
use super::{Defaults, Manifest, Plugin, Registry};
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
        "{path}: not a regular file ({kind}); only regular files, or symbolic links to them, are loaded"
    )]
    NotRegular { path: PathBuf, kind: &'static str },
    #[error("{path}: {size} bytes, more than the {limit} bytes a {what} may have{setting}")]
    TooLarge {
        path: PathBuf,
        size: u64,
        limit: u64,
        what: &'static str,
        setting: &'static str,
    },
    #[error(
        "{path}: still being written (a process has it open for writing); it loads once the writer closes it"
    )]
    BeingWritten { path: PathBuf },
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

/// The largest manifest read.
pub const MAX_MANIFEST_BYTES: u64 = 64 << 10;

/// What a file is, when it is not a regular file.
fn kind_of(file_type: std::fs::FileType) -> Option<&'static str> {
    if file_type.is_file() {
        None
    } else if file_type.is_fifo() {
        Some("a FIFO")
    } else if file_type.is_char_device() {
        Some("a character device")
    } else if file_type.is_block_device() {
        Some("a block device")
    } else if file_type.is_socket() {
        Some("a socket")
    } else if file_type.is_dir() {
        Some("a folder")
    } else {
        Some("not a file")
    }
}

/// Whether some process has `file` open for writing. Asked by taking a read lease and giving it
/// back at once: Linux grants none while the file is open for writing anywhere. `None` when
/// that cannot be asked (the file belongs to another user, or its file system has no leases).
fn open_for_writing(file: &File) -> Option<bool> {
    /// `F_SETSIG` from Linux's fcntl.h (the same on every architecture), which the libc crate
    /// does not name.
    const F_SETSIG: libc::c_int = 10;
    let fd = file.as_raw_fd();
    // SAFETY: plain fcntl calls on a descriptor this function borrows. A writer opening the
    // file during the lease would signal this process; SIGURG is ignored unless handled, and
    // nothing here handles it.
    unsafe {
        libc::fcntl(fd, F_SETSIG, libc::SIGURG);
        if libc::fcntl(fd, libc::F_SETLEASE, libc::F_RDLCK) == 0 {
            libc::fcntl(fd, libc::F_SETLEASE, libc::F_UNLCK);
            return Some(false);
        }
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::EAGAIN) => Some(true),
        _ => None,
    }
}

/// Reads a plugin file: a regular file (or a link to one) of at most `limit` bytes that no
/// process is writing. `Ok(None)` when it does not exist. Blocking.
pub fn read_plugin_file(
    path: &Path,
    limit: u64,
    what: &'static str,
    setting: &'static str,
) -> Result<Option<Vec<u8>>, LoadError> {
    let read_error = |source| LoadError::Read {
        path: path.to_path_buf(),
        source,
    };
    let not_regular = |kind| LoadError::NotRegular {
        path: path.to_path_buf(),
        kind,
    };
    // Checked before opening: opening a FIFO waits for a writer, and opening a device may
    // do something.
    match std::fs::metadata(path) {
        Ok(metadata) => {
            if let Some(kind) = kind_of(metadata.file_type()) {
                return Err(not_regular(kind));
            }
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(read_error(error)),
    }
    // Non-blocking, in case it was swapped for a FIFO since; checked again once open.
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
    {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(read_error(error)),
    };
    let metadata = file.metadata().map_err(read_error)?;
    if let Some(kind) = kind_of(metadata.file_type()) {
        return Err(not_regular(kind));
    }
    let too_large = |size| LoadError::TooLarge {
        path: path.to_path_buf(),
        size,
        limit,
        what,
        setting,
    };
    if metadata.len() > limit {
        return Err(too_large(metadata.len()));
    }
    if open_for_writing(&file) == Some(true) {
        return Err(LoadError::BeingWritten {
            path: path.to_path_buf(),
        });
    }
    let mut bytes = Vec::with_capacity(metadata.len() as usize);
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    if bytes.len() as u64 > limit {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(Some(bytes))
}

/// What a build is called: its task type, the names its errors give for the component and
/// the manifest, and where it came from.
#[derive(Debug, Clone)]
pub struct Named {
    pub task_type: String,
    pub path: PathBuf,
    pub manifest_path: PathBuf,
    pub source: Source,
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
    /// The largest component file loaded (`max_plugin_size`).
    pub max_bytes: usize,
    /// Bounds the compiles running at once ([`PluginLoader::compile_slots`]).
    pub compile_slots: Arc<tokio::sync::Semaphore>,
}

impl PluginLoader {
    /// Loads every `*.wasm` in the folder into `registry`. The files are read and compiled
    /// concurrently (compiles bounded by [`PluginLoader::compile_slots`]), then registered in
    /// name order, so which of two types with overlapping grants wins does not depend on which
    /// compiled first. A file that fails to load (or whose grants overlap a type registered
    /// before it) is logged and recorded in the registry's errors; the others still load.
    /// Returns the failures.
    pub async fn load_folder(
        self: &Arc<Self>,
        registry: &Arc<Registry>,
    ) -> Result<Vec<LoadError>, LoadError> {
        let entries = std::fs::read_dir(&self.folder).map_err(|source| LoadError::Folder {
            path: self.folder.clone(),
            source,
        })?;
        // Everything named `*.wasm` but folders: what is not a regular file is refused by
        // `load` with a load error, so the operator sees it.
        let paths: Vec<PathBuf> = entries
            .filter_map(|entry| entry.ok())
            .filter(|entry| !entry.file_type().is_ok_and(|t| t.is_dir()))
            .map(|entry| entry.path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "wasm"))
            .collect();
        let mut loads = tokio::task::JoinSet::new();
        for path in paths {
            let (loader, registry) = (self.clone(), registry.clone());
            loads.spawn(async move {
                let stem = path
                    .file_stem()
                    .and_then(|s| s.to_str())
                    .unwrap_or_default()
                    .to_string();
                let _loading = registry.mark_loading(&stem);
                let loaded = loader.load(&path, None).await;
                (path, stem, loaded)
            });
        }
        let mut loaded = loads.join_all().await;
        loaded.sort_by(|a, b| a.0.cmp(&b.0));
        let mut failures = Vec::new();
        for (_, stem, plugin) in loaded {
            if let Err(error) = plugin.and_then(|plugin| registry.insert(plugin)) {
                tracing::error!("{error}");
                registry.record_error(&stem, error.to_string());
                failures.push(error);
            }
        }
        Ok(failures)
    }

    /// Compiles running at once: one per core, so a slow compile of one type never holds up
    /// another type's, and loading a folder does not starve the attempts running meanwhile.
    pub fn compile_slots() -> Arc<tokio::sync::Semaphore> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Arc::new(tokio::sync::Semaphore::new(cores))
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
        let manifest_path = path.with_extension("toml");
        let (wasm, toml, limit) = (path.to_path_buf(), manifest_path.clone(), self.max_bytes);
        let (bytes, manifest_bytes) = tokio::task::spawn_blocking(move || {
            let bytes = read_plugin_file(&wasm, limit as u64, "plugin file", " (max_plugin_size)")?
                .ok_or_else(|| LoadError::Read {
                    path: wasm.clone(),
                    source: std::io::ErrorKind::NotFound.into(),
                })?;
            let manifest = read_plugin_file(&toml, MAX_MANIFEST_BYTES, "manifest", "")?;
            Ok::<_, LoadError>((bytes, manifest))
        })
        .await
        .expect("plugin read task panicked")?;
        let manifest = manifest_bytes
            .map(|bytes| {
                String::from_utf8(bytes).map_err(|_| LoadError::Manifest {
                    path: manifest_path.clone(),
                    message: "not UTF-8 text".into(),
                })
            })
            .transpose()?;
        let named = Named {
            task_type,
            path: path.to_path_buf(),
            manifest_path,
            source: Source::Folder,
        };
        self.build(named, bytes, manifest.as_deref(), current).await
    }

    /// Checks and compiles a build from its bytes, as [`PluginLoader::load`] does a file's:
    /// at most `max_plugin_size` bytes, a manifest that parses and resolves, a component (or
    /// WASI program) that compiles. When `current` is the same build (a manifest-only change),
    /// its compiled handler is reused. Deployed builds come through here.
    pub async fn build(
        &self,
        named: Named,
        bytes: Vec<u8>,
        manifest: Option<&str>,
        current: Option<&Plugin>,
    ) -> Result<Plugin, LoadError> {
        let Named {
            task_type,
            path,
            manifest_path,
            source,
        } = named;
        if bytes.len() > self.max_bytes {
            return Err(LoadError::TooLarge {
                path,
                size: bytes.len() as u64,
                limit: self.max_bytes as u64,
                what: "plugin file",
                setting: " (max_plugin_size)",
            });
        }
        let manifest = match manifest {
            Some(text) => Manifest::parse(text).map_err(|message| LoadError::Manifest {
                path: manifest_path.clone(),
                message,
            })?,
            None => Manifest::default(),
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
                let _slot = self
                    .compile_slots
                    .acquire()
                    .await
                    .expect("the compile slots are never closed");
                let (sandbox, cache, hash) =
                    (self.sandbox.clone(), self.cache.clone(), version.clone());
                tokio::task::spawn_blocking(move || sandbox.compile(&bytes, &hash, cache.as_ref()))
                    .await
                    .expect("compile task panicked")
                    .map_err(|source| LoadError::Compile {
                        path: path.clone(),
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
            path,
            source,
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
    fn only_regular_files_of_bounded_size_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("ok.wasm");
        std::fs::write(&file, b"0123456789").unwrap();
        let read = |path: &Path, limit| read_plugin_file(path, limit, "plugin file", "");
        assert_eq!(read(&file, 10).unwrap().unwrap(), b"0123456789");
        let error = read(&file, 9).unwrap_err().to_string();
        assert!(error.contains("10 bytes, more than the 9 bytes"), "{error}");
        assert!(
            read(&dir.path().join("missing.wasm"), 10)
                .unwrap()
                .is_none()
        );

        let fifo = dir.path().join("fifo.wasm");
        let name = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
        let error = read(&fifo, 10).unwrap_err().to_string();
        assert!(error.contains("not a regular file (a FIFO)"), "{error}");
        let link = dir.path().join("zero.wasm");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        let error = read(&link, 10).unwrap_err().to_string();
        assert!(error.contains("(a character device)"), "{error}");
        let alias = dir.path().join("alias.wasm");
        std::os::unix::fs::symlink(&file, &alias).unwrap();
        assert_eq!(
            read(&alias, 10).unwrap().unwrap().len(),
            10,
            "a link to a file is fine"
        );
    }

    #[test]
    fn a_file_open_for_writing_is_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("copy.wasm");
        let mut writer = File::create(&path).unwrap();
        std::io::Write::write_all(&mut writer, b"\0asm").unwrap();
        let read = || read_plugin_file(&path, 100, "plugin file", "");
        match read() {
            Err(LoadError::BeingWritten { .. }) => {}
            // A file system without leases cannot tell; the watcher still waits for the close.
            Ok(_) if open_for_writing(&File::open(&path).unwrap()).is_none() => {}
            other => panic!("{other:?}"),
        }
        drop(writer);
        assert_eq!(read().unwrap().unwrap(), b"\0asm");
    }
}
