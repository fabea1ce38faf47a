//! A stand-in for the external mail service: slow, and flaky on demand.
//!
//! - `POST /send` `{"from", "to", "subject", "text"}` with an `idempotency-key` header:
//!   waits `--delay-ms` (an external service's latency; 1.5 s by default), records the
//!   delivery and answers 202 `{"delivery": n}`. It does not deduplicate: every accepted
//!   request is a delivery, so a mail sent twice shows as two.
//! - `POST /fail-next` `{"to": "finance@example.com"}`: the next mail to that address gets 503
//!   at once, without a delivery (the service is overloaded). `--fail-next-to` does the same at
//!   start.
//! - `GET /mails`: `{"deliveries": [{"n", "key", "from", "to", "subject"}], "refused": n}`.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// `approval mail-stub` settings.
#[derive(clap::Args, Clone, Debug)]
pub struct Config {
    /// Where the service listens (port 0: any free port).
    #[arg(long, default_value = "127.0.0.1:8025")]
    pub listen: SocketAddr,
    /// How long it takes to accept a mail, in milliseconds.
    #[arg(long, default_value_t = 1500)]
    pub delay_ms: u64,
    /// Refuse the next mail to this address with 503 (repeatable).
    #[arg(long)]
    pub fail_next_to: Vec<String>,
}

/// One accepted mail.
#[derive(Debug, Clone, Serialize)]
pub struct Delivery {
    pub n: usize,
    pub key: Option<String>,
    pub from: String,
    pub to: String,
    pub subject: String,
}

/// The service's state.
pub struct MailStub {
    delay: Duration,
    fail_next: Mutex<Vec<String>>,
    deliveries: Mutex<Vec<Delivery>>,
    refused: Mutex<usize>,
}

#[derive(Deserialize)]
struct Mail {
    from: String,
    to: String,
    subject: String,
}

#[derive(Deserialize)]
struct FailNext {
    to: String,
}

impl MailStub {
    pub fn new(delay: Duration) -> Arc<MailStub> {
        Arc::new(MailStub {
            delay,
            fail_next: Mutex::new(Vec::new()),
            deliveries: Mutex::new(Vec::new()),
            refused: Mutex::new(0),
        })
    }

    /// The next mail to `to` gets 503.
    pub fn fail_next(&self, to: &str) {
        self.fail_next.lock().unwrap().push(to.to_string());
    }

    /// Every mail accepted so far.
    pub fn deliveries(&self) -> Vec<Delivery> {
        self.deliveries.lock().unwrap().clone()
    }

    /// How many mails were refused with 503.
    pub fn refused(&self) -> usize {
        *self.refused.lock().unwrap()
    }

    pub fn router(self: Arc<MailStub>) -> Router {
        Router::new()
            .route("/send", post(send))
            .route("/fail-next", post(fail_next))
            .route(
                "/mails",
                get(|State(stub): State<Arc<MailStub>>| async move {
                    axum::Json(
                        json!({ "deliveries": stub.deliveries(), "refused": stub.refused() }),
                    )
                }),
            )
            .with_state(self)
    }
}

async fn send(
    State(stub): State<Arc<MailStub>>,
    headers: HeaderMap,
    axum::Json(mail): axum::Json<Mail>,
) -> (StatusCode, axum::Json<Value>) {
    let refuse = {
        let mut fail_next = stub.fail_next.lock().unwrap();
        let position = fail_next.iter().position(|to| *to == mail.to);
        position.map(|i| fail_next.remove(i)).is_some()
    };
    if refuse {
        *stub.refused.lock().unwrap() += 1;
        let error = json!({ "error": "temporarily overloaded, try again later" });
        return (StatusCode::SERVICE_UNAVAILABLE, axum::Json(error));
    }
    tokio::time::sleep(stub.delay).await;
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let mut deliveries = stub.deliveries.lock().unwrap();
    let n = deliveries.len() + 1;
    deliveries.push(Delivery {
        n,
        key,
        from: mail.from,
        to: mail.to,
        subject: mail.subject,
    });
    (StatusCode::ACCEPTED, axum::Json(json!({ "delivery": n })))
}

async fn fail_next(
    State(stub): State<Arc<MailStub>>,
    axum::Json(request): axum::Json<FailNext>,
) -> StatusCode {
    stub.fail_next(&request.to);
    StatusCode::NO_CONTENT
}

/// Serves the stub on `listener`; returns its send URL and the serving task.
pub fn start(
    stub: Arc<MailStub>,
    listener: tokio::net::TcpListener,
) -> anyhow::Result<(String, tokio::task::JoinHandle<anyhow::Result<()>>)> {
    let url = format!("http://{}/send", listener.local_addr()?);
    let task = tokio::spawn(async move {
        axum::serve(listener, stub.router())
            .await
            .context("the mail service stopped")
    });
    Ok((url, task))
}

/// `approval mail-stub`.
pub async fn serve(config: Config) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let stub = MailStub::new(Duration::from_millis(config.delay_ms));
    for to in &config.fail_next_to {
        stub.fail_next(to);
    }
    let (url, task) = start(stub, listener)?;
    println!("mail service listening on {url}");
    task.await?
}
