//! The approval app: `POST /approvals` and the report data its handler reads.
//!
//! Routes:
//! - `POST /approvals` `{"request_id", "approver", "requester", "amount"}`: one transaction
//!   inserts the approval row and enqueues three tasks with `spool_client::enqueue`: `mail`
//!   (priority 10, five retries), `report` and `stats`, each with an idempotency key derived
//!   from the approval id. 201 `{"approval_id", "mode": "async", "tasks": {...}}`.
//! - `POST /approvals?sync=1`: the endpoint before Spool. It commits the approval, then builds
//!   the report (queries the approver's approvals, computes, writes the file), sends the two
//!   mails through the mail service and refreshes the statistics cache, all before answering.
//!   201 `{"approval_id", "mode": "sync", "report", "mails", "stats", "timings_ms"}`.
//! - `GET /approvals/{id}/report-data`: what the `report` handler reads over HTTP.
//!
//! Errors are `{"error": {"code", "message"}}`: 409 `already_approved` for a second approval of
//! the same request, 422 `invalid` for a body or a value the table refuses, 502
//! `mail_failed` when the mail service fails a synchronous submit.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use spool_client::Task;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

use crate::report::{self, Approval, Past, ReportData};

/// `approval serve` settings.
#[derive(clap::Args, Clone, Debug)]
pub struct Config {
    /// The application's PostgreSQL database, the one Spool hosts serve.
    #[arg(long, env = "DATABASE_URL")]
    pub database_url: String,
    /// Where the app listens (port 0: any free port).
    #[arg(long, default_value = "127.0.0.1:3000")]
    pub listen: SocketAddr,
    /// The mail service's send URL (the stand-in: `approval mail-stub`).
    #[arg(long, default_value = "http://127.0.0.1:8025/send")]
    pub mail_url: String,
    /// Where `?sync=1` writes reports: the folder the `report` handler's grant maps.
    #[arg(long, default_value = "reports")]
    pub reports_dir: PathBuf,
    /// The address handlers reach the app at [default: http://LISTEN-ADDRESS]
    #[arg(long)]
    pub public_url: Option<String>,
    /// Who gets a copy of every approval mail, besides the requester.
    #[arg(long, default_value = "finance@example.com")]
    pub finance: String,
}

/// The app's table. The unique constraint on `request_id` is checked at commit
/// (`DEFERRABLE INITIALLY DEFERRED`): a second approval of a request fails only when its
/// transaction commits, after its tasks were inserted, and takes them with it.
const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS approval (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    request_id text NOT NULL,
    approver text NOT NULL,
    requester text NOT NULL,
    amount_cents bigint NOT NULL CHECK (amount_cents > 0),
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT approval_once_per_request UNIQUE (request_id) DEFERRABLE INITIALLY DEFERRED
);
CREATE INDEX IF NOT EXISTS approval_by_approver ON approval (approver, id);
";

/// The sender of approval mails.
const MAIL_FROM: &str = "approvals@example.com";

/// The app's state.
pub struct App {
    pool: PgPool,
    http: reqwest::Client,
    mail_url: String,
    reports_dir: PathBuf,
    public_url: String,
    finance: String,
    /// The statistics cache `?sync=1` refreshes: in the process, standing in for the cache
    /// server the endpoint used to refresh. With Spool, the `stats` handler keeps it.
    stats_cache: Mutex<HashMap<String, Stats>>,
}

/// An approver's statistics, as the caches hold them.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Stats {
    pub approvals: i64,
    pub total_cents: i64,
}

/// `POST /approvals` body.
#[derive(Debug, Deserialize)]
pub struct Submit {
    pub request_id: String,
    pub approver: String,
    /// The requester's mail address.
    pub requester: String,
    /// The approved amount, in currency units (cents are kept).
    pub amount: f64,
}

#[derive(Debug, Deserialize)]
struct Mode {
    sync: Option<String>,
}

impl App {
    /// Connects to the database and creates the app's table if it is missing.
    pub async fn connect(config: &Config, public_url: String) -> anyhow::Result<App> {
        let pool = PgPoolOptions::new()
            .max_connections(10)
            .connect(&config.database_url)
            .await
            .with_context(|| format!("cannot connect to {}", config.database_url))?;
        sqlx::raw_sql(SCHEMA)
            .execute(&pool)
            .await
            .context("cannot create the approval table")?;
        Ok(App {
            pool,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()?,
            mail_url: config.mail_url.clone(),
            reports_dir: config.reports_dir.clone(),
            public_url,
            finance: config.finance.clone(),
            stats_cache: Mutex::new(HashMap::new()),
        })
    }

    pub fn router(self: Arc<App>) -> Router {
        Router::new()
            .route("/approvals", post(submit))
            .route("/approvals/{id}/report-data", get(report_data))
            .route("/health", get(|| async { "ok" }))
            .with_state(self)
    }

    /// Inserts the approval on `tx` and returns its id.
    async fn insert(
        tx: &mut sqlx::PgConnection,
        body: &Submit,
        amount_cents: i64,
    ) -> Result<i64, AppError> {
        let id = sqlx::query_scalar(
            "INSERT INTO approval (request_id, approver, requester, amount_cents)
             VALUES ($1, $2, $3, $4) RETURNING id",
        )
        .bind(&body.request_id)
        .bind(&body.approver)
        .bind(&body.requester)
        .bind(amount_cents)
        .fetch_one(tx)
        .await?;
        Ok(id)
    }

    /// The approval and its tasks, in one transaction.
    async fn submit_async(&self, body: &Submit, amount_cents: i64) -> Result<Value, AppError> {
        let mut tx = self.pool.begin().await?;
        let id = App::insert(&mut tx, body, amount_cents).await?;
        let mail = Task::new("mail", &self.mail_payload(id, body, amount_cents))
            .priority(10)
            .max_retry(5)
            .idempotency_key(format!("approval-{id}-mail"));
        let report = Task::new(
            "report",
            &json!({ "approval_id": id, "source": self.report_source(id) }),
        )
        .idempotency_key(format!("approval-{id}-report"));
        let stats = Task::new(
            "stats",
            &json!({ "approval_id": id, "approver": body.approver, "amount_cents": amount_cents }),
        )
        .idempotency_key(format!("approval-{id}-stats"));
        let mail = spool_client::enqueue(&mut tx, &mail).await?;
        let report = spool_client::enqueue(&mut tx, &report).await?;
        let stats = spool_client::enqueue(&mut tx, &stats).await?;
        tx.commit().await?; // the approval and its three tasks, or none of them
        Ok(json!({
            "approval_id": id,
            "mode": "async",
            "tasks": { "mail": mail.id, "report": report.id, "stats": stats.id },
        }))
    }

    /// The endpoint before Spool: everything inline, in a row.
    async fn submit_sync(&self, body: &Submit, amount_cents: i64) -> Result<Value, AppError> {
        let started = Instant::now();
        let mut tx = self.pool.begin().await?;
        let id = App::insert(&mut tx, body, amount_cents).await?;
        tx.commit().await?;
        let recorded = started.elapsed();

        let step = Instant::now();
        let data = self
            .report_data(id)
            .await?
            .ok_or_else(|| AppError::internal("the approval vanished"))?;
        let text = report::render(&data);
        let dir = self.reports_dir.clone();
        let file = tokio::task::spawn_blocking(move || report::write(&dir, id, &text))
            .await
            .map_err(|e| AppError::internal(e.to_string()))?
            .map_err(|e| AppError::internal(format!("cannot write the report: {e}")))?;
        let reported = step.elapsed();

        let step = Instant::now();
        let mail = self.mail_payload(id, body, amount_cents);
        let recipients = self.recipients(body);
        for to in &recipients {
            self.send_mail(&mail, to).await?;
        }
        let mailed = step.elapsed();

        let step = Instant::now();
        let (approvals, total_cents): (i64, i64) = sqlx::query_as(
            "SELECT count(*), coalesce(sum(amount_cents), 0)::bigint FROM approval WHERE approver = $1",
        )
        .bind(&body.approver)
        .fetch_one(&self.pool)
        .await?;
        let stats = Stats {
            approvals,
            total_cents,
        };
        self.stats_cache
            .lock()
            .unwrap()
            .insert(body.approver.clone(), stats);
        let cached = step.elapsed();

        let ms = |d: Duration| (d.as_secs_f64() * 10_000.0).round() / 10.0;
        Ok(json!({
            "approval_id": id,
            "mode": "sync",
            "report": file,
            "mails": recipients,
            "stats": stats,
            "timings_ms": {
                "record": ms(recorded), "report": ms(reported), "mail": ms(mailed), "stats": ms(cached),
            },
        }))
    }

    /// The requester and finance.
    fn recipients(&self, body: &Submit) -> Vec<String> {
        vec![body.requester.clone(), self.finance.clone()]
    }

    /// The `mail` task's payload; `?sync=1` sends the same mails.
    fn mail_payload(&self, id: i64, body: &Submit, amount_cents: i64) -> Value {
        json!({
            "approval_id": id,
            "service": self.mail_url,
            "from": MAIL_FROM,
            "to": self.recipients(body),
            "subject": format!("Request {} approved", body.request_id),
            "text": format!(
                "{} approved request {} of {} for {}. Approval number: {id}.",
                body.approver, body.request_id, body.requester, report::money(amount_cents)
            ),
        })
    }

    /// Where the `report` handler reads the report's data.
    fn report_source(&self, id: i64) -> String {
        format!("{}/approvals/{id}/report-data", self.public_url)
    }

    /// Sends one mail the way the `mail` handler does (same body, same idempotency key).
    async fn send_mail(&self, mail: &Value, to: &str) -> Result<(), AppError> {
        let key = format!("mail:{}:{to}", mail["approval_id"]);
        let sent = self
            .http
            .post(&self.mail_url)
            .header("idempotency-key", &key)
            .json(&json!({
                "from": mail["from"], "to": to, "subject": mail["subject"], "text": mail["text"],
            }))
            .send()
            .await;
        match sent {
            Ok(response) if response.status().is_success() => Ok(()),
            Ok(response) => Err(AppError::mail(format!(
                "the mail service answered {} for {to}",
                response.status()
            ))),
            Err(error) => Err(AppError::mail(format!(
                "the mail service did not answer: {error}"
            ))),
        }
    }

    /// The approval and its approver's approvals up to it, newest first.
    async fn report_data(&self, id: i64) -> Result<Option<ReportData>, AppError> {
        let approval: Option<(i64, String, String, String, i64, i64)> = sqlx::query_as(
            "SELECT id, request_id, approver, requester, amount_cents,
                    (extract(epoch FROM created_at) * 1000)::bigint
             FROM approval WHERE id = $1",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        let Some((id, request_id, approver, requester, amount_cents, created_ms)) = approval else {
            return Ok(None);
        };
        let history: Vec<(i64, i64, i64)> = sqlx::query_as(
            "SELECT id, amount_cents, (extract(epoch FROM created_at) * 1000)::bigint
             FROM approval WHERE approver = $1 AND id <= $2
             ORDER BY id DESC LIMIT $3",
        )
        .bind(&approver)
        .bind(id)
        .bind(report::HISTORY_LIMIT)
        .fetch_all(&self.pool)
        .await?;
        Ok(Some(ReportData {
            approval: Approval {
                id,
                request_id,
                approver,
                requester,
                amount_cents,
                created_ms,
            },
            history: history
                .into_iter()
                .map(|(id, amount_cents, created_ms)| Past {
                    id,
                    amount_cents,
                    created_ms,
                })
                .collect(),
        }))
    }
}

async fn submit(
    State(app): State<Arc<App>>,
    Query(mode): Query<Mode>,
    body: Result<axum::Json<Submit>, axum::extract::rejection::JsonRejection>,
) -> Result<(StatusCode, axum::Json<Value>), AppError> {
    let axum::Json(body) = body.map_err(|e| AppError::invalid(e.body_text()))?;
    if body.request_id.trim().is_empty() || body.approver.trim().is_empty() {
        return Err(AppError::invalid(
            "request_id and approver must not be empty",
        ));
    }
    if !body.requester.contains('@') {
        return Err(AppError::invalid("requester must be a mail address"));
    }
    if !body.amount.is_finite() || body.amount.abs() >= 1e15 {
        return Err(AppError::invalid("amount must be a number below 10^15"));
    }
    let amount_cents = (body.amount * 100.0).round() as i64;
    let answer = match mode.sync.as_deref() {
        Some("1" | "true") => app.submit_sync(&body, amount_cents).await?,
        _ => app.submit_async(&body, amount_cents).await?,
    };
    Ok((StatusCode::CREATED, axum::Json(answer)))
}

async fn report_data(
    State(app): State<Arc<App>>,
    Path(id): Path<i64>,
) -> Result<axum::Json<ReportData>, AppError> {
    match app.report_data(id).await? {
        Some(data) => Ok(axum::Json(data)),
        None => Err(AppError {
            status: StatusCode::NOT_FOUND,
            code: "not_found",
            message: format!("no approval {id}"),
        }),
    }
}

/// `approval serve`.
pub async fn serve(config: Config) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let (url, app) = start(&config, listener).await?;
    println!("approval app listening on {url}");
    app.await?
}

/// Serves the app on `listener`; returns its URL and the serving task.
pub async fn start(
    config: &Config,
    listener: tokio::net::TcpListener,
) -> anyhow::Result<(String, tokio::task::JoinHandle<anyhow::Result<()>>)> {
    let url = format!("http://{}", listener.local_addr()?);
    let public_url = config.public_url.clone().unwrap_or_else(|| url.clone());
    let app = Arc::new(App::connect(config, public_url).await?);
    let task = tokio::spawn(async move {
        axum::serve(listener, app.router())
            .await
            .context("the app stopped")
    });
    Ok((url, task))
}

/// An error answer.
#[derive(Debug)]
pub struct AppError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl AppError {
    fn invalid(message: impl Into<String>) -> AppError {
        AppError {
            status: StatusCode::UNPROCESSABLE_ENTITY,
            code: "invalid",
            message: message.into(),
        }
    }

    fn mail(message: String) -> AppError {
        AppError {
            status: StatusCode::BAD_GATEWAY,
            code: "mail_failed",
            message: format!("the approval is recorded, but {message}"),
        }
    }

    fn internal(message: impl Into<String>) -> AppError {
        AppError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            code: "internal",
            message: message.into(),
        }
    }
}

impl From<sqlx::Error> for AppError {
    fn from(error: sqlx::Error) -> AppError {
        let code = error
            .as_database_error()
            .and_then(|e| e.code())
            .map(|c| c.into_owned());
        match code.as_deref() {
            Some("23505") => AppError {
                status: StatusCode::CONFLICT,
                code: "already_approved",
                message: "this request is already approved".into(),
            },
            Some("23514") => AppError::invalid(format!("the approval table refuses it: {error}")),
            _ => AppError::internal(format!("database: {error}")),
        }
    }
}

impl From<spool_client::Error> for AppError {
    fn from(error: spool_client::Error) -> AppError {
        AppError::internal(format!("cannot enqueue: {error}"))
    }
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            eprintln!("{} {}: {}", self.status, self.code, self.message);
        }
        let body = json!({ "error": { "code": self.code, "message": self.message } });
        (self.status, axum::Json(body)).into_response()
    }
}
