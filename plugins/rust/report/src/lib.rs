//! `report`: aggregates JSON rows into a small grouped report.
//!
//! # Payload
//!
//! ```json
//! {
//!   "title": "Q3 approvals",
//!   "rows": [
//!     {"region": "north", "amount": 120.5},
//!     {"region": "south", "amount": 80},
//!     {"region": "north", "amount": 42}
//!   ],
//!   "group_by": "region",
//!   "sum": "amount"
//! }
//! ```
//!
//! * `rows` (required): an array of JSON objects.
//! * `sum` (required): the field to add up; it must be a number in every row.
//! * `group_by` (optional): the field to group rows by. Strings are used as they are, other
//!   values as their JSON text; a row without the field (or with `null`) falls into the group
//!   `(none)`. Without `group_by` all rows form one group, `all`.
//! * `title` (optional): the report's title, `Report` by default.
//!
//! # Result
//!
//! ```json
//! {
//!   "title": "Q3 approvals",
//!   "group_by": "region",
//!   "sum": "amount",
//!   "groups": [
//!     {"key": "north", "count": 2, "sum": 162.5, "min": 42.0, "max": 120.5, "mean": 81.25},
//!     {"key": "south", "count": 1, "sum": 80.0, "min": 80.0, "max": 80.0, "mean": 80.0}
//!   ],
//!   "totals": {"count": 3, "sum": 242.5, "min": 42.0, "max": 120.5, "mean": 80.83333333333333},
//!   "markdown": "## Q3 approvals\n\n| region | count | sum | min | max | mean |\n…"
//! }
//! ```
//!
//! Groups are sorted by key. `min`, `max` and `mean` are `null` for an empty report (no rows).
//! `markdown` renders the same numbers as a Markdown table with two decimals and a total row.
//!
//! # Failures
//!
//! A payload without `rows` or `sum`, with an unknown field (a typo), a row that is not an
//! object, or a row whose `sum` field is missing or not a number fails permanently
//! ([`Failure::Fail`]) with a message naming the row or field: the same payload would fail the
//! same way on every attempt.
//!
//! While it works through the rows the handler reports its progress, and it logs one line
//! with the outcome at the end.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use spool_sdk::{Failure, Handler, TaskInfo, json, log};

/// The `report` handler.
struct Report;

impl Handler for Report {
    fn handle(_task: TaskInfo, payload: String) -> Result<String, Failure> {
        let request: Request = json::parse_payload(&payload)?;
        let report = build(request, &mut |percent, note| {
            spool_sdk::progress(percent, note)
        })?;
        log::info(format!(
            "report {:?}: {} rows in {} groups, total {} = {}",
            report.title,
            report.totals.count,
            report.groups.len(),
            report.sum,
            report.totals.sum,
        ));
        json::to_result(&report)
    }
}

spool_sdk::export_handler!(Report);

/// The payload.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Request {
    #[serde(default = "default_title")]
    title: String,
    rows: Vec<Value>,
    #[serde(default)]
    group_by: Option<String>,
    sum: String,
}

fn default_title() -> String {
    "Report".to_owned()
}

/// The result.
#[derive(Debug, Serialize)]
struct ReportResult {
    title: String,
    group_by: Option<String>,
    sum: String,
    groups: Vec<Group>,
    totals: Stats,
    markdown: String,
}

/// One group's statistics, keyed.
#[derive(Debug, Serialize)]
struct Group {
    key: String,
    #[serde(flatten)]
    stats: Stats,
}

/// Count, sum, min, max and mean of a set of numbers.
#[derive(Debug, Default, Clone, Serialize)]
struct Stats {
    count: u64,
    sum: f64,
    min: Option<f64>,
    max: Option<f64>,
    mean: Option<f64>,
}

impl Stats {
    fn add(&mut self, value: f64) {
        self.count += 1;
        self.sum += value;
        self.min = Some(self.min.map_or(value, |m| m.min(value)));
        self.max = Some(self.max.map_or(value, |m| m.max(value)));
        self.mean = Some(self.sum / self.count as f64);
    }
}

/// The group of rows without the `group_by` field.
const NO_KEY: &str = "(none)";
/// The single group when there is no `group_by`.
const ALL: &str = "all";
/// How many progress reports to send at most while going through the rows.
const PROGRESS_STEPS: usize = 10;

/// Aggregates the rows, calling `progress(percent, note)` as it goes.
fn build(request: Request, progress: &mut dyn FnMut(u8, &str)) -> Result<ReportResult, Failure> {
    let Request {
        title,
        rows,
        group_by,
        sum,
    } = request;
    let total_rows = rows.len();
    let step = total_rows.div_ceil(PROGRESS_STEPS).max(1);

    let mut groups: BTreeMap<String, Stats> = BTreeMap::new();
    let mut totals = Stats::default();
    for (index, row) in rows.iter().enumerate() {
        let row = row
            .as_object()
            .ok_or_else(|| Failure::fail(format!("row {index} is not a JSON object: {row}")))?;
        let value = number_field(row, &sum, index)?;
        let key = match &group_by {
            Some(field) => group_key(row.get(field)),
            None => ALL.to_owned(),
        };
        groups.entry(key).or_default().add(value);
        totals.add(value);

        let done = index + 1;
        if done % step == 0 || done == total_rows {
            // Leave the last percent for producing the result.
            let percent = spool_sdk::percent(done, total_rows).min(99);
            progress(percent, &format!("aggregated {done} of {total_rows} rows"));
        }
    }

    let groups: Vec<Group> = groups
        .into_iter()
        .map(|(key, stats)| Group { key, stats })
        .collect();
    let markdown = markdown(
        &title,
        group_by.as_deref().unwrap_or("group"),
        &groups,
        &totals,
    );
    progress(100, "report ready");
    Ok(ReportResult {
        title,
        group_by,
        sum,
        groups,
        totals,
        markdown,
    })
}

/// Reads the numeric field `field` of row `index`.
fn number_field(row: &Map<String, Value>, field: &str, index: usize) -> Result<f64, Failure> {
    match row.get(field) {
        Some(Value::Number(n)) => n.as_f64().ok_or_else(|| {
            Failure::fail(format!("row {index}: field {field:?} is out of range: {n}"))
        }),
        Some(other) => Err(Failure::fail(format!(
            "row {index}: field {field:?} is not a number: {other}"
        ))),
        None => Err(Failure::fail(format!(
            "row {index}: field {field:?} is missing"
        ))),
    }
}

/// The group a row belongs to, from the value of its `group_by` field.
fn group_key(value: Option<&Value>) -> String {
    match value {
        None | Some(Value::Null) => NO_KEY.to_owned(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

/// Renders the report as a Markdown heading and table with a total row.
fn markdown(title: &str, key_header: &str, groups: &[Group], totals: &Stats) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "## {}\n", title.trim());
    let _ = writeln!(
        out,
        "| {} | count | sum | min | max | mean |",
        cell(key_header)
    );
    out.push_str("| --- | ---: | ---: | ---: | ---: | ---: |\n");
    for group in groups {
        row(&mut out, &cell(&group.key), &group.stats);
    }
    row(&mut out, "**total**", totals);
    out
}

fn row(out: &mut String, label: &str, stats: &Stats) {
    let _ = writeln!(
        out,
        "| {label} | {} | {} | {} | {} | {} |",
        stats.count,
        number(Some(stats.sum)),
        number(stats.min),
        number(stats.max),
        number(stats.mean),
    );
}

/// A number with two decimals, or `–` for none.
fn number(value: Option<f64>) -> String {
    value.map_or_else(|| "–".to_owned(), |v| format!("{v:.2}"))
}

/// Text made safe for a table cell: pipes escaped, line breaks flattened.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace(['\r', '\n'], " ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(payload: Value) -> Result<ReportResult, Failure> {
        let request: Request = json::parse_payload(&payload.to_string())?;
        build(request, &mut |_, _| {})
    }

    fn fail_message(result: Result<ReportResult, Failure>) -> String {
        match result {
            Err(Failure::Fail(message)) => message,
            other => panic!("expected a permanent failure, got {other:?}"),
        }
    }

    #[test]
    fn groups_and_totals() {
        let report = run(json!({
            "title": "Q3 approvals",
            "rows": [
                {"region": "north", "amount": 120.5},
                {"region": "south", "amount": 80},
                {"region": "north", "amount": 42},
                {"amount": 1}
            ],
            "group_by": "region",
            "sum": "amount"
        }))
        .unwrap();
        let keys: Vec<&str> = report.groups.iter().map(|g| g.key.as_str()).collect();
        assert_eq!(keys, ["(none)", "north", "south"]);
        let north = &report.groups[1].stats;
        assert_eq!(
            (north.count, north.sum, north.min, north.max),
            (2, 162.5, Some(42.0), Some(120.5))
        );
        assert_eq!(north.mean, Some(81.25));
        assert_eq!(report.totals.count, 4);
        assert_eq!(report.totals.sum, 243.5);
        assert!(
            report
                .markdown
                .contains("| north | 2 | 162.50 | 42.00 | 120.50 | 81.25 |")
        );
        assert!(report.markdown.contains("| **total** | 4 | 243.50 |"));
    }

    #[test]
    fn without_group_by_everything_is_one_group() {
        let report = run(json!({"rows": [{"n": 1}, {"n": 2}], "sum": "n"})).unwrap();
        assert_eq!(report.title, "Report");
        assert_eq!(report.groups.len(), 1);
        assert_eq!(report.groups[0].key, "all");
        assert_eq!(report.groups[0].stats.sum, 3.0);
    }

    #[test]
    fn empty_rows_make_an_empty_report() {
        let report = run(json!({"rows": [], "sum": "n"})).unwrap();
        assert!(report.groups.is_empty());
        assert_eq!((report.totals.count, report.totals.mean), (0, None));
        let text = serde_json::to_string(&report.totals).unwrap();
        assert_eq!(
            text,
            r#"{"count":0,"sum":0.0,"min":null,"max":null,"mean":null}"#
        );
    }

    #[test]
    fn bad_payloads_fail_permanently() {
        assert!(fail_message(run(json!({"sum": "n"}))).contains("missing field `rows`"));
        assert_eq!(
            fail_message(run(json!({"rows": [{"n": 1}, {"n": "2"}], "sum": "n"}))),
            r#"row 1: field "n" is not a number: "2""#
        );
        assert_eq!(
            fail_message(run(json!({"rows": [{"m": 1}], "sum": "n"}))),
            r#"row 0: field "n" is missing"#
        );
        assert_eq!(
            fail_message(run(json!({"rows": [3], "sum": "n"}))),
            "row 0 is not a JSON object: 3"
        );
    }

    #[test]
    fn progress_is_reported_in_steps() {
        let rows: Vec<Value> = (0..95).map(|n| json!({"n": n})).collect();
        let request: Request = serde_json::from_value(json!({"rows": rows, "sum": "n"})).unwrap();
        let mut seen = Vec::new();
        build(request, &mut |percent, _| seen.push(percent)).unwrap();
        assert_eq!(seen, [10, 21, 31, 42, 52, 63, 73, 84, 94, 99, 100]);
    }

    #[test]
    fn table_cells_are_escaped() {
        let report =
            run(json!({"rows": [{"k": "a|b", "n": 1}], "group_by": "k", "sum": "n"})).unwrap();
        assert!(report.markdown.contains("| a\\|b | 1 |"));
    }
}
