//! How a flat setting's value is read from each source: [`Raw`] gives clap the parser for flags
//! and `SPOOL_*` variables and serde the reader for `spool.toml`, so one type reads the same
//! way everywhere (a duration is humantime text, `90s` or `30d`, on the command line and in
//! the file alike).

use clap::builder::ValueParser;
use serde::{Deserialize, Deserializer};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// A type a flat setting's value is given in.
pub trait Raw: Sized {
    /// How clap reads it from a flag or an environment variable (for a list: one element).
    fn parser() -> ValueParser;
    /// How it is read from spool.toml.
    fn read<'de, D: Deserializer<'de>>(file: D) -> Result<Self, D::Error>;
}

/// serde's reader for a flat setting of spool.toml (`deserialize_with`).
pub fn from_file<'de, D: Deserializer<'de>, T: Raw>(file: D) -> Result<Option<T>, D::Error> {
    T::read(file).map(Some)
}

macro_rules! raw_as_usual {
    ($($t:ty),*) => {$(
        impl Raw for $t {
            fn parser() -> ValueParser {
                clap::value_parser!($t).into()
            }
            fn read<'de, D: Deserializer<'de>>(file: D) -> Result<Self, D::Error> {
                <$t>::deserialize(file)
            }
        }
    )*};
}

raw_as_usual!(String, PathBuf, SocketAddr, bool, u32, u64, usize, f64);

impl Raw for Duration {
    fn parser() -> ValueParser {
        ValueParser::new(humantime::parse_duration)
    }
    fn read<'de, D: Deserializer<'de>>(file: D) -> Result<Self, D::Error> {
        humantime_serde::deserialize(file)
    }
}

/// A list: comma-separated after a flag or in a variable (with `value_delimiter`), an array in
/// the file.
impl Raw for Vec<String> {
    fn parser() -> ValueParser {
        ValueParser::string()
    }
    fn read<'de, D: Deserializer<'de>>(file: D) -> Result<Self, D::Error> {
        Vec::deserialize(file)
    }
}
