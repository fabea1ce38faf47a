//! Building handlers from source: `spool plugin new` (a project from a template) and
//! `spool plugin build` (a project into `NAME.wasm` in the plugin folder).
//!
//! One module per language holds that language's recipe. Each recipe drives the language's own
//! compiler as a subprocess and installs pinned toolchains on first use into the tools folder
//! (a Python virtual environment for componentize-py, Go and Zig; npm packages in the
//! project's own folder), so the same command works on a fresh machine. Only C needs system
//! packages (clang and wasi-libc from the distribution), and says so when they are missing.
//!
//! The WIT a project builds against is the one embedded here ([`HANDLER_WIT`], the repository's
//! `wit/handler.wit`), the contract the host implements, so a handler can never be built
//! against a different one.
//!
//! Failures are an [`Error`]: each case says what went wrong and what to do, with the step
//! that failed as its [`source`](std::error::Error::source).
//!
//! # Beside the host, not inside it
//! The `spool` host runs handlers; it never compiles them. This crate holds everything that
//! does (wit-bindgen's C generator, wit-component and the WASI preview1 adapter, the
//! templates), and the host depends on it only through its default-on cargo feature
//! `toolchain`, for the `spool` binary's `plugin new` and `plugin build`. The `spool` library
//! never uses it, and `cargo build -p spool --no-default-features` builds a server without it.
//!
//! # The host's rules
//! A build must not deploy a manifest the host would refuse, so `NAME.toml` is checked before
//! anything is built. The check belongs to the host: its manifest parser knows retry and
//! backoff limits, the grants rules, schedules with their cron and time zones, and sharing it
//! through a common crate would carry most of the host's policy model along. So the caller
//! hands the check in: [`BuildRequest::check_manifest`] is the host's verdict on a manifest's
//! text, which the `spool` binary fills with its own parser. This crate needs nothing of the
//! host, and the host stays the one owner of what a manifest means. The other rule both
//! share, which names can be task types, comes from the crate that defines it for every Spool
//! crate (`spool_rules::names::is_valid_task_type`).

mod build;
mod c;
mod error;
mod files;
mod fingerprint;
mod go;
mod javascript;
mod language;
mod process;
mod python;
mod rust;
mod template;
mod zig;

pub use build::{BuildRequest, Built, ManifestCheck, build};
pub use error::{Error, Result};
pub use language::Language;
pub use template::new_project;

use std::path::PathBuf;

/// The handler contract (`wit/handler.wit`) the host implements.
pub const HANDLER_WIT: &str = include_str!("../../wit/handler.wit");

/// Where pinned toolchains go unless `--tools-dir` says otherwise: `$XDG_CACHE_HOME/spool/tools`
/// or `~/.cache/spool/tools`.
pub fn default_tools_dir() -> PathBuf {
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))
        .unwrap_or_else(|| PathBuf::from(".spool"));
    cache.join("spool").join("tools")
}
