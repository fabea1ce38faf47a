//! Delivering an [`Alert`] through every configured channel, each within [`SEND_TIMEOUT`],
//! all at once; every channel's outcome comes back, so a failing one is reported by name.
//!
//! - Webhook: a JSON POST (reqwest, already the CLI's HTTP client; rustls for https) whose
//!   `text` field is what Slack and compatible receivers show; the alert's fields ride beside
//!   it. Any 2xx answer is delivery.
//! - E-mail: SMTP with lettre on tokio, the maintained async SMTP client for Rust (STARTTLS,
//!   implicit TLS through rustls, authentication, RFC 5322 messages with encoded headers).
//!   Each send opens its own connection: alerts are rare, and a pooled connection the server
//!   dropped while idle would fail the one send that matters.

use lettre::message::{Mailbox, header::ContentType};
use lettre::{AsyncSmtpTransport, AsyncTransport, Tokio1Executor};
use std::sync::Arc;

use super::config::{ChannelConfig, SEND_TIMEOUT};
use super::message::Alert;
use crate::store::alerts::ChannelOutcome;

/// Checks an SMTP URL the way the e-mail channel will read it.
pub fn check_smtp_url(url: &str) -> Result<(), String> {
    let scheme = url.split_once("://").map(|(s, _)| s).unwrap_or_default();
    if !matches!(scheme, "smtp" | "smtps") {
        return Err(format!(
            "`{url}` is not an SMTP URL; write smtp://[USER:PASSWORD@]HOST[:PORT][?tls=required] or smtps://..."
        ));
    }
    AsyncSmtpTransport::<Tokio1Executor>::from_url(url)
        .map(|_| ())
        .map_err(|e| format!("`{}`: {e}", redact(url)))
}

/// Checks an address (`a@b.example` or `Name <a@b.example>`).
pub fn check_mailbox(text: &str) -> Result<(), String> {
    text.parse::<Mailbox>()
        .map(|_| ())
        .map_err(|e| format!("`{text}` is not an e-mail address ({e})"))
}

/// An SMTP URL without its credentials, for messages.
fn redact(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut parsed) => {
            let _ = parsed.set_password(None);
            let _ = parsed.set_username("");
            parsed.to_string()
        }
        Err(_) => "(unparsable URL)".into(),
    }
}

enum Channel {
    Webhook {
        name: String,
        url: reqwest::Url,
        http: reqwest::Client,
    },
    Email {
        name: String,
        transport: AsyncSmtpTransport<Tokio1Executor>,
        from: Mailbox,
        to: Vec<Mailbox>,
    },
}

impl Channel {
    fn name(&self) -> &str {
        match self {
            Channel::Webhook { name, .. } | Channel::Email { name, .. } => name,
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Channel::Webhook { .. } => "webhook",
            Channel::Email { .. } => "email",
        }
    }

    async fn send(&self, alert: &Alert) -> Result<(), String> {
        match self {
            Channel::Webhook { url, http, .. } => {
                let response = http
                    .post(url.clone())
                    .json(&alert.webhook_json())
                    .send()
                    .await
                    .map_err(|e| {
                        let e = e.without_url();
                        format!("the webhook did not answer: {e}")
                    })?;
                let status = response.status();
                if status.is_success() {
                    return Ok(());
                }
                let body = response.text().await.unwrap_or_default();
                let body: String = body.chars().take(200).collect();
                Err(format!("the webhook answered {status}: {}", body.trim()))
            }
            Channel::Email {
                transport,
                from,
                to,
                ..
            } => {
                let mut message = lettre::Message::builder()
                    .from(from.clone())
                    .subject(alert.subject.clone())
                    .header(ContentType::TEXT_PLAIN);
                for to in to {
                    message = message.to(to.clone());
                }
                let message = message
                    .body(alert.text.clone())
                    .map_err(|e| format!("the e-mail could not be built: {e}"))?;
                transport
                    .send(message)
                    .await
                    .map(|_| ())
                    .map_err(|e| format!("the SMTP server did not take the e-mail: {e}"))
            }
        }
    }
}

/// The configured channels, ready to send.
#[derive(Clone, Default)]
pub struct Channels {
    list: Vec<Arc<Channel>>,
}

impl Channels {
    /// Builds the channels of a validated configuration.
    pub fn new(configs: &[ChannelConfig]) -> Channels {
        let http = reqwest::Client::builder()
            .timeout(SEND_TIMEOUT)
            .build()
            .unwrap_or_default();
        let list = configs
            .iter()
            .filter_map(|config| {
                let channel = match config {
                    ChannelConfig::Webhook { name, url } => Channel::Webhook {
                        name: name.clone(),
                        url: url.clone(),
                        http: http.clone(),
                    },
                    ChannelConfig::Email(email) => {
                        let transport =
                            match AsyncSmtpTransport::<Tokio1Executor>::from_url(&email.smtp) {
                                Ok(builder) => builder.timeout(Some(SEND_TIMEOUT)).build(),
                                Err(error) => {
                                    tracing::error!(channel = %email.name, "cannot use this e-mail channel: {error}");
                                    return None;
                                }
                            };
                        Channel::Email {
                            name: email.name.clone(),
                            transport,
                            from: email.from.parse().ok()?,
                            to: email.to.iter().filter_map(|t| t.parse().ok()).collect(),
                        }
                    }
                };
                Some(Arc::new(channel))
            })
            .collect();
        Channels { list }
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Sends `alert` through every channel at once; returns each channel's outcome, in the
    /// configured order. Never takes much longer than [`SEND_TIMEOUT`].
    pub async fn send(&self, alert: &Alert) -> Vec<ChannelOutcome> {
        let alert = Arc::new(alert.clone());
        let mut sends = tokio::task::JoinSet::new();
        for (index, channel) in self.list.iter().enumerate() {
            let (channel, alert) = (channel.clone(), alert.clone());
            sends.spawn(async move {
                let outcome = match tokio::time::timeout(
                    SEND_TIMEOUT + SEND_TIMEOUT / 2,
                    channel.send(&alert),
                )
                .await
                {
                    Ok(result) => result,
                    Err(_) => Err(format!("no answer within {SEND_TIMEOUT:?}")),
                };
                (index, outcome)
            });
        }
        let mut outcomes: Vec<Option<Result<(), String>>> = vec![None; self.list.len()];
        while let Some(joined) = sends.join_next().await {
            if let Ok((index, outcome)) = joined {
                outcomes[index] = Some(outcome);
            }
        }
        self.list
            .iter()
            .zip(outcomes)
            .map(|(channel, outcome)| {
                let outcome = outcome.unwrap_or_else(|| Err("the send task failed".into()));
                match &outcome {
                    Ok(()) => tracing::info!(channel = channel.name(), alert = %alert.alert, event = alert.event, "alert sent"),
                    Err(error) => tracing::error!(channel = channel.name(), alert = %alert.alert, event = alert.event, "ALERT NOT DELIVERED through this channel: {error}"),
                }
                ChannelOutcome {
                    channel: channel.name().to_string(),
                    kind: channel.kind().to_string(),
                    ok: outcome.is_ok(),
                    error: outcome.err(),
                }
            })
            .collect()
    }
}
