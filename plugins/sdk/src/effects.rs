//! The effect ledger: remembering which external effects already happened.
//!
//! A task may run more than once — a retry after a failure, or a run after the host stopped
//! mid-task — so an external effect (sending a mail, charging a card) done by one attempt can
//! be done again by the next. The host keeps a durable ledger of effect keys for each task
//! type: check a key before the effect with [`is_done`], and [`record`] it right after the
//! effect succeeded. [`once`] does both around a closure.
//!
//! Keys are shared by all tasks of the handler's task type, on every host, and never expire.
//! Put whatever identifies one effect into the key — usually the task's id and the effect's
//! target, as in `format!("mail:{}:{to}", task.id)`.
//!
//! # The guarantee
//!
//! The ledger does not make an effect exactly-once on its own. If the instance dies (a trap,
//! a timeout, the host stopping) after the effect but before [`record`] returns, the key is
//! not recorded and the next run performs the effect again. The ledger narrows the window for
//! a repeat to that gap. To close it, pass the key to the downstream service as its
//! idempotency key, so that the service itself drops the repeat.

use crate::{Failure, host};

/// True when an effect with this key was recorded as done for this task type, by any attempt
/// of any task.
pub fn is_done(key: impl AsRef<str>) -> bool {
    host::effect_done(key.as_ref())
}

/// Records durably that the effect with this key succeeded; returns once the record is stored.
/// Recording a key twice is harmless.
pub fn record(key: impl AsRef<str>) {
    host::record_effect(key.as_ref());
}

/// Runs `effect` unless the effect `key` is already done, and records `key` after it succeeds.
///
/// Returns `Ok(Some(value))` when `effect` ran and succeeded (the key is then recorded),
/// `Ok(None)` when the key was already done (`effect` did not run), and `effect`'s error when
/// it failed (the key is not recorded, so a later attempt tries again).
///
/// ```no_run
/// use spool_sdk::{Failure, effects};
/// # fn send_mail(_to: &str, _idempotency_key: &str) -> Result<(), Failure> { Ok(()) }
/// # let (task_id, to) = (7, "ada@example.com");
///
/// let key = format!("mail:{task_id}:{to}");
/// let sent = effects::once(&key, || send_mail(to, &key))?.is_some();
/// # Ok::<(), Failure>(())
/// ```
///
/// If the instance dies between the end of `effect` and the record, the effect runs again
/// on the next attempt: see [the guarantee](self#the-guarantee).
pub fn once<T>(
    key: impl AsRef<str>,
    effect: impl FnOnce() -> Result<T, Failure>,
) -> Result<Option<T>, Failure> {
    let key = key.as_ref();
    if is_done(key) {
        return Ok(None);
    }
    let value = effect()?;
    record(key);
    Ok(Some(value))
}
