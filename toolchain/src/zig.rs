//! Zig handlers: plain WASI programs built with `zig build-exe -target wasm32-wasi`.
//!
//! The pinned Zig comes from PyPI's `ziglang` package, installed into a virtual environment
//! in the tools folder on first use. Zig's standard library changes between releases, so the
//! template is written for exactly this version. Caches stay inside the tools folder.

use std::process::Command;

use crate::build::Recipe;
use crate::error::{Error, IoContext, Result};
use crate::process::{pip_tool, run};

/// The pinned Zig from PyPI.
pub(crate) const ZIGLANG: &str = "ziglang==0.17.1";

pub(crate) fn build(recipe: &Recipe) -> Result<()> {
    let bin = pip_tool(&recipe.tools.join(ZIGLANG.replace("==", "-")), ZIGLANG)?;
    let main = main_file(recipe)?;
    let state = recipe.tools.join("zig-state");
    run(
        Command::new(bin.join("python"))
            .current_dir(recipe.project)
            .args(["-m", "ziglang", "build-exe"])
            .arg(&main)
            .args([
                "-target",
                "wasm32-wasi",
                "-O",
                "ReleaseSmall",
                "--cache-dir",
            ])
            .arg(state.join("cache"))
            .arg("--global-cache-dir")
            .arg(state.join("global-cache"))
            .arg(format!("-femit-bin={}", recipe.output.display())),
        "the Zig toolchain did not install; remove its folder in the tools folder and try again",
    )
}

/// The program's root file: `NAME.zig`, or `main.zig`, or the only `.zig` file.
fn main_file(recipe: &Recipe) -> Result<String> {
    for candidate in [format!("{}.zig", recipe.task_type), "main.zig".to_string()] {
        if recipe.project.join(&candidate).is_file() {
            return Ok(candidate);
        }
    }
    let zig_files: Vec<String> = std::fs::read_dir(recipe.project)
        .at("cannot read", recipe.project)?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            e.file_name()
                .to_str()
                .filter(|n| n.ends_with(".zig"))
                .map(str::to_string)
        })
        .collect();
    match zig_files.as_slice() {
        [only] => Ok(only.clone()),
        _ => Err(Error::IncompleteProject {
            dir: recipe.project.to_path_buf(),
            problem: format!(
                "has no .zig file Spool can tell is the program; name it {}.zig or main.zig",
                recipe.task_type
            ),
        }),
    }
}
