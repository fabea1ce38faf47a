//! `report`: the report of one approval, written into the reports folder.
//!
//! Payload: `{"approval_id": 42, "source": "http://127.0.0.1:3000/approvals/42/report-data"}`.
//! The handler reads the report's data from `source` (the approval app; the manifest's
//! `[http] allow` lists it), computes the report (the same code the app runs for
//! `?sync=1`, in `report.rs`) and writes `/reports/approval-42.md`, the manifest's writable
//! folder grant. Result: `{"file": "approval-42.md", "bytes": 1234, "approvals": 17}`.
//!
//! Writing the file is idempotent (a retry writes the same text to the same name), so it
//! needs no effect ledger. An unreachable or failing app is a transient failure (retried with
//! backoff); a payload or an answer that cannot be a report fails the task permanently.

mod http;
mod report;

use serde::Deserialize;
use spool_sdk::{Failure, Handler, TaskInfo, json, log, progress};

struct Report;

#[derive(Deserialize)]
struct Payload {
    approval_id: i64,
    source: String,
}

impl Handler for Report {
    fn handle(task: TaskInfo, payload: String) -> Result<String, Failure> {
        let Payload {
            approval_id,
            source,
        } = json::parse_payload(&payload)?;
        log::info(format!(
            "report of approval {approval_id}, attempt {}: reading {source}",
            task.attempt
        ));
        let (status, body) =
            http::get(&source).map_err(|e| Failure::retry(format!("GET {source}: {e}")))?;
        match status {
            200 => {}
            404 => return Err(Failure::fail(format!("no approval {approval_id}: {body}"))),
            _ => {
                return Err(Failure::retry(format!(
                    "GET {source} answered {status}: {body}"
                )));
            }
        }
        let data: report::ReportData = serde_json::from_str(&body)
            .map_err(|e| Failure::fail(format!("the report data is not readable: {e}")))?;
        if data.approval.id != approval_id {
            return Err(Failure::fail(format!(
                "{source} describes approval {}, not {approval_id}",
                data.approval.id
            )));
        }
        progress(50, "data read");

        let text = report::render(&data);
        let file = report::write(std::path::Path::new("/reports"), approval_id, &text)
            .map_err(|e| Failure::retry(format!("cannot write the report: {e}")))?;
        log::info(format!(
            "wrote {file}: {} approvals of {}",
            data.history.len(),
            data.approval.approver
        ));
        progress(100, "report written");
        json::to_result(&json::json!({
            "file": file,
            "bytes": text.len(),
            "approvals": data.history.len(),
        }))
    }
}

spool_sdk::export_handler!(Report);
