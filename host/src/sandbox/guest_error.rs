//! Why a guest stopped, in its own words: the end of its output read the way each language's
//! runtime writes an uncaught error.
//!
//! A guest that throws, panics or aborts prints its error to stderr and then traps (or, as a
//! plain WASI program, exits with a failure status). The trap alone says little ("unreachable
//! code"), and the last lines of the output are often the runtime's noise rather than the
//! error: componentize-py ends with "Python function threw an unexpected exception" and a
//! note about `RUST_BACKTRACE` that concerns its own Rust code, componentize-js with
//! "mozalloc_abort", Go with stack frames. [`explain`] finds the error instead:
//! - Python: the exception's type and message and the last frames of the traceback (and a
//!   handler's result of the wrong type, which componentize-py reports as a Rust panic);
//! - JavaScript: the thrown value and the first frames of the user's stack, without the
//!   bindings' frames and the abort notice (and a result that is not a string);
//! - Rust: the panic's message and location, without the `RUST_BACKTRACE` note;
//! - Go: the panic (or fatal error) and its innermost frames;
//! - Zig: the panic's message;
//! - C: a failed assertion's text.
//!
//! Anything else falls back to the last lines of output, noise left out. Explanations are
//! bounded ([`MAX_EXPLANATION_BYTES`]); the caller cleans them like any guest text. The
//! sandbox looks for an error only when the guest stopped itself (a trap on `unreachable`, a
//! program's failed exit); after fuel, time or memory ran out it shows the last lines
//! ([`output_lines`]), as an error printed earlier is not the cause. The fixtures of the tests
//! (`guest_error/*.log`) are task logs of real handlers built with `spool plugin build`.

/// How many bytes from the end of a guest's output are read to explain a failure.
pub const TAIL_BYTES: usize = 16 << 10;
/// The most bytes of an explanation.
pub const MAX_EXPLANATION_BYTES: usize = 1500;
/// How many stack frames an explanation shows.
const FRAMES: usize = 3;
/// How many lines of output the fallback shows.
const LAST_LINES: usize = 3;

/// What the end of a guest's output says about its failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LastWords {
    /// An error recognized in one language's format, explained.
    Recognized(String),
    /// No known format: the last lines of output (noise left out), joined with ` | `.
    Lines(String),
}

impl LastWords {
    /// `reason` (how the sandbox saw the attempt end) with the guest's words: a recognized
    /// error leads, plain output lines follow.
    pub fn with_reason(words: Option<LastWords>, reason: &str) -> String {
        match words {
            Some(LastWords::Recognized(error)) => format!("{error}; {reason}"),
            Some(LastWords::Lines(lines)) => format!("{reason}; last output: {lines}"),
            None => reason.to_string(),
        }
    }

    /// The explanation or the lines alone.
    pub fn text(&self) -> &str {
        match self {
            LastWords::Recognized(text) | LastWords::Lines(text) => text,
        }
    }
}

/// Explains the end of a guest's output (`tail`), or `None` when it printed nothing useful.
pub fn explain(tail: &str) -> Option<LastWords> {
    let lines: Vec<&str> = tail.lines().map(str::trim_end).collect();
    let recognized = python_traceback(&lines)
        .or_else(|| python_result_error(&lines))
        .or_else(|| javascript(&lines))
        .or_else(|| rust_panic(&lines))
        .or_else(|| go_panic(&lines))
        .or_else(|| zig_panic(&lines))
        .or_else(|| c_assertion(&lines));
    match recognized {
        Some(text) => Some(LastWords::Recognized(bounded(text))),
        None => last_lines(&lines).map(|text| LastWords::Lines(bounded(text))),
    }
}

/// The last lines of a guest's output (noise left out), without looking for an error in them.
pub fn output_lines(tail: &str) -> Option<LastWords> {
    let lines: Vec<&str> = tail.lines().map(str::trim_end).collect();
    last_lines(&lines).map(|text| LastWords::Lines(bounded(text)))
}

/// Lines that are a runtime's noise, never the error.
fn is_noise(line: &str) -> bool {
    let line = line.trim();
    line.is_empty()
        || line.starts_with("[spool")
        || line.starts_with("note: run with `RUST_BACKTRACE")
        || line == "Redirecting call to abort() to mozalloc_abort"
        || line == "Cannot print stack trace: stack tracing is disabled"
}

fn last_lines(lines: &[&str]) -> Option<String> {
    let mut last: Vec<&str> = lines
        .iter()
        .rev()
        .filter(|line| !is_noise(line))
        .map(|line| line.trim())
        .take(LAST_LINES)
        .collect();
    if last.is_empty() {
        return None;
    }
    last.reverse();
    Some(last.join(" | "))
}

fn bounded(mut text: String) -> String {
    if text.len() > MAX_EXPLANATION_BYTES {
        let mut end = MAX_EXPLANATION_BYTES;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

/// A CPython traceback: `Traceback (most recent call last):`, `  File "...", line N, in f`
/// frames (each maybe followed by its source line), then `Type: message`.
fn python_traceback(lines: &[&str]) -> Option<String> {
    let start = lines
        .iter()
        .rposition(|line| line.trim() == "Traceback (most recent call last):")?;
    let mut frames = Vec::new();
    let mut at = start + 1;
    while let Some(line) = lines.get(at) {
        if let Some(frame) = line.trim_start().strip_prefix("File ") {
            frames.push(python_frame(frame));
        } else if !(line.starts_with(' ') || line.starts_with('\t')) {
            break;
        }
        at += 1;
    }
    let message: Vec<&str> = lines[at..]
        .iter()
        .take_while(|line| !line.trim().is_empty() && !line.starts_with("thread '"))
        .map(|line| line.trim())
        .collect();
    if message.is_empty() {
        return None;
    }
    let mut text = format!("uncaught Python exception {}", message.join(" / "));
    if !frames.is_empty() {
        let shown = &frames[frames.len().saturating_sub(FRAMES)..];
        text.push_str(&format!(
            " (traceback, most recent call last: {})",
            shown.join(" → ")
        ));
    }
    Some(text)
}

/// `"/0/app.py", line 31, in handle` as `/0/app.py:31 in handle`.
fn python_frame(frame: &str) -> String {
    let parsed = frame.strip_prefix('"').and_then(|rest| {
        let (path, rest) = rest.split_once("\", line ")?;
        let (line, function) = rest.split_once(", in ")?;
        Some(format!("{path}:{line} in {}", function.trim()))
    });
    parsed.unwrap_or_else(|| frame.trim().to_string())
}

/// componentize-py's report of a Python error outside the handler's own code, as a Rust
/// panic: `... PyErr { type: <class 'TypeError'>, value: TypeError("..."), traceback: None }`.
/// A handler returning something other than a `str` ends this way.
fn python_result_error(lines: &[&str]) -> Option<String> {
    let line = lines
        .iter()
        .rev()
        .find(|line| line.contains("PyErr { type: <class '"))?;
    let (_, rest) = line.split_once("PyErr { type: <class '")?;
    let (kind, rest) = rest.split_once("'>")?;
    let value = rest
        .split_once("value: ")
        .map(|(_, value)| value.rsplit_once(", traceback:").map_or(value, |(v, _)| v))
        .unwrap_or_default();
    let message = value
        .strip_prefix(kind)
        .and_then(|v| v.strip_prefix('('))
        .and_then(|v| v.strip_suffix(')'))
        .map(unquote)
        .unwrap_or(value);
    let mut text = format!("Python {kind}: {message}");
    if message.contains("is not an instance of 'str'") {
        text.push_str(
            " (the handler returned something other than a str: return json.dumps(result))",
        );
    }
    Some(text)
}

/// A Rust string literal's text without its surrounding quotes.
fn unquote(text: &str) -> &str {
    ['"', '\'']
        .iter()
        .find_map(|quote| text.strip_prefix(*quote)?.strip_suffix(*quote))
        .unwrap_or(text)
}

/// A componentize-js (SpiderMonkey) abort: the error's message, `Stack:` with `fn@file:line:col`
/// frames, and the abort notice.
fn javascript(lines: &[&str]) -> Option<String> {
    let aborted = lines.iter().any(|line| {
        line.contains("to mozalloc_abort") || line.contains("/sources/initializer.js:")
    });
    if !aborted {
        return None;
    }
    let stack_at = lines.iter().rposition(|line| line.trim() == "Stack:");
    let (message, stack) = match stack_at {
        Some(at) => {
            let mut first = at;
            while first > 0 && !is_message_boundary(lines[first - 1]) {
                first -= 1;
            }
            let message: Vec<&str> = lines[first..at].iter().map(|l| l.trim()).collect();
            let stack: Vec<&str> = lines[at + 1..]
                .iter()
                .take_while(|line| !line.trim().is_empty())
                .map(|line| line.trim())
                .collect();
            (message.join(" / "), stack)
        }
        None => (last_lines(lines)?, Vec::new()),
    };
    let user_stack = user_frames(&lines[..stack_at.unwrap_or(lines.len())]).unwrap_or_else(|| {
        stack
            .iter()
            .copied()
            .filter(|frame| !frame.contains("/sources/initializer.js:"))
            .take(FRAMES)
            .collect()
    });
    let bindings_frame = |name: &str| stack.iter().any(|frame| frame.starts_with(name));
    let mut text = if let Some(thrown) = thrown_value(&message) {
        format!(
            "uncaught JavaScript exception {thrown} (to fail on purpose, throw {{tag: 'fail', val: message}} or {{tag: 'retry', val: message}})"
        )
    } else if message.starts_with("expected a string, received") && bindings_frame("export_handle@")
    {
        format!(
            "the handler returned {}, not a string: return JSON.stringify(result)",
            message.trim_start_matches("expected a string, received ")
        )
    } else {
        format!("JavaScript error: {message}")
    };
    if !user_stack.is_empty() {
        text.push_str(&format!(" (stack: {})", user_stack.join(" ← ")));
    }
    Some(text)
}

/// Whether a line is a SpiderMonkey stack frame: `function@file:line:column`.
fn is_js_frame(line: &str) -> bool {
    let line = line.trim();
    let mut parts = line.rsplitn(3, ':');
    line.contains('@')
        && parts.next().is_some_and(|c| c.parse::<u32>().is_ok())
        && parts.next().is_some_and(|l| l.parse::<u32>().is_ok())
}

/// The first frames of the last stack printed before the bindings' report (the template
/// prints an Error's stack when it passes through `handle`), bindings' frames left out.
fn user_frames<'a>(lines: &[&'a str]) -> Option<Vec<&'a str>> {
    let end = lines.iter().rposition(|line| is_js_frame(line))? + 1;
    let start = lines[..end]
        .iter()
        .rposition(|line| !is_js_frame(line))
        .map_or(0, |at| at + 1);
    let frames: Vec<&str> = lines[start..end]
        .iter()
        .map(|line| line.trim())
        .filter(|frame| !frame.contains("/sources/initializer.js:"))
        .take(FRAMES)
        .collect();
    (!frames.is_empty()).then_some(frames)
}

/// Where a message printed before a JavaScript `Stack:` begins: after an empty line, a log
/// line (`[info] ...`) or another stack.
fn is_message_boundary(line: &str) -> bool {
    let line = line.trim();
    line.is_empty()
        || line.starts_with('[')
        || line == "Stack:"
        || (line.contains('@') && line.contains(".js:"))
}

/// The thrown value in the bindings' complaint about a `throw` that is not a `failure`:
/// ``invalid variant tag value `undefined` (received `TypeError: boom`) specified for `Failure` ``.
fn thrown_value(message: &str) -> Option<&str> {
    let (_, rest) = message.split_once("(received `")?;
    let (value, _) = rest.rsplit_once("`) specified for `Failure`")?;
    Some(value)
}

/// A Rust panic: `thread '...' panicked at FILE:LINE:COL:` then the message.
fn rust_panic(lines: &[&str]) -> Option<String> {
    let at = lines
        .iter()
        .rposition(|line| line.starts_with("thread '") && line.contains("' panicked at "))?;
    let (_, location) = lines[at].split_once(" panicked at ")?;
    let location = location.trim_end_matches(':');
    let message: Vec<&str> = lines[at + 1..]
        .iter()
        .take_while(|line| {
            !line.trim().is_empty() && !line.starts_with("note: run with `RUST_BACKTRACE")
        })
        .map(|line| line.trim())
        .collect();
    Some(format!("panicked at {location}: {}", message.join(" / ")))
}

/// A Go panic or fatal error: `panic: message` (or `fatal error: message`), an empty line,
/// `goroutine N [running]:` and frames (a function line, then a tab and `file:line +0x..`).
fn go_panic(lines: &[&str]) -> Option<String> {
    let goroutine = lines
        .iter()
        .position(|line| line.starts_with("goroutine ") && line.ends_with("]:"))?;
    let start = lines[..goroutine]
        .iter()
        .rposition(|line| line.starts_with("panic: ") || line.starts_with("fatal error: "))?;
    let message: Vec<&str> = lines[start..goroutine]
        .iter()
        .filter(|line| !line.trim().is_empty())
        .map(|line| line.trim())
        .collect();
    let mut frames = Vec::new();
    let mut at = goroutine + 1;
    while frames.len() < FRAMES && at < lines.len() {
        let function = lines[at];
        if function.trim().is_empty() || function.starts_with("goroutine ") {
            break;
        }
        let place = lines.get(at + 1).map(|l| l.trim()).unwrap_or_default();
        let place = place.split(" +0x").next().unwrap_or(place);
        frames.push(format!("{function} at {place}"));
        at += 2;
    }
    let mut text = message.join(" / ");
    if !frames.is_empty() {
        text.push_str(&format!(
            " ({}, innermost first: {})",
            lines[goroutine].trim_end_matches(':'),
            frames.join(" ← ")
        ));
    }
    Some(text)
}

/// A Zig panic: `panic: message`, then a stack trace or a note that tracing is disabled.
fn zig_panic(lines: &[&str]) -> Option<String> {
    let line = lines
        .iter()
        .rev()
        .find(|line| line.starts_with("panic: "))?;
    Some(line.trim().to_string())
}

/// A failed C `assert` (wasi-libc): `Assertion failed: EXPR (FILE: FUNCTION: LINE)`.
fn c_assertion(lines: &[&str]) -> Option<String> {
    let line = lines
        .iter()
        .rev()
        .find(|line| line.starts_with("Assertion failed: "))?;
    Some(line.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Output captured from real handlers (see the fixtures' folder).
    fn fixture(name: &str) -> LastWords {
        let text = match name {
            "python_raise" => include_str!("guest_error/python_raise.log"),
            "python_dict" => include_str!("guest_error/python_dict.log"),
            "python_template_raise" => include_str!("guest_error/python_template_raise.log"),
            "javascript_template_throw" => {
                include_str!("guest_error/javascript_template_throw.log")
            }
            "javascript_throw" => include_str!("guest_error/javascript_throw.log"),
            "javascript_object" => include_str!("guest_error/javascript_object.log"),
            "c_assert" => include_str!("guest_error/c_assert.log"),
            "c_abort" => include_str!("guest_error/c_abort.log"),
            "go_panic" => include_str!("guest_error/go_panic.log"),
            "go_index" => include_str!("guest_error/go_index.log"),
            "zig_panic" => include_str!("guest_error/zig_panic.log"),
            _ => unreachable!("no fixture {name}"),
        };
        explain(text).expect("the fixture explains something")
    }

    fn recognized(name: &str) -> String {
        match fixture(name) {
            LastWords::Recognized(text) => {
                assert!(!text.contains("RUST_BACKTRACE"), "{text}");
                text
            }
            other => panic!("{name} was not recognized: {other:?}"),
        }
    }

    #[test]
    fn python_exceptions_show_type_message_and_frames() {
        assert_eq!(
            recognized("python_raise"),
            "uncaught Python exception ValueError: the ledger is corrupt: hi (traceback, most recent call last: /0/app.py:31 in handle → /0/app.py:30 in inner)"
        );
    }

    #[test]
    fn tracebacks_through_the_templates_check_show_the_last_frames() {
        assert_eq!(
            recognized("python_template_raise"),
            "uncaught Python exception ValueError: the ledger is corrupt: hi (traceback, most recent call last: /0/spool_handler.py:23 in checked_handle → /0/app.py:40 in handle → /0/app.py:39 in inner)"
        );
    }

    #[test]
    fn the_javascript_templates_stack_shows_where_the_error_was_thrown() {
        let text = recognized("javascript_template_throw");
        assert!(
            text.starts_with("uncaught JavaScript exception TypeError: the ledger is corrupt: hi"),
            "{text}"
        );
        assert!(
            text.ends_with("(stack: inner@app.js:56:29 ← work@app.js:57:38 ← handle@app.js:26:14)"),
            "{text}"
        );
    }

    #[test]
    fn a_python_result_of_the_wrong_type_says_what_to_return() {
        assert_eq!(
            recognized("python_dict"),
            "Python TypeError: 'dict' object is not an instance of 'str' (the handler returned something other than a str: return json.dumps(result))"
        );
    }

    #[test]
    fn javascript_throws_show_the_thrown_error_without_abort_noise() {
        let text = recognized("javascript_throw");
        assert!(
            text.starts_with("uncaught JavaScript exception TypeError: the ledger is corrupt: hi"),
            "{text}"
        );
        assert!(
            !text.contains("mozalloc") && !text.contains("initializer.js"),
            "{text}"
        );
        assert_eq!(
            recognized("javascript_object"),
            "the handler returned [object], not a string: return JSON.stringify(result)"
        );
    }

    #[test]
    fn c_assertions_show_their_text() {
        assert_eq!(
            recognized("c_assert"),
            "Assertion failed: balance >= 0 && \"the ledger balance must not be negative\" (/tmp/errs/c_crash/c_crash.c: check_ledger: 16)"
        );
        assert_eq!(
            fixture("c_abort"),
            LastWords::Lines("cannot continue: the ledger is corrupt".into())
        );
    }

    #[test]
    fn go_panics_show_the_panic_and_innermost_frames() {
        assert_eq!(
            recognized("go_panic"),
            "panic: the ledger is corrupt: negative balance (goroutine 1 [running], innermost first: main.check(...) at go_panic/main.go:11 ← main.main() at go_panic/main.go:21)"
        );
        assert_eq!(
            recognized("go_index"),
            "panic: runtime error: index out of range [11] with length 0 (goroutine 1 [running], innermost first: main.main() at go_panic/main.go:19)"
        );
    }

    #[test]
    fn zig_panics_show_the_message_without_the_tracing_note() {
        assert_eq!(
            recognized("zig_panic"),
            "panic: the ledger is corrupt: negative balance"
        );
    }

    #[test]
    fn rust_panics_drop_the_backtrace_note() {
        let log = "working\nthread '<unnamed>' panicked at src/lib.rs:9:9:\nboom\nnote: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n[spool: 10 more bytes of output were dropped]\n";
        assert_eq!(
            explain(log),
            Some(LastWords::Recognized(
                "panicked at src/lib.rs:9:9: boom".into()
            ))
        );
    }

    #[test]
    fn other_output_falls_back_to_its_last_lines() {
        assert_eq!(
            explain("one\ntwo\n\nthree\nfour\n[spool: 3 more bytes of output were dropped]\n"),
            Some(LastWords::Lines("two | three | four".into()))
        );
        assert_eq!(explain("\n\n"), None);
        let long = "x".repeat(3 * MAX_EXPLANATION_BYTES);
        let text = explain(&long).unwrap();
        assert!(text.text().len() <= MAX_EXPLANATION_BYTES + '…'.len_utf8());
    }

    #[test]
    fn reasons_lead_with_a_recognized_error() {
        assert_eq!(
            LastWords::with_reason(Some(LastWords::Recognized("panic: x".into())), "trap: y"),
            "panic: x; trap: y"
        );
        assert_eq!(
            LastWords::with_reason(Some(LastWords::Lines("a | b".into())), "trap: y"),
            "trap: y; last output: a | b"
        );
        assert_eq!(LastWords::with_reason(None, "trap: y"), "trap: y");
    }
}
