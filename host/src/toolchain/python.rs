//! Python handlers: `app.py` with a `WitWorld` class, built into a component by
//! componentize-py. The pinned componentize-py is installed into a virtual environment in
//! the tools folder on first use.
//!
//! componentize-py bundles a CPython interpreter: components are large (~18 MB) and take
//! seconds to compile on first load; the host's compiled-code cache makes every later load
//! take milliseconds.

use anyhow::Result;
use std::process::Command;

use super::{Recipe, pip_tool, run};

/// The pinned componentize-py from PyPI.
pub(crate) const COMPONENTIZE_PY: &str = "componentize-py==0.25.1";

pub(crate) fn build(recipe: &Recipe) -> Result<()> {
    let bin = pip_tool(
        &recipe.tools.join(COMPONENTIZE_PY.replace("==", "-")),
        COMPONENTIZE_PY,
    )?;
    run(
        Command::new(bin.join("componentize-py"))
            .arg("-d")
            .arg(recipe.wit_dir)
            .args(["-w", "handler", "componentize", "app", "-p"])
            .arg(recipe.project)
            .arg("-o")
            .arg(recipe.output),
        "componentize-py did not install; remove its folder in the tools folder and try again",
    )
}
