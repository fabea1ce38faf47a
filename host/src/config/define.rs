//! The `settings!` macro: from one entry per flat setting it writes [`super::Settings`] (what
//! one source gives: a clap argument group and a serde table), the layering of sources, the
//! record of where each value came from, [`super::Config`] (the checked values, each under its
//! setting's name), the check from one to the other, and [`super::SETTINGS`] (the list behind
//! `--help` and docs/configuration.md).
//!
//! An entry:
//!
//! ```text
//! /// Help text: what the setting does (without its default, which is added)
//! name: SourceType => CheckedType {   // `=> CheckedType` when the rule changes the type
//!     env: "SPOOL_NAME",              // the flag is always `--name`, the file key `name`
//!     default: expression,            // of CheckedType; may use settings listed above
//!     shown: "prose",                 // optional: the default in words, for --help and docs
//!     rule: SomeRule,                 // a `rules::Rule<SourceType, Out = CheckedType>`
//!     arg: (hide_env_values = true),  // optional: more clap `#[arg]` options
//! }
//! ```
//!
//! How a source type is read from a flag, a variable or the file is [`super::source::Raw`]'s
//! job: durations are humantime (`90s`, `30d`) everywhere. Besides the flat settings,
//! `Settings` carries the spool.toml tables that are no flat setting (`[alerts]`,
//! `[[schedule]]`) and `Config` what is made of them; they are written out below, as is the
//! hand-written last step, `super::finish`, which checks settings against each other.

macro_rules! settings {
    (@shown $raw:ty, $rule:expr, $default:expr, $shown:literal) => {
        String::from($shown)
    };
    (@shown $raw:ty, $rule:expr, $default:expr) => {
        crate::config::rules::Rule::<$raw>::show(&$rule, &$default)
    };
    (@checked $raw:ty, $out:ty) => { $out };
    (@checked $raw:ty) => { $raw };
    ($(
        $(#[doc = $doc:literal])+
        $name:ident: $raw:ty $(=> $out:ty)? {
            env: $env:literal,
            default: $default:expr,
            $(shown: $shown:literal,)?
            rule: $rule:expr,
            $(arg: ($($arg:tt)*),)?
        }
    ),* $(,)?) => {
        /// Settings from one source (flags and `SPOOL_*` variables through clap, or
        /// `spool.toml` through serde); every field optional so sources can be layered.
        #[derive(Debug, Clone, Default, clap::Args, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct Settings {
            $(
                $(#[doc = $doc])+
                #[arg(
                    long,
                    env = $env,
                    value_parser = <$raw as crate::config::source::Raw>::parser(),
                    help = crate::config::help_text(
                        &[$($doc),+],
                        settings!(@shown $raw, $rule, $default $(, $shown)?),
                    )
                    $(, $($arg)*)?
                )]
                #[serde(default, deserialize_with = "crate::config::source::from_file")]
                pub $name: Option<$raw>,
            )*
            /// Alert rules, channels and cool-down: the `[alerts]` table of spool.toml only
            /// (see [`crate::alerts::config`]).
            #[arg(skip)]
            #[serde(default)]
            pub alerts: Option<crate::alerts::config::AlertSettings>,
            /// Periodic tasks (`[[schedule]]` tables, spool.toml only; see [`crate::schedule`]).
            #[arg(skip)]
            #[serde(default)]
            pub schedule: Vec<crate::schedule::ScheduleEntry>,
            /// Where each value above came from, for messages.
            #[arg(skip)]
            #[serde(skip)]
            pub origins: crate::config::origin::Origins,
        }

        impl Settings {
            /// Fills every setting this source leaves unset from `lower`.
            pub fn or(self, lower: Settings) -> Settings {
                Settings {
                    $($name: self.$name.or(lower.$name),)*
                    alerts: self.alerts.or(lower.alerts),
                    schedule: if self.schedule.is_empty() {
                        lower.schedule
                    } else {
                        self.schedule
                    },
                    origins: self.origins.or(lower.origins),
                }
            }

            /// Records which settings clap found on the command line and which in the
            /// environment; `matches` are those of the command that flattens `Settings`.
            pub fn note_command_line(&mut self, matches: &clap::ArgMatches) {
                $(
                    if let Some(origin) = crate::config::origin::Origin::in_matches(
                        matches,
                        stringify!($name),
                        &crate::config::flag_of(stringify!($name)),
                        $env,
                    ) {
                        self.origins.set(stringify!($name), origin);
                    }
                )*
            }
        }

        /// Every flat setting, in the order `--help` lists them.
        pub const SETTINGS: &[crate::config::SettingInfo] = &[$(
            crate::config::SettingInfo {
                name: stringify!($name),
                env: $env,
                doc: &[$($doc),+],
                shown: || settings!(@shown $raw, $rule, $default $(, $shown)?),
            },
        )*];

        /// The checked configuration of one host: every flat setting under its own name
        /// (sizes in bytes), and what the spool.toml tables describe.
        #[derive(Debug, Clone)]
        pub struct Config {
            $(
                $(#[doc = $doc])+
                pub $name: settings!(@checked $raw $(, $out)?),
            )*
            /// Periodic tasks declared in spool.toml.
            pub schedules: Vec<crate::schedule::Schedule>,
            /// Alert rules and channels (`[alerts]`).
            pub alerts: crate::alerts::config::AlertsConfig,
        }

        impl Config {
            /// Checks merged settings, applying defaults; an error names the setting, where
            /// its value came from and what is allowed.
            pub fn from_settings(
                settings: Settings,
            ) -> Result<Config, crate::config::ConfigError> {
                let Settings {
                    $($name,)*
                    alerts,
                    schedule,
                    mut origins,
                } = settings;
                $(
                    let $name: settings!(@checked $raw $(, $out)?) = match $name {
                        Some(given) => crate::config::rules::Rule::<$raw>::check(&$rule, given)
                            .map_err(|problem| {
                                crate::config::ConfigError::setting(
                                    stringify!($name),
                                    &origins,
                                    problem,
                                )
                            })?,
                        None => {
                            origins.set(
                                stringify!($name),
                                crate::config::origin::Origin::Default,
                            );
                            $default
                        }
                    };
                )*
                let config = Config {
                    $($name,)*
                    schedules: Vec::new(),
                    alerts: crate::alerts::config::AlertsConfig::defaults_for(
                        crate::config::DEFAULT_LISTEN.parse().expect("a valid default"),
                    ),
                };
                crate::config::finish(config, alerts, schedule, &origins)
            }
        }
    };
}

pub(crate) use settings;
