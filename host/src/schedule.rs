//! Periodic tasks: the `[[schedule]]` entries of a plugin's manifest and of `spool.toml`, and
//! the pure arithmetic of their ticks (no clock, no database: every function takes `now`).
//!
//! ```toml
//! [[schedule]]
//! name = "nightly"              # needed when a type has several schedules in one file
//! cron = "0 3 * * *"            # five fields, or six with seconds first ("*/10 * * * * *")
//! timezone = "Europe/Berlin"    # IANA name for cron; default UTC
//! payload = { full = true }     # any TOML value, becomes the task's JSON payload; default {}
//! priority = 5                  # default: the type's manifest priority, else 0
//! max_retry = 2                 # default: the type's manifest, else the host's
//!
//! [[schedule]]
//! name = "sweep"
//! every = "15m"                 # or an interval: ticks at whole multiples since 1970-01-01 UTC
//! ```
//! In `spool.toml` every entry also names its `task_type`; in a manifest the type is the
//! plugin's own and `task_type` is refused.
//!
//! Cron expressions are parsed and evaluated by [croner](https://docs.rs/croner): maintained,
//! with optional seconds, `L`/`W`/`#` specifiers, and time zones through chrono-tz with
//! documented daylight-saving rules (a fixed-time job whose time falls in a skipped hour runs
//! when the gap ends; one in a repeated hour runs once). The `cron` crate needs seven fields
//! with seconds and years, which standard five-field expressions are not.
//!
//! A tick is an instant. Its task's idempotency key is [`Schedule::idempotency_key`]:
//! `spool:schedule:SOURCE:NAME:TICK` (the tick in RFC 3339 UTC with milliseconds) within the
//! task type, so any number of hosts enqueueing the same tick create one task. The API refuses
//! keys starting with `spool:` ([`RESERVED_KEY_PREFIX`]), so no caller can take a tick's key first.
//!
//! [`due`] is the catch-up rule: of the ticks after `after` (the later of when the schedule was
//! first seen and its last enqueued tick) and at or before `now`, only the latest is due. A host
//! that was down across many ticks enqueues one task for them, not one per missed tick.

use chrono::{DateTime, SubsecRound, TimeZone, Utc};
use chrono_tz::Tz;
use croner::Cron;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;
use std::time::Duration;

use spool_rules::limits::MAX_RETRY;
use spool_rules::names::{RESERVED_KEY_PREFIX, is_valid_task_type};
/// The name of a schedule that has none.
pub const DEFAULT_NAME: &str = "default";
/// The shortest `every`.
pub const MIN_EVERY: Duration = Duration::from_secs(1);
/// The longest `every`: a year.
pub const MAX_EVERY: Duration = Duration::from_secs(366 * 86_400);

/// Where a schedule is declared.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
)]
pub enum Source {
    /// A `[[schedule]]` in a plugin's manifest: it exists while the plugin is loaded.
    #[serde(rename = "manifest")]
    Manifest,
    /// A `[[schedule]]` in `spool.toml`.
    #[serde(rename = "spool.toml")]
    Config,
}

impl Source {
    /// The word used in idempotency keys.
    fn key_word(self) -> &'static str {
        match self {
            Source::Manifest => "manifest",
            Source::Config => "config",
        }
    }
}

/// A `[[schedule]]` entry as written.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleEntry {
    /// The task type to enqueue (`spool.toml` only).
    pub task_type: Option<String>,
    pub name: Option<String>,
    pub cron: Option<String>,
    #[serde(default, with = "humantime_serde")]
    pub every: Option<Duration>,
    pub timezone: Option<String>,
    pub payload: Option<toml::Value>,
    pub priority: Option<i32>,
    pub max_retry: Option<u32>,
}

/// When a schedule ticks.
#[derive(Debug, Clone, PartialEq)]
pub enum Timing {
    /// A cron expression, evaluated in a time zone.
    Cron {
        expression: String,
        cron: Box<Cron>,
        timezone: Tz,
    },
    /// Every whole multiple of the interval since 1970-01-01T00:00:00Z.
    Every(Duration),
}

/// A checked schedule, apart from its task type.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleSpec {
    pub name: String,
    pub timing: Timing,
    /// JSON text.
    pub payload: String,
    pub priority: Option<i32>,
    pub max_retry: Option<u32>,
}

/// A schedule of a task type, from one source.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    pub source: Source,
    pub task_type: String,
    pub spec: ScheduleSpec,
}

impl Schedule {
    /// The idempotency key of the task for `tick`.
    pub fn idempotency_key(&self, tick: DateTime<Utc>) -> String {
        format!(
            "{RESERVED_KEY_PREFIX}schedule:{}:{}:{}",
            self.source.key_word(),
            self.spec.name,
            tick_text(tick)
        )
    }

    /// The name under which the hosts sharing a database keep the latest tick of this schedule
    /// that was enqueued, so a restart or a new leader never enqueues it again, even after its
    /// task was archived and purged.
    pub fn last_tick_name(&self) -> String {
        format!(
            "schedule-last-tick:{}:{}:{}",
            self.source.key_word(),
            self.task_type,
            self.spec.name
        )
    }

    /// The name under which the hosts sharing a database agree on when this schedule (with
    /// this timing) was first seen: ticks before it are never enqueued.
    pub fn first_seen_name(&self) -> String {
        format!(
            "schedule-since:{}:{}:{}:{}",
            self.source.key_word(),
            self.task_type,
            self.spec.name,
            self.spec.timing.fingerprint()
        )
    }

    /// What identifies the schedule among all of a host's: source, task type and name.
    pub fn id(&self) -> (Source, String, String) {
        (self.source, self.task_type.clone(), self.spec.name.clone())
    }
}

/// A tick as written in keys: RFC 3339 in UTC with milliseconds.
pub fn tick_text(tick: DateTime<Utc>) -> String {
    tick.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
}

impl Timing {
    /// The cron expression, if any.
    pub fn cron(&self) -> Option<&str> {
        match self {
            Timing::Cron { expression, .. } => Some(expression),
            Timing::Every(_) => None,
        }
    }

    /// The interval, if any.
    pub fn every(&self) -> Option<Duration> {
        match self {
            Timing::Every(every) => Some(*every),
            Timing::Cron { .. } => None,
        }
    }

    /// The time zone cron expressions are read in (UTC for intervals).
    pub fn timezone(&self) -> Tz {
        match self {
            Timing::Cron { timezone, .. } => *timezone,
            Timing::Every(_) => Tz::UTC,
        }
    }

    /// A short hash of what decides the ticks: a changed expression is a new schedule.
    pub fn fingerprint(&self) -> String {
        let text = match self {
            Timing::Cron {
                expression,
                timezone,
                ..
            } => format!("cron {expression} {timezone}"),
            Timing::Every(every) => format!("every {}", every.as_millis()),
        };
        hex::encode(&Sha256::digest(text.as_bytes())[..8])
    }

    /// The first tick after `now`.
    pub fn next_after(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match self {
            Timing::Every(every) => {
                let step = every.as_millis() as i64;
                let ms = now.timestamp_millis();
                DateTime::from_timestamp_millis((ms.div_euclid(step) + 1) * step)
            }
            Timing::Cron { cron, timezone, .. } => {
                let local = now.trunc_subsecs(0).with_timezone(timezone);
                let next = cron.find_next_occurrence(&local, false).ok()?;
                Some(next.with_timezone(&Utc))
            }
        }
    }

    /// The last tick at or before `now`.
    ///
    /// For cron, ticks are always the forward search's (croner's daylight-saving rules are
    /// stated for it): the backward search only finds a starting point two occurrences back,
    /// from which the forward search walks up to `now`. So every host names a tick alike.
    pub fn latest_at_or_before(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match self {
            Timing::Every(every) => {
                let step = every.as_millis() as i64;
                let ms = now.timestamp_millis();
                DateTime::from_timestamp_millis(ms.div_euclid(step) * step)
            }
            Timing::Cron { cron, timezone, .. } => {
                let local = now.trunc_subsecs(0).with_timezone(timezone);
                let previous = cron.find_previous_occurrence(&local, true).ok()?;
                let start = cron
                    .find_previous_occurrence(&previous, false)
                    .unwrap_or_else(|_| previous - chrono::Duration::seconds(1));
                let mut cursor = start;
                let mut latest = None;
                // Two occurrences back, plus room for a repeated hour: a handful of steps.
                for _ in 0..8 {
                    let Ok(next) = cron.find_next_occurrence(&cursor, false) else {
                        break;
                    };
                    if next.with_timezone(&Utc) > now {
                        break;
                    }
                    latest = Some(next.with_timezone(&Utc));
                    cursor = next;
                }
                latest
            }
        }
    }
}

/// The tick to enqueue now, if any: the latest tick at or before `now` that is after `after`
/// (the later of when the schedule was first seen and its last enqueued tick). Ticks missed
/// in between are not enqueued: one task stands for all of them.
pub fn due(timing: &Timing, after: DateTime<Utc>, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    timing.latest_at_or_before(now).filter(|tick| *tick > after)
}

/// Checks a list of entries: names unique per task type, exactly one of `cron` and `every`,
/// valid time zones and payloads. `source` decides whether `task_type` is required
/// (`spool.toml`) or refused (a manifest). Returns the task type of each (`None` in a
/// manifest) with its checked schedule. Errors start with `schedule[i]` and say what to change.
pub fn check_entries(
    entries: &[ScheduleEntry],
    source: Source,
    now: DateTime<Utc>,
) -> Result<Vec<(Option<String>, ScheduleSpec)>, String> {
    let mut seen = BTreeSet::new();
    let mut checked = Vec::with_capacity(entries.len());
    for (i, entry) in entries.iter().enumerate() {
        let at = format!("schedule[{i}]");
        let task_type = match (source, &entry.task_type) {
            (Source::Manifest, Some(_)) => {
                return Err(format!(
                    "{at}.task_type: a manifest's schedules enqueue its own task type; remove task_type"
                ));
            }
            (Source::Config, None) => {
                return Err(format!(
                    "{at}: name the task type to enqueue, e.g. task_type = \"report\""
                ));
            }
            (Source::Config, Some(task_type)) if !is_valid_task_type(task_type) => {
                return Err(format!(
                    "{at}.task_type = {task_type:?}: write a task type name (letters, digits, `_` or `-`, at most 64 characters)"
                ));
            }
            (_, task_type) => task_type.clone(),
        };
        let name = entry.name.clone().unwrap_or_else(|| DEFAULT_NAME.into());
        if !is_valid_task_type(&name) {
            return Err(format!(
                "{at}.name = {name:?}: write a name of letters, digits, `_` or `-`, at most 64 characters"
            ));
        }
        if !seen.insert((task_type.clone(), name.clone())) {
            let of = task_type
                .as_deref()
                .map(|t| format!(" of task type `{t}`"))
                .unwrap_or_default();
            return Err(format!(
                "{at}: another schedule{of} is also named `{name}`; give each schedule of a type its own `name`"
            ));
        }
        let timing = check_timing(entry, now).map_err(|problem| format!("{at}.{problem}"))?;
        let payload = match &entry.payload {
            None => "{}".to_string(),
            Some(toml::Value::String(text)) if text.trim_start().starts_with(['{', '[']) => {
                return Err(format!(
                    "{at}.payload: a string starting with {{ or [ looks like JSON text; write the payload as a TOML value instead, e.g. payload = {{ full = true }}"
                ));
            }
            Some(value) => {
                serde_json::to_string(&toml_to_json(value).map_err(|e| format!("{at}.{e}"))?)
                    .expect("JSON values serialize")
            }
        };
        if let Some(max_retry) = entry.max_retry.filter(|m| !MAX_RETRY.contains(m)) {
            return Err(format!(
                "{at}.max_retry = {max_retry}: use {}",
                MAX_RETRY.shown
            ));
        }
        checked.push((
            task_type,
            ScheduleSpec {
                name,
                timing,
                payload,
                priority: entry.priority,
                max_retry: entry.max_retry,
            },
        ));
    }
    Ok(checked)
}

/// The entry's `cron` (with `timezone`) or `every`; the error names the field.
fn check_timing(entry: &ScheduleEntry, now: DateTime<Utc>) -> Result<Timing, String> {
    match (&entry.cron, entry.every) {
        (Some(_), Some(_)) => {
            Err("cron: give either cron or every, not both".into())
        }
        (None, None) => Err(
            "cron: give cron = \"0 3 * * *\" (minute hour day month weekday, optionally seconds first) or every = \"15m\"".into(),
        ),
        (None, Some(every)) => {
            if entry.timezone.is_some() {
                return Err(
                    "timezone: applies to cron only (every ticks at whole multiples since 1970-01-01 UTC); for a local time of day use cron".into(),
                );
            }
            if !(MIN_EVERY..=MAX_EVERY).contains(&every) || every.subsec_nanos() % 1_000_000 != 0
            {
                return Err(format!(
                    "every = {:?}: use an interval from 1s to 366d in whole milliseconds",
                    humantime::format_duration(every).to_string()
                ));
            }
            Ok(Timing::Every(every))
        }
        (Some(expression), None) => {
            let timezone = match &entry.timezone {
                None => Tz::UTC,
                Some(name) => name.parse::<Tz>().map_err(|_| {
                    format!(
                        "timezone = {name:?}: not an IANA time zone name; write one such as \"Europe/Berlin\" or \"UTC\""
                    )
                })?,
            };
            let cron = croner::parser::CronParser::builder()
                .seconds(croner::parser::Seconds::Optional)
                .build()
                .parse(expression)
                .map_err(|error| {
                    format!(
                        "cron = {expression:?}: {error}; write five fields (minute hour day month weekday) or six with seconds first"
                    )
                })?;
            if cron
                .find_next_occurrence(&now.with_timezone(&timezone), false)
                .is_err()
            {
                return Err(format!(
                    "cron = {expression:?}: never matches from now on; check the day and month fields"
                ));
            }
            Ok(Timing::Cron {
                expression: expression.clone(),
                cron: Box::new(cron),
                timezone,
            })
        }
    }
}

/// A TOML value as JSON; dates become strings.
fn toml_to_json(value: &toml::Value) -> Result<serde_json::Value, String> {
    use serde_json::Value;
    Ok(match value {
        toml::Value::String(text) => Value::String(text.clone()),
        toml::Value::Integer(n) => Value::from(*n),
        toml::Value::Float(f) => serde_json::Number::from_f64(*f)
            .map(Value::Number)
            .ok_or_else(|| format!("payload: {f} has no JSON form; use a finite number"))?,
        toml::Value::Boolean(b) => Value::Bool(*b),
        toml::Value::Datetime(at) => Value::String(at.to_string()),
        toml::Value::Array(items) => Value::Array(
            items
                .iter()
                .map(toml_to_json)
                .collect::<Result<Vec<_>, _>>()?,
        ),
        toml::Value::Table(table) => Value::Object(
            table
                .iter()
                .map(|(k, v)| Ok((k.clone(), toml_to_json(v)?)))
                .collect::<Result<serde_json::Map<_, _>, String>>()?,
        ),
    })
}

/// A time in `tz` given by its local wall-clock reading, for tests and examples.
pub fn local_time(tz: Tz, y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> DateTime<Utc> {
    tz.with_ymd_and_hms(y, mo, d, h, mi, s)
        .earliest()
        .expect("a valid local time")
        .with_timezone(&Utc)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(text: &str) -> DateTime<Utc> {
        text.parse().unwrap()
    }

    fn entries(text: &str) -> Vec<ScheduleEntry> {
        #[derive(Deserialize)]
        struct File {
            schedule: Vec<ScheduleEntry>,
        }
        toml::from_str::<File>(text).unwrap().schedule
    }

    fn one(text: &str) -> Timing {
        let mut checked = check_entries(
            &entries(text),
            Source::Manifest,
            utc("2026-01-01T00:00:00Z"),
        )
        .unwrap();
        checked.remove(0).1.timing
    }

    #[test]
    fn intervals_tick_at_whole_multiples_since_the_epoch() {
        let every = one("[[schedule]]\nevery = \"15m\"");
        let now = utc("2026-03-01T10:07:12.345Z");
        assert_eq!(
            every.latest_at_or_before(now),
            Some(utc("2026-03-01T10:00:00Z"))
        );
        assert_eq!(every.next_after(now), Some(utc("2026-03-01T10:15:00Z")));
        let on_tick = utc("2026-03-01T10:15:00Z");
        assert_eq!(every.latest_at_or_before(on_tick), Some(on_tick));
        assert_eq!(every.next_after(on_tick), Some(utc("2026-03-01T10:30:00Z")));
    }

    #[test]
    fn five_and_six_field_cron_expressions() {
        let daily = one("[[schedule]]\ncron = \"30 3 * * *\"");
        let now = utc("2026-03-01T10:00:00Z");
        assert_eq!(
            daily.latest_at_or_before(now),
            Some(utc("2026-03-01T03:30:00Z"))
        );
        assert_eq!(daily.next_after(now), Some(utc("2026-03-02T03:30:00Z")));
        let seconds = one("[[schedule]]\ncron = \"*/10 * * * * *\"");
        let now = utc("2026-03-01T10:00:25.900Z");
        assert_eq!(
            seconds.latest_at_or_before(now),
            Some(utc("2026-03-01T10:00:20Z"))
        );
        assert_eq!(seconds.next_after(now), Some(utc("2026-03-01T10:00:30Z")));
        assert_eq!(
            seconds.latest_at_or_before(utc("2026-03-01T10:00:30Z")),
            Some(utc("2026-03-01T10:00:30Z")),
            "a tick is due at its own instant"
        );
    }

    #[test]
    fn only_the_latest_missed_tick_is_due() {
        let minutely = one("[[schedule]]\nevery = \"1m\"");
        let last = utc("2026-03-01T10:00:00Z");
        // Down from 10:00:30 to 10:05:30: five ticks missed, one is due.
        assert_eq!(
            due(&minutely, last, utc("2026-03-01T10:05:30Z")),
            Some(utc("2026-03-01T10:05:00Z"))
        );
        // Nothing new since the last enqueued tick.
        assert_eq!(due(&minutely, last, utc("2026-03-01T10:00:59Z")), None);
        // A schedule first seen at 10:00:30 waits for its first tick after that.
        let first_seen = utc("2026-03-01T10:00:30Z");
        assert_eq!(
            due(&minutely, first_seen, utc("2026-03-01T10:00:45Z")),
            None
        );
        assert_eq!(
            due(&minutely, first_seen, utc("2026-03-01T10:01:00Z")),
            Some(utc("2026-03-01T10:01:00Z"))
        );
        let nightly = one("[[schedule]]\ncron = \"0 3 * * *\"");
        assert_eq!(
            due(
                &nightly,
                utc("2026-02-25T03:00:00Z"),
                utc("2026-03-01T12:00:00Z")
            ),
            Some(utc("2026-03-01T03:00:00Z")),
            "four nights missed, one task"
        );
    }

    #[test]
    fn cron_follows_the_time_zone_across_daylight_saving_changes() {
        let berlin: Tz = "Europe/Berlin".parse().unwrap();
        let daily = one("[[schedule]]\ncron = \"30 2 * * *\"\ntimezone = \"Europe/Berlin\"");
        // Winter: 02:30 CET is 01:30 UTC.
        assert_eq!(
            daily.next_after(utc("2026-03-27T12:00:00Z")),
            Some(local_time(berlin, 2026, 3, 28, 2, 30, 0))
        );
        assert_eq!(
            local_time(berlin, 2026, 3, 28, 2, 30, 0),
            utc("2026-03-28T01:30:00Z")
        );
        // 29 March 2026: clocks jump from 02:00 to 03:00, so 02:30 does not exist; the tick is
        // when the gap ends, 03:00 CEST (01:00 UTC), once, and the next and latest agree on it.
        let spring = utc("2026-03-29T01:00:00Z");
        assert_eq!(daily.next_after(utc("2026-03-28T12:00:00Z")), Some(spring));
        assert_eq!(
            daily.latest_at_or_before(utc("2026-03-29T06:00:00Z")),
            Some(spring)
        );
        assert_eq!(
            due(
                &daily,
                utc("2026-03-28T12:00:00Z"),
                utc("2026-03-29T06:00:00Z")
            ),
            Some(spring)
        );
        // Summer: 02:30 CEST is 00:30 UTC.
        assert_eq!(daily.next_after(spring), Some(utc("2026-03-30T00:30:00Z")));
        // 25 October 2026: 02:30 happens twice; a fixed-time job runs once, at the first.
        let autumn_first = utc("2026-10-25T00:30:00Z");
        assert_eq!(
            daily.next_after(utc("2026-10-24T12:00:00Z")),
            Some(autumn_first)
        );
        assert_eq!(
            daily.next_after(autumn_first),
            Some(utc("2026-10-26T01:30:00Z")),
            "not again at 02:30 CET"
        );
        assert_eq!(
            daily.latest_at_or_before(utc("2026-10-25T12:00:00Z")),
            Some(autumn_first)
        );
    }

    #[test]
    fn keys_are_reserved_and_name_source_schedule_and_tick() {
        let checked = check_entries(
            &entries(
                "[[schedule]]\ntask_type = \"report\"\nname = \"nightly\"\ncron = \"0 3 * * *\"",
            ),
            Source::Config,
            Utc::now(),
        )
        .unwrap();
        let (task_type, spec) = checked.into_iter().next().unwrap();
        let schedule = Schedule {
            source: Source::Config,
            task_type: task_type.unwrap(),
            spec,
        };
        let key = schedule.idempotency_key(utc("2026-03-01T03:00:00Z"));
        assert_eq!(
            key,
            "spool:schedule:config:nightly:2026-03-01T03:00:00.000Z"
        );
        assert!(key.starts_with(RESERVED_KEY_PREFIX));
        assert!(key.len() <= spool_rules::names::MAX_IDEMPOTENCY_KEY);
        assert!(
            schedule
                .first_seen_name()
                .starts_with("schedule-since:config:report:nightly:")
        );
        assert!(
            schedule.first_seen_name().len() <= 191,
            "fits MySQL's spool_meta.name"
        );
    }

    #[test]
    fn payloads_become_json() {
        let checked = check_entries(
            &entries(
                "[[schedule]]\nevery = \"1h\"\npayload = { full = true, rows = [1, 2.5], at = 2026-01-01, name = \"x\" }\n[[schedule]]\nname = \"b\"\nevery = \"1h\"\n[[schedule]]\nname = \"c\"\nevery = \"1h\"\npayload = 7",
            ),
            Source::Manifest,
            Utc::now(),
        )
        .unwrap();
        let json: serde_json::Value = serde_json::from_str(&checked[0].1.payload).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"full": true, "rows": [1, 2.5], "at": "2026-01-01", "name": "x"})
        );
        assert_eq!(checked[1].1.payload, "{}");
        assert_eq!(checked[2].1.payload, "7");
    }

    #[test]
    fn errors_name_the_entry_and_say_what_to_change() {
        let now = Utc::now();
        for (source, text, starts, says) in [
            (
                Source::Manifest,
                "[[schedule]]\nevery = \"1h\"\ntask_type = \"x\"",
                "schedule[0].task_type",
                "remove task_type",
            ),
            (
                Source::Config,
                "[[schedule]]\nevery = \"1h\"",
                "schedule[0]",
                "task_type = ",
            ),
            (
                Source::Config,
                "[[schedule]]\ntask_type = \"a b\"\nevery = \"1h\"",
                "schedule[0].task_type",
                "letters",
            ),
            (
                Source::Manifest,
                "[[schedule]]\nevery = \"1h\"\n[[schedule]]\ncron = \"* * * * *\"",
                "schedule[1]",
                "own `name`",
            ),
            (
                Source::Manifest,
                "[[schedule]]\nname = \"a:b\"\nevery = \"1h\"",
                "schedule[0].name",
                "letters",
            ),
            (
                Source::Manifest,
                "[[schedule]]\nname = \"x\"",
                "schedule[0].cron",
                "every = ",
            ),
            (
                Source::Manifest,
                "[[schedule]]\ncron = \"* * * * *\"\nevery = \"1h\"",
                "schedule[0].cron",
                "not both",
            ),
            (
                Source::Manifest,
                "[[schedule]]\ncron = \"61 * * * *\"",
                "schedule[0].cron = \"61 * * * *\"",
                "five fields",
            ),
            (
                Source::Manifest,
                "[[schedule]]\ncron = \"0 0 30 2 *\"",
                "schedule[0].cron",
                "never matches",
            ),
            (
                Source::Manifest,
                "[[schedule]]\ncron = \"0 3 * * *\"\ntimezone = \"Europe/Berln\"",
                "schedule[0].timezone",
                "IANA",
            ),
            (
                Source::Manifest,
                "[[schedule]]\nevery = \"1h\"\ntimezone = \"UTC\"",
                "schedule[0].timezone",
                "cron only",
            ),
            (
                Source::Manifest,
                "[[schedule]]\nevery = \"10ms\"",
                "schedule[0].every",
                "from 1s",
            ),
            (
                Source::Manifest,
                "[[schedule]]\nevery = \"1h\"\npayload = '{\"a\": 1}'",
                "schedule[0].payload",
                "TOML value",
            ),
            (
                Source::Manifest,
                "[[schedule]]\nevery = \"1h\"\npayload = nan",
                "schedule[0].payload",
                "finite",
            ),
            (
                Source::Manifest,
                "[[schedule]]\nevery = \"1h\"\nmax_retry = 5000",
                "schedule[0].max_retry",
                "at most",
            ),
        ] {
            let error = check_entries(&entries(text), source, now).unwrap_err();
            assert!(error.starts_with(starts), "{text}: {error}");
            assert!(error.contains(says), "{text}: {error}");
        }
        // The same name under two task types is fine in spool.toml.
        assert!(
            check_entries(
                &entries("[[schedule]]\ntask_type = \"a\"\nevery = \"1h\"\n[[schedule]]\ntask_type = \"b\"\nevery = \"1h\""),
                Source::Config,
                now
            )
            .is_ok()
        );
    }

    #[test]
    fn a_changed_expression_is_a_new_fingerprint() {
        let a = one("[[schedule]]\ncron = \"0 3 * * *\"");
        let b = one("[[schedule]]\ncron = \"0 4 * * *\"");
        let c = one("[[schedule]]\ncron = \"0 3 * * *\"\ntimezone = \"Asia/Tokyo\"");
        assert_ne!(a.fingerprint(), b.fingerprint());
        assert_ne!(a.fingerprint(), c.fingerprint());
        assert_eq!(
            a.fingerprint(),
            one("[[schedule]]\ncron = \"0 3 * * *\"").fingerprint()
        );
    }
}
