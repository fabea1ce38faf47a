//! The guest plugins: installs the wasm targets they build for, builds the guest crates in
//! `plugins/` (all of them for the tests, the examples alone for the demo), and copies the
//! example handlers into the plugin folder.

use crate::{cargo, run};
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The WebAssembly target handler components are built for.
const WASM_TARGET: &str = "wasm32-wasip2";
/// The target of plain WASI preview1 programs (the second door).
const WASIP1_TARGET: &str = "wasm32-wasip1";
/// Guest crates that are plain WASI programs, also built as preview1 core modules.
const COMMANDS: &[&str] = &["shout"];
/// Example handlers copied into the plugin folder for the demo; test-only handlers stay in
/// the build output where the tests find them.
const EXAMPLES: &[&str] = &["report", "notify", "flaky"];

/// Installs a target's standard library through rustup when it is missing.
fn ensure_target(target: &str) -> Result<()> {
    let sysroot = Command::new("rustc")
        .args(["--print", "sysroot"])
        .output()
        .context("cannot run rustc")?;
    let sysroot = PathBuf::from(String::from_utf8_lossy(&sysroot.stdout).trim());
    if sysroot.join("lib/rustlib").join(target).exists() {
        return Ok(());
    }
    eprintln!("installing the {target} target with rustup");
    run(Command::new("rustup").args(["target", "add", target])).with_context(|| {
        format!(
            "the {target} target is missing and rustup could not add it; install it with `rustup target add {target}`"
        )
    })
}

/// Builds every guest crate (what the tests and benchmarks use) and copies the examples into
/// the plugin folder.
pub fn build_plugins(root: &Path) -> Result<()> {
    build(root, &[])?;
    for command in COMMANDS {
        build_for(root, WASIP1_TARGET, &["-p", command])?;
    }
    copy_examples(root)
}

/// Builds only the example handlers, the ones the demo runs, and copies them into the plugin
/// folder.
pub fn build_examples(root: &Path) -> Result<()> {
    let packages: Vec<&str> = EXAMPLES.iter().flat_map(|name| ["-p", name]).collect();
    build(root, &packages)?;
    copy_examples(root)
}

/// `cargo build --release` of the guest workspace for wasm32-wasip2 (`packages`: `-p` options;
/// none builds them all).
fn build(root: &Path, packages: &[&str]) -> Result<()> {
    build_for(root, WASM_TARGET, packages)
}

fn build_for(root: &Path, target: &str, packages: &[&str]) -> Result<()> {
    ensure_target(target)?;
    run(cargo()
        .current_dir(root.join("plugins"))
        .args(["build", "--release", "--target", target])
        .args(packages)
        .env_remove("CARGO_TARGET_DIR"))
}

fn copy_examples(root: &Path) -> Result<()> {
    let plugins = root.join("plugins");
    let built = plugins.join("target").join(WASM_TARGET).join("release");
    for name in EXAMPLES {
        let wasm = built.join(format!("{name}.wasm"));
        copy_if_changed(&wasm, &plugins.join(format!("{name}.wasm")))?;
        let manifest = plugins.join("rust").join(name).join(format!("{name}.toml"));
        if manifest.exists() {
            copy_if_changed(&manifest, &plugins.join(format!("{name}.toml")))?;
        }
    }
    eprintln!("example plugins are in {}", plugins.display());
    Ok(())
}

/// Copies only when the content differs, so an unchanged plugin keeps its file untouched.
fn copy_if_changed(from: &Path, to: &Path) -> Result<()> {
    let bytes = std::fs::read(from).with_context(|| format!("cannot read {}", from.display()))?;
    if std::fs::read(to).ok().as_deref() != Some(&bytes[..]) {
        // Written under a temporary name and renamed, so a reader never sees half a file.
        let partial = to.with_extension("partial");
        std::fs::write(&partial, &bytes)
            .with_context(|| format!("cannot write {}", partial.display()))?;
        std::fs::rename(&partial, to)?;
    }
    Ok(())
}
