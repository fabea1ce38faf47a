//! The task log: what a guest writes to stdout and stderr and through the `log` import,
//! captured into one bounded buffer per attempt.
//!
//! The bound protects the database and the host's memory: a guest printing gigabytes keeps
//! running (writes past the limit are accepted and dropped, never an error that would make the
//! guest's `println!` panic), and the log ends with a note of how much was dropped. Control
//! characters other than newline and tab are shown escaped ([`super::text`]), within the bound.
//!
//! The log keeps what came first; the end of the output, where a failing guest prints its
//! error, is kept apart as well ([`TaskLog::tail`]), so the error can be explained even when the
//! log was full long before ([`super::guest_error`]).

use bytes::Bytes;
use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tokio::io::AsyncWrite;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

/// The default bound of a task log.
pub const DEFAULT_LOG_LIMIT: usize = 64 << 10;

#[derive(Debug, Default)]
struct Buffer {
    text: Vec<u8>,
    dropped: u64,
    /// The last [`TAIL_BYTES`](super::guest_error::TAIL_BYTES) written, dropped or not.
    tail: VecDeque<u8>,
}

/// A bounded log shared by an attempt's stdout, stderr and `log` import.
#[derive(Debug, Clone)]
pub struct TaskLog {
    buffer: Arc<Mutex<Buffer>>,
    limit: usize,
}

impl TaskLog {
    /// An empty log keeping at most `limit` bytes.
    pub fn new(limit: usize) -> Self {
        TaskLog {
            buffer: Arc::default(),
            limit,
        }
    }

    /// Appends bytes, dropping what does not fit.
    pub fn append(&self, bytes: &[u8]) {
        let mut buffer = self.buffer.lock().expect("task log lock");
        let room = self.limit.saturating_sub(buffer.text.len());
        let kept = bytes.len().min(room);
        buffer.text.extend_from_slice(&bytes[..kept]);
        buffer.dropped += (bytes.len() - kept) as u64;
        let cap = super::guest_error::TAIL_BYTES;
        let newest = &bytes[bytes.len().saturating_sub(cap)..];
        let excess = (buffer.tail.len() + newest.len()).saturating_sub(cap);
        buffer.tail.drain(..excess);
        buffer.tail.extend(newest);
    }

    /// The end of the output, with control characters escaped: where a failing guest's error
    /// is. The last [`TAIL_BYTES`](super::guest_error::TAIL_BYTES) written, starting with `…`
    /// when earlier output was cut off.
    pub fn tail(&self) -> String {
        let buffer = self.buffer.lock().expect("task log lock");
        let (front, back) = buffer.tail.as_slices();
        let mut bytes = Vec::with_capacity(front.len() + back.len());
        bytes.extend_from_slice(front);
        bytes.extend_from_slice(back);
        let cut = buffer.text.len() as u64 + buffer.dropped > bytes.len() as u64;
        // Not from the middle of a character.
        let start = if cut {
            bytes
                .iter()
                .take(3)
                .take_while(|b| *b & 0xc0 == 0x80)
                .count()
        } else {
            0
        };
        let (text, _) =
            super::text::escape_within(&String::from_utf8_lossy(&bytes[start..]), usize::MAX);
        if cut { format!("…{text}") } else { text }
    }

    /// Appends one line.
    pub fn line(&self, line: &str) {
        let mut text = String::with_capacity(line.len() + 1);
        text.push_str(line);
        text.push('\n');
        self.append(text.as_bytes());
    }

    /// The log as text (invalid UTF-8 replaced, control characters escaped, at most the
    /// limit), with a note when output was dropped.
    pub fn contents(&self) -> String {
        let buffer = self.buffer.lock().expect("task log lock");
        let raw = String::from_utf8_lossy(&buffer.text);
        let (mut text, cut) = super::text::escape_within(&raw, self.limit);
        let dropped = buffer.dropped + cut as u64;
        if dropped > 0 {
            text.push_str(&format!(
                "\n[spool: {dropped} more bytes of output were dropped: the task log keeps {} bytes]\n",
                self.limit
            ));
        }
        text
    }

    /// What was written, as is (invalid UTF-8 replaced), and how many bytes past the limit
    /// were dropped: a program's stdout, which is its result.
    pub fn raw(&self) -> (String, u64) {
        let buffer = self.buffer.lock().expect("task log lock");
        (
            String::from_utf8_lossy(&buffer.text).into_owned(),
            buffer.dropped,
        )
    }

    /// The guest's stdout or stderr, writing into this log.
    pub fn stream(&self) -> LogStream {
        LogStream(self.clone())
    }
}

/// One output stream of a guest, writing into a [`TaskLog`].
#[derive(Debug, Clone)]
pub struct LogStream(TaskLog);

impl IsTerminal for LogStream {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for LogStream {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }
    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[async_trait::async_trait]
impl Pollable for LogStream {
    async fn ready(&mut self) {}
}

impl OutputStream for LogStream {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.0.append(&bytes);
        Ok(())
    }
    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }
    fn check_write(&mut self) -> StreamResult<usize> {
        // Always ready: excess is dropped rather than refused.
        Ok(64 << 10)
    }
}

impl AsyncWrite for LogStream {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.0.append(buf);
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_up_to_the_limit_and_says_what_was_dropped() {
        let log = TaskLog::new(10);
        log.append(b"12345");
        log.line("6789");
        log.append(b"abcdef");
        let text = log.contents();
        assert!(text.starts_with("123456789\n\n[spool"), "{text}");
        assert!(
            text.contains("6 more bytes of output were dropped"),
            "{text}"
        );
    }

    #[test]
    fn control_characters_are_escaped_within_the_limit() {
        let log = TaskLog::new(12);
        log.append(b"ok\x00\x1b[0m\x07\x07\x07");
        let text = log.contents();
        let kept = text.split("\n[spool").next().unwrap();
        assert_eq!(kept, "ok\\u{0}");
        assert!(text.contains("7 more bytes"), "{text}");
        assert_eq!(log.raw(), ("ok\0\x1b[0m\x07\x07\x07".to_string(), 0));
    }

    #[test]
    fn the_tail_keeps_the_end_of_a_long_output() {
        let cap = crate::sandbox::guest_error::TAIL_BYTES;
        let log = TaskLog::new(100);
        log.line("first");
        assert_eq!(log.tail(), "first\n");
        for i in 0..cap / 10 {
            log.line(&format!("line {i:04}"));
        }
        log.append(b"\x1b[1mpanic: boom\n");
        let tail = log.tail();
        assert!(tail.len() <= cap + 8, "{}", tail.len());
        assert!(tail.starts_with('…'), "says it was cut: {tail:.40}");
        assert!(tail.ends_with("\\u{1b}[1mpanic: boom\n"), "{tail}");
        assert!(
            log.contents().starts_with("first\n"),
            "the log keeps the start"
        );
        let big = TaskLog::new(10);
        big.append(&vec![b'x'; 3 * cap]);
        assert_eq!(
            big.tail(),
            format!("…{}", "x".repeat(cap)),
            "one long line: its end"
        );
        let wide = TaskLog::new(10);
        wide.append("é".repeat(cap).as_bytes());
        wide.append(b"!");
        assert!(wide.tail().starts_with("…é"), "not from within a character");
    }

    #[test]
    fn small_logs_are_untouched() {
        let log = TaskLog::new(100);
        log.line("hello");
        assert_eq!(log.contents(), "hello\n");
    }
}
