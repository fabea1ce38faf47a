//! Where each setting's value came from (a flag, a `SPOOL_*` variable, a line of the config
//! file), so a message about a value can say where to change it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The source of one setting's value.
#[derive(Debug, Clone, PartialEq)]
pub enum Origin {
    /// A command-line flag, as written (`--concurrency`).
    Flag(String),
    /// An environment variable (`SPOOL_CONCURRENCY`).
    Env(String),
    /// A line of a config file.
    File { path: PathBuf, line: usize },
    /// Nothing set it: the built-in default applies.
    Default,
}

impl Origin {
    /// Where clap found the value of argument `id`: on the command line as `flag`, or in the
    /// environment variable `env`. `None` when clap found none.
    pub fn in_matches(
        matches: &clap::ArgMatches,
        id: &str,
        flag: &str,
        env: &str,
    ) -> Option<Origin> {
        use clap::parser::ValueSource;
        match matches.value_source(id)? {
            ValueSource::CommandLine => Some(Origin::Flag(flag.to_string())),
            ValueSource::EnvVariable => Some(Origin::Env(env.to_string())),
            _ => None,
        }
    }

    /// The origin as a message names it: `--concurrency`, `SPOOL_CONCURRENCY`,
    /// `spool.toml line 4`, `the default`.
    pub fn describe(&self) -> String {
        match self {
            Origin::Flag(flag) => flag.clone(),
            Origin::Env(env) => env.clone(),
            Origin::File { path, line } => format!("{} line {line}", path.display()),
            Origin::Default => "the default".into(),
        }
    }
}

/// The origin of every setting a source gave, by setting name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Origins(BTreeMap<&'static str, Origin>);

impl Origins {
    /// Records where `name`'s value came from.
    pub fn set(&mut self, name: &'static str, origin: Origin) {
        self.0.insert(name, origin);
    }

    /// Where `name`'s value came from, if anyone recorded it.
    pub fn get(&self, name: &str) -> Option<&Origin> {
        self.0.get(name)
    }

    /// These origins, and `lower`'s for the settings these do not have.
    pub fn or(mut self, lower: Origins) -> Origins {
        for (name, origin) in lower.0 {
            self.0.entry(name).or_insert(origin);
        }
        self
    }

    /// The lines of a config file's top-level keys, as origins: `names` are the settings.
    pub fn in_file(path: &Path, text: &str, names: &[&'static str]) -> Origins {
        let spans: BTreeMap<String, toml::Spanned<toml::Value>> =
            toml::from_str(text).unwrap_or_default();
        let mut origins = Origins::default();
        for name in names {
            if let Some(value) = spans.get(*name) {
                let line = text[..value.span().start].matches('\n').count() + 1;
                origins.set(
                    name,
                    Origin::File {
                        path: path.to_path_buf(),
                        line,
                    },
                );
            }
        }
        origins
    }
}
