//! `readfile` (test handler): reads or writes a file, or reads an environment variable.
//!
//! Used to test what the host lets a handler see: preopened directories, their permissions,
//! and environment variables.
//!
//! # Payload and result
//!
//! A JSON object with exactly one of these fields:
//!
//! | payload                                                | result                     |
//! | ------------------------------------------------------ | -------------------------- |
//! | `{"path": "/data/in.txt"}`                             | `{"content": "…"}`         |
//! | `{"write": {"path": "/out/x.txt", "content": "…"}}`    | `{"written": "/out/x.txt"}` |
//! | `{"env": "NAME"}`                                      | `{"value": "…"}`, or `{"value": null}` when unset |
//!
//! Reading fails permanently with `cannot read /data/in.txt: <error>` when the file cannot
//! be read (missing, not preopened, not UTF-8), and writing with
//! `cannot write /out/x.txt: <error>`. Any other payload fails permanently.

use serde::Deserialize;
use spool_sdk::{Failure, Handler, TaskInfo, json, log};

/// The `readfile` handler.
struct Readfile;

/// What the payload asks for.
#[derive(Debug, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case")]
enum Request {
    /// Read this file.
    Path(String),
    /// Write a file.
    Write {
        /// Where.
        path: String,
        /// What.
        content: String,
    },
    /// Read this environment variable.
    Env(String),
}

impl Handler for Readfile {
    fn handle(_task: TaskInfo, payload: String) -> Result<String, Failure> {
        let request: Request = json::parse_payload(&payload)?;
        log::debug(format!("{request:?}"));
        match request {
            Request::Path(path) => {
                let content = std::fs::read_to_string(&path)
                    .map_err(|err| Failure::Fail(format!("cannot read {path}: {err}")))?;
                json::to_result(&json::json!({ "content": content }))
            }
            Request::Write { path, content } => {
                std::fs::write(&path, content)
                    .map_err(|err| Failure::Fail(format!("cannot write {path}: {err}")))?;
                json::to_result(&json::json!({ "written": path }))
            }
            Request::Env(name) => {
                json::to_result(&json::json!({ "value": std::env::var(name).ok() }))
            }
        }
    }
}

spool_sdk::export_handler!(Readfile);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_each_request() {
        assert_eq!(
            json::parse_payload::<Request>(r#"{"path": "/data/in.txt"}"#).unwrap(),
            Request::Path("/data/in.txt".into())
        );
        assert_eq!(
            json::parse_payload::<Request>(r#"{"write": {"path": "/out/x", "content": "hi"}}"#)
                .unwrap(),
            Request::Write {
                path: "/out/x".into(),
                content: "hi".into()
            }
        );
        assert_eq!(
            json::parse_payload::<Request>(r#"{"env": "HOME"}"#).unwrap(),
            Request::Env("HOME".into())
        );
        assert!(json::parse_payload::<Request>(r#"{"path": "a", "env": "B"}"#).is_err());
        assert!(json::parse_payload::<Request>("{}").is_err());
    }
}
