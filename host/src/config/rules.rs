//! What each flat setting accepts: the rules that turn a given value into the value a host
//! uses (or say what is allowed), and how values are written in `--help` and the docs.
//!
//! A rule names no setting: the caller puts the setting's name and where its value came from in
//! front of the rule's message (see [`super::origin`]).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use spool_rules::authority::Authority;
use spool_rules::limits::Bounds;
use spool_rules::size::{parse_byte_size, show_size};

/// Checks a value given for a setting of source type `R` and turns it into the value used.
pub trait Rule<R> {
    /// The checked value, as [`super::Config`] holds it.
    type Out;
    /// The value to use, or what is allowed and what was given.
    fn check(&self, given: R) -> Result<Self::Out, String>;
    /// A value as `--help` and docs/configuration.md write it (a default, say).
    fn show(&self, value: &Self::Out) -> String;
}

/// Any value its type can hold.
pub struct Any;

impl<T: Show> Rule<T> for Any {
    type Out = T;
    fn check(&self, given: T) -> Result<T, String> {
        Ok(given)
    }
    fn show(&self, value: &T) -> String {
        value.show()
    }
}

/// A count of at least 1.
pub struct AtLeastOne;

impl Rule<usize> for AtLeastOne {
    type Out = usize;
    fn check(&self, given: usize) -> Result<usize, String> {
        if given == 0 {
            Err("must be at least 1, got 0".into())
        } else {
            Ok(given)
        }
    }
    fn show(&self, value: &usize) -> String {
        value.to_string()
    }
}

/// A duration longer than zero.
pub struct Positive;

impl Rule<Duration> for Positive {
    type Out = Duration;
    fn check(&self, given: Duration) -> Result<Duration, String> {
        if given.is_zero() {
            Err(format!("must be longer than zero, got {}", given.show()))
        } else {
            Ok(given)
        }
    }
    fn show(&self, value: &Duration) -> String {
        value.show()
    }
}

/// A duration longer than zero and at most this long.
pub struct PositiveAtMost(pub Duration);

impl Rule<Duration> for PositiveAtMost {
    type Out = Duration;
    fn check(&self, given: Duration) -> Result<Duration, String> {
        if given.is_zero() || given > self.0 {
            Err(format!(
                "must be longer than zero and at most {}, got {}",
                self.0.show(),
                given.show()
            ))
        } else {
            Ok(given)
        }
    }
    fn show(&self, value: &Duration) -> String {
        value.show()
    }
}

/// A size in bytes, written `64KiB`, `1MiB`, `2GiB` (or a plain number of bytes).
pub struct Size;

impl Rule<String> for Size {
    type Out = usize;
    fn check(&self, given: String) -> Result<usize, String> {
        parse_byte_size(&given)
    }
    fn show(&self, value: &usize) -> String {
        show_size(*value)
    }
}

/// A value within one of the ranges a task's policy shares with manifests and the API
/// ([`spool_rules::limits`]).
pub struct Within<T: 'static>(pub Bounds<T>);

impl<T: Show + PartialOrd + Copy> Rule<T> for Within<T> {
    type Out = T;
    fn check(&self, given: T) -> Result<T, String> {
        if self.0.contains(&given) {
            Ok(given)
        } else {
            Err(format!("must be {}, got {}", self.0.shown, given.show()))
        }
    }
    fn show(&self, value: &T) -> String {
        value.show()
    }
}

/// A size (as [`Size`] reads it) within one of the policy ranges.
pub struct SizeWithin(pub Bounds<usize>);

impl Rule<String> for SizeWithin {
    type Out = usize;
    fn check(&self, given: String) -> Result<usize, String> {
        let size = parse_byte_size(&given)?;
        if self.0.contains(&size) {
            Ok(size)
        } else {
            Err(format!("must be {}, got {}", self.0.shown, show_size(size)))
        }
    }
    fn show(&self, value: &usize) -> String {
        show_size(*value)
    }
}

/// A fraction from 0 to 1.
pub struct Fraction;

impl Rule<f64> for Fraction {
    type Out = f64;
    fn check(&self, given: f64) -> Result<f64, String> {
        if (0.0..=1.0).contains(&given) {
            Ok(given)
        } else {
            Err(format!("must be a fraction from 0 to 1, got {given}"))
        }
    }
    fn show(&self, value: &f64) -> String {
        value.to_string()
    }
}

/// A number where 0 stands for this default.
pub struct ZeroMeans(pub u64);

impl Rule<u64> for ZeroMeans {
    type Out = u64;
    fn check(&self, given: u64) -> Result<u64, String> {
        Ok(if given == 0 { self.0 } else { given })
    }
    fn show(&self, value: &u64) -> String {
        value.to_string()
    }
}

/// A secret; an empty one is none at all.
pub struct Token;

impl Rule<String> for Token {
    type Out = Option<String>;
    fn check(&self, given: String) -> Result<Option<String>, String> {
        Ok(Some(given).filter(|token| !token.is_empty()))
    }
    fn show(&self, value: &Option<String>) -> String {
        match value {
            Some(_) => "set".into(),
            None => "none".into(),
        }
    }
}

/// Host names, `NAME` or `NAME:PORT`, compared in lower case; blank entries are dropped.
pub struct HostNames;

impl Rule<Vec<String>> for HostNames {
    type Out = Vec<String>;
    fn check(&self, given: Vec<String>) -> Result<Vec<String>, String> {
        given
            .iter()
            .map(|name| name.trim().to_ascii_lowercase())
            .filter(|name| !name.is_empty())
            .map(|name| match Authority::parse(&name) {
                Some(_) => Ok(name),
                None => Err(format!(
                    "`{name}` is not a host name; write NAME or NAME:PORT"
                )),
            })
            .collect()
    }
    fn show(&self, value: &Vec<String>) -> String {
        if value.is_empty() {
            "none".into()
        } else {
            value.join(",")
        }
    }
}

/// A value written as a setting takes it: what `--help` and the docs print.
pub trait Show {
    fn show(&self) -> String;
}

macro_rules! show_by_display {
    ($($t:ty),*) => {$(
        impl Show for $t {
            fn show(&self) -> String {
                self.to_string()
            }
        }
    )*};
}

show_by_display!(String, SocketAddr, bool, u32, u64, usize, f64);

impl Show for PathBuf {
    fn show(&self) -> String {
        self.display().to_string()
    }
}

impl Show for Duration {
    /// In the largest unit that divides it exactly (`30d`, `5m`, `250ms`), as the duration
    /// parser reads it back.
    fn show(&self) -> String {
        const UNITS: [(u128, &str); 5] = [
            (86_400_000, "d"),
            (3_600_000, "h"),
            (60_000, "m"),
            (1_000, "s"),
            (1, "ms"),
        ];
        let millis = self.as_millis();
        if self.is_zero() {
            return "0s".into();
        }
        if !self.subsec_nanos().is_multiple_of(1_000_000) {
            return humantime::format_duration(*self).to_string();
        }
        let (size, unit) = UNITS
            .into_iter()
            .find(|(size, _)| millis.is_multiple_of(*size))
            .expect("every whole number of milliseconds divides by 1");
        format!("{}{unit}", millis / size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_show_in_their_largest_exact_unit_and_read_back() {
        for (duration, text) in [
            (Duration::from_secs(30 * 86_400), "30d"),
            (Duration::from_secs(5 * 60), "5m"),
            (Duration::from_secs(90), "90s"),
            (Duration::from_millis(250), "250ms"),
            (Duration::ZERO, "0s"),
        ] {
            assert_eq!(duration.show(), text);
            assert_eq!(humantime::parse_duration(text).unwrap(), duration);
        }
    }

    #[test]
    fn sizes_show_in_their_largest_exact_unit_and_read_back() {
        for (bytes, text) in [
            (1 << 20, "1MiB"),
            (256 << 20, "256MiB"),
            (2 << 30, "2GiB"),
            (1536, "1536"),
            (100, "100"),
        ] {
            assert_eq!(show_size(bytes), text);
            assert_eq!(Size.check(text.into()).unwrap(), bytes);
        }
        assert_eq!(Size.check("64KiB".into()).unwrap(), 64 << 10);
        assert!(
            Size.check("huge".into())
                .unwrap_err()
                .contains("KiB, MiB or GiB")
        );
        assert!(
            Size.check("1TB".into())
                .unwrap_err()
                .contains("unknown size unit")
        );
    }

    #[test]
    fn each_rule_says_what_is_allowed() {
        assert_eq!(
            AtLeastOne.check(0).unwrap_err(),
            "must be at least 1, got 0"
        );
        assert_eq!(
            Positive.check(Duration::ZERO).unwrap_err(),
            "must be longer than zero, got 0s"
        );
        assert_eq!(
            PositiveAtMost(Duration::from_secs(60))
                .check(Duration::from_secs(61))
                .unwrap_err(),
            "must be longer than zero and at most 1m, got 61s"
        );
        assert_eq!(
            Fraction.check(1.5).unwrap_err(),
            "must be a fraction from 0 to 1, got 1.5"
        );
        assert_eq!(
            HostNames.check(vec!["http://x".into()]).unwrap_err(),
            "`http://x` is not a host name; write NAME or NAME:PORT"
        );
        assert_eq!(ZeroMeans(7).check(0), Ok(7));
        assert_eq!(Token.check(String::new()), Ok(None));
        assert_eq!(
            HostNames.check(vec![" Spool.Internal ".into(), "".into()]),
            Ok(vec!["spool.internal".to_string()])
        );
    }
}
