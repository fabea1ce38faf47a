//! `hostile` (test handler): tries to escape its folder grants through a symbolic link.
//!
//! Used to test that a guest cannot turn one grant into a way out of the grants root. A guest
//! with a writable grant that contains the host folder of another grant (`box` writable as
//! `/box`, `box/inner` as `/inner`) replaces that folder with a symbolic link whose relative
//! target climbs out (`../../../..` up to `/`, or over to the compiled-code cache). Within
//! the guest the link is harmless, because WASI resolves paths beneath the preopen; the danger
//! is a host that opens the other grant by path, following the link, on a later attempt.
//!
//! # Payload and result
//!
//! A JSON object with exactly one of these fields:
//!
//! | payload                                                   | result                        |
//! | --------------------------------------------------------- | ----------------------------- |
//! | `{"plant": {"link": "/box/inner", "target": "../../.."}}` | `{"planted": "/box/inner"}`   |
//! | `{"read": "/inner/etc/hostname"}`                         | `{"content": "…"}`            |
//! | `{"write": {"path": "/out/x", "content": "…"}}`           | `{"written": "/out/x"}`       |
//!
//! `plant` removes whatever is at `link` (a folder with everything in it, or a file) and puts
//! a symbolic link to `target` in its place. Every I/O error fails permanently, naming the
//! step: `cannot remove …`, `cannot link …`, `cannot read …`, `cannot write …`.

use serde::Deserialize;
use spool_sdk::{Failure, Handler, TaskInfo, json, log};

/// The `hostile` handler.
struct Hostile;

/// What the payload asks for.
#[derive(Debug, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case")]
enum Request {
    /// Replace `link` with a symbolic link to `target`.
    Plant {
        /// The path to replace.
        link: String,
        /// What the link points to (relative: WASI refuses absolute targets).
        target: String,
    },
    /// Read this file.
    Read(String),
    /// Write a file.
    Write {
        /// Where.
        path: String,
        /// What.
        content: String,
    },
}

fn fail(what: &str, path: &str, err: std::io::Error) -> Failure {
    Failure::Fail(format!("cannot {what} {path}: {err}"))
}

/// Creates a symbolic link at `link` pointing to `target`, through the preopened folder that
/// holds `link` (the standard library's `symlink_path` is not stable for WASI).
fn symlink(target: &str, link: &str) -> Result<(), String> {
    let mut holder = None;
    for (dir, name) in wasip2::filesystem::preopens::get_directories() {
        let prefix = name.trim_end_matches('/').to_string();
        let inside = link
            .strip_prefix(&prefix)
            .and_then(|rest| rest.strip_prefix('/'));
        if let Some(rest) = inside
            && holder
                .as_ref()
                .is_none_or(|(longest, _, _): &(String, _, _)| prefix.len() > longest.len())
        {
            holder = Some((prefix, dir, rest.to_string()));
        }
    }
    let (_, dir, rest) = holder.ok_or("no granted folder holds it")?;
    dir.symlink_at(target, &rest)
        .map_err(|code| format!("{code:?}"))
}

impl Handler for Hostile {
    fn handle(_task: TaskInfo, payload: String) -> Result<String, Failure> {
        let request: Request = json::parse_payload(&payload)?;
        log::debug(format!("{request:?}"));
        match request {
            Request::Plant { link, target } => {
                match std::fs::symlink_metadata(&link) {
                    Ok(meta) if meta.is_dir() => {
                        std::fs::remove_dir_all(&link).map_err(|e| fail("remove", &link, e))?
                    }
                    Ok(_) => std::fs::remove_file(&link).map_err(|e| fail("remove", &link, e))?,
                    Err(_) => {}
                }
                symlink(&target, &link)
                    .map_err(|e| Failure::Fail(format!("cannot link {link}: {e}")))?;
                json::to_result(&json::json!({ "planted": link }))
            }
            Request::Read(path) => {
                let content = std::fs::read_to_string(&path).map_err(|e| fail("read", &path, e))?;
                json::to_result(&json::json!({ "content": content }))
            }
            Request::Write { path, content } => {
                std::fs::write(&path, content).map_err(|e| fail("write", &path, e))?;
                json::to_result(&json::json!({ "written": path }))
            }
        }
    }
}

spool_sdk::export_handler!(Hostile);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_each_request() {
        assert_eq!(
            json::parse_payload::<Request>(
                r#"{"plant": {"link": "/box/inner", "target": "../.."}}"#
            )
            .unwrap(),
            Request::Plant {
                link: "/box/inner".into(),
                target: "../..".into()
            }
        );
        assert_eq!(
            json::parse_payload::<Request>(r#"{"read": "/inner/etc/hostname"}"#).unwrap(),
            Request::Read("/inner/etc/hostname".into())
        );
        assert_eq!(
            json::parse_payload::<Request>(r#"{"write": {"path": "/out/x", "content": "hi"}}"#)
                .unwrap(),
            Request::Write {
                path: "/out/x".into(),
                content: "hi".into()
            }
        );
        assert!(json::parse_payload::<Request>("{}").is_err());
    }
}
