//! Watches the services a host cannot work without (the dispatcher and the completer). A
//! service that ends while the host is still running (it panicked, or returned by mistake)
//! must never leave a host that looks alive but has silently stopped claiming: the failure is
//! logged, `/health` answers 503 naming the service, and the host is stopped, so its process
//! exits non-zero and whatever supervises it (systemd, Kubernetes) restarts it. Tasks it held
//! are handed back by the ordered shutdown, or rescued after their lease.
//!
//! Stopping rather than restarting in place: a panicking dispatcher may have left its state
//! (in-flight table, slots) inconsistent, and a fresh process is the one state known to be good.

use std::collections::BTreeMap;
use std::sync::Mutex;
use tokio::task::JoinHandle;

use crate::shutdown::{Shutdown, Stage};

/// Services that died, by name, with why; shared with `/health`.
#[derive(Debug, Default)]
pub struct ServiceFailures {
    failed: Mutex<BTreeMap<&'static str, String>>,
}

impl ServiceFailures {
    /// The failed services and their reasons.
    pub fn all(&self) -> BTreeMap<&'static str, String> {
        self.lock().clone()
    }

    /// Whether any service failed.
    pub fn any(&self) -> bool {
        !self.lock().is_empty()
    }

    fn record(&self, service: &'static str, reason: String) {
        self.lock().insert(service, reason);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<&'static str, String>> {
        self.failed.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Spawns a watcher over `service`: returns a handle that resolves when the service has ended,
/// after recording a failure and stopping the host if it ended before shutdown was asked for.
pub fn supervise(
    name: &'static str,
    service: JoinHandle<()>,
    failures: std::sync::Arc<ServiceFailures>,
    shutdown: Shutdown,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let outcome = service.await;
        let reason = match outcome {
            Err(error) if error.is_panic() => Some(format!(
                "the {name} panicked: {}",
                panic_text(error.into_panic())
            )),
            Err(error) => Some(format!("the {name} was cancelled: {error}")),
            Ok(()) if shutdown.stage() == Stage::Running => {
                Some(format!("the {name} stopped unexpectedly"))
            }
            Ok(()) => None,
        };
        if let Some(reason) = reason {
            tracing::error!(
                service = name,
                "{reason}; stopping this host so it can be restarted"
            );
            failures.record(name, reason);
            shutdown.request(Stage::Graceful);
        }
    })
}

fn panic_text(payload: Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[tokio::test]
    async fn a_panicking_service_is_recorded_and_stops_the_host() {
        let failures = Arc::new(ServiceFailures::default());
        let shutdown = Shutdown::new();
        let service = tokio::spawn(async { panic!("claim loop broke") });
        supervise("dispatcher", service, failures.clone(), shutdown.clone())
            .await
            .unwrap();
        assert_eq!(shutdown.stage(), Stage::Graceful);
        let all = failures.all();
        assert!(
            all["dispatcher"].contains("panicked: claim loop broke"),
            "{all:?}"
        );
    }

    #[tokio::test]
    async fn a_service_that_returns_early_is_a_failure_but_one_ending_at_shutdown_is_not() {
        let failures = Arc::new(ServiceFailures::default());
        let shutdown = Shutdown::new();
        supervise(
            "completer",
            tokio::spawn(async {}),
            failures.clone(),
            shutdown.clone(),
        )
        .await
        .unwrap();
        assert!(failures.all()["completer"].contains("stopped unexpectedly"));

        let calm = Arc::new(ServiceFailures::default());
        let stopping = Shutdown::new();
        stopping.request(Stage::Graceful);
        supervise("completer", tokio::spawn(async {}), calm.clone(), stopping)
            .await
            .unwrap();
        assert!(!calm.any());
    }
}
