//! Cross-host wake-up: a task that LISTENs on a channel (`spool_enqueue`, or `spool_deploy`
//! for deployments) and wakes its waiter (the dispatcher, the deployment sync) on every
//! notification.
//!
//! The migration `0003_wake_up.sql` notifies that channel from triggers: once per INSERT
//! statement into `async_task` (by any host or by application SQL), and once per transaction
//! that makes a task pending and due by an UPDATE (API retry, rescue, release, an application's
//! requeue). Notifications arrive when the writing transaction commits.
//!
//! The listener holds one connection of its own, outside the store's pool. When that
//! connection drops (the server restarted, the network failed), the task reconnects with
//! exponential backoff and wakes the dispatcher once connected again, since notifications sent
//! meanwhile are lost. It stops when the store is closed (or dropped).

use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use tokio::sync::{Notify, watch};

/// The channel the enqueue triggers notify.
pub(super) const CHANNEL: &str = "spool_enqueue";
/// The channel the deployment trigger notifies (migration `0014_deployments.sql`).
pub(super) const DEPLOY_CHANNEL: &str = "spool_deploy";
/// The first wait before reconnecting; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// How long one connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Listens on `channel` until `stop` turns true (or its sender is dropped), calling
/// `wake.notify_one()` on every notification.
pub(super) async fn listen(
    options: PgConnectOptions,
    channel: &'static str,
    wake: Arc<Notify>,
    mut stop: watch::Receiver<bool>,
) {
    // A pool of one connection, used only to (re)connect the listener.
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .min_connections(0)
        .acquire_timeout(CONNECT_TIMEOUT)
        .idle_timeout(None)
        .max_lifetime(None)
        .connect_lazy_with(options);
    let mut backoff = FIRST_BACKOFF;
    // Whether the listener was connected before (so this is a reconnection), and whether a
    // failure to connect was reported since.
    let (mut connected_before, mut failing) = (false, false);
    loop {
        let session = tokio::select! {
            biased;
            _ = stop.wait_for(|stopped| *stopped) => break,
            session = subscribe(&pool, channel) => session,
        };
        match session {
            Ok(mut listener) => {
                if connected_before || failing {
                    tracing::info!(channel, "listening for notifications again");
                    // Whatever was enqueued while the connection was down notified nobody.
                    wake.notify_one();
                }
                (connected_before, failing, backoff) = (true, false, FIRST_BACKOFF);
                let lost = loop {
                    tokio::select! {
                        biased;
                        _ = stop.wait_for(|stopped| *stopped) => break None,
                        received = listener.try_recv() => match received {
                            Ok(Some(_)) => wake.notify_one(),
                            Ok(None) => break Some("the connection was closed".to_string()),
                            Err(error) => break Some(error.to_string()),
                        },
                    }
                };
                drop(listener);
                match lost {
                    None => break,
                    Some(reason) => {
                        tracing::warn!(
                            channel,
                            "lost the notification connection ({reason}); reconnecting"
                        );
                        // A short pause, so a server that drops every new connection is not
                        // hammered; failing reconnects back off further below.
                        tokio::select! {
                            biased;
                            _ = stop.wait_for(|stopped| *stopped) => break,
                            _ = tokio::time::sleep(FIRST_BACKOFF) => {}
                        }
                    }
                }
            }
            Err(error) => {
                if !failing {
                    tracing::warn!(
                        channel,
                        "cannot listen for notifications ({error}); retrying, polling meanwhile"
                    );
                }
                failing = true;
                tokio::select! {
                    biased;
                    _ = stop.wait_for(|stopped| *stopped) => break,
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
    pool.close().await;
}

/// A listener subscribed to `channel` on a fresh connection.
async fn subscribe(pool: &sqlx::PgPool, channel: &str) -> Result<PgListener, sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    // Report a lost connection (`Ok(None)`) instead of reconnecting inside `try_recv`: the
    // loop above reconnects, with backoff, on a listener of its own.
    listener.eager_reconnect(false);
    listener.listen(channel).await?;
    Ok(listener)
}
