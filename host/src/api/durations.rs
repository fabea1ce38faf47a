//! The API's two spans of time: a task's `delay` (`POST /tasks`) and the long-poll `wait` of
//! `GET /tasks/{id}`. Both are written in the number-and-unit grammar of
//! [`spool_rules::span`]; each states here its units, its bounds and the OpenAPI pattern that
//! matches exactly what it accepts.

use serde::Deserialize;
use spool_rules::span::{Span, Unit, numbers_up_to};
use std::time::Duration;

use super::error::ApiError;

/// The longest `delay`: 100 years of 365.25 days.
pub const MAX_DELAY: Duration = Duration::from_secs(36_525 * 86_400);
/// The pattern `delay` text follows: a whole number and one unit, each unit's number short
/// enough to stay within [`MAX_DELAY`]. [`Delay::to_duration`] accepts exactly these.
pub const DELAY_PATTERN: &str = "^([0-9]{1,12}ms|[0-9]{1,9}s|[0-9]{1,7}m|[0-9]{1,5}h|[0-9]{1,4}d)$";
/// The units of `delay`, each with the most digits [`DELAY_PATTERN`] gives its number.
const DELAY_UNITS: [(Unit, usize); 5] = [
    (Unit::Millis, 12),
    (Unit::Seconds, 9),
    (Unit::Minutes, 7),
    (Unit::Hours, 5),
    (Unit::Days, 4),
];

/// The pattern of `wait` on a host whose longest wait is the default, 60 s: [`wait_pattern`]
/// of [`crate::config::DEFAULT_MAX_WAIT`] (a host with a lower `max_wait` describes its own).
pub const WAIT_PATTERN: &str =
    "^((0|[1-9]|[1-5][0-9]{1}|60)s?|(0|[1-9][0-9]{0,3}|[1-5][0-9]{4}|60000)ms)$";

/// The pattern `wait` follows on a host whose longest wait is `max`: exactly the values
/// [`parse_wait`] accepts.
pub fn wait_pattern(max: Duration) -> String {
    format!(
        "^(({})s?|({})ms)$",
        numbers_up_to(u128::from(max.as_secs())),
        numbers_up_to(max.as_millis())
    )
}

/// A `wait` value: whole seconds (`30`, `30s`) or milliseconds (`500ms`), written without
/// leading zeros, at most `max`.
pub fn parse_wait(text: &str, max: Duration) -> Option<Duration> {
    let span = Span::parse(text, &[Unit::Seconds, Unit::Millis], Some(Unit::Seconds))?;
    let wait = span.duration()?;
    (span.is_canonical() && span.digits <= 20 && wait <= max).then_some(wait)
}

/// The schema of `delay`: null, a number of seconds, or text in [`DELAY_PATTERN`].
pub fn delay_schema() -> utoipa::openapi::schema::Schema {
    use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, SchemaType, Type};
    OneOfBuilder::new()
        .item(ObjectBuilder::new().schema_type(Type::Null))
        .item(
            ObjectBuilder::new()
                .schema_type(SchemaType::new(Type::Number))
                .minimum(Some(0.0))
                .maximum(Some(MAX_DELAY.as_secs_f64())),
        )
        .item(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .pattern(Some(DELAY_PATTERN)),
        )
        .examples([serde_json::json!("30s")])
        .build()
        .into()
}

/// A delay given as seconds or as a whole number with a unit.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Delay {
    Seconds(f64),
    Text(String),
}

impl Delay {
    /// The delay, if it is one [`delay_schema`] describes.
    pub fn to_duration(&self) -> Result<Duration, ApiError> {
        let out_of_range = || {
            ApiError::invalid(format!(
                "delay {self} is out of range: at most 100 years (3155760000 seconds)"
            ))
        };
        let duration = match self {
            Delay::Seconds(s) if *s >= 0.0 => Duration::try_from_secs_f64(*s).map_err(|_| out_of_range())?,
            Delay::Seconds(s) => return Err(ApiError::invalid(format!("delay {s} must be zero or more seconds"))),
            Delay::Text(text) => parse_delay(text).ok_or_else(|| {
                ApiError::invalid(format!(
                    "delay `{text}` is not a duration: write a whole number with one unit, ms, s, m, h or d (\"90s\", \"5m\", \"36h\"), or seconds as a number"
                ))
            })?,
        };
        if duration > MAX_DELAY {
            return Err(out_of_range());
        }
        Ok(duration)
    }
}

impl std::fmt::Display for Delay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Delay::Seconds(s) => write!(f, "{s}"),
            Delay::Text(text) => write!(f, "`{text}`"),
        }
    }
}

/// Parses text that matches [`DELAY_PATTERN`], and nothing else: each unit's number has at
/// most the digits the pattern gives it.
fn parse_delay(text: &str) -> Option<Duration> {
    let span = Span::parse(text, &DELAY_UNITS.map(|(unit, _)| unit), None)?;
    let (_, most_digits) = DELAY_UNITS.iter().find(|(unit, _)| *unit == span.unit)?;
    (span.digits <= *most_digits).then(|| span.duration())?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_follow_their_pattern_exactly() {
        assert_eq!(parse_delay("90s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_delay("5m"), Some(Duration::from_secs(300)));
        assert_eq!(parse_delay("0036h"), Some(Duration::from_secs(36 * 3600)));
        assert_eq!(
            parse_delay("9999d"),
            Some(Duration::from_secs(9999 * 86_400))
        );
        assert_eq!(
            parse_delay("999999999999ms"),
            Some(Duration::from_millis(999_999_999_999))
        );
        for bad in [
            "",
            "s",
            "90",
            "1h30m",
            "1h 30m",
            " 5m",
            "5 m",
            "5M",
            "99999d",
            "1000000000s",
            "-5s",
            "5.5s",
            "٣s",
            "1y",
        ] {
            assert_eq!(parse_delay(bad), None, "{bad:?}");
        }
        // Every delay the pattern allows is within the longest delay.
        for longest in [
            "999999999999ms",
            "999999999s",
            "9999999m",
            "99999h",
            "9999d",
        ] {
            assert!(parse_delay(longest).unwrap() <= MAX_DELAY, "{longest}");
        }
        let seconds = |s: f64| Delay::Seconds(s).to_duration().map_err(|e| e.status);
        assert_eq!(seconds(MAX_DELAY.as_secs_f64()), Ok(MAX_DELAY));
        assert!(seconds(MAX_DELAY.as_secs_f64() + 1.0).is_err());
        assert!(seconds(1e300).is_err());
        assert!(seconds(-0.5).is_err());
    }

    #[test]
    fn waits_follow_their_pattern_exactly() {
        assert_eq!(wait_pattern(crate::config::DEFAULT_MAX_WAIT), WAIT_PATTERN);
        assert_eq!(
            wait_pattern(Duration::from_millis(200)),
            "^((0)s?|(0|[1-9][0-9]{0,1}|1[0-9]{2}|200)ms)$"
        );
        let max = Duration::from_secs(60);
        assert_eq!(parse_wait("30s", max), Some(Duration::from_secs(30)));
        assert_eq!(parse_wait("30", max), Some(Duration::from_secs(30)));
        assert_eq!(parse_wait("60s", max), Some(max));
        assert_eq!(parse_wait("0", max), Some(Duration::ZERO));
        assert_eq!(parse_wait("500ms", max), Some(Duration::from_millis(500)));
        assert_eq!(parse_wait("60000ms", max), Some(max));
        for bad in [
            "",
            "s",
            "61s",
            "60001ms",
            "030s",
            "1m",
            "5 s",
            "-1",
            "1.5s",
            "99999999999999999999999s",
        ] {
            assert_eq!(parse_wait(bad, max), None, "{bad:?}");
        }
        // Every number up to a few past the limit, in both units: the pattern (checked here
        // by its own alternatives) and the parser agree.
        for max_ms in [200u64, 1_000, 5_500, 60_000] {
            let max = Duration::from_millis(max_ms);
            let pattern = wait_pattern(max);
            for n in 0..max_ms + 50 {
                for unit in ["", "s", "ms"] {
                    let text = format!("{n}{unit}");
                    assert_eq!(
                        parse_wait(&text, max).is_some(),
                        matches_pattern(&pattern, &text),
                        "{text} against {pattern}"
                    );
                }
            }
        }
    }

    /// Whether `text` matches a pattern made by [`wait_pattern`]: a small matcher for exactly
    /// that shape (alternatives of digits, `[a-b]` classes and `{m}` / `{m,n}` repeats).
    fn matches_pattern(pattern: &str, text: &str) -> bool {
        let body = &pattern[3..pattern.len() - 2];
        let (seconds, millis) = body.split_once(")s?|(").unwrap();
        let millis = millis.trim_end_matches(")ms");
        let number_matches = |alternatives: &str, number: &str| {
            alternatives
                .split('|')
                .any(|alt| matches_number(alt, number))
        };
        if let Some(number) = text.strip_suffix("ms") {
            return number_matches(millis, number);
        }
        let number = text.strip_suffix('s').unwrap_or(text);
        number_matches(seconds, number)
    }

    fn matches_number(alternative: &str, number: &str) -> bool {
        // Tokens: a digit, or a class [a-b], each optionally followed by {m} or {m,n}.
        let mut tokens: Vec<(u8, u8, usize, usize)> = Vec::new();
        let bytes = alternative.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            let (low, high) = if bytes[i] == b'[' {
                let token = (bytes[i + 1], bytes[i + 3]);
                i += 5;
                token
            } else {
                i += 1;
                (bytes[i - 1], bytes[i - 1])
            };
            let (mut least, mut most) = (1, 1);
            if bytes.get(i) == Some(&b'{') {
                let end = i + alternative[i..].find('}').unwrap();
                let counts = &alternative[i + 1..end];
                match counts.split_once(',') {
                    Some((a, b)) => (least, most) = (a.parse().unwrap(), b.parse().unwrap()),
                    None => (least, most) = (counts.parse().unwrap(), counts.parse().unwrap()),
                }
                i = end + 1;
            }
            tokens.push((low, high, least, most));
        }
        fn rest(tokens: &[(u8, u8, usize, usize)], text: &[u8]) -> bool {
            let Some(&(low, high, least, most)) = tokens.first() else {
                return text.is_empty();
            };
            (least..=most).any(|count| {
                text.len() >= count
                    && text[..count].iter().all(|c| (low..=high).contains(c))
                    && rest(&tokens[1..], &text[count..])
            })
        }
        rest(&tokens, number.as_bytes())
    }
}
