//! Writing into the plugin folder (and the project's work folder) so a watching host never
//! sees half a file, and an unchanged file is not touched at all.

use std::path::Path;

use crate::error::{IoContext, Result};

/// Writes a file through a temporary name and a rename, and only when its content changes,
/// so an unchanged plugin keeps its file (and a watching host does not reload it).
pub(crate) fn write_if_changed(path: &Path, bytes: &[u8]) -> Result<()> {
    if std::fs::read(path).ok().as_deref() == Some(bytes) {
        return Ok(());
    }
    let mut partial_name = std::ffi::OsString::from(".");
    partial_name.push(path.file_name().unwrap_or(path.as_os_str()));
    partial_name.push(".partial");
    let partial = path.with_file_name(partial_name);
    std::fs::write(&partial, bytes).at("cannot write", &partial)?;
    std::fs::rename(&partial, path).at("cannot move the new file to", path)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn unchanged_files_are_not_rewritten() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.wasm");
        write_if_changed(&path, b"one").unwrap();
        let first = std::fs::metadata(&path).unwrap().modified().unwrap();
        std::thread::sleep(Duration::from_millis(20));
        write_if_changed(&path, b"one").unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().modified().unwrap(), first);
        write_if_changed(&path, b"two").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            1,
            "no temporary file is left behind"
        );
    }
}
