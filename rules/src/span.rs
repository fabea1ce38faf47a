//! Spans of time written as a whole number and one unit: `500ms`, `90s`, `5m`, `36h`, `2d`,
//! `1w`. This is the grammar of the API's `delay` and `wait` and of the CLI's `--since` and
//! `--until`; each use names the units it takes, whether a bare number means a unit, and its
//! own bounds. (spool.toml, manifests and flags write durations in humantime's grammar,
//! through the `humantime` crate, which also takes `1h 30m`.)
//!
//! A regular expression for the same values, for an OpenAPI pattern, is built from
//! [`numbers_up_to`].

use std::time::Duration;

/// A unit of a span.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Millis,
    Seconds,
    Minutes,
    Hours,
    Days,
    Weeks,
}

impl Unit {
    /// Every unit, shortest first.
    pub const ALL: [Unit; 6] = [
        Unit::Millis,
        Unit::Seconds,
        Unit::Minutes,
        Unit::Hours,
        Unit::Days,
        Unit::Weeks,
    ];

    /// How the unit is written after the number.
    pub fn suffix(self) -> &'static str {
        match self {
            Unit::Millis => "ms",
            Unit::Seconds => "s",
            Unit::Minutes => "m",
            Unit::Hours => "h",
            Unit::Days => "d",
            Unit::Weeks => "w",
        }
    }

    /// The unit's length in milliseconds.
    pub fn millis(self) -> u64 {
        match self {
            Unit::Millis => 1,
            Unit::Seconds => 1_000,
            Unit::Minutes => 60_000,
            Unit::Hours => 3_600_000,
            Unit::Days => 86_400_000,
            Unit::Weeks => 7 * 86_400_000,
        }
    }
}

/// A span as written: its number, how many digits it was written with, and its unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub number: u64,
    /// Digits as written, leading zeros included.
    pub digits: usize,
    pub unit: Unit,
}

impl Span {
    /// Reads `text` as digits followed by one of `units`, or digits alone when `bare` names
    /// the unit they mean. Nothing else is a span: no sign, no space, no fraction.
    pub fn parse(text: &str, units: &[Unit], bare: Option<Unit>) -> Option<Span> {
        let digits = text.bytes().take_while(u8::is_ascii_digit).count();
        let (number, suffix) = text.split_at(digits);
        if digits == 0 {
            return None;
        }
        let unit = match suffix {
            "" => bare?,
            _ => *units.iter().find(|unit| unit.suffix() == suffix)?,
        };
        // Leading zeros may make the text long while the number stays small.
        let number = number.trim_start_matches('0');
        let number = if number.is_empty() {
            0
        } else {
            number.parse().ok()?
        };
        Some(Span {
            number,
            digits,
            unit,
        })
    }

    /// Whether the number was written without leading zeros (`0` itself is canonical).
    pub fn is_canonical(&self) -> bool {
        self.digits == 1
            || self.number.checked_ilog10().map(|log| log as usize + 1) == Some(self.digits)
    }

    /// The span's length, if it fits in a `Duration` of milliseconds.
    pub fn duration(&self) -> Option<Duration> {
        self.number
            .checked_mul(self.unit.millis())
            .map(Duration::from_millis)
    }
}

/// The regular expression of canonical whole numbers (no leading zero) from 0 to `n`, as
/// alternatives without anchors: `numbers_up_to(60)` is `0|[1-9]|[1-5][0-9]{1}|60`.
pub fn numbers_up_to(n: u128) -> String {
    let digits: Vec<u8> = n.to_string().bytes().map(|b| b - b'0').collect();
    let len = digits.len();
    let mut alternatives = vec!["0".to_string()];
    if len >= 2 {
        alternatives.push(match len {
            2 => "[1-9]".to_string(),
            _ => format!("[1-9][0-9]{{0,{}}}", len - 2),
        });
    }
    for (i, &digit) in digits.iter().enumerate() {
        let lowest = u8::from(i == 0);
        if digit <= lowest {
            continue;
        }
        let prefix: String = digits[..i].iter().map(|d| char::from(b'0' + d)).collect();
        let class = if digit - 1 == lowest {
            lowest.to_string()
        } else {
            format!("[{lowest}-{}]", digit - 1)
        };
        let rest = match len - i - 1 {
            0 => String::new(),
            rest => format!("[0-9]{{{rest}}}"),
        };
        alternatives.push(format!("{prefix}{class}{rest}"));
    }
    if n > 0 {
        alternatives.push(n.to_string());
    }
    alternatives.join("|")
}

#[cfg(test)]
mod tests {
    use super::*;

    const SOME: [Unit; 3] = [Unit::Millis, Unit::Seconds, Unit::Days];

    #[test]
    fn a_span_is_digits_and_one_of_the_given_units() {
        let span = Span::parse("90s", &SOME, None).unwrap();
        assert_eq!((span.number, span.unit), (90, Unit::Seconds));
        assert_eq!(span.duration(), Some(Duration::from_secs(90)));
        assert_eq!(
            Span::parse("500ms", &SOME, None).unwrap().unit,
            Unit::Millis
        );
        assert_eq!(
            Span::parse("2d", &SOME, None).unwrap().duration(),
            Some(Duration::from_secs(2 * 86_400))
        );
        for bad in [
            "", "s", "90", "9 s", "-5s", "+5s", "1.5s", "5m", "5S", "5sec", "٣s",
        ] {
            assert_eq!(Span::parse(bad, &SOME, None), None, "{bad:?}");
        }
    }

    #[test]
    fn a_bare_number_takes_the_named_unit() {
        let span = Span::parse("30", &SOME, Some(Unit::Seconds)).unwrap();
        assert_eq!(span.duration(), Some(Duration::from_secs(30)));
    }

    #[test]
    fn leading_zeros_are_counted_but_do_not_overflow() {
        let span = Span::parse("0036h", &[Unit::Hours], None).unwrap();
        assert_eq!((span.number, span.digits), (36, 4));
        assert!(!span.is_canonical());
        assert!(
            Span::parse("0", &[], Some(Unit::Seconds))
                .unwrap()
                .is_canonical()
        );
        assert!(Span::parse("10s", &SOME, None).unwrap().is_canonical());
        let long = format!("{}1s", "0".repeat(40));
        assert_eq!(Span::parse(&long, &SOME, None).unwrap().number, 1);
        assert_eq!(Span::parse("99999999999999999999999s", &SOME, None), None);
        let huge = Span::parse("18446744073709551615d", &SOME, None).unwrap();
        assert_eq!(huge.duration(), None);
    }

    #[test]
    fn number_patterns_match_exactly_the_numbers_in_range() {
        assert_eq!(numbers_up_to(60), "0|[1-9]|[1-5][0-9]{1}|60");
        assert_eq!(numbers_up_to(0), "0");
        assert_eq!(numbers_up_to(9), "0|[1-8]|9");
    }
}
