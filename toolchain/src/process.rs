//! Running the compilers and installers a build drives, and installing pinned tools from PyPI
//! into the tools folder.

use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::{Error, IoContext, Result};

/// Runs a build step, streaming its output to the user; a failure names the command, and a
/// missing program adds `hint` (what to install or fix).
pub(crate) fn run(command: &mut Command, hint: &str) -> Result<()> {
    let status = command
        .status()
        .map_err(|error| start_error(command, error, hint))?;
    if !status.success() {
        return Err(Error::CommandFailed {
            command: describe(command),
            status,
            output: String::new(),
        });
    }
    Ok(())
}

/// Why `command` could not be started: its program is missing (`hint` says how to install
/// it), or something else stopped it.
pub(crate) fn start_error(command: &Command, error: io::Error, hint: &str) -> Error {
    let command = describe(command);
    if error.kind() == io::ErrorKind::NotFound {
        Error::ToolMissing {
            command,
            hint: hint.to_string(),
        }
    } else {
        Error::ToolStart {
            command,
            source: error,
        }
    }
}

/// A command as a user could type it (program and arguments, without the environment).
pub(crate) fn describe(command: &Command) -> String {
    std::iter::once(command.get_program())
        .chain(command.get_args())
        .map(|part| part.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Creates a Python virtual environment in `venv` holding exactly `requirement` (a pinned
/// `package==version`), unless it already does. Returns the environment's `bin` folder.
pub(crate) fn pip_tool(venv: &Path, requirement: &str) -> Result<PathBuf> {
    let bin = venv.join("bin");
    let stamp = venv.join("spool-installed.txt");
    if std::fs::read_to_string(&stamp).is_ok_and(|installed| installed.trim() == requirement) {
        return Ok(bin);
    }
    eprintln!("installing {requirement} into {}", venv.display());
    install(venv, &bin, requirement)
        .and_then(|()| std::fs::write(&stamp, requirement).at("cannot write", &stamp))
        .map_err(|source| Error::InstallFailed {
            requirement: requirement.to_string(),
            venv: venv.to_path_buf(),
            source: Box::new(source),
        })?;
    Ok(bin)
}

fn install(venv: &Path, bin: &Path, requirement: &str) -> Result<()> {
    let tools = venv.parent().unwrap_or(venv);
    std::fs::create_dir_all(tools).at("cannot create the tools folder", tools)?;
    run(
        Command::new("python3").args(["-m", "venv"]).arg(venv),
        "Python 3 with the venv module is needed (Debian: apt-get install python3-venv)",
    )?;
    run(
        Command::new(bin.join("pip")).args([
            "install",
            "--quiet",
            "--disable-pip-version-check",
            requirement,
        ]),
        "pip could not install the tool",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_program_is_named_with_the_hint() {
        let error = run(
            Command::new("spool-no-such-program").arg("--version"),
            "install it",
        )
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            "cannot find the program for `spool-no-such-program --version`: install it"
        );
    }

    #[test]
    fn a_failing_step_names_its_command() {
        let error = run(Command::new("false").arg("x"), "").unwrap_err();
        assert!(
            matches!(&error, Error::CommandFailed { command, output, .. } if command == "false x" && output.is_empty()),
            "{error}"
        );
    }
}
