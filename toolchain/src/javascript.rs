//! JavaScript handlers: an ES module `app.js` exporting `handle`, built into a component by
//! componentize-js (a SpiderMonkey-based JavaScript engine, snapshotted with the module).
//!
//! componentize-js is an npm package: the project's `package.json` pins it, and the build
//! runs `npm ci` (with a lock file) or `npm install` in the project folder when its
//! `node_modules` is missing or older than the manifest. The default (non-AOT) mode is used:
//! AOT compilation needs a tool that npm does not provide.

use std::path::Path;
use std::process::Command;

use crate::build::Recipe;
use crate::error::{Error, Result};
use crate::process::run;

pub(crate) fn build(recipe: &Recipe) -> Result<()> {
    let project = recipe.project;
    if !project.join("app.js").is_file() {
        return Err(Error::IncompleteProject {
            dir: project.to_path_buf(),
            problem:
                "has no app.js; a JavaScript handler is an ES module app.js exporting `handle`"
                    .into(),
        });
    }
    install_packages(project)?;
    let cli = project.join("node_modules/.bin/componentize-js");
    if !cli.exists() {
        return Err(Error::IncompleteProject {
            dir: project.to_path_buf(),
            problem: "has no componentize-js after npm install; add \"@bytecodealliance/componentize-js\" to its devDependencies"
                .into(),
        });
    }
    run(
        Command::new("node")
            .current_dir(project)
            .arg(&cli)
            .arg("app.js")
            .arg("--wit")
            .arg(recipe.wit_dir)
            .args(["--world-name", "handler", "--out"])
            .arg(recipe.output),
        "Node.js 20 or later is needed to build JavaScript handlers (https://nodejs.org, or Debian's nodejs package)",
    )
}

/// Installs the project's npm packages unless `node_modules` is newer than the manifests.
fn install_packages(project: &Path) -> Result<()> {
    let modified = |path: &Path| std::fs::metadata(path).and_then(|m| m.modified()).ok();
    let installed = modified(&project.join("node_modules/.package-lock.json"));
    let manifests = [
        modified(&project.join("package.json")),
        modified(&project.join("package-lock.json")),
    ];
    if installed.is_some_and(|installed| manifests.iter().flatten().all(|m| *m <= installed)) {
        return Ok(());
    }
    let locked = project.join("package-lock.json").is_file();
    let mut npm = Command::new("npm");
    npm.current_dir(project).args([
        if locked { "ci" } else { "install" },
        "--no-audit",
        "--no-fund",
        "--loglevel=error",
    ]);
    run(
        &mut npm,
        "npm is needed to build JavaScript handlers (it comes with Node.js)",
    )
}
