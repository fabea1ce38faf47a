//! The approval report: its input and how it is computed and written.
//!
//! One module, compiled twice: into the `report` handler (WebAssembly, run by a Spool host) and
//! into the approval app (native, for `POST /approvals?sync=1`, which builds the same report
//! inside the request). Plain `std` and serde, so it builds for both.

use serde::{Deserialize, Serialize};

/// The most past approvals of one approver a report looks at (the newest ones).
pub const HISTORY_LIMIT: i64 = 1000;

/// The approval a report is about.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Approval {
    pub id: i64,
    pub request_id: String,
    pub approver: String,
    pub requester: String,
    pub amount_cents: i64,
    /// When it was recorded, in Unix milliseconds.
    pub created_ms: i64,
}

/// One approval of the same approver, for the statistics.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Past {
    pub id: i64,
    pub amount_cents: i64,
    pub created_ms: i64,
}

/// What the app's `GET /approvals/{id}/report-data` answers: the approval and its approver's
/// approvals up to and including it, newest first, at most [`HISTORY_LIMIT`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReportData {
    pub approval: Approval,
    pub history: Vec<Past>,
}

/// The report's file name in the reports folder.
pub fn file_name(approval_id: i64) -> String {
    format!("approval-{approval_id}.md")
}

/// Writes `text` as the report of `approval_id` into `dir`: to a temporary file first, then
/// renamed over the final name, so a reader never sees half a report and a second run (a
/// retried task) simply replaces the first one's file with the same text.
pub fn write(dir: &std::path::Path, approval_id: i64, text: &str) -> std::io::Result<String> {
    let name = file_name(approval_id);
    let temporary = dir.join(format!(".{name}.partial"));
    std::fs::write(&temporary, text)?;
    std::fs::rename(&temporary, dir.join(&name))?;
    Ok(name)
}

/// The report as Markdown: the approval, where its amount stands among the approver's
/// approvals (count, total, mean, median, 90th percentile, largest, rank) and a monthly chart.
pub fn render(data: &ReportData) -> String {
    let a = &data.approval;
    let mut amounts: Vec<i64> = data.history.iter().map(|p| p.amount_cents).collect();
    if amounts.is_empty() {
        amounts.push(a.amount_cents);
    }
    amounts.sort_unstable();
    let count = amounts.len() as i64;
    let total: i64 = amounts.iter().sum();
    let smaller = amounts.partition_point(|&x| x < a.amount_cents);
    let rank = 100 * smaller as i64 / count;

    let mut out = String::new();
    let mut line = |text: String| {
        out.push_str(&text);
        out.push('\n');
    };
    line(format!("# Approval {}: request {}", a.id, a.request_id));
    line(String::new());
    line(format!(
        "{} approved {}, requested by {}, on {}.",
        a.approver,
        money(a.amount_cents),
        a.requester,
        date(a.created_ms)
    ));
    line(String::new());
    line(format!(
        "## {}'s approvals ({count}{})",
        a.approver,
        if count >= HISTORY_LIMIT {
            ", the most recent"
        } else {
            ""
        }
    ));
    line(String::new());
    line("| count | total | mean | median | 90th percentile | largest |".into());
    line("|---:|---:|---:|---:|---:|---:|".into());
    line(format!(
        "| {count} | {} | {} | {} | {} | {} |",
        money(total),
        money(total / count),
        money(percentile(&amounts, 50)),
        money(percentile(&amounts, 90)),
        money(*amounts.last().unwrap_or(&0)),
    ));
    line(String::new());
    line(format!(
        "This approval is larger than {rank} % of {}'s approvals.",
        a.approver
    ));
    line(String::new());
    line("## By month".into());
    line(String::new());
    line("| month | approvals | total | |".into());
    line("|---|---:|---:|---|".into());
    let months = by_month(&data.history);
    let widest = months.iter().map(|m| m.2).max().unwrap_or(1).max(1);
    for (month, n, sum) in &months {
        let bar = (30 * sum / widest).max(1) as usize;
        line(format!(
            "| {month} | {n} | {} | {} |",
            money(*sum),
            "█".repeat(bar)
        ));
    }
    out
}

/// The `p`-th percentile of sorted values (nearest rank).
fn percentile(sorted: &[i64], p: usize) -> i64 {
    let rank = (p * sorted.len()).div_ceil(100).max(1);
    sorted[rank - 1]
}

/// (month "YYYY-MM", approvals, total cents), oldest month first.
fn by_month(history: &[Past]) -> Vec<(String, i64, i64)> {
    let mut months: Vec<(String, i64, i64)> = Vec::new();
    let mut sorted: Vec<&Past> = history.iter().collect();
    sorted.sort_by_key(|p| p.created_ms);
    for past in sorted {
        let month = date(past.created_ms)[..7].to_string();
        match months.last_mut() {
            Some(last) if last.0 == month => {
                last.1 += 1;
                last.2 += past.amount_cents;
            }
            _ => months.push((month, 1, past.amount_cents)),
        }
    }
    months
}

/// Cents as `1,250.00`.
pub fn money(cents: i64) -> String {
    let sign = if cents < 0 { "-" } else { "" };
    let cents = cents.unsigned_abs();
    let units = (cents / 100).to_string();
    let mut grouped = String::new();
    for (i, digit) in units.chars().enumerate() {
        if i > 0 && (units.len() - i).is_multiple_of(3) {
            grouped.push(',');
        }
        grouped.push(digit);
    }
    format!("{sign}{grouped}.{:02}", cents % 100)
}

/// Unix milliseconds as a UTC date, `YYYY-MM-DD` (the civil-from-days algorithm).
pub fn date(unix_ms: i64) -> String {
    let days = unix_ms.div_euclid(86_400_000) + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_money_and_dates() {
        assert_eq!(money(125_000), "1,250.00");
        assert_eq!(money(5), "0.05");
        assert_eq!(money(123_456_789), "1,234,567.89");
        assert_eq!(date(0), "1970-01-01");
        assert_eq!(date(1_709_251_200_000), "2024-03-01");
        assert_eq!(date(951_782_400_000), "2000-02-29");
    }

    #[test]
    fn computes_the_approvers_statistics() {
        let past = |id, amount_cents, created_ms| Past {
            id,
            amount_cents,
            created_ms,
        };
        let data = ReportData {
            approval: Approval {
                id: 3,
                request_id: "PO-3".into(),
                approver: "dana".into(),
                requester: "sam@example.com".into(),
                amount_cents: 30_000,
                created_ms: 1_709_251_200_000,
            },
            history: vec![
                past(3, 30_000, 1_709_251_200_000),
                past(2, 20_000, 1_706_745_600_000),
                past(1, 10_000, 1_706_745_600_000),
            ],
        };
        let text = render(&data);
        assert!(text.starts_with("# Approval 3: request PO-3\n"), "{text}");
        assert!(
            text.contains("| 3 | 600.00 | 200.00 | 200.00 | 300.00 | 300.00 |"),
            "{text}"
        );
        assert!(text.contains("larger than 66 % of dana's"), "{text}");
        assert!(text.contains("| 2024-02 | 2 | 300.00 |"), "{text}");
        assert!(text.contains("| 2024-03 | 1 | 300.00 |"), "{text}");
    }
}
