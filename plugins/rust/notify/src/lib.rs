//! `notify`: renders a notification from templates and checks it is fit to send.
//!
//! # Payload
//!
//! ```json
//! {
//!   "channel": "email",
//!   "to": "ada@example.com",
//!   "subject": "Approval {{id}}",
//!   "template": "Hello {{name}}, your approval {{id}} is {{status}}.",
//!   "vars": {"name": "Ada", "id": 42, "status": "approved"}
//! }
//! ```
//!
//! * `channel` (required): `"email"` or `"sms"`.
//! * `to` (required): the recipient. For email it must look like an address
//!   (`local@domain.tld`); for SMS it must be a phone number, digits with an optional leading
//!   `+` (3 to 15 digits; spaces, dashes, dots and parentheses are removed first).
//! * `template` (required): the body. Each `{{name}}` (spaces inside the braces allowed) is
//!   replaced with the value of `name` in `vars`; substituted text is not scanned again, and
//!   there is no escape for a literal `{{`.
//! * `vars` (optional): the values, each a string, number or boolean.
//! * `subject` (optional): a template for the email subject; it must render to one line. SMS
//!   has no subject, so one given for SMS is ignored with a warning.
//!
//! # Result
//!
//! ```json
//! {
//!   "channel": "email",
//!   "to": "ada@example.com",
//!   "subject": "Approval 42",
//!   "body": "Hello Ada, your approval 42 is approved.",
//!   "segments": ["Hello Ada, your approval 42 is approved."],
//!   "truncated": false
//! }
//! ```
//!
//! `segments` are the messages to send: the whole body for email; for SMS the body split into
//! parts of at most 160 characters. An SMS body longer than 10 segments (1600 characters) is
//! cut to fit, ending in `…`, and `truncated` is `true`. `subject` is `null` when there is none.
//!
//! # Failures
//!
//! Every problem is in the payload, so each fails permanently ([`Failure::Fail`]): an unknown
//! channel, an unknown field (a typo), an invalid recipient, a variable missing from `vars`
//! (the message names it), an unclosed `{{`, a multi-line subject or an empty body.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use spool_sdk::{Failure, Handler, TaskInfo, json, log};

/// The `notify` handler.
struct Notify;

impl Handler for Notify {
    fn handle(_task: TaskInfo, payload: String) -> Result<String, Failure> {
        let request: Request = json::parse_payload(&payload)?;
        if request.channel == Channel::Sms && request.subject.is_some() {
            log::warn("sms has no subject; ignoring the subject template");
        }
        let notification = compose(request)?;
        log::info(format!(
            "rendered {} notification to {} in {} segment(s){}",
            notification.channel.name(),
            notification.to,
            notification.segments.len(),
            if notification.truncated {
                ", truncated"
            } else {
                ""
            },
        ));
        json::to_result(&notification)
    }
}

spool_sdk::export_handler!(Notify);

/// Longest SMS segment, in characters.
const SMS_SEGMENT_CHARS: usize = 160;
/// Most segments one SMS may be split into; a longer body is truncated.
const SMS_MAX_SEGMENTS: usize = 10;

/// The payload.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Request {
    channel: Channel,
    to: String,
    template: String,
    #[serde(default)]
    vars: Map<String, Value>,
    #[serde(default)]
    subject: Option<String>,
}

/// Where the notification goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
enum Channel {
    Email,
    Sms,
}

impl Channel {
    fn name(self) -> &'static str {
        match self {
            Channel::Email => "email",
            Channel::Sms => "sms",
        }
    }
}

/// The result.
#[derive(Debug, Serialize)]
struct Notification {
    channel: Channel,
    to: String,
    subject: Option<String>,
    body: String,
    segments: Vec<String>,
    truncated: bool,
}

/// Validates the recipient, renders the templates and splits the body as the channel needs.
fn compose(request: Request) -> Result<Notification, Failure> {
    let Request {
        channel,
        to,
        template,
        vars,
        subject,
    } = request;
    let to = match channel {
        Channel::Email => email_address(&to)?,
        Channel::Sms => phone_number(&to)?,
    };

    let subject = match (channel, subject) {
        (_, None) => None,
        (Channel::Email, Some(subject)) => {
            let subject =
                render(&subject, &vars).map_err(|e| Failure::fail(format!("subject: {e}")))?;
            if subject.contains(['\r', '\n']) {
                return Err(Failure::fail("subject must be a single line"));
            }
            Some(subject.trim().to_owned())
        }
        // SMS has no subject; `handle` warns about one given.
        (Channel::Sms, Some(_)) => None,
    };

    let body = render(&template, &vars).map_err(|e| Failure::fail(format!("template: {e}")))?;
    if body.trim().is_empty() {
        return Err(Failure::fail("the rendered body is empty"));
    }

    let (body, segments, truncated) = match channel {
        Channel::Email => (body.clone(), vec![body], false),
        Channel::Sms => {
            let (body, truncated) = truncate(body, SMS_SEGMENT_CHARS * SMS_MAX_SEGMENTS);
            let segments = split(&body, SMS_SEGMENT_CHARS);
            (body, segments, truncated)
        }
    };
    Ok(Notification {
        channel,
        to,
        subject,
        body,
        segments,
        truncated,
    })
}

/// Replaces each `{{name}}` in `template` with the value of `name` in `vars`.
fn render(template: &str, vars: &Map<String, Value>) -> Result<String, String> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find("}}").ok_or_else(|| {
            format!(
                "unclosed \"{{{{\" at byte {}",
                template.len() - rest.len() + start
            )
        })?;
        let name = after[..end].trim();
        if name.is_empty() {
            return Err("empty placeholder \"{{}}\"".to_owned());
        }
        match vars.get(name) {
            Some(Value::String(s)) => out.push_str(s),
            Some(Value::Number(n)) => out.push_str(&n.to_string()),
            Some(Value::Bool(b)) => out.push_str(if *b { "true" } else { "false" }),
            Some(_) => {
                return Err(format!(
                    "variable {name:?} must be a string, number or boolean"
                ));
            }
            None => return Err(format!("variable {name:?} is missing from vars")),
        }
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Checks that `to` looks like an email address (`local@domain.tld`) and returns it trimmed.
fn email_address(to: &str) -> Result<String, Failure> {
    let address = to.trim();
    let invalid = || Failure::fail(format!("recipient {to:?} is not a valid email address"));
    let (local, domain) = address.split_once('@').ok_or_else(invalid)?;

    const LOCAL_SPECIALS: &str = "!#$%&'*+/=?^_`{|}~-";
    let local_ok = !local.is_empty()
        && local.len() <= 64
        && !local.starts_with('.')
        && !local.ends_with('.')
        && !local.contains("..")
        && local
            .chars()
            .all(|c| c.is_alphanumeric() || c == '.' || LOCAL_SPECIALS.contains(c));

    let labels: Vec<&str> = domain.split('.').collect();
    let domain_ok = domain.len() <= 253
        && labels.len() >= 2
        && labels.iter().all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label.chars().all(|c| c.is_alphanumeric() || c == '-')
        });

    if local_ok && domain_ok {
        Ok(address.to_owned())
    } else {
        Err(invalid())
    }
}

/// Checks that `to` is a phone number (an optional `+` and 3 to 15 digits, once spaces, dashes,
/// dots and parentheses are removed) and returns it in that compact form.
fn phone_number(to: &str) -> Result<String, Failure> {
    let compact: String = to
        .chars()
        .filter(|c| !matches!(c, ' ' | '-' | '.' | '(' | ')'))
        .collect();
    let digits = compact.strip_prefix('+').unwrap_or(&compact);
    if (3..=15).contains(&digits.len()) && digits.bytes().all(|b| b.is_ascii_digit()) {
        Ok(compact)
    } else {
        Err(Failure::fail(format!(
            "recipient {to:?} is not a valid phone number (digits with an optional leading +)"
        )))
    }
}

/// Cuts `text` to at most `max_chars` characters, ending a cut text in `…`.
fn truncate(text: String, max_chars: usize) -> (String, bool) {
    if text.chars().count() <= max_chars {
        return (text, false);
    }
    let mut cut: String = text.chars().take(max_chars - 1).collect();
    cut.push('…');
    (cut, true)
}

/// Splits `text` into parts of at most `chars` characters each.
fn split(text: &str, chars: usize) -> Vec<String> {
    let all: Vec<char> = text.chars().collect();
    all.chunks(chars)
        .map(|part| part.iter().collect())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(payload: Value) -> Result<Notification, Failure> {
        compose(json::parse_payload(&payload.to_string())?)
    }

    fn fail_message(result: Result<Notification, Failure>) -> String {
        match result {
            Err(Failure::Fail(message)) => message,
            other => panic!("expected a permanent failure, got {other:?}"),
        }
    }

    #[test]
    fn renders_an_email() {
        let n = run(json!({
            "channel": "email",
            "to": " ada@example.com ",
            "subject": "Approval {{ id }}",
            "template": "Hello {{name}}, your approval {{id}} is {{status}}.",
            "vars": {"name": "Ada", "id": 42, "status": "approved"}
        }))
        .unwrap();
        assert_eq!(n.to, "ada@example.com");
        assert_eq!(n.subject.as_deref(), Some("Approval 42"));
        assert_eq!(n.body, "Hello Ada, your approval 42 is approved.");
        assert_eq!(n.segments, std::slice::from_ref(&n.body));
        assert!(!n.truncated);
        let text = serde_json::to_value(&n).unwrap();
        assert_eq!(text["channel"], "email");
    }

    #[test]
    fn a_missing_variable_is_named() {
        let message = fail_message(run(json!({
            "channel": "email", "to": "a@b.co", "template": "Hi {{name}}, {{who}}", "vars": {"name": "x"}
        })));
        assert_eq!(message, r#"template: variable "who" is missing from vars"#);
        let message = fail_message(run(json!({
            "channel": "email", "to": "a@b.co", "template": "Hi", "subject": "{{x}}"
        })));
        assert_eq!(message, r#"subject: variable "x" is missing from vars"#);
    }

    #[test]
    fn template_errors() {
        let vars = Map::new();
        assert_eq!(
            render("a {{b", &vars).unwrap_err(),
            r#"unclosed "{{" at byte 2"#
        );
        assert_eq!(
            render("{{ }}", &vars).unwrap_err(),
            r#"empty placeholder "{{}}""#
        );
        let vars = json!({"v": {"nested": 1}, "t": "{{v}}"})
            .as_object()
            .unwrap()
            .clone();
        assert!(
            render("{{v}}", &vars)
                .unwrap_err()
                .contains("must be a string")
        );
        assert_eq!(
            render("{{t}}", &vars).unwrap(),
            "{{v}}",
            "values are not rendered again"
        );
    }

    #[test]
    fn email_addresses() {
        for good in ["a@b.co", "first.last+tag@sub.example.org", "ü@exämple.de"] {
            assert!(email_address(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "ada",
            "@example.com",
            "ada@",
            "ada@localhost",
            "a b@c.de",
            "a@b@c.de",
            "a..b@c.de",
            "a@-b.de",
            "a@b..de",
        ] {
            assert!(email_address(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn phone_numbers() {
        assert_eq!(phone_number("+1 (555) 010-0199").unwrap(), "+15550100199");
        assert_eq!(phone_number("4915112345678").unwrap(), "4915112345678");
        for bad in [
            "",
            "+",
            "12",
            "+12a45",
            "1234567890123456",
            "++123",
            "ada@example.com",
        ] {
            assert!(phone_number(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn sms_is_split_and_truncated() {
        let n = run(json!({"channel": "sms", "to": "+15550100", "template": "{{t}}", "vars": {"t": "é".repeat(400)}})).unwrap();
        assert_eq!(
            n.segments
                .iter()
                .map(|s| s.chars().count())
                .collect::<Vec<_>>(),
            [160, 160, 80]
        );
        assert!(!n.truncated);

        let n = run(json!({"channel": "sms", "to": "+15550100", "template": "x".repeat(2000), "subject": "ignored"})).unwrap();
        assert!(n.truncated);
        assert_eq!(n.subject, None);
        assert_eq!(n.body.chars().count(), 1600);
        assert!(n.body.ends_with('…'));
        assert_eq!(n.segments.len(), 10);
    }

    #[test]
    fn bad_payloads_fail_permanently() {
        assert!(
            fail_message(run(json!({"channel": "fax", "to": "1", "template": "x"})))
                .contains("unknown variant `fax`")
        );
        assert!(
            fail_message(run(
                json!({"channel": "sms", "to": "nope", "template": "x"})
            ))
            .contains("not a valid phone number")
        );
        assert!(
            fail_message(run(
                json!({"channel": "email", "to": "nope", "template": "x"})
            ))
            .contains("not a valid email address")
        );
        assert_eq!(
            fail_message(run(
                json!({"channel": "email", "to": "a@b.co", "template": " {{e}} ", "vars": {"e": ""}})
            )),
            "the rendered body is empty"
        );
        assert_eq!(
            fail_message(run(
                json!({"channel": "email", "to": "a@b.co", "template": "x", "subject": "a\nb"})
            )),
            "subject must be a single line"
        );
    }
}
