//! What a JSON payload must be, beyond valid JSON, for every database to store it: nested at
//! most [`MAX_JSON_DEPTH`] deep (MySQL and MariaDB refuse documents deeper than 100; serde_json
//! parses up to 128), and without a lone UTF-16 surrogate escape such as `"\ud800"` (valid JSON
//! text that PostgreSQL's `jsonb` and MySQL's `JSON` refuse, and no Unicode string can hold).
//!
//! A payload that breaks either is refused when it is enqueued, on every backend alike, so one
//! such payload never reaches a database transaction that other enqueues share.

/// The deepest nesting of arrays and objects a payload may have (a flat object is depth 1).
pub const MAX_JSON_DEPTH: usize = 64;

/// Why a JSON text cannot be stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JsonProblem {
    /// Arrays and objects nest deeper than [`MAX_JSON_DEPTH`].
    TooDeep,
    /// A `\uD800`–`\uDFFF` escape that is not half of a surrogate pair.
    LoneSurrogate,
}

impl std::fmt::Display for JsonProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JsonProblem::TooDeep => write!(
                f,
                "arrays and objects nest deeper than {MAX_JSON_DEPTH} levels; flatten the payload"
            ),
            JsonProblem::LoneSurrogate => write!(
                f,
                "a string holds a lone UTF-16 surrogate escape (\\uD800 to \\uDFFF without its \
                 pair), which is not a character and which no database stores"
            ),
        }
    }
}

/// Checks a text that is already known to be valid JSON (the caller parses it first).
pub fn storable_json(text: &str) -> Result<(), JsonProblem> {
    let bytes = text.as_bytes();
    let mut depth = 0usize;
    let mut index = 0;
    while index < bytes.len() {
        match bytes[index] {
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_JSON_DEPTH {
                    return Err(JsonProblem::TooDeep);
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            b'"' => index = end_of_string(bytes, index + 1)?,
            _ => {}
        }
        index += 1;
    }
    Ok(())
}

/// Walks a string's body from `index` (after its opening quote); returns the index of its
/// closing quote, checking each `\u` escape for a surrogate without its pair.
fn end_of_string(bytes: &[u8], mut index: usize) -> Result<usize, JsonProblem> {
    while index < bytes.len() {
        match bytes[index] {
            b'"' => return Ok(index),
            b'\\' if bytes.get(index + 1) == Some(&b'u') => {
                let unit = hex_unit(bytes, index + 2);
                index += 6;
                match unit {
                    Some(0xD800..=0xDBFF) => {
                        let follows = (bytes.get(index) == Some(&b'\\')
                            && bytes.get(index + 1) == Some(&b'u'))
                        .then(|| hex_unit(bytes, index + 2))
                        .flatten();
                        if !matches!(follows, Some(0xDC00..=0xDFFF)) {
                            return Err(JsonProblem::LoneSurrogate);
                        }
                        index += 6;
                    }
                    Some(0xDC00..=0xDFFF) => return Err(JsonProblem::LoneSurrogate),
                    _ => {}
                }
                continue;
            }
            b'\\' => index += 2,
            _ => index += 1,
        }
    }
    Ok(index)
}

/// The four hex digits at `at`, as a UTF-16 code unit.
fn hex_unit(bytes: &[u8], at: usize) -> Option<u32> {
    let digits = std::str::from_utf8(bytes.get(at..at + 4)?).ok()?;
    u32::from_str_radix(digits, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(depth: usize) -> String {
        format!("{}{}", "[".repeat(depth), "]".repeat(depth))
    }

    #[test]
    fn nesting_is_allowed_up_to_the_limit() {
        assert_eq!(storable_json(&nested(MAX_JSON_DEPTH)), Ok(()));
        assert_eq!(
            storable_json(&nested(MAX_JSON_DEPTH + 1)),
            Err(JsonProblem::TooDeep)
        );
        let objects = format!("{}1{}", r#"{"a":"#.repeat(65), "}".repeat(65));
        assert_eq!(storable_json(&objects), Err(JsonProblem::TooDeep));
        // Brackets inside strings are text, not nesting.
        let text = format!("{{\"a\": \"{}\"}}", "[{".repeat(200));
        assert_eq!(storable_json(&text), Ok(()));
        // Siblings do not add up.
        let wide = format!("[{}]", vec![nested(60); 50].join(","));
        assert_eq!(storable_json(&wide), Ok(()));
    }

    #[test]
    fn surrogate_escapes_must_come_in_pairs() {
        for lone in [
            r#""\ud800""#,
            r#""\uDBFF x""#,
            r#""\udc00""#,
            r#"{"a": ["ok", "\ud800\u0041"]}"#,
            r#""\ud800\ud800""#,
            r#""\ud800"#,
        ] {
            assert_eq!(
                storable_json(lone),
                Err(JsonProblem::LoneSurrogate),
                "{lone}"
            );
        }
        for fine in [
            r#""\ud83d\ude00""#,
            r#""\u00e9 and \\ud800 is text""#,
            r#""quote \" then \ud800""#,
            r#"{"\u0041": 1}"#,
            "\"😀\"",
        ] {
            let expected = if fine.contains(r#"\" then \ud800"#) {
                Err(JsonProblem::LoneSurrogate)
            } else {
                Ok(())
            };
            assert_eq!(storable_json(fine), expected, "{fine}");
        }
    }
}
