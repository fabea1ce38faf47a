//! Debian packages the build and the tests need, installed with apt-get when missing (through
//! sudo when not root). The package index is refreshed once per run, before the first install.
//! The C toolchain's, the browser test's and the clock-skew test's packages are listed here;
//! the database servers' are in `postgres.rs` and `mariadb.rs`.

use crate::process::is_root;
use crate::run;
use anyhow::{Context, Result};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};

/// Debian packages the C handlers build with (clang, its wasm32 runtime, wasi-libc).
const C_PACKAGES: &[&str] = &["clang", "lld", "wasi-libc", "libclang-rt-dev-wasm32"];

/// Debian packages the dashboard's browser test drives: headless Chromium and its WebDriver.
const BROWSER_PACKAGES: &[&str] = &["chromium", "chromium-driver"];

/// Whether this run has refreshed the package index already.
static UPDATED: AtomicBool = AtomicBool::new(false);

/// Whether dpkg has the package installed.
fn installed(package: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", package])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
}

/// A command run as root: directly when we are root, through sudo otherwise.
fn as_root(program: &str) -> Command {
    if is_root() {
        Command::new(program)
    } else {
        let mut command = Command::new("sudo");
        command.arg(program);
        command
    }
}

/// Installs the packages with apt-get (refreshing the index first, once per run); `hint` says
/// what they are for when the install fails.
pub fn install(packages: &[&str], hint: &str) -> Result<()> {
    eprintln!("installing {} with apt-get", packages.join(" "));
    // Another apt-get holding the dpkg lock is waited for, not an error.
    let lock_timeout = "DPkg::Lock::Timeout=300";
    if !UPDATED.swap(true, Ordering::SeqCst) {
        run(as_root("apt-get").args(["-o", lock_timeout, "update", "-qq"]))
            .with_context(|| format!("{hint}: `apt-get update` failed"))?;
    }
    run(as_root("apt-get")
        .args([
            "-o",
            lock_timeout,
            "install",
            "-y",
            "-qq",
            "--no-install-recommends",
        ])
        .args(packages)
        .env("DEBIAN_FRONTEND", "noninteractive"))
    .with_context(|| {
        format!(
            "{hint}; install them with `apt-get install {}`",
            packages.join(" ")
        )
    })
}

/// Installs those of `packages` that are missing; `hint` says what they are for.
fn ensure(packages: &[&str], hint: &str) -> Result<()> {
    let missing: Vec<&str> = packages
        .iter()
        .copied()
        .filter(|package| !installed(package))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    install(&missing, hint)
}

/// Installs the Debian packages C handlers need when they are missing (the tests build the C
/// example and template). Other languages' toolchains are installed by `spool plugin build`.
pub fn ensure_c_toolchain() -> Result<()> {
    ensure(C_PACKAGES, "C handlers need clang and wasi-libc")
}

/// Installs Chromium and chromedriver when missing: the dashboard's end-to-end test
/// (tests/e2e/dashboard.rs) opens every page in a real browser.
pub fn ensure_browser() -> Result<()> {
    ensure(
        BROWSER_PACKAGES,
        "the dashboard's browser test needs Chromium and chromedriver",
    )
}

/// Installs libfaketime when missing: the clock-skew test (tests/e2e/clock_skew.rs) runs a
/// host whose clock is set ahead with it.
pub fn ensure_faketime() -> Result<()> {
    ensure(
        &["libfaketime"],
        "the clock-skew test runs a host under libfaketime",
    )
}
