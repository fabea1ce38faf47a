//! Folder grants: host folders a manifest's `[[dirs]]` maps into the guest, opened so that no
//! guest can turn a grant into a way out.
//!
//! The policy:
//! - every grant lives beneath one **grants root**, a folder the operator chooses
//!   (`--grants-root`; default `plugin-data` beside the plugin folder). A manifest's `host` is
//!   a path relative to it: absolute paths, `..`, `.` and empty components are rejected when
//!   the manifest is read ([`check_host_path`]);
//! - the root is opened once, when the host starts ([`GrantsRoot::open`]); it is the
//!   operator's path and is trusted, symbolic links in it included. At start the root must be
//!   apart from what the host trusts ([`check_apart`]): it neither contains nor lies inside the
//!   plugin folder or the compiled-code cache, and it does not contain the task database;
//! - each attempt opens each of its grants again, beneath the root's handle, **without
//!   following a symbolic link in any component** ([`GrantsRoot::open_grant`]). A grant whose
//!   path has a link in it (planted by a guest with a writable grant over it, or by anyone
//!   else) fails the attempt with a reason naming the link; it is retried per policy like any
//!   failure, and it never opens. A missing grant folder is not created: the manifest is
//!   rejected at load ("does not exist"), and an attempt whose folder has gone fails;
//! - the guest gets exactly the directory that was opened ([`preopen`]), never a path that is
//!   looked up again;
//! - when a manifest is loaded, a grant that overlaps another type's grant where either is
//!   writable is rejected ([`overlaps`], checked by the registry), so one type never writes
//!   where another type reads or writes.
//!
//! Inside a grant the guest's own paths are resolved by wasmtime-wasi beneath the preopened
//! directory (links included), so the guest cannot climb out through `..` or a link either.
//!
//! Opening beneath the root uses Linux's `openat2` with `RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS`: one system call, and the kernel refuses any link and any escape.
//! Where `openat2` is missing (kernels before 5.6, or a seccomp filter answering `ENOSYS`,
//! and other Unixes) it walks the path one component at a time with `openat(O_NOFOLLOW |
//! O_DIRECTORY)`, each step relative to the directory the previous step opened, which is just
//! as race-free. Both go through **rustix**, the safe system-call layer that wasmtime,
//! cap-std and tempfile are built on (already in the build), rather than hand-written `libc`
//! calls: no `unsafe` here, and typed flags. cap-std's no-follow opens would do the same walk,
//! but wasmtime-wasi 48 no longer uses cap-std, so it would be one more crate to trust.
//!
//! wasmtime-wasi 48's `WasiCtxBuilder::preopened_dir` takes only a path (the list of preopens
//! is private to the crate), so [`preopen`] hands it `/proc/self/fd/N` of the directory
//! already open: a "magic link" that the kernel resolves to that open file itself, not by
//! looking a name up again, so what the guest gets is exactly what was checked.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, Mode, OFlags};
use rustix::io::Errno;
use wasmtime_wasi::{FsPerms, WasiCtxBuilder};

/// The folder every grant lives beneath, opened once per host start.
pub struct GrantsRoot {
    dir: OwnedFd,
    path: PathBuf,
}

impl std::fmt::Debug for GrantsRoot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("GrantsRoot").field(&self.path).finish()
    }
}

impl PartialEq for GrantsRoot {
    fn eq(&self, other: &Self) -> bool {
        self.path == other.path
    }
}

/// Why a grant could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum GrantError {
    #[error(
        "{link:?} is a symbolic link; grants are opened without following links, so this one stays closed \
         (make {grant:?} a real folder beneath the grants root {root})"
    )]
    Symlink {
        grant: PathBuf,
        link: PathBuf,
        root: PathBuf,
    },
    #[error(
        "folder {grant:?} does not exist beneath the grants root {root}; create it or fix the path"
    )]
    Missing { grant: PathBuf, root: PathBuf },
    #[error("{grant:?} beneath the grants root {root} is not a folder")]
    NotAFolder { grant: PathBuf, root: PathBuf },
    #[error("cannot open {grant:?} beneath the grants root {root}: {source}")]
    Io {
        grant: PathBuf,
        root: PathBuf,
        source: io::Error,
    },
}

impl GrantsRoot {
    /// Opens the grants root, creating it if missing. The path is the operator's and is
    /// followed as given; [`GrantsRoot::path`] is its canonical form.
    pub fn open(path: &Path) -> io::Result<GrantsRoot> {
        std::fs::create_dir_all(path)?;
        let path = path.canonicalize()?;
        let dir = rustix::fs::open(
            &path,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(GrantsRoot { dir, path })
    }

    /// Opens the grants root at host start, after checking that it stays apart from what the
    /// host trusts ([`check_apart`]), both before it is created (nothing is created in the
    /// wrong place) and once it is open (its real path).
    pub fn open_apart(path: &Path, trusted: &[Trusted<'_>]) -> Result<GrantsRoot, String> {
        check_apart(&canonical(path), trusted)?;
        let root = GrantsRoot::open(path).map_err(|error| {
            format!("cannot open grants_root {}: {error}; create it or choose another folder with --grants-root", path.display())
        })?;
        check_apart(root.path(), trusted)?;
        Ok(root)
    }

    /// The root's canonical path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Opens the folder `grant` (a path checked by [`check_host_path`]) beneath the root,
    /// following no symbolic link in any component.
    pub fn open_grant(&self, grant: &Path) -> Result<OwnedFd, GrantError> {
        let opened = open_beneath(&self.dir, grant);
        opened.map_err(|errno| self.explain(grant, errno))
    }

    /// Turns a failed open into a reason, naming the link when there is one. The diagnosis
    /// looks again, by name; it only words the error, it never opens anything.
    fn explain(&self, grant: &Path, errno: Errno) -> GrantError {
        let (grant_path, root) = (grant.to_path_buf(), self.path.clone());
        let mut prefix = PathBuf::new();
        for component in grant.components() {
            prefix.push(component);
            match rustix::fs::statat(&self.dir, &prefix, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(stat)
                    if rustix::fs::FileType::from_raw_mode(stat.st_mode)
                        == rustix::fs::FileType::Symlink =>
                {
                    return GrantError::Symlink {
                        grant: grant_path,
                        link: prefix,
                        root,
                    };
                }
                Ok(stat)
                    if rustix::fs::FileType::from_raw_mode(stat.st_mode)
                        != rustix::fs::FileType::Directory =>
                {
                    return GrantError::NotAFolder {
                        grant: grant_path,
                        root,
                    };
                }
                Ok(_) => {}
                Err(Errno::NOENT) => {
                    return GrantError::Missing {
                        grant: grant_path,
                        root,
                    };
                }
                Err(_) => break,
            }
        }
        match errno {
            // A link that was replaced between the open and the diagnosis still is the reason.
            Errno::LOOP => GrantError::Symlink {
                grant: grant_path.clone(),
                link: grant_path,
                root,
            },
            Errno::NOENT => GrantError::Missing {
                grant: grant_path,
                root,
            },
            Errno::NOTDIR => GrantError::NotAFolder {
                grant: grant_path,
                root,
            },
            other => GrantError::Io {
                grant: grant_path,
                root,
                source: other.into(),
            },
        }
    }
}

/// The directory flags of every open: a handle for path lookups only, never inherited.
const DIR_FLAGS: OFlags = OFlags::PATH.union(OFlags::DIRECTORY).union(OFlags::CLOEXEC);

#[cfg(any(target_os = "linux", target_os = "android"))]
fn open_beneath(root: &OwnedFd, grant: &Path) -> Result<OwnedFd, Errno> {
    use rustix::fs::ResolveFlags;
    match rustix::fs::openat2(
        root,
        grant,
        DIR_FLAGS,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS,
    ) {
        Err(Errno::NOSYS) => open_walking(root, grant),
        other => other,
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn open_beneath(root: &OwnedFd, grant: &Path) -> Result<OwnedFd, Errno> {
    open_walking(root, grant)
}

/// Opens `grant` one component at a time, each relative to the directory opened before,
/// refusing links (`O_NOFOLLOW` on every component; `O_DIRECTORY` refuses everything else, and
/// Linux answers `ENOTDIR` rather than `ELOOP` for a link; [`GrantsRoot::explain`] tells them
/// apart).
fn open_walking(root: &OwnedFd, grant: &Path) -> Result<OwnedFd, Errno> {
    let mut current: Option<OwnedFd> = None;
    for component in grant.components() {
        let Component::Normal(name) = component else {
            return Err(Errno::XDEV);
        };
        let parent = current.as_ref().unwrap_or(root);
        // Not O_PATH here: with O_PATH | O_NOFOLLOW Linux opens the link itself.
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        current = Some(rustix::fs::openat(parent, name, flags, Mode::empty())?);
    }
    match current {
        Some(dir) => Ok(dir),
        None => Err(Errno::INVAL),
    }
}

/// Maps `dir`, a directory this process holds open, into the guest at `guest`.
///
/// `WasiCtxBuilder::preopened_dir` takes only a path, so it gets `/proc/self/fd/N`: the
/// kernel resolves that link to the open directory itself, whatever happened to its name
/// since, so the guest gets exactly what [`GrantsRoot::open_grant`] checked. `dir` may be
/// closed afterwards; wasmtime-wasi holds its own handle.
pub fn preopen(
    wasi: &mut WasiCtxBuilder,
    dir: &OwnedFd,
    guest: &str,
    perms: FsPerms,
) -> wasmtime::Result<()> {
    let by_fd = PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd()));
    wasi.preopened_dir(&by_fd, guest, perms).map_err(|error| {
        error.context(format!(
            "cannot hand the opened grant for {guest} to the sandbox through {} (is /proc mounted?)",
            by_fd.display()
        ))
    })?;
    Ok(())
}

/// Checks a manifest's `host` path: relative to the grants root, made of plain names only.
pub fn check_host_path(host: &Path) -> Result<(), String> {
    let Some(text) = host.to_str() else {
        return Err("is not valid text".into());
    };
    if text.is_empty() {
        return Err("is empty: name a folder beneath the grants root, such as \"reports\"".into());
    }
    if text.starts_with('/') || host.is_absolute() {
        return Err("is absolute: write a path relative to the grants root (--grants-root), such as \"reports\"".into());
    }
    for part in text.split('/') {
        match part {
            ".." => {
                return Err("climbs out with \"..\": a grant stays beneath the grants root".into());
            }
            "." => {
                return Err(
                    "has a \".\" component: write each folder name once, such as \"reports/2024\""
                        .into(),
                );
            }
            "" => {
                return Err(
                    "has an empty component (\"//\" or a trailing \"/\"): write \"reports/2024\""
                        .into(),
                );
            }
            _ if part.contains('\0') => return Err("contains a NUL character".into()),
            _ => {}
        }
    }
    Ok(())
}

/// Whether two grant paths (checked by [`check_host_path`]) share folders: one is the other
/// or lies inside it, compared by whole components (`data` and `database` do not overlap).
pub fn overlaps(a: &Path, b: &Path) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

/// A path in its canonical form when it exists; otherwise its nearest existing ancestor's
/// canonical form with the rest appended (a cache folder not created yet, say).
fn canonical(path: &Path) -> PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut missing = Vec::new();
    let mut existing = absolute.as_path();
    loop {
        if let Ok(real) = existing.canonicalize() {
            return missing.iter().rev().fold(real, |acc, name| acc.join(name));
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                missing.push(name.to_os_string());
                existing = parent;
            }
            _ => return absolute,
        }
    }
}

/// What the grants root must stay apart from: folders whose content the host trusts.
#[derive(Debug, Clone, Copy)]
pub enum Trusted<'a> {
    /// A folder (plugin folder, compiled-code cache): neither may contain the other.
    Folder {
        setting: &'static str,
        path: &'a Path,
    },
    /// A file (the SQLite database, with its journal beside it): the root must not contain its
    /// folder. The root may lie inside that folder: by default the database and the root both
    /// live in the working directory.
    File {
        setting: &'static str,
        path: &'a Path,
    },
}

/// Checks at start that the grants root (canonical, as [`GrantsRoot::path`]) stays apart from
/// every trusted folder, comparing canonical paths; the error names both settings.
pub fn check_apart(root: &Path, trusted: &[Trusted<'_>]) -> Result<(), String> {
    for item in trusted {
        match *item {
            Trusted::Folder { setting, path } => {
                let other = canonical(path);
                if root.starts_with(&other) || other.starts_with(root) {
                    let how = if root == other {
                        "is the same folder as"
                    } else if root.starts_with(&other) {
                        "lies inside"
                    } else {
                        "contains"
                    };
                    return Err(format!(
                        "grants_root {} {how} {setting} {}: a guest with a writable grant could change files the host \
                         trusts; choose a grants_root (--grants-root) apart from {setting}",
                        root.display(),
                        other.display()
                    ));
                }
            }
            Trusted::File { setting, path } => {
                let file = canonical(path);
                let folder = file.parent().unwrap_or(&file);
                if folder.starts_with(root) {
                    return Err(format!(
                        "grants_root {} contains the folder of the task database {} ({setting}): a guest with a writable \
                         grant could change the queue; choose a grants_root (--grants-root) apart from the database's folder",
                        root.display(),
                        file.display()
                    ));
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root_with(folders: &[&str]) -> (tempfile::TempDir, GrantsRoot) {
        let dir = tempfile::tempdir().unwrap();
        for folder in folders {
            std::fs::create_dir_all(dir.path().join("root").join(folder)).unwrap();
        }
        let root = GrantsRoot::open(&dir.path().join("root")).unwrap();
        (dir, root)
    }

    #[test]
    fn opens_plain_folders_beneath_the_root() {
        let (dir, root) = root_with(&["reports/2024"]);
        std::fs::write(dir.path().join("root/reports/2024/a.txt"), "a").unwrap();
        let opened = root.open_grant(Path::new("reports/2024")).unwrap();
        let real = std::fs::read_link(format!("/proc/self/fd/{}", opened.as_raw_fd())).unwrap();
        assert_eq!(
            real,
            dir.path().join("root/reports/2024").canonicalize().unwrap()
        );
        let walked = open_walking(&root.dir, Path::new("reports/2024")).unwrap();
        let real = std::fs::read_link(format!("/proc/self/fd/{}", walked.as_raw_fd())).unwrap();
        assert_eq!(
            real,
            dir.path().join("root/reports/2024").canonicalize().unwrap()
        );
    }

    #[test]
    fn a_symlink_in_any_component_keeps_the_grant_closed() {
        let (dir, root) = root_with(&["box", "real"]);
        let base = dir.path().join("root");
        std::os::unix::fs::symlink("../../../../../../../../..", base.join("box/inner")).unwrap();
        std::os::unix::fs::symlink("real", base.join("alias")).unwrap();
        std::fs::create_dir(base.join("real/sub")).unwrap();
        for (grant, link) in [
            ("box/inner", "box/inner"),
            ("alias", "alias"),
            ("alias/sub", "alias"),
        ] {
            let error = root.open_grant(Path::new(grant)).unwrap_err();
            match &error {
                GrantError::Symlink { link: named, .. } => {
                    assert_eq!(named, Path::new(link), "{error}")
                }
                other => panic!("{grant}: expected a symlink error, got {other}"),
            }
            assert!(error.to_string().contains("symbolic link"), "{error}");
            // O_DIRECTORY answers before O_NOFOLLOW: a link is "not a directory" to the walk.
            let walked = open_walking(&root.dir, Path::new(grant)).unwrap_err();
            assert!(
                matches!(walked, Errno::LOOP | Errno::NOTDIR),
                "{grant}: {walked}"
            );
        }
        // The root itself is the operator's path: a link in it is followed.
        std::os::unix::fs::symlink(&base, dir.path().join("root-link")).unwrap();
        let via_link = GrantsRoot::open(&dir.path().join("root-link")).unwrap();
        assert_eq!(via_link.path(), base.canonicalize().unwrap());
        assert!(via_link.open_grant(Path::new("real/sub")).is_ok());
    }

    #[test]
    fn missing_and_non_folders_are_named() {
        let (dir, root) = root_with(&["data"]);
        std::fs::write(dir.path().join("root/data/file"), "x").unwrap();
        let missing = root.open_grant(Path::new("data/nope")).unwrap_err();
        assert!(matches!(missing, GrantError::Missing { .. }), "{missing}");
        assert!(missing.to_string().contains("does not exist"), "{missing}");
        let file = root.open_grant(Path::new("data/file")).unwrap_err();
        assert!(matches!(file, GrantError::NotAFolder { .. }), "{file}");
        assert!(
            !dir.path().join("root/data/nope").exists(),
            "a missing grant is not created"
        );
    }

    #[test]
    fn preopen_hands_over_the_open_directory() {
        let (_dir, root) = root_with(&["data"]);
        let opened = root.open_grant(Path::new("data")).unwrap();
        let mut wasi = WasiCtxBuilder::new();
        preopen(&mut wasi, &opened, "/data", FsPerms::ReadOnly).unwrap();
    }

    #[test]
    fn host_paths_must_be_plain_and_relative() {
        for good in ["reports", "reports/2024", "a-b_c.d", "..x", "x.."] {
            assert_eq!(check_host_path(Path::new(good)), Ok(()), "{good}");
        }
        for (bad, says) in [
            ("/etc", "absolute"),
            ("../x", ".."),
            ("a/../../b", ".."),
            ("..", ".."),
            (".", "\".\""),
            ("./a", "\".\""),
            ("a/./b", "\".\""),
            ("", "empty"),
            ("a//b", "empty component"),
            ("a/", "empty component"),
        ] {
            let error = check_host_path(Path::new(bad)).unwrap_err();
            assert!(error.contains(says), "{bad:?}: {error}");
        }
    }

    #[test]
    fn overlap_is_by_whole_components() {
        assert!(overlaps(Path::new("data"), Path::new("data")));
        assert!(overlaps(Path::new("data"), Path::new("data/in")));
        assert!(overlaps(Path::new("data/in/x"), Path::new("data")));
        assert!(!overlaps(Path::new("data"), Path::new("database")));
        assert!(!overlaps(Path::new("data/in"), Path::new("data/out")));
    }

    #[test]
    fn the_root_stays_apart_from_what_the_host_trusts() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let root = base.join("plugin-data");
        std::fs::create_dir_all(&root).unwrap();
        let plugins = base.join("plugins");
        let ok = [
            Trusted::Folder {
                setting: "plugins",
                path: &plugins,
            },
            Trusted::Folder {
                setting: "cache_dir",
                path: &base.join(".spool/cache"),
            },
            Trusted::File {
                setting: "database_url",
                path: &base.join("spool.db"),
            },
        ];
        assert_eq!(check_apart(&root, &ok), Ok(()), "the default layout");

        let inside = check_apart(
            &root,
            &[Trusted::Folder {
                setting: "plugins",
                path: &root.join("p"),
            }],
        )
        .unwrap_err();
        assert!(
            inside.contains("grants_root")
                && inside.contains("plugins")
                && inside.contains("contains"),
            "{inside}"
        );
        let around = check_apart(
            &root,
            &[Trusted::Folder {
                setting: "cache_dir",
                path: &base,
            }],
        )
        .unwrap_err();
        assert!(around.contains("lies inside cache_dir"), "{around}");
        let same = check_apart(
            &root,
            &[Trusted::Folder {
                setting: "plugins",
                path: &root,
            }],
        )
        .unwrap_err();
        assert!(same.contains("same folder"), "{same}");
        let db = check_apart(
            &root,
            &[Trusted::File {
                setting: "database_url",
                path: &root.join("q/spool.db"),
            }],
        )
        .unwrap_err();
        assert!(
            db.contains("database_url") && db.contains("grants_root"),
            "{db}"
        );
        // Compared canonically: a link to the root is the root.
        std::os::unix::fs::symlink(&root, base.join("alias")).unwrap();
        let linked = check_apart(
            &root,
            &[Trusted::Folder {
                setting: "cache_dir",
                path: &base.join("alias/cache"),
            }],
        );
        assert!(linked.is_err(), "a path through a link is resolved first");
    }
}
