//! The Spool services (effect ledger, key-value store, follow-up enqueues) through the tape:
//! each call is made and recorded with its answer, or answered from the record in a replay.

use std::sync::Arc;

use super::{Answer, Call, Tape};
use crate::sandbox::host_api::{FollowUp, ServiceError, TaskServices};

/// The Spool services through the tape: with `live` services, each call is made and recorded;
/// without, each is answered from the record and nothing reaches a database.
pub struct TapedServices {
    pub tape: Arc<Tape>,
    pub live: Option<Arc<dyn TaskServices>>,
}

#[async_trait::async_trait]
impl TaskServices for TapedServices {
    fn progress(&self, task_id: u64, percent: u8, note: String) {
        if let Some(live) = &self.live {
            live.progress(task_id, percent, note);
        }
    }

    async fn effect_done(&self, task_type: &str, key: &str) -> Result<bool, ServiceError> {
        let live = self.live.as_ref().map(|l| l.effect_done(task_type, key));
        self.tape.service("effect-done", key, live).await
    }

    async fn record_effect(
        &self,
        task_type: &str,
        key: &str,
        task_id: u64,
    ) -> Result<(), ServiceError> {
        let live = self
            .live
            .as_ref()
            .map(|l| l.record_effect(task_type, key, task_id));
        self.tape.service("record-effect", key, live).await
    }

    async fn kv_get(&self, task_type: &str, key: &str) -> Result<Option<String>, ServiceError> {
        let live = self.live.as_ref().map(|l| l.kv_get(task_type, key));
        self.tape.service("kv-get", key, live).await
    }

    async fn kv_set(&self, task_type: &str, key: &str, value: &str) -> Result<(), ServiceError> {
        let live = self.live.as_ref().map(|l| l.kv_set(task_type, key, value));
        self.tape.service("kv-set", key, live).await
    }

    async fn kv_delete(&self, task_type: &str, key: &str) -> Result<bool, ServiceError> {
        let live = self.live.as_ref().map(|l| l.kv_delete(task_type, key));
        self.tape.service("kv-delete", key, live).await
    }

    async fn enqueue(&self, follow_up: FollowUp) -> Result<Result<u64, String>, ServiceError> {
        let subject = follow_up.task_type.clone();
        let live = self.live.as_ref().map(|l| l.enqueue(follow_up));
        self.tape.service("enqueue", &subject, live).await
    }
}

/// A service's answer as a record keeps it.
trait Recorded: Sized {
    fn to_answer(&self) -> Answer;
    /// The answer, if the record's is of this call's kind.
    fn from_answer(answer: &Answer) -> Option<Self>;
}

impl Recorded for bool {
    fn to_answer(&self) -> Answer {
        Answer::Flag(*self)
    }
    fn from_answer(answer: &Answer) -> Option<Self> {
        match answer {
            Answer::Flag(flag) => Some(*flag),
            _ => None,
        }
    }
}

impl Recorded for () {
    fn to_answer(&self) -> Answer {
        Answer::Done
    }
    fn from_answer(answer: &Answer) -> Option<Self> {
        matches!(answer, Answer::Done).then_some(())
    }
}

impl Recorded for Option<String> {
    fn to_answer(&self) -> Answer {
        Answer::Value(self.clone())
    }
    fn from_answer(answer: &Answer) -> Option<Self> {
        match answer {
            Answer::Value(value) => Some(value.clone()),
            _ => None,
        }
    }
}

impl Recorded for Result<u64, String> {
    fn to_answer(&self) -> Answer {
        Answer::Enqueued(self.clone())
    }
    fn from_answer(answer: &Answer) -> Option<Self> {
        match answer {
            Answer::Enqueued(result) => Some(result.clone()),
            _ => None,
        }
    }
}

impl Tape {
    /// A service call: recorded with its answer, or answered from the record.
    async fn service<T: Recorded, F>(
        &self,
        name: &str,
        subject: &str,
        live: Option<F>,
    ) -> Result<T, ServiceError>
    where
        F: std::future::Future<Output = Result<T, ServiceError>>,
    {
        let Some(live) = live else {
            let asked = format!("{name}({subject:?})");
            let answer = self
                .next(&asked, |call| match call {
                    Call::Service {
                        name: n,
                        subject: s,
                        answer,
                    } if n == name && s == subject => Some(answer.clone()),
                    _ => None,
                })
                .map_err(|problem| ServiceError::Unavailable(format!("replay: {problem}")))?;
            return match answer {
                Answer::Unavailable(message) => Err(ServiceError::Unavailable(message)),
                Answer::Refused(message) => Err(ServiceError::Refused(message)),
                other => T::from_answer(&other).ok_or_else(|| {
                    ServiceError::Unavailable(format!(
                        "replay: the record's answer to {asked} is not one this call gives"
                    ))
                }),
            };
        };
        let result = live.await;
        let answer = match &result {
            Ok(value) => value.to_answer(),
            Err(ServiceError::Unavailable(message)) => Answer::Unavailable(message.clone()),
            Err(ServiceError::Refused(message)) => Answer::Refused(message.clone()),
        };
        self.keep(Call::Service {
            name: name.to_string(),
            subject: subject.to_string(),
            answer,
        });
        result
    }
}
