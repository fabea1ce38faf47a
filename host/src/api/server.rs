//! The HTTP server: accepts connections and serves the API on each with hyper's HTTP/1.1, with
//! deadlines, so that no client can hold the API or the host's shutdown hostage.
//!
//! `axum::serve` sets none of these: without a timer hyper waits for a request's head forever,
//! and its graceful shutdown waits for every connection, so one client sending a byte a second
//! kept a host from stopping. Here:
//!
//! - a request's head must arrive within `header_timeout`, which also closes a connection that
//!   sits idle that long between requests (hyper's `header_read_timeout`, which starts as soon
//!   as hyper waits for a head);
//! - a request body must arrive within `body_timeout` (enforced where bodies are read, see
//!   [`super::ApiJson`]), and a client that stops taking an answer for `body_timeout` loses the
//!   connection ([`StallLimit`]);
//! - at most `max_connections` connections are served at once; further ones wait in the
//!   listen queue until one closes;
//! - on shutdown, no new connection is accepted; a connection with no request being handled
//!   (idle, or still sending a head) is closed at once, and one whose request is being handled
//!   gets [`DRAIN`] to finish its answer.

use axum::Router;
use axum::body::{Body, Bytes};
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;
use tower::Service;

use crate::config::Config;

/// How long a request being handled when shutdown begins may take to finish its answer.
pub const DRAIN: Duration = Duration::from_secs(5);

/// The limits a server holds its clients to.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub header_timeout: Duration,
    pub body_timeout: Duration,
    pub max_connections: usize,
}

impl Limits {
    pub fn new(config: &Config) -> Limits {
        Limits {
            header_timeout: config.header_timeout,
            body_timeout: config.body_timeout,
            max_connections: config.max_connections,
        }
    }
}

/// The connection a request arrived on (a request extension).
#[derive(Debug, Clone, Copy)]
pub struct ConnectionInfo {
    /// The address the client connected to.
    pub local: SocketAddr,
    pub peer: SocketAddr,
}

/// Serves `app` on `listener` until `stop` resolves, then shuts down as described above.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    stop: impl Future<Output = ()>,
) {
    let open = accept_until(&listener, app, limits, stop).await;
    drop(listener);
    open.close().await;
}

/// Serves `app` on a listener the caller keeps (the host serves `/health` on it while it waits
/// for its database, then the API): stops accepting when `stop` resolves, and returns once
/// every connection it accepted has closed.
pub async fn serve_borrowed(
    listener: &TcpListener,
    app: Router,
    limits: Limits,
    stop: impl Future<Output = ()>,
) {
    accept_until(listener, app, limits, stop)
        .await
        .close()
        .await;
}

/// Connections still open when accepting stopped.
struct OpenConnections {
    stopping: watch::Sender<bool>,
    connections: JoinSet<()>,
}

impl OpenConnections {
    /// Tells every connection to finish its requests and close, and waits until they have.
    async fn close(mut self) {
        let _ = self.stopping.send(true);
        while self.connections.join_next().await.is_some() {}
    }
}

/// Accepts connections and serves `app` on each until `stop` resolves.
async fn accept_until(
    listener: &TcpListener,
    app: Router,
    limits: Limits,
    stop: impl Future<Output = ()>,
) -> OpenConnections {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let (stopping, _) = watch::channel(false);
    let mut connections = JoinSet::new();
    tokio::pin!(stop);
    loop {
        let slot = match slots.clone().try_acquire_owned() {
            Ok(slot) => slot,
            Err(_) => {
                tracing::warn!(
                    max_connections = limits.max_connections,
                    "the API is at its connection limit; new connections wait"
                );
                tokio::select! {
                    biased;
                    () = &mut stop => break,
                    slot = slots.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
                }
            }
        };
        let accepted = tokio::select! {
            biased;
            () = &mut stop => break,
            accepted = listener.accept() => accepted,
        };
        while connections.try_join_next().is_some() {}
        match accepted {
            Ok((stream, peer)) => {
                let Ok(local) = stream.local_addr() else {
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let info = ConnectionInfo { local, peer };
                connections.spawn(connection(
                    stream,
                    info,
                    app.clone(),
                    limits,
                    stopping.subscribe(),
                    slot,
                ));
            }
            Err(error) => {
                // Out of file descriptors, most likely: wait for connections to close.
                tracing::warn!("accepting an API connection failed: {error}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    OpenConnections {
        stopping,
        connections,
    }
}

/// Serves one connection until it closes, or until shutdown closes it.
async fn connection(
    stream: TcpStream,
    info: ConnectionInfo,
    app: Router,
    limits: Limits,
    mut stopping: watch::Receiver<bool>,
    _slot: OwnedSemaphorePermit,
) {
    // Requests of this connection being handled, from head received to answer sent.
    let busy = Arc::new(AtomicUsize::new(0));
    let service = hyper::service::service_fn({
        let busy = busy.clone();
        move |request: hyper::Request<Incoming>| {
            let guard = BusyGuard::enter(&busy);
            let mut request = request.map(Body::new);
            request.extensions_mut().insert(info);
            let answer = app.clone().call(request);
            async move {
                let response = answer
                    .await
                    .unwrap_or_else(|never: Infallible| match never {});
                Ok::<_, Infallible>(response.map(|body| Tracked {
                    body,
                    _guard: guard,
                }))
            }
        }
    });
    let io = TokioIo::new(StallLimit::new(stream, limits.body_timeout));
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    let connection = builder.serve_connection(io, service);
    tokio::pin!(connection);
    tokio::select! {
        result = connection.as_mut() => {
            if let Err(error) = result {
                tracing::debug!(peer = %info.peer, "API connection ended: {error}");
            }
            return;
        }
        _ = stopping.wait_for(|stop| *stop) => {}
    }
    if busy.load(Ordering::SeqCst) == 0 {
        // Idle, or still sending a head: no answer is owed.
        return;
    }
    connection.as_mut().graceful_shutdown();
    if tokio::time::timeout(DRAIN, connection).await.is_err() {
        tracing::warn!(peer = %info.peer, "closed an API connection whose answer did not finish within {DRAIN:?} of shutdown");
    }
}

/// Counts a request as being handled while it lives.
struct BusyGuard(Arc<AtomicUsize>);

impl BusyGuard {
    fn enter(busy: &Arc<AtomicUsize>) -> BusyGuard {
        busy.fetch_add(1, Ordering::SeqCst);
        BusyGuard(busy.clone())
    }
}

impl Drop for BusyGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// An answer's body that keeps its request counted as handled until it is sent (or dropped).
struct Tracked {
    body: Body,
    _guard: BusyGuard,
}

impl http_body::Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// A connection whose writes fail once the client has taken nothing for `limit`: a client
/// that stops reading an answer cannot hold the connection, or the answer's memory, forever.
struct StallLimit<S> {
    stream: S,
    limit: Duration,
    /// Set while a write waits for the client.
    stalled: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<S> StallLimit<S> {
    fn new(stream: S, limit: Duration) -> StallLimit<S> {
        StallLimit {
            stream,
            limit,
            stalled: None,
        }
    }

    /// Passes a write's outcome on, failing it once the client stalled past the limit.
    fn watch<T>(
        &mut self,
        cx: &mut Context<'_>,
        poll: Poll<std::io::Result<T>>,
    ) -> Poll<std::io::Result<T>> {
        match poll {
            Poll::Ready(result) => {
                self.stalled = None;
                Poll::Ready(result)
            }
            Poll::Pending => {
                let limit = self.limit;
                let stalled = self
                    .stalled
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
                match stalled.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "the client took nothing of the answer for the body timeout",
                    ))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for StallLimit<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for StallLimit<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.stream).poll_write(cx, buf);
        this.watch(cx, poll)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.stream).poll_write_vectored(cx, bufs);
        this.watch(cx, poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.stream).poll_flush(cx);
        this.watch(cx, poll)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.stream).poll_shutdown(cx);
        this.watch(cx, poll)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn a_client_that_stops_taking_an_answer_loses_the_connection() {
        let limit = Duration::from_millis(400);
        let (server, mut client) = tokio::io::duplex(16);
        let mut server = StallLimit::new(server, limit);
        // Taken slowly but steadily, for longer than the limit in all: no stall.
        let reader = tokio::spawn(async move {
            let mut buf = [0u8; 8];
            for _ in 0..8 {
                client.read_exact(&mut buf).await.unwrap();
                tokio::time::sleep(Duration::from_millis(150)).await;
            }
            client
        });
        server
            .write_all(&[7u8; 64])
            .await
            .expect("a slow but steady client is served");
        let _client = reader.await.unwrap();
        // Nobody reads any more: the write fails once it has waited the limit.
        let started = std::time::Instant::now();
        let error = server.write_all(&[7u8; 64]).await.unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::TimedOut);
        assert!(
            started.elapsed() >= limit && started.elapsed() < limit * 5,
            "{:?}",
            started.elapsed()
        );
    }
}
