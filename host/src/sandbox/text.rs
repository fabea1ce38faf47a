//! Text a guest hands to the host, made safe to keep: bounded, and free of control characters.
//!
//! A handler's `retry` and `fail` messages are lifted from its memory by [`GuestText`], which
//! copies at most its bound no matter how long the string is: a guest failing with a 500 MiB
//! message costs the host a few KiB. Everything a guest says that the host stores or shows (those
//! messages, crash reasons, the task log, log lines, progress notes) passes through [`clean`]:
//! control characters other than newline and tab become visible escapes (`\u{1b}`), so a NUL
//! cannot make a database refuse the row, a stored text does not grow sixfold when it is
//! escaped as JSON, and a guest cannot forge lines in the host's log. The bound is applied after
//! escaping, so a stored text is never longer than its bound (plus a short note saying what was
//! cut).

use std::fmt::Write as _;

use wasmtime::ValRaw;
use wasmtime::component::__internal::{
    CanonicalAbiInfo, InstanceType, InterfaceType, LiftContext, wasmtime_environ,
};
use wasmtime::component::{ComponentType, Lift, WasmStr};
use wasmtime_environ::component::StringEncoding;

/// The most bytes kept of a `retry` or `fail` message, a crash reason, a log line or a
/// progress note.
pub const MAX_MESSAGE_BYTES: usize = 8 << 10;

/// Whether `c` is shown as an escape: every control character but newline and tab.
fn escaped(c: char) -> bool {
    c.is_control() && c != '\n' && c != '\t'
}

/// Escapes control characters and keeps at most `limit` bytes on a character boundary.
/// Returns the kept text and how many bytes of `text` did not fit.
pub fn escape_within(text: &str, limit: usize) -> (String, usize) {
    let mut out = String::with_capacity(text.len().min(limit));
    for (at, c) in text.char_indices() {
        let before = out.len();
        if escaped(c) {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        } else {
            out.push(c);
        }
        if out.len() > limit {
            out.truncate(before);
            return (out, text.len() - at);
        }
    }
    (out, 0)
}

/// `text` made safe to store: control characters escaped, at most `limit` bytes kept, and a
/// note when something was cut. `total` is the length the guest's text really had, when only
/// its beginning was read (otherwise `text.len()`).
pub fn clean(text: &str, limit: usize, total: usize) -> String {
    let (mut kept, cut) = escape_within(text, limit);
    if cut > 0 || total > text.len() {
        let _ = write!(kept, "… [cut: {total} bytes in all; {limit} are kept]");
    }
    kept
}

/// Room for the note [`clean`] adds to a text it cut.
const NOTE_BYTES: usize = 128;

/// [`clean`] with the message bound.
pub fn clean_message(text: &str) -> String {
    clean(text, MAX_MESSAGE_BYTES, text.len())
}

/// [`clean`] for a message that may have been cleaned already (a guest's `fail` message on
/// its way out of the sandbox): its bound leaves room for the note, so a cleaned message
/// passes unchanged and any other is bounded all the same.
pub fn clean_reason(text: &str) -> String {
    clean(text, MAX_MESSAGE_BYTES + NOTE_BYTES, text.len())
}

/// A string in a guest's memory of which only the first `CAP` bytes are copied to the host
/// (lifted in place of `string` in the handler's `failure`).
pub struct GuestText<const CAP: usize> {
    /// Up to `CAP` bytes of the text, cut on a character boundary.
    pub head: String,
    /// The text's whole length in bytes, as the guest encoded it.
    pub len: usize,
}

impl<const CAP: usize> GuestText<CAP> {
    /// The text as the host keeps it: see [`clean`].
    pub fn cleaned(&self) -> String {
        clean(&self.head, CAP, self.len)
    }

    fn read(cx: &mut LiftContext<'_>, ptr: usize, len: usize) -> wasmtime::Result<Self> {
        const UTF16_TAG: usize = 1 << 31;
        let (unit, count, latin1) = match cx.options().string_encoding {
            StringEncoding::Utf8 => (1, len, false),
            StringEncoding::Utf16 => (2, len, false),
            StringEncoding::CompactUtf16 if len & UTF16_TAG == 0 => (1, len, true),
            StringEncoding::CompactUtf16 => (2, len ^ UTF16_TAG, false),
        };
        let memory = cx.memory();
        let byte_len = count
            .checked_mul(unit)
            .filter(|n| ptr.checked_add(*n).is_some_and(|end| end <= memory.len()))
            .ok_or_else(|| wasmtime::Error::msg("string pointer/length out of bounds of memory"))?;
        if !ptr.is_multiple_of(unit) {
            wasmtime::bail!("string pointer not aligned to {unit}");
        }
        let take = byte_len.min(CAP) / unit * unit;
        let bytes = &memory[ptr..ptr + take];
        let head = if latin1 {
            bytes.iter().map(|&b| char::from(b)).collect()
        } else if unit == 2 {
            let units: Vec<u16> = bytes
                .chunks_exact(2)
                .map(|pair| u16::from_le_bytes([pair[0], pair[1]]))
                .collect();
            String::from_utf16_lossy(&units)
        } else {
            match std::str::from_utf8(bytes) {
                Ok(text) => text.to_owned(),
                // Cut in the middle of a character: keep the characters before it.
                Err(error) if error.error_len().is_none() && take < byte_len => {
                    String::from_utf8(bytes[..error.valid_up_to()].to_vec())
                        .expect("valid up to here")
                }
                Err(error) => return Err(error.into()),
            }
        };
        cx.consume_fuel(take)?;
        Ok(GuestText {
            head,
            len: byte_len,
        })
    }
}

// SAFETY: the same representation as `string` (a pointer and a length), which is what
// `typecheck` accepts.
unsafe impl<const CAP: usize> ComponentType for GuestText<CAP> {
    type Lower = [ValRaw; 2];

    const ABI: CanonicalAbiInfo = CanonicalAbiInfo::POINTER_PAIR;

    fn typecheck(ty: &InterfaceType, types: &InstanceType<'_>) -> wasmtime::Result<()> {
        <WasmStr as ComponentType>::typecheck(ty, types)
    }
}

// SAFETY: reads the pointer and length as the canonical ABI lays them out, and only bytes
// within the memory's bounds.
unsafe impl<const CAP: usize> Lift for GuestText<CAP> {
    fn linear_lift_from_flat(
        cx: &mut LiftContext<'_>,
        _ty: InterfaceType,
        src: &Self::Lower,
    ) -> wasmtime::Result<Self> {
        let ptr = usize::try_from(src[0].get_u32())?;
        let len = usize::try_from(src[1].get_u32())?;
        Self::read(cx, ptr, len)
    }

    fn linear_lift_from_memory(
        cx: &mut LiftContext<'_>,
        _ty: InterfaceType,
        bytes: &[u8],
    ) -> wasmtime::Result<Self> {
        let word = |at: usize| {
            u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
        };
        Self::read(cx, usize::try_from(word(0))?, usize::try_from(word(4))?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_become_visible() {
        assert_eq!(
            clean_message("a\u{0}b\u{1b}[31mc\n\td"),
            "a\\u{0}b\\u{1b}[31mc\n\td"
        );
        assert_eq!(clean_message("plain é text"), "plain é text");
    }

    #[test]
    fn the_bound_holds_after_escaping() {
        let nuls = "\u{0}".repeat(MAX_MESSAGE_BYTES);
        let kept = clean_message(&nuls);
        let (body, note) = kept.split_once('…').unwrap();
        assert!(body.len() <= MAX_MESSAGE_BYTES, "{}", body.len());
        assert_eq!(body.len() % 5, 0, "whole escapes only");
        assert!(
            note.contains(&format!("{MAX_MESSAGE_BYTES} bytes in all")),
            "{note}"
        );
        let json = serde_json::to_string(&kept).unwrap();
        assert!(
            json.len() < 3 * MAX_MESSAGE_BYTES,
            "escaping it again doubles it at most"
        );
    }

    #[test]
    fn cuts_fall_on_character_boundaries() {
        let (kept, cut) = escape_within("ééé", 5);
        assert_eq!((kept.as_str(), cut), ("éé", 2));
        assert_eq!(
            clean("abc", 10, 4000),
            "abc… [cut: 4000 bytes in all; 10 are kept]"
        );
    }
}
