//! The one shutdown signal every service listens to.
//!
//! Two stages: the first request (SIGTERM, Ctrl-C) is *graceful*: stop taking new work and let
//! running tasks finish within the grace period. A second request is *immediate*: stop running
//! tasks now. Either way unfinished tasks are handed back to the queue, so nothing is lost.

use tokio::sync::watch;

/// How far shutdown has gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stage {
    Running,
    Graceful,
    Immediate,
}

/// A cloneable handle to request and observe shutdown.
#[derive(Clone)]
pub struct Shutdown {
    sender: watch::Sender<Stage>,
}

impl Default for Shutdown {
    fn default() -> Self {
        Shutdown::new()
    }
}

impl Shutdown {
    /// A signal in the running stage.
    pub fn new() -> Self {
        Shutdown {
            sender: watch::Sender::new(Stage::Running),
        }
    }

    /// Advances to the next stage (running → graceful → immediate).
    pub fn escalate(&self) {
        self.sender.send_modify(|stage| {
            *stage = match *stage {
                Stage::Running => Stage::Graceful,
                _ => Stage::Immediate,
            }
        });
    }

    /// Requests at least the given stage.
    pub fn request(&self, wanted: Stage) {
        self.sender.send_if_modified(|stage| {
            let advance = wanted > *stage;
            if advance {
                *stage = wanted;
            }
            advance
        });
    }

    /// The current stage.
    pub fn stage(&self) -> Stage {
        *self.sender.borrow()
    }

    /// Resolves once shutdown has reached `stage`.
    pub async fn reached(&self, stage: Stage) {
        let mut receiver = self.sender.subscribe();
        // The sender lives in `self`, so the channel cannot close while we wait.
        let _ = receiver.wait_for(|current| *current >= stage).await;
    }
}

/// Resolves on Ctrl-C or SIGTERM.
pub async fn os_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = terminate => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn escalates_in_order() {
        let shutdown = Shutdown::new();
        assert_eq!(shutdown.stage(), Stage::Running);
        shutdown.escalate();
        shutdown.reached(Stage::Graceful).await;
        assert_eq!(shutdown.stage(), Stage::Graceful);
        shutdown.escalate();
        shutdown.reached(Stage::Immediate).await;
        shutdown.request(Stage::Graceful);
        assert_eq!(shutdown.stage(), Stage::Immediate);
    }
}
