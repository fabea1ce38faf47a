//! What can go wrong making or building a handler project. Each case says what happened and,
//! where the user can do something about it, what to do.
//!
//! Causes are chained through [`std::error::Error::source`]: a failed build is a
//! [`Error::Build`] naming the language and project, caused by the step that failed.

use std::io;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;

use crate::Language;

/// The result of this crate's operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why `spool plugin new` or `spool plugin build` failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `--lang` names no language Spool builds.
    #[error("unknown language `{given}`; choose one of {}", Language::names())]
    UnknownLanguage { given: String },

    /// The folder holds no project of a language Spool builds.
    #[error(
        "{} holds no handler project Spool recognizes (Cargo.toml, app.py, package.json, go.mod, *.zig or *.c); \
         start one with `spool plugin new --lang LANG NAME`",
        .dir.display()
    )]
    NoProject { dir: PathBuf },

    /// The folder holds the files of more than one language.
    #[error(
        "{} looks like more than one kind of project ({}); say which with --lang",
        .dir.display(),
        .found.iter().map(|l| l.name()).collect::<Vec<_>>().join(", ")
    )]
    AmbiguousProject { dir: PathBuf, found: Vec<Language> },

    /// The project path is not a folder.
    #[error("{} is not a folder; give the handler project's folder", .path.display())]
    NotAFolder { path: PathBuf },

    /// The project folder's name cannot serve as the default task type.
    #[error("the project folder {} has no usable name; give the task type with --name", .dir.display())]
    UnnamedProject { dir: PathBuf },

    /// A name that cannot be a task type (a task type is also its plugin's file name). `build`:
    /// the name is a build's (the project folder's or `--name`), which `--name` can change.
    #[error(
        "`{name}` cannot be a task type: use 1-64 letters, digits, `_` or `-`{}",
        if *.build { " (pass --name to choose another)" } else { "" }
    )]
    InvalidTaskType { name: String, build: bool },

    /// `spool plugin new` would overwrite an existing folder.
    #[error("{} already exists; choose another name or remove it", .dir.display())]
    ProjectExists { dir: PathBuf },

    /// The project's manifest is one the host would refuse; `message` is the host's.
    #[error(
        "{}: invalid manifest: {message}; nothing was built or written to the plugin folder",
        .path.display()
    )]
    InvalidManifest { path: PathBuf, message: String },

    /// The project lacks something its language's build needs; `problem` says what and what
    /// to do, after the folder's name.
    #[error("{} {problem}", .dir.display())]
    IncompleteProject { dir: PathBuf, problem: String },

    /// A program a build runs is not installed; `hint` says how to install it.
    #[error("cannot find the program for `{command}`: {hint}")]
    ToolMissing { command: String, hint: String },

    /// A program a build runs exists but could not be started.
    #[error("cannot start `{command}`")]
    ToolStart {
        command: String,
        #[source]
        source: io::Error,
    },

    /// Part of the C toolchain (from the system's packages) is missing; `fix` installs it.
    #[error("{problem}; {fix}")]
    IncompleteToolchain { problem: String, fix: String },

    /// Installing a pinned tool into the tools folder failed (the next build tries again).
    #[error("cannot install {requirement} into {}", .venv.display())]
    InstallFailed {
        requirement: String,
        venv: PathBuf,
        #[source]
        source: Box<Error>,
    },

    /// A build step ran and failed. `output` holds its messages when they were captured;
    /// when empty, they were shown as the step ran.
    #[error("`{command}` failed ({status}){}", messages(.output))]
    CommandFailed {
        command: String,
        status: ExitStatus,
        output: String,
    },

    /// The C compiler refused the handler's sources; `diagnostics` are its messages.
    #[error("{compiler} failed ({status}) compiling the C handler:\n{}", .diagnostics.trim_end())]
    CompileFailed {
        compiler: String,
        status: ExitStatus,
        diagnostics: String,
    },

    /// A Rust build produced no component or program.
    #[error(
        "the crate produced no .wasm; a handler is a `cdylib` (crate-type = [\"cdylib\"]) or a `bin`"
    )]
    NoArtifact,

    /// A Rust build produced several, none named like the task type.
    #[error(
        "the build produced several components ({}); pass --name with the one to install",
        .names.join(", ")
    )]
    SeveralArtifacts { names: Vec<String> },

    /// Reading the WIT, generating bindings or making the component failed; `detail` is the
    /// WebAssembly tooling's message.
    #[error("cannot {step}: {detail}")]
    Component { step: String, detail: String },

    /// A Python build failed and app.py's handler class is visibly the reason.
    #[error("{problem}")]
    HandlerClass {
        problem: String,
        #[source]
        source: Box<Error>,
    },

    /// Building the project failed; the cause is the step that did.
    #[error("building the {language} handler in {} failed", .project.display())]
    Build {
        language: Language,
        project: PathBuf,
        #[source]
        source: Box<Error>,
    },

    /// A file operation failed: `action` (as "cannot write") on `path`.
    #[error("{action} {}", .path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

fn messages(output: &str) -> String {
    match output.trim_end() {
        "" => "; its messages are above".to_string(),
        output => format!(":\n{output}"),
    }
}

/// Names the path an I/O error happened on.
pub(crate) trait IoContext<T> {
    /// `action` is what was attempted, as "cannot read".
    fn at(self, action: &'static str, path: &Path) -> Result<T>;
}

impl<T> IoContext<T> for io::Result<T> {
    fn at(self, action: &'static str, path: &Path) -> Result<T> {
        self.map_err(|source| Error::Io {
            action,
            path: path.to_path_buf(),
            source,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn a_failed_step_shows_captured_output_or_points_above() {
        let status = std::os::unix::process::ExitStatusExt::from_raw(1 << 8);
        let captured = Error::CommandFailed {
            command: "clang a.c".into(),
            status,
            output: "a.c:1: error: oops\n".into(),
        };
        assert_eq!(
            captured.to_string(),
            "`clang a.c` failed (exit status: 1):\na.c:1: error: oops"
        );
        let streamed = Error::CommandFailed {
            command: "go build".into(),
            status,
            output: String::new(),
        };
        assert!(streamed.to_string().ends_with("its messages are above"));
    }

    #[test]
    fn io_errors_name_the_path_and_keep_the_cause() {
        let error = std::fs::read("/nonexistent/spool")
            .at("cannot read", Path::new("/nonexistent/spool"))
            .unwrap_err();
        assert_eq!(error.to_string(), "cannot read /nonexistent/spool");
        assert!(error.source().is_some());
    }
}
