//! Processes and ports of the test database servers: which processes serve a data folder (found
//! by their command line, so a stale pid file or a reused pid never points at a stranger),
//! signalling them and waiting for them to end, free loopback ports, whether we run as root,
//! and the last lines of a server log for error messages.

use anyhow::{Context, Result, bail};
use std::fs;
use std::net::TcpListener;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The lowest port a server may get: below it live well-known services and their defaults.
const LOWEST_PORT: u16 = 10_000;

/// Whether this process runs as root.
pub fn is_root() -> bool {
    fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// The running processes whose command line has `argument` as one of its arguments.
pub fn with_argument(argument: &str) -> Vec<u32> {
    let me = std::process::id();
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me)
        .filter(|&pid| {
            fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|line| line.split(|&b| b == 0).any(|a| a == argument.as_bytes()))
        })
        .filter(|&pid| alive(pid))
        .collect()
}

/// The running processes whose working folder is `dir` or inside it: both servers work in
/// their data folder, PostgreSQL's child processes too (their command lines do not name it).
pub fn working_in(dir: &Path) -> Vec<u32> {
    let me = std::process::id();
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me)
        .filter(|&pid| {
            fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd.starts_with(dir))
        })
        .filter(|&pid| alive(pid))
        .collect()
}

/// Whether the process exists and has not ended (a zombie, ended but not yet reaped by its
/// parent, has ended).
pub fn alive(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X']))
    })
}

/// Sends a signal (by name: `INT`, `TERM`, `KILL`) to a process.
pub fn signal(pid: u32, name: &str) {
    let _ = Command::new("kill")
        .args(["-s", name, &pid.to_string()])
        .status();
}

/// Waits until none of the processes is alive; whether they all ended within the timeout.
pub fn wait_ended(pids: &[u32], timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if !pids.iter().any(|&pid| alive(pid)) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether nothing listens on the loopback port.
pub fn port_free(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_ok()
}

/// A free loopback port below the kernel's ephemeral range, so the outgoing connections the
/// tests make never take a stopped server's port before it starts again.
pub fn free_port() -> Result<u16> {
    let ephemeral_low = fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32_768);
    let span = u64::from(ephemeral_low.saturating_sub(LOWEST_PORT));
    if span > 100 {
        let mut x = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
            ^ (u64::from(std::process::id()) << 32)
            | 1;
        for _ in 0..500 {
            // xorshift: a different candidate each try, different runs start elsewhere.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let port = LOWEST_PORT + (x % span) as u16;
            if port_free(port) {
                return Ok(port);
            }
        }
    }
    match TcpListener::bind(("127.0.0.1", 0)).and_then(|l| l.local_addr()) {
        Ok(address) => Ok(address.port()),
        Err(error) => bail!("cannot find a free port on 127.0.0.1: {error}"),
    }
}

/// The last lines of a log file, for an error message.
pub fn log_tail(path: &Path, lines: usize) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    let tail = all[all.len().saturating_sub(lines)..].join("\n");
    format!("last lines of {}:\n{tail}", path.display())
}

/// A program on PATH, or in the system folders a user's PATH may lack (`/usr/sbin` holds
/// `mariadbd`).
pub fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/local/sbin", "/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// Runs a command to completion with its output captured, failing with that output (so a
/// server tool's complaint reaches the error message) when it does not succeed.
pub fn run_captured(command: &mut Command) -> Result<String> {
    let shown = format!("{command:?}");
    let output = command
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot start {shown}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    if !output.status.success() {
        bail!(
            "{shown} failed with {}:\n{}",
            output.status,
            text.trim_end()
        );
    }
    Ok(text)
}
