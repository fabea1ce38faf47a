//! Rust handlers: a crate built with cargo for wasm32-wasip2. A `cdylib` using the guest SDK
//! becomes a handler component; a `bin` becomes a wasi:cli/run program (the second door).

use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::build::Recipe;
use crate::error::{Error, IoContext, Result};
use crate::process::{describe, run, start_error};

/// What to do when cargo or rustc is missing.
const INSTALL_RUST: &str =
    "Rust is needed to build Rust handlers; install it from https://rustup.rs";

/// The target handler crates are built for.
pub(crate) const TARGET: &str = "wasm32-wasip2";

/// One line of cargo's `--message-format=json` output, reduced to what finds the artifact.
#[derive(Deserialize)]
struct Message {
    reason: String,
    #[serde(default)]
    target: Option<ArtifactTarget>,
    #[serde(default)]
    filenames: Vec<PathBuf>,
}

#[derive(Deserialize)]
struct ArtifactTarget {
    name: String,
    kind: Vec<String>,
}

pub(crate) fn build(recipe: &Recipe) -> Result<()> {
    ensure_target(TARGET)?;
    let mut command = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    command
        .current_dir(recipe.project)
        .args([
            "build",
            "--release",
            "--target",
            TARGET,
            "--message-format=json-render-diagnostics",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let output = command
        .output()
        .map_err(|error| start_error(&command, error, INSTALL_RUST))?;
    if !output.status.success() {
        // The compiler's messages went to stderr as it ran.
        return Err(Error::CommandFailed {
            command: describe(&command),
            status: output.status,
            output: String::new(),
        });
    }
    let artifacts = wasm_artifacts(&String::from_utf8_lossy(&output.stdout));
    let wasm = pick(&artifacts, recipe.task_type)?;
    std::fs::copy(&wasm, recipe.output).at("cannot copy", &wasm)?;
    Ok(())
}

/// The `.wasm` files of `cdylib` and `bin` targets in cargo's JSON messages, by target name.
fn wasm_artifacts(messages: &str) -> Vec<(String, PathBuf)> {
    messages
        .lines()
        .filter_map(|line| serde_json::from_str::<Message>(line).ok())
        .filter(|m| m.reason == "compiler-artifact")
        .filter_map(|m| {
            let target = m.target?;
            if !target.kind.iter().any(|k| k == "cdylib" || k == "bin") {
                return None;
            }
            let wasm = m
                .filenames
                .into_iter()
                .find(|f| f.extension().is_some_and(|e| e == "wasm"))?;
            Some((target.name, wasm))
        })
        .collect()
}

/// The one artifact to install: the only one, or the one named like the task type.
fn pick(artifacts: &[(String, PathBuf)], task_type: &str) -> Result<PathBuf> {
    match artifacts {
        [] => Err(Error::NoArtifact),
        [(_, only)] => Ok(only.clone()),
        many => {
            let wanted = task_type.replace('-', "_");
            many.iter()
                .find(|(name, _)| name.replace('-', "_") == wanted)
                .map(|(_, path)| path.clone())
                .ok_or_else(|| Error::SeveralArtifacts {
                    names: many.iter().map(|(name, _)| name.clone()).collect(),
                })
        }
    }
}

/// Installs a target's standard library through rustup when it is missing.
pub(crate) fn ensure_target(target: &str) -> Result<()> {
    let mut rustc = Command::new("rustc");
    rustc.args(["--print", "sysroot"]);
    let sysroot = rustc
        .output()
        .map_err(|error| start_error(&rustc, error, INSTALL_RUST))?;
    let sysroot = PathBuf::from(String::from_utf8_lossy(&sysroot.stdout).trim());
    if Path::new(&sysroot)
        .join("lib/rustlib")
        .join(target)
        .exists()
    {
        return Ok(());
    }
    eprintln!("installing the {target} target with rustup");
    run(
        Command::new("rustup").args(["target", "add", target]),
        &format!("the {target} target is missing; install it with `rustup target add {target}`"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const MESSAGES: &str = r#"{"reason":"compiler-artifact","target":{"name":"spool_sdk","kind":["lib"]},"filenames":["/t/libspool_sdk.rlib"]}
{"reason":"compiler-artifact","target":{"name":"invoice","kind":["cdylib"]},"filenames":["/t/invoice.wasm"]}
{"reason":"compiler-artifact","target":{"name":"shout","kind":["bin"]},"filenames":["/t/shout.wasm"]}
not json
{"reason":"build-finished","success":true}"#;

    #[test]
    fn finds_component_and_program_artifacts() {
        let found = wasm_artifacts(MESSAGES);
        assert_eq!(
            found,
            vec![
                ("invoice".into(), PathBuf::from("/t/invoice.wasm")),
                ("shout".into(), PathBuf::from("/t/shout.wasm"))
            ]
        );
    }

    #[test]
    fn picks_the_artifact_named_like_the_task_type() {
        let found = wasm_artifacts(MESSAGES);
        assert_eq!(
            pick(&found, "shout").unwrap(),
            PathBuf::from("/t/shout.wasm")
        );
        let error = pick(&found, "other").unwrap_err().to_string();
        assert!(
            error.contains("invoice, shout") && error.contains("--name"),
            "{error}"
        );
        assert_eq!(
            pick(&found[..1], "anything").unwrap(),
            PathBuf::from("/t/invoice.wasm")
        );
        assert!(pick(&[], "x").unwrap_err().to_string().contains("cdylib"));
    }
}
