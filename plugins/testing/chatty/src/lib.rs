//! `chatty` (test handler): writes a given number of bytes to stdout and a line to stderr.
//!
//! Used to test how the host captures, limits or discards a guest's output.
//!
//! # Payload
//!
//! ```json
//! {"bytes": 250}
//! ```
//!
//! The handler writes exactly `bytes` bytes to stdout, as lines of 99 `x` and a newline
//! (100 bytes each); the last line is shorter when `bytes` is not a multiple of 100. Then it
//! writes `chatty: wrote 250 bytes to stdout` and a newline to stderr. Write errors are
//! ignored, so a host that closes or refuses the output streams does not make it fail.
//!
//! # Result
//!
//! ```json
//! {"printed": 250}
//! ```
//!
//! `printed` is the number of bytes asked for. A payload without a whole, non-negative
//! `bytes` fails permanently.

use std::io::Write;

use serde::{Deserialize, Serialize};
use spool_sdk::{Failure, Handler, TaskInfo, json};

/// The `chatty` handler.
struct Chatty;

/// The payload.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Request {
    bytes: u64,
}

/// The result.
#[derive(Serialize)]
struct Printed {
    printed: u64,
}

/// The length of a full line, newline included.
const LINE: u64 = 100;

impl Handler for Chatty {
    fn handle(_task: TaskInfo, payload: String) -> Result<String, Failure> {
        let Request { bytes } = json::parse_payload(&payload)?;
        let xs = "x".repeat(LINE as usize - 1);
        let mut stdout = std::io::stdout().lock();
        for len in line_lengths(bytes) {
            // `len` is 1..=100: the line is `len - 1` x's and a newline.
            let _ = writeln!(stdout, "{}", &xs[..len as usize - 1]);
        }
        let _ = stdout.flush();
        let _ = writeln!(std::io::stderr(), "chatty: wrote {bytes} bytes to stdout");
        json::to_result(&Printed { printed: bytes })
    }
}

spool_sdk::export_handler!(Chatty);

/// The lengths of the lines (newline included) that make up `bytes` bytes of output.
fn line_lengths(bytes: u64) -> impl Iterator<Item = u64> {
    let full = bytes / LINE;
    let rest = bytes % LINE;
    (0..full).map(|_| LINE).chain((rest > 0).then_some(rest))
}

#[cfg(test)]
mod tests {
    use super::line_lengths;

    #[test]
    fn lines_add_up_to_the_bytes_asked_for() {
        for bytes in [0, 1, 99, 100, 101, 250, 10_000] {
            let lengths: Vec<u64> = line_lengths(bytes).collect();
            assert_eq!(lengths.iter().sum::<u64>(), bytes);
            assert!(lengths.iter().all(|&len| (1..=100).contains(&len)));
        }
        assert_eq!(line_lengths(250).collect::<Vec<_>>(), [100, 100, 50]);
    }
}
