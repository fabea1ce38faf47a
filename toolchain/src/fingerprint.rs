//! Whether a handler project needs building again: a fingerprint of everything a build reads.
//!
//! The fingerprint is a SHA-256 over the project's source files (relative path and content, in
//! path order), the handler WIT, the language, the pinned toolchain and the Spool version.
//! Contents, not modification times: saving a file without changing it, a fresh checkout or a
//! copy to another machine leave the fingerprint as it was, so the build is skipped and the
//! component keeps its version (and every host its compiled code). Folders that are outputs or
//! caches (`target/` and `node_modules/` at the top, `.git` and `__pycache__` anywhere) are
//! not sources; the lock files that pin dependencies are.

use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

use crate::error::{IoContext, Result};
use crate::{HANDLER_WIT, Language};

/// The fingerprint of a build of `project` in `language` with `toolchain` (the pinned tool it
/// runs), as hex.
pub fn of_sources(project: &Path, language: Language, toolchain: &str) -> Result<String> {
    let mut hash = Sha256::new();
    for part in [
        env!("CARGO_PKG_VERSION"),
        language.name(),
        toolchain,
        HANDLER_WIT,
    ] {
        hash.update((part.len() as u64).to_le_bytes());
        hash.update(part.as_bytes());
    }
    for relative in source_files(project)? {
        let path = project.join(&relative);
        let content = std::fs::read(&path).at("cannot read", &path)?;
        let name = relative.as_os_str().as_encoded_bytes();
        hash.update((name.len() as u64).to_le_bytes());
        hash.update(name);
        hash.update((content.len() as u64).to_le_bytes());
        hash.update(&content);
    }
    Ok(hex::encode(hash.finalize()))
}

/// The project's source files, relative to it, sorted.
fn source_files(project: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let mut pending = vec![PathBuf::new()];
    while let Some(relative) = pending.pop() {
        let dir = project.join(&relative);
        for entry in std::fs::read_dir(&dir).at("cannot read", &dir)? {
            let entry = entry.at("cannot read", &dir)?;
            let name = entry.file_name();
            let path = relative.join(&name);
            let file_type = entry.file_type().at("cannot read", &project.join(&path))?;
            if file_type.is_dir() {
                let top = relative.as_os_str().is_empty();
                if top && (name == "target" || name == "node_modules")
                    || name == ".git"
                    || name == "__pycache__"
                {
                    continue;
                }
                pending.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files.sort();
    Ok(files)
}

/// Whether `output` exists and was built from sources with this fingerprint (`record` holds
/// the fingerprint of the build that wrote it).
pub fn is_up_to_date(output: &Path, record: &Path, fingerprint: &str) -> bool {
    output.is_file() && std::fs::read_to_string(record).is_ok_and(|built| built == fingerprint)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fingerprint_follows_contents_not_times() {
        let project = tempfile::tempdir().unwrap();
        let root = project.path();
        for dir in ["target/spool", "node_modules/pkg", "lib/__pycache__", "lib"] {
            std::fs::create_dir_all(root.join(dir)).unwrap();
        }
        std::fs::write(root.join("app.py"), "print(1)").unwrap();
        std::fs::write(root.join("lib/util.py"), "x = 1").unwrap();
        let print = || of_sources(root, Language::Python, "componentize-py==1").unwrap();
        let first = print();

        // Rewritten with the same bytes (a save, a checkout): the same fingerprint.
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(root.join("app.py"), "print(1)").unwrap();
        assert_eq!(print(), first);
        // Outputs, caches and installed packages are not sources.
        std::fs::write(root.join("target/spool/h.wasm"), "wasm").unwrap();
        std::fs::write(root.join("node_modules/pkg/index.js"), "js").unwrap();
        std::fs::write(root.join("lib/__pycache__/util.pyc"), "pyc").unwrap();
        assert_eq!(print(), first);

        std::fs::write(root.join("lib/util.py"), "x = 2").unwrap();
        let changed = print();
        assert_ne!(changed, first, "a changed source in a subfolder");
        std::fs::rename(root.join("lib/util.py"), root.join("lib/other.py")).unwrap();
        assert_ne!(print(), changed, "a renamed source");
        assert_ne!(
            of_sources(root, Language::Python, "componentize-py==2").unwrap(),
            print(),
            "another toolchain"
        );
    }

    #[test]
    fn a_build_is_up_to_date_while_its_record_matches() {
        let dir = tempfile::tempdir().unwrap();
        let (output, record) = (dir.path().join("h.wasm"), dir.path().join("h.sources"));
        assert!(!is_up_to_date(&output, &record, "abc"), "nothing built yet");
        std::fs::write(&output, "wasm").unwrap();
        assert!(!is_up_to_date(&output, &record, "abc"), "no record");
        std::fs::write(&record, "abc").unwrap();
        assert!(is_up_to_date(&output, &record, "abc"));
        assert!(!is_up_to_date(&output, &record, "abd"));
    }
}
