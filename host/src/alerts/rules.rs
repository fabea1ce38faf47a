//! The rule evaluator, pure: what the queue and the host look like now goes in, which alerts
//! to send comes out. No I/O, no clock of its own; the service feeds it.
//!
//! Each rule turns observations into [`Condition`]s, one per alert key (`dead_letters:mail`,
//! `backlog:report`, `plugin_load:mail`, `database`). The [`Evaluator`] keeps the alerts that
//! are firing and, on each [`Evaluator::observe`]:
//! - a condition that was not firing starts firing: [`Event::Firing`], sent at once;
//! - one still firing is sent again once `cooldown` has passed since it was last sent:
//!   [`Event::Repeat`];
//! - one firing before and absent now has cleared: [`Event::Resolved`], sent once.
//!
//! Shared rules (the task table) and local rules (this host) are observed separately: an
//! observation of one group never resolves an alert of the other, so while the database is
//! away (shared rules cannot be read) their alerts stay as they were.

use chrono::{DateTime, Utc};
use std::collections::BTreeMap;
use std::time::Duration;

use super::config::Rule;
use crate::store::reads::Backlog;

/// A rule that holds now, for one subject.
#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    /// The alert's identity: `KIND` or `KIND:TASK_TYPE`.
    pub key: String,
    /// The rule's kind (`dead_letters`, ...).
    pub rule: &'static str,
    pub task_type: Option<String>,
    /// The figure that broke the rule: dead letters in the window, pending tasks, seconds the
    /// oldest due task waited, seconds the database has not answered; 1 for a plugin error.
    pub value: u64,
    /// What holds, in words: "5 dead letters of type mail within 10m (more than 3)".
    pub text: String,
    /// Read from the shared task table (the leading host evaluates it) rather than this host.
    pub shared: bool,
}

/// What happened to an alert.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    Firing,
    Repeat,
    Resolved,
}

impl Event {
    pub fn as_str(self) -> &'static str {
        match self {
            Event::Firing => "firing",
            Event::Repeat => "repeat",
            Event::Resolved => "resolved",
        }
    }

    pub fn parse(text: &str) -> Option<Event> {
        match text {
            "firing" => Some(Event::Firing),
            "repeat" => Some(Event::Repeat),
            "resolved" => Some(Event::Resolved),
            _ => None,
        }
    }
}

/// An alert to send.
#[derive(Debug, Clone, PartialEq)]
pub struct Notice {
    pub event: Event,
    /// The condition (for a resolved alert, as it was last seen).
    pub condition: Condition,
    /// When the alert started firing.
    pub since: DateTime<Utc>,
    pub at: DateTime<Utc>,
}

/// An alert that is firing.
#[derive(Debug, Clone, PartialEq)]
pub struct Active {
    pub condition: Condition,
    pub since: DateTime<Utc>,
    pub last_sent: DateTime<Utc>,
}

/// The firing alerts and the cool-down between repeats.
#[derive(Debug, Clone)]
pub struct Evaluator {
    cooldown: chrono::Duration,
    active: BTreeMap<String, Active>,
}

impl Evaluator {
    pub fn new(cooldown: Duration) -> Self {
        Evaluator {
            cooldown: crate::task::chrono_duration(cooldown),
            active: BTreeMap::new(),
        }
    }

    /// Takes what holds now for one group (`shared` or not) and returns the alerts to send.
    /// Alerts of the other group are left alone.
    pub fn observe(
        &mut self,
        now: DateTime<Utc>,
        shared: bool,
        holding: Vec<Condition>,
    ) -> Vec<Notice> {
        let mut notices = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        for condition in holding.into_iter().filter(|c| c.shared == shared) {
            if !seen.insert(condition.key.clone()) {
                continue; // two rules on one subject: the first one speaks
            }
            match self.active.get_mut(&condition.key) {
                None => {
                    notices.push(Notice {
                        event: Event::Firing,
                        condition: condition.clone(),
                        since: now,
                        at: now,
                    });
                    self.active.insert(
                        condition.key.clone(),
                        Active {
                            condition,
                            since: now,
                            last_sent: now,
                        },
                    );
                }
                Some(active) => {
                    active.condition = condition;
                    if now - active.last_sent >= self.cooldown {
                        active.last_sent = now;
                        notices.push(Notice {
                            event: Event::Repeat,
                            condition: active.condition.clone(),
                            since: active.since,
                            at: now,
                        });
                    }
                }
            }
        }
        let cleared: Vec<String> = self
            .active
            .iter()
            .filter(|(key, active)| active.condition.shared == shared && !seen.contains(*key))
            .map(|(key, _)| key.clone())
            .collect();
        for key in cleared {
            if let Some(active) = self.active.remove(&key) {
                notices.push(Notice {
                    event: Event::Resolved,
                    condition: active.condition,
                    since: active.since,
                    at: now,
                });
            }
        }
        notices
    }

    /// Forgets the shared alerts without resolving them (this host stopped leading: the next
    /// leader takes them over from the alert log).
    pub fn forget_shared(&mut self) {
        self.active.retain(|_, active| !active.condition.shared);
    }

    /// Takes over an alert another host (or this one, before a restart) had firing.
    pub fn restore(&mut self, active: Active) {
        self.active.insert(active.condition.key.clone(), active);
    }

    /// The alerts firing now.
    pub fn active(&self) -> impl Iterator<Item = &Active> {
        self.active.values()
    }
}

fn key(rule: &Rule, task_type: Option<&str>) -> String {
    match task_type {
        Some(task_type) => format!("{}:{task_type}", rule.kind()),
        None => rule.kind().to_string(),
    }
}

/// Rebuilds the condition an alert key stands for (as far as the key tells), for alerts taken
/// over from the alert log.
pub fn condition_of_key(key: &str, value: u64, text: String) -> Option<Condition> {
    let (kind, task_type) = match key.split_once(':') {
        Some((kind, task_type)) => (kind, Some(task_type.to_string())),
        None => (key, None),
    };
    let (rule, shared) = match kind {
        "dead_letters" => ("dead_letters", true),
        "backlog" => ("backlog", true),
        "oldest_pending" => ("oldest_pending", true),
        "plugin_load" => ("plugin_load", false),
        "database" => ("database", false),
        _ => return None,
    };
    Some(Condition {
        key: key.to_string(),
        rule,
        task_type,
        value,
        text,
        shared,
    })
}

fn applies(rule_type: Option<&str>, task_type: &str) -> bool {
    rule_type.is_none_or(|t| t == task_type)
}

/// A dead-letter rule over the dead letters per type within its window.
pub fn dead_letters(rule: &Rule, counts: &BTreeMap<String, u64>) -> Vec<Condition> {
    let Rule::DeadLetters {
        task_type,
        threshold,
        window,
    } = rule
    else {
        return Vec::new();
    };
    counts
        .iter()
        .filter(|(t, count)| applies(task_type.as_deref(), t) && **count > *threshold)
        .map(|(t, count)| Condition {
            key: key(rule, Some(t)),
            rule: rule.kind(),
            task_type: Some(t.clone()),
            value: *count,
            text: format!(
                "{count} dead letters of type {t} within {} (more than {threshold})",
                humantime::format_duration(*window)
            ),
            shared: true,
        })
        .collect()
}

/// A backlog or oldest-pending rule over the pending tasks per type.
pub fn backlog(
    rule: &Rule,
    backlog: &BTreeMap<String, Backlog>,
    now: DateTime<Utc>,
) -> Vec<Condition> {
    let mut holding = Vec::new();
    for (t, b) in backlog {
        match rule {
            Rule::Backlog {
                task_type,
                threshold,
            } if applies(task_type.as_deref(), t) && b.pending > *threshold => {
                holding.push(Condition {
                    key: key(rule, Some(t)),
                    rule: rule.kind(),
                    task_type: Some(t.clone()),
                    value: b.pending,
                    text: format!(
                        "{} pending tasks of type {t} (more than {threshold})",
                        b.pending
                    ),
                    shared: true,
                });
            }
            Rule::OldestPending {
                task_type,
                older_than,
            } if applies(task_type.as_deref(), t) => {
                let Some(due) = b.oldest_due else { continue };
                let waited = (now - due).to_std().unwrap_or_default();
                if waited > *older_than {
                    let shown = Duration::from_secs(waited.as_secs());
                    holding.push(Condition {
                        key: key(rule, Some(t)),
                        rule: rule.kind(),
                        task_type: Some(t.clone()),
                        value: waited.as_secs(),
                        text: format!(
                            "the oldest due task of type {t} has waited {} (longer than {}); {} pending",
                            humantime::format_duration(shown),
                            humantime::format_duration(*older_than),
                            b.pending
                        ),
                        shared: true,
                    });
                }
            }
            _ => {}
        }
    }
    holding
}

/// A plugin-load rule over this host's load errors (task type → error).
pub fn plugin_errors(
    rule: &Rule,
    errors: &BTreeMap<String, String>,
    host_id: &str,
) -> Vec<Condition> {
    let Rule::PluginLoad { task_type } = rule else {
        return Vec::new();
    };
    errors
        .iter()
        .filter(|(t, _)| applies(task_type.as_deref(), t))
        .map(|(t, error)| {
            let first_line: String = error
                .lines()
                .next()
                .unwrap_or("")
                .chars()
                .take(300)
                .collect();
            Condition {
                key: key(rule, Some(t)),
                rule: rule.kind(),
                task_type: Some(t.clone()),
                value: 1,
                text: format!("plugin {t} failed to load on host {host_id}: {first_line}"),
                shared: false,
            }
        })
        .collect()
}

/// The database rule: `down_since` is when this host's checks started failing (None while it
/// answers).
pub fn database(
    rule: &Rule,
    down_since: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
    database: &str,
    host_id: &str,
) -> Vec<Condition> {
    let (Rule::Database { after }, Some(since)) = (rule, down_since) else {
        return Vec::new();
    };
    let down = (now - since).to_std().unwrap_or_default();
    if down < *after {
        return Vec::new();
    }
    vec![Condition {
        key: key(rule, None),
        rule: rule.kind(),
        task_type: None,
        value: down.as_secs(),
        text: format!(
            "the task database {database} has not answered host {host_id} for {}",
            humantime::format_duration(Duration::from_secs(down.as_secs()))
        ),
        shared: false,
    }]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + seconds, 0).unwrap()
    }

    fn essay() -> Rule {
        Rule::defaults().remove(0)
    }

    fn counts(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
        pairs.iter().map(|(t, n)| (t.to_string(), *n)).collect()
    }

    fn events(notices: &[Notice]) -> Vec<(Event, &str)> {
        notices
            .iter()
            .map(|n| (n.event, n.condition.key.as_str()))
            .collect()
    }

    #[test]
    fn more_than_three_dead_letters_of_a_type_fire_per_type() {
        let holding = dead_letters(&essay(), &counts(&[("mail", 4), ("report", 3)]));
        assert_eq!(holding.len(), 1, "3 is not more than 3");
        assert_eq!(holding[0].key, "dead_letters:mail");
        assert_eq!(holding[0].value, 4);
        assert_eq!(
            holding[0].text,
            "4 dead letters of type mail within 10m (more than 3)"
        );
        let only_report = Rule::DeadLetters {
            task_type: Some("report".into()),
            threshold: 0,
            window: Duration::from_secs(60),
        };
        let holding = dead_letters(&only_report, &counts(&[("mail", 9), ("report", 1)]));
        assert_eq!(holding.len(), 1);
        assert_eq!(holding[0].key, "dead_letters:report");
    }

    #[test]
    fn fires_once_repeats_after_the_cooldown_and_resolves_once() {
        let mut evaluator = Evaluator::new(Duration::from_secs(600));
        let rule = essay();
        let mut step = |t: i64, mail: u64| {
            evaluator.observe(at(t), true, dead_letters(&rule, &counts(&[("mail", mail)])))
        };
        assert!(step(0, 2).is_empty());
        let first = step(5, 4);
        assert_eq!(events(&first), [(Event::Firing, "dead_letters:mail")]);
        assert_eq!(first[0].since, at(5));
        assert!(step(10, 5).is_empty(), "within the cooldown: nothing");
        assert!(
            step(600, 6).is_empty(),
            "cooldown counts from the last send"
        );
        let repeat = step(605, 6);
        assert_eq!(events(&repeat), [(Event::Repeat, "dead_letters:mail")]);
        assert_eq!(repeat[0].condition.value, 6, "with the latest figure");
        assert_eq!(repeat[0].since, at(5));
        assert!(step(610, 6).is_empty());
        let resolved = step(700, 1);
        assert_eq!(events(&resolved), [(Event::Resolved, "dead_letters:mail")]);
        assert_eq!(resolved[0].condition.value, 6, "as last seen");
        assert!(step(705, 0).is_empty(), "resolved only once");
        assert_eq!(
            events(&step(710, 4)),
            [(Event::Firing, "dead_letters:mail")],
            "a new incident fires again at once"
        );
    }

    #[test]
    fn groups_never_resolve_each_other() {
        let mut evaluator = Evaluator::new(Duration::from_secs(600));
        let shared = dead_letters(&essay(), &counts(&[("mail", 4)]));
        let db = Rule::Database {
            after: Duration::from_secs(30),
        };
        let local = database(&db, Some(at(0)), at(40), "sqlite://x", "h1");
        assert_eq!(local[0].key, "database");
        assert_eq!(evaluator.observe(at(40), true, shared).len(), 1);
        assert_eq!(evaluator.observe(at(40), false, local).len(), 1);
        // The database is away: shared rules are not observed; the local group clears.
        let notices = evaluator.observe(at(50), false, Vec::new());
        assert_eq!(events(&notices), [(Event::Resolved, "database")]);
        assert_eq!(evaluator.active().count(), 1, "the dead-letter alert stays");
        evaluator.forget_shared();
        assert_eq!(evaluator.active().count(), 0);
    }

    #[test]
    fn restored_alerts_resolve_or_repeat_on_the_new_leader() {
        let mut evaluator = Evaluator::new(Duration::from_secs(600));
        let condition = condition_of_key("dead_letters:mail", 5, "5 dead letters".into()).unwrap();
        assert!(condition.shared);
        evaluator.restore(Active {
            condition: condition.clone(),
            since: at(0),
            last_sent: at(0),
        });
        let still = dead_letters(&essay(), &counts(&[("mail", 5)]));
        assert!(evaluator.observe(at(100), true, still.clone()).is_empty());
        assert_eq!(
            evaluator.observe(at(600), true, still)[0].event,
            Event::Repeat
        );
        assert_eq!(
            events(&evaluator.observe(at(700), true, Vec::new())),
            [(Event::Resolved, "dead_letters:mail")]
        );
        assert!(condition_of_key("nonsense", 0, String::new()).is_none());
        assert!(
            !condition_of_key("plugin_load:x", 1, String::new())
                .unwrap()
                .shared
        );
    }

    #[test]
    fn backlog_and_oldest_pending() {
        let pending = BTreeMap::from([
            (
                "report".to_string(),
                Backlog {
                    pending: 1200,
                    due: 1200,
                    oldest_due: Some(at(0)),
                    ..Backlog::default()
                },
            ),
            (
                "mail".to_string(),
                Backlog {
                    pending: 3,
                    ..Backlog::default()
                },
            ),
        ]);
        let big = Rule::Backlog {
            task_type: None,
            threshold: 1000,
        };
        let holding = backlog(&big, &pending, at(0));
        assert_eq!(holding.len(), 1);
        assert_eq!(holding[0].key, "backlog:report");
        assert_eq!(
            holding[0].text,
            "1200 pending tasks of type report (more than 1000)"
        );
        let old = Rule::OldestPending {
            task_type: None,
            older_than: Duration::from_secs(900),
        };
        assert!(
            backlog(&old, &pending, at(900)).is_empty(),
            "not longer yet"
        );
        let holding = backlog(&old, &pending, at(901));
        assert_eq!(holding.len(), 1, "scheduled-only types never count");
        assert_eq!(holding[0].key, "oldest_pending:report");
        assert_eq!(holding[0].value, 901);
        assert!(
            holding[0].text.contains("waited 15m 1s (longer than 15m)"),
            "{}",
            holding[0].text
        );
    }

    #[test]
    fn plugin_errors_and_the_database_are_local() {
        let rule = Rule::PluginLoad { task_type: None };
        let errors = BTreeMap::from([(
            "mail".to_string(),
            "not a component\nmore detail".to_string(),
        )]);
        let holding = plugin_errors(&rule, &errors, "h1");
        assert_eq!(holding[0].key, "plugin_load:mail");
        assert_eq!(
            holding[0].text,
            "plugin mail failed to load on host h1: not a component"
        );
        assert!(!holding[0].shared);
        let db = Rule::Database {
            after: Duration::from_secs(30),
        };
        assert!(database(&db, None, at(100), "d", "h").is_empty());
        assert!(
            database(&db, Some(at(80)), at(100), "d", "h").is_empty(),
            "a blip"
        );
        let down = database(&db, Some(at(60)), at(100), "postgres://db:5432/app", "h1");
        assert_eq!(
            down[0].text,
            "the task database postgres://db:5432/app has not answered host h1 for 40s"
        );
    }
}
