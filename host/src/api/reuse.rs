//! A database read that many requests share: made at most once per period on this host, with
//! concurrent requests waiting for the one read under way instead of each making their own.
//! `GET /stats` and `GET /metrics` share the backlog this way, `GET /health` its counts.

use chrono::{DateTime, Utc};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::store::StoreError;

/// An answer, when it was read (monotonic and wall clock).
type Answer<T> = (Instant, DateTime<Utc>, Arc<T>);

/// The last answer of a read, reused for `period`.
pub struct Reused<T> {
    period: Duration,
    /// When it was read (monotonic and wall clock) and what it said.
    last: tokio::sync::Mutex<Option<Answer<T>>>,
}

impl<T> Reused<T> {
    pub fn new(period: Duration) -> Self {
        Reused {
            period,
            last: tokio::sync::Mutex::new(None),
        }
    }

    /// The answer (at most `period` old) and when it was read; `read` is given the read time.
    pub async fn get<F, Fut>(&self, read: F) -> Result<(DateTime<Utc>, Arc<T>), StoreError>
    where
        F: FnOnce(DateTime<Utc>) -> Fut,
        Fut: Future<Output = Result<T, StoreError>>,
    {
        let mut last = self.last.lock().await;
        if let Some((read_at, at, value)) = last.as_ref()
            && read_at.elapsed() < self.period
        {
            return Ok((*at, value.clone()));
        }
        let at = Utc::now();
        let value = Arc::new(read(at).await?);
        *last = Some((Instant::now(), at, value.clone()));
        Ok((at, value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[tokio::test]
    async fn concurrent_and_repeated_requests_share_one_read_per_period() {
        let reused = Reused::new(Duration::from_millis(200));
        let reads = AtomicU32::new(0);
        let read = |_| async {
            reads.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(20)).await;
            Ok(7)
        };
        let (a, b) = tokio::join!(reused.get(read), reused.get(read));
        assert_eq!((*a.unwrap().1, *b.unwrap().1), (7, 7));
        assert_eq!(reads.load(Ordering::SeqCst), 1);
        tokio::time::sleep(Duration::from_millis(250)).await;
        reused.get(read).await.unwrap();
        assert_eq!(
            reads.load(Ordering::SeqCst),
            2,
            "read again after the period"
        );
    }

    #[tokio::test]
    async fn a_failed_read_is_not_kept() {
        let reused: Reused<u32> = Reused::new(Duration::from_secs(60));
        let failed = reused
            .get(|_| async { Err(StoreError::Unavailable("away".into())) })
            .await;
        assert!(failed.is_err());
        assert_eq!(*reused.get(|_| async { Ok(1) }).await.unwrap().1, 1);
    }
}
