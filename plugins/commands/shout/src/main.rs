//! `shout`: a handler written as a plain WASI program, the door for any language that builds
//! one. Built for wasm32-wasip2 it is a component exporting `wasi:cli/run`; built for
//! wasm32-wasip1 it is a core module with `_start`. Spool runs both the same way.
//!
//! Reads the JSON payload from stdin:
//! - `{"text": "hi"}` → prints `{"shout": "HI"}` on stdout and exits 0 (done);
//! - `{"text": "hi", "fail": "reason"}` → prints the reason on stderr and exits 3 (retried);
//! - anything that is not such an object → a message on stderr, exit 2.

use std::io::Read;
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut input = String::new();
    if let Err(error) = std::io::stdin().read_to_string(&mut input) {
        eprintln!("cannot read the payload from stdin: {error}");
        return ExitCode::from(2);
    }
    let payload: serde_json::Value = match serde_json::from_str(&input) {
        Ok(value) => value,
        Err(error) => {
            eprintln!("the payload is not JSON: {error}");
            return ExitCode::from(2);
        }
    };
    if let Some(reason) = payload["fail"].as_str() {
        eprintln!("shout refuses: {reason}");
        return ExitCode::from(3);
    }
    let Some(text) = payload["text"].as_str() else {
        eprintln!("the payload needs a \"text\" string");
        return ExitCode::from(2);
    };
    println!("{}", serde_json::json!({ "shout": text.to_uppercase() }));
    ExitCode::SUCCESS
}
