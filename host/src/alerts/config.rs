//! The `[alerts]` table of `spool.toml`: which conditions alert a person, where the alerts go,
//! and how often they repeat. [`AlertSettings`] is the file's form; [`AlertsConfig`] the
//! validated one the host uses.
//!
//! ```toml
//! [alerts]
//! dashboard_url = "https://spool.internal/"   # the link every alert carries
//! cooldown = "30m"                            # a firing alert repeats this often
//!
//! [[alerts.rule]]                             # none configured: the three defaults below
//! kind = "dead_letters"                       # more than 3 dead letters of a type in 10m
//! threshold = 3
//! window = "10m"
//!
//! [[alerts.webhook]]                          # JSON POST with a Slack-compatible `text`
//! url = "https://hooks.slack.com/services/..."
//!
//! [[alerts.email]]                            # e-mail over SMTP
//! smtp = "smtp://user:password@mail.internal:587?tls=required"
//! from = "spool@example.com"
//! to = ["oncall@example.com"]
//! ```
//!
//! With no `[[alerts.rule]]` the rules are the essay's: more than 3 dead letters of any one task
//! type within 10 minutes, a plugin that fails to load, and the database not answering for 30 s.
//! Configuring any rule replaces that list (write the defaults out to keep them).

use serde::Deserialize;
use std::net::SocketAddr;
use std::time::Duration;

/// An `[alerts]` table that cannot be used: the message names the field and what to write.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct AlertSettingsError(pub String);

/// How long a firing alert waits before it is sent again while it lasts.
pub const DEFAULT_COOLDOWN: Duration = Duration::from_secs(30 * 60);
/// How often the rules are evaluated.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(5);
/// The essay's rule: more than this many dead letters...
pub const DEFAULT_DEAD_LETTERS: u64 = 3;
/// ...of one type within this window.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(10 * 60);
/// The database must not answer for this long before it alerts (a blip is not an incident).
pub const DEFAULT_DATABASE_AFTER: Duration = Duration::from_secs(30);
/// The essay's quarterly drill: a last drill older than this is a warning.
pub const DRILL_MAX_AGE: Duration = Duration::from_secs(90 * 86_400);
/// How long a channel may take to accept one message.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(10);

/// The `[alerts]` table as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlertSettings {
    /// The dashboard link in every alert [default: http://LISTEN/].
    pub dashboard_url: Option<String>,
    /// A firing alert is sent again after this long while it lasts [default: 30m].
    #[serde(default, with = "humantime_serde")]
    pub cooldown: Option<Duration>,
    /// How often the rules are evaluated [default: 5s].
    #[serde(default, with = "humantime_serde")]
    pub interval: Option<Duration>,
    #[serde(default)]
    pub rule: Vec<RuleSettings>,
    #[serde(default)]
    pub webhook: Vec<WebhookSettings>,
    #[serde(default)]
    pub email: Vec<EmailSettings>,
}

/// One `[[alerts.rule]]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleSettings {
    /// `dead_letters`, `backlog`, `oldest_pending`, `plugin_load` or `database`.
    pub kind: String,
    /// Only this task type; absent: every type, each on its own.
    pub task_type: Option<String>,
    /// `dead_letters`: more than this many in the window [default: 3]; `backlog`: more than
    /// this many pending (required).
    pub threshold: Option<u64>,
    /// `dead_letters`: the window [default: 10m].
    #[serde(default, with = "humantime_serde")]
    pub window: Option<Duration>,
    /// `oldest_pending`: a due task waiting longer than this (required).
    #[serde(default, with = "humantime_serde")]
    pub older_than: Option<Duration>,
    /// `database`: not answering for this long [default: 30s].
    #[serde(default, with = "humantime_serde")]
    pub after: Option<Duration>,
}

/// One `[[alerts.webhook]]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookSettings {
    /// A name for logs and the drill report [default: webhook-N].
    pub name: Option<String>,
    /// `http://` or `https://` URL the JSON is POSTed to.
    pub url: String,
}

/// One `[[alerts.email]]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmailSettings {
    /// A name for logs and the drill report [default: email-N].
    pub name: Option<String>,
    /// `smtp://[USER:PASSWORD@]HOST[:PORT][?tls=required|opportunistic]` (plain unless `tls`
    /// says otherwise) or `smtps://...` (TLS from the first byte).
    pub smtp: String,
    /// The sender, `spool@example.com` or `Spool <spool@example.com>`.
    pub from: String,
    /// The recipients.
    pub to: Vec<String>,
}

/// What a rule watches.
#[derive(Debug, Clone, PartialEq)]
pub enum Rule {
    /// More than `threshold` tasks of a type became dead letters (failed) within `window`.
    DeadLetters {
        task_type: Option<String>,
        threshold: u64,
        window: Duration,
    },
    /// More than `threshold` tasks of a type are pending.
    Backlog {
        task_type: Option<String>,
        threshold: u64,
    },
    /// A due task of a type has waited longer than `older_than`.
    OldestPending {
        task_type: Option<String>,
        older_than: Duration,
    },
    /// A plugin of this host failed to load.
    PluginLoad { task_type: Option<String> },
    /// The database has not answered this host for `after`.
    Database { after: Duration },
}

impl Rule {
    /// The rule's kind as written in `spool.toml`.
    pub fn kind(&self) -> &'static str {
        match self {
            Rule::DeadLetters { .. } => "dead_letters",
            Rule::Backlog { .. } => "backlog",
            Rule::OldestPending { .. } => "oldest_pending",
            Rule::PluginLoad { .. } => "plugin_load",
            Rule::Database { .. } => "database",
        }
    }

    /// The task type it is limited to, if any.
    pub fn task_type(&self) -> Option<&str> {
        match self {
            Rule::DeadLetters { task_type, .. }
            | Rule::Backlog { task_type, .. }
            | Rule::OldestPending { task_type, .. }
            | Rule::PluginLoad { task_type } => task_type.as_deref(),
            Rule::Database { .. } => None,
        }
    }

    /// Whether the rule reads the shared task table (evaluated by the leading host only) or
    /// watches this host (evaluated on every host).
    pub fn is_shared(&self) -> bool {
        matches!(
            self,
            Rule::DeadLetters { .. } | Rule::Backlog { .. } | Rule::OldestPending { .. }
        )
    }

    /// The rule in words, e.g. "more than 3 dead letters of a type within 10m".
    pub fn describe(&self) -> String {
        let of = |task_type: &Option<String>| match task_type {
            Some(t) => format!("of type {t}"),
            None => "of a type".to_string(),
        };
        match self {
            Rule::DeadLetters {
                task_type,
                threshold,
                window,
            } => format!(
                "more than {threshold} dead letters {} within {}",
                of(task_type),
                humantime::format_duration(*window)
            ),
            Rule::Backlog {
                task_type,
                threshold,
            } => format!("more than {threshold} pending tasks {}", of(task_type)),
            Rule::OldestPending {
                task_type,
                older_than,
            } => format!(
                "a due task {} waiting longer than {}",
                of(task_type),
                humantime::format_duration(*older_than)
            ),
            Rule::PluginLoad { task_type: Some(t) } => format!("plugin {t} fails to load"),
            Rule::PluginLoad { task_type: None } => "a plugin fails to load".to_string(),
            Rule::Database { after } => format!(
                "the database does not answer for {}",
                humantime::format_duration(*after)
            ),
        }
    }

    /// The rules when none is configured: the essay's.
    pub fn defaults() -> Vec<Rule> {
        vec![
            Rule::DeadLetters {
                task_type: None,
                threshold: DEFAULT_DEAD_LETTERS,
                window: DEFAULT_WINDOW,
            },
            Rule::PluginLoad { task_type: None },
            Rule::Database {
                after: DEFAULT_DATABASE_AFTER,
            },
        ]
    }
}

/// Where alerts go.
#[derive(Debug, Clone, PartialEq)]
pub enum ChannelConfig {
    Webhook { name: String, url: reqwest::Url },
    Email(EmailConfig),
}

/// A validated e-mail channel. Its `Debug` leaves out the SMTP URL, which may hold a password.
#[derive(Clone, PartialEq)]
pub struct EmailConfig {
    pub name: String,
    /// The SMTP URL as written (lettre parses it; it may carry credentials).
    pub smtp: String,
    pub from: String,
    pub to: Vec<String>,
}

impl std::fmt::Debug for EmailConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmailConfig")
            .field("name", &self.name)
            .field("smtp", &"(hidden)")
            .field("from", &self.from)
            .field("to", &self.to)
            .finish()
    }
}

impl ChannelConfig {
    pub fn name(&self) -> &str {
        match self {
            ChannelConfig::Webhook { name, .. } => name,
            ChannelConfig::Email(email) => &email.name,
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            ChannelConfig::Webhook { .. } => "webhook",
            ChannelConfig::Email(_) => "email",
        }
    }

    /// Where it sends, as anyone may see it: a webhook's scheme, host and port (its path is
    /// often the secret), an e-mail channel's server and recipients (no credentials).
    pub fn target(&self) -> String {
        match self {
            ChannelConfig::Webhook { url, .. } => origin(url),
            ChannelConfig::Email(email) => {
                let server = reqwest::Url::parse(&email.smtp)
                    .map(|url| origin(&url))
                    .unwrap_or_default();
                format!("{} via {server}", email.to.join(", "))
            }
        }
    }
}

fn origin(url: &reqwest::Url) -> String {
    let mut text = format!("{}://{}", url.scheme(), url.host_str().unwrap_or_default());
    if let Some(port) = url.port() {
        text += &format!(":{port}");
    }
    text
}

/// The validated `[alerts]` configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct AlertsConfig {
    pub dashboard_url: String,
    pub cooldown: Duration,
    pub interval: Duration,
    pub rules: Vec<Rule>,
    pub channels: Vec<ChannelConfig>,
}

impl AlertsConfig {
    /// The rules and channels of a host with no `[alerts]` table, listening on `listen`.
    pub fn defaults_for(listen: SocketAddr) -> AlertsConfig {
        AlertsConfig::from_settings(None, listen).expect("the defaults are valid")
    }

    /// Validates the `[alerts]` table; `listen` gives the default dashboard link.
    pub fn from_settings(
        settings: Option<AlertSettings>,
        listen: SocketAddr,
    ) -> Result<AlertsConfig, AlertSettingsError> {
        let settings = settings.unwrap_or_default();
        let error = |text: String| AlertSettingsError(format!("alerts.{text}"));
        let positive = |value: Option<Duration>, name: &str, default: Duration| {
            let value = value.unwrap_or(default);
            if value.is_zero() {
                Err(error(format!("{name} must be longer than zero")))
            } else {
                Ok(value)
            }
        };
        let dashboard_url = match settings.dashboard_url {
            None => format!("http://{listen}/"),
            Some(url) => {
                let parsed = reqwest::Url::parse(&url).map_err(|e| {
                    error(format!(
                        "dashboard_url = {url:?}: {e}; write an http:// or https:// URL"
                    ))
                })?;
                if !matches!(parsed.scheme(), "http" | "https") {
                    return Err(error(format!(
                        "dashboard_url = {url:?}: write an http:// or https:// URL"
                    )));
                }
                url
            }
        };
        let rules = if settings.rule.is_empty() {
            Rule::defaults()
        } else {
            settings
                .rule
                .into_iter()
                .enumerate()
                .map(|(index, rule)| {
                    rule_from(rule).map_err(|e| error(format!("rule[{index}]: {e}")))
                })
                .collect::<Result<Vec<_>, _>>()?
        };
        let mut channels = Vec::new();
        for (index, hook) in settings.webhook.into_iter().enumerate() {
            let name = hook
                .name
                .unwrap_or_else(|| format!("webhook-{}", index + 1));
            let url = reqwest::Url::parse(&hook.url)
                .ok()
                .filter(|url| matches!(url.scheme(), "http" | "https") && url.host().is_some())
                .ok_or_else(|| {
                    error(format!(
                        "webhook[{index}].url: `{}` is not an http:// or https:// URL",
                        hook.url
                    ))
                })?;
            channels.push(ChannelConfig::Webhook { name, url });
        }
        for (index, email) in settings.email.into_iter().enumerate() {
            let name = email.name.unwrap_or_else(|| format!("email-{}", index + 1));
            let at = |field: &str| format!("email[{index}].{field}");
            super::channels::check_smtp_url(&email.smtp)
                .map_err(|e| error(format!("{}: {e}", at("smtp"))))?;
            super::channels::check_mailbox(&email.from)
                .map_err(|e| error(format!("{}: {e}", at("from"))))?;
            if email.to.is_empty() {
                return Err(error(format!("{}: name at least one recipient", at("to"))));
            }
            for to in &email.to {
                super::channels::check_mailbox(to)
                    .map_err(|e| error(format!("{}: {e}", at("to"))))?;
            }
            channels.push(ChannelConfig::Email(EmailConfig {
                name,
                smtp: email.smtp,
                from: email.from,
                to: email.to,
            }));
        }
        let mut names: Vec<&str> = channels.iter().map(ChannelConfig::name).collect();
        names.sort_unstable();
        if let Some(twice) = names.windows(2).find(|pair| pair[0] == pair[1]) {
            return Err(error(format!(
                "two channels are named `{}`; give each [[alerts.webhook]] and [[alerts.email]] its own name",
                twice[0]
            )));
        }
        Ok(AlertsConfig {
            dashboard_url,
            cooldown: positive(settings.cooldown, "cooldown", DEFAULT_COOLDOWN)?,
            interval: positive(settings.interval, "interval", DEFAULT_INTERVAL)?,
            rules,
            channels,
        })
    }
}

/// One rule as written, validated.
fn rule_from(rule: RuleSettings) -> Result<Rule, String> {
    let RuleSettings {
        kind,
        task_type,
        threshold,
        window,
        older_than,
        after,
    } = rule;
    let unused = |name: &str, set: bool| {
        if set {
            Err(format!("{name} does not apply to kind = \"{kind}\""))
        } else {
            Ok(())
        }
    };
    let nonzero = |name: &str, value: Option<Duration>| match value {
        Some(value) if value.is_zero() => Err(format!("{name} must be longer than zero")),
        other => Ok(other),
    };
    let window = nonzero("window", window)?;
    let older_than = nonzero("older_than", older_than)?;
    let after = nonzero("after", after)?;
    let rule = match kind.as_str() {
        "dead_letters" => {
            unused("older_than", older_than.is_some())?;
            unused("after", after.is_some())?;
            Rule::DeadLetters {
                task_type,
                threshold: threshold.unwrap_or(DEFAULT_DEAD_LETTERS),
                window: window.unwrap_or(DEFAULT_WINDOW),
            }
        }
        "backlog" => {
            unused("window", window.is_some())?;
            unused("older_than", older_than.is_some())?;
            unused("after", after.is_some())?;
            Rule::Backlog {
                task_type,
                threshold: threshold.ok_or(
                    "kind = \"backlog\" needs threshold: alert above this many pending tasks",
                )?,
            }
        }
        "oldest_pending" => {
            unused("threshold", threshold.is_some())?;
            unused("window", window.is_some())?;
            unused("after", after.is_some())?;
            Rule::OldestPending {
                task_type,
                older_than: older_than.ok_or(
                    "kind = \"oldest_pending\" needs older_than, e.g. older_than = \"15m\"",
                )?,
            }
        }
        "plugin_load" => {
            unused("threshold", threshold.is_some())?;
            unused("window", window.is_some())?;
            unused("older_than", older_than.is_some())?;
            unused("after", after.is_some())?;
            Rule::PluginLoad { task_type }
        }
        "database" => {
            unused("task_type", task_type.is_some())?;
            unused("threshold", threshold.is_some())?;
            unused("window", window.is_some())?;
            unused("older_than", older_than.is_some())?;
            Rule::Database {
                after: after.unwrap_or(DEFAULT_DATABASE_AFTER),
            }
        }
        other => {
            return Err(format!(
                "kind = \"{other}\" is not a rule; use dead_letters, backlog, oldest_pending, plugin_load or database"
            ));
        }
    };
    Ok(rule)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<AlertsConfig, AlertSettingsError> {
        #[derive(Deserialize)]
        struct File {
            alerts: Option<AlertSettings>,
        }
        let file: File = toml::from_str(text).map_err(|e| AlertSettingsError(e.to_string()))?;
        AlertsConfig::from_settings(file.alerts, "127.0.0.1:8787".parse().unwrap())
    }

    #[test]
    fn no_table_gives_the_essays_rules_and_no_channels() {
        let config = parse("").unwrap();
        assert_eq!(config.rules, Rule::defaults());
        assert_eq!(
            config.rules[0].describe(),
            "more than 3 dead letters of a type within 10m"
        );
        assert!(config.channels.is_empty());
        assert_eq!(config.dashboard_url, "http://127.0.0.1:8787/");
        assert_eq!(config.cooldown, DEFAULT_COOLDOWN);
    }

    #[test]
    fn rules_and_channels_are_read() {
        let config = parse(
            r#"
            [alerts]
            dashboard_url = "https://spool.internal/"
            cooldown = "5m"
            [[alerts.rule]]
            kind = "dead_letters"
            task_type = "mail"
            window = "1m"
            [[alerts.rule]]
            kind = "backlog"
            threshold = 1000
            [[alerts.rule]]
            kind = "oldest_pending"
            older_than = "15m"
            [[alerts.webhook]]
            url = "https://hooks.example/services/SECRET"
            [[alerts.email]]
            name = "oncall"
            smtp = "smtp://u:p@mail.example:2525"
            from = "Spool <spool@example.com>"
            to = ["oncall@example.com"]
            "#,
        )
        .unwrap();
        assert_eq!(config.rules.len(), 3);
        assert_eq!(
            config.rules[0],
            Rule::DeadLetters {
                task_type: Some("mail".into()),
                threshold: 3,
                window: Duration::from_secs(60)
            }
        );
        assert_eq!(config.channels[0].name(), "webhook-1");
        assert_eq!(config.channels[0].target(), "https://hooks.example");
        assert_eq!(
            config.channels[1].target(),
            "oncall@example.com via smtp://mail.example:2525"
        );
    }

    #[test]
    fn mistakes_name_the_setting() {
        let message = |text: &str| parse(text).unwrap_err().to_string();
        assert!(
            message("[[alerts.rule]]\nkind = \"backlog\"")
                .contains("alerts.rule[0]: kind = \"backlog\" needs threshold")
        );
        assert!(
            message("[[alerts.rule]]\nkind = \"nope\"").contains("alerts.rule[0]: kind = \"nope\"")
        );
        assert!(
            message("[[alerts.rule]]\nkind = \"database\"\ntask_type = \"x\"")
                .contains("task_type does not apply")
        );
        assert!(message("[[alerts.webhook]]\nurl = \"ftp://x\"").contains("alerts.webhook[0].url"));
        assert!(
            message("[[alerts.email]]\nsmtp = \"smtp://h\"\nfrom = \"nobody\"\nto = [\"a@b.c\"]")
                .contains("alerts.email[0].from")
        );
        assert!(
            message("[[alerts.email]]\nsmtp = \"smtp://h\"\nfrom = \"a@b.c\"\nto = []")
                .contains("alerts.email[0].to")
        );
        assert!(
            message("[[alerts.email]]\nsmtp = \"http://h\"\nfrom = \"a@b.c\"\nto = [\"a@b.c\"]")
                .contains("alerts.email[0].smtp")
        );
        assert!(message("[alerts]\ncooldown = \"0s\"").contains("alerts.cooldown"));
        assert!(message("[alerts]\ndashboard_url = \"nope\"").contains("alerts.dashboard_url"));
        assert!(
            message(
                "[[alerts.webhook]]\nname = \"a\"\nurl = \"http://x\"\n[[alerts.webhook]]\nname = \"a\"\nurl = \"http://y\""
            )
            .contains("two channels are named `a`")
        );
        assert!(message("[alerts]\ncooldwn = \"1m\"").contains("cooldwn"));
    }
}
