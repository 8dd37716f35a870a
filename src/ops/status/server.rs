//! The status endpoints' HTTP server: an accept loop over hyper rather than `axum::serve`, for
//! the bounds a client must not be able to lift. A connection that sends half a request head,
//! or pipelines requests and never reads the answers, would otherwise live for ever, and
//! `axum::serve`'s graceful shutdown waits for every connection: one such client held a
//! SIGTERMed replica open for 40-70 s, until Kubernetes killed it (issue 29, case 5).
//!
//! So a request head must arrive within [`HEADER_READ_TIMEOUT`], a write must make progress
//! within [`WRITE_STALL_TIMEOUT`], and at shutdown the server gives the requests in flight
//! [`HTTP_GRACE`], its own grace apart from the slots' drain, then drops what is left.
//!
//! And the server answers at most [`ANSWERS_PER_SECOND`], all clients together: a request
//! beyond waits for its turn, so a flood of even the cheapest request (a cached page, a
//! `/healthz`) costs the replica a bounded share of a core, not all of one (case 4).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Request, State};
use axum::middleware::{Next, from_fn_with_state};
use axum::response::Response;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio::time::{Instant, Sleep};
use tokio_util::sync::CancellationToken;

/// How long a client may take to send a whole request head (the first, or the next on a
/// kept-alive connection). A probe or a browser sends one in a packet; seconds is a stall.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a write to a client may make no progress: a reader that stopped reading (its
/// window full) is dropped, not waited for.
pub const WRITE_STALL_TIMEOUT: Duration = Duration::from_secs(5);
/// The server's own grace at shutdown: the requests in flight get this long to finish (every
/// answer is served from memory or bounded reads, well under it), then their connections are
/// dropped. Apart from the slots' drain, which waits for running actions.
pub const HTTP_GRACE: Duration = Duration::from_secs(2);
/// Connections served at once; past it the next waits in the listen backlog until one ends,
/// so clients cannot grow the replica's tasks and memory without bound.
pub const MAX_CONNECTIONS: usize = 256;
/// Answers per second, all clients together: a browser, a probe and a scraper need a handful;
/// at this rate the answers cost a few percent of a core, and a probe queued behind one
/// request of each of [`MAX_CONNECTIONS`] clients waits half a second, within a kubelet's
/// default 1 s timeout.
pub const ANSWERS_PER_SECOND: u32 = 500;
/// Pause after a failed `accept` (out of file descriptors): retrying at once would spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Serves `app` on `listener` until `shutdown`, then drains for at most [`HTTP_GRACE`].
pub async fn serve(listener: TcpListener, app: Router, shutdown: CancellationToken) {
    let app = app.layer(from_fn_with_state(Arc::new(Pace::default()), paced));
    let graceful = GracefulShutdown::new();
    // A JoinSet, not detached tasks: dropping it at the end aborts the connections the grace
    // did not see out, so none outlives the replica.
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            biased;
            () = shutdown.cancelled() => break,
            accepted = listener.accept(), if connections.len() < MAX_CONNECTIONS => match accepted {
                Ok((stream, _)) => {
                    let connection = graceful.watch(connection(stream, app.clone()));
                    connections.spawn(connection);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "the status server cannot accept a connection");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(listener);
    drain(graceful, connections).await;
}

/// Asks every connection to finish its request and close, for at most [`HTTP_GRACE`]; then
/// drops those still open (a client that neither sends nor reads).
async fn drain(graceful: GracefulShutdown, mut connections: JoinSet<ClosedConnection>) {
    if tokio::time::timeout(HTTP_GRACE, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            connections = connections.len(),
            grace_ms = HTTP_GRACE.as_millis() as u64,
            "status server: connections still open after its grace at shutdown, dropped"
        );
    }
    connections.shutdown().await;
}

/// Each request waits for its turn at [`ANSWERS_PER_SECOND`].
async fn paced(State(pace): State<Arc<Pace>>, request: Request, next: Next) -> Response {
    pace.turn().await;
    next.run(request).await
}

/// The turns of the server's answers, one per `1 / ANSWERS_PER_SECOND`.
#[derive(Debug)]
struct Pace {
    /// The next free turn. A std mutex: held to take a turn, never across an await.
    next: Mutex<Instant>,
}

impl Default for Pace {
    fn default() -> Self {
        Pace {
            next: Mutex::new(Instant::now()),
        }
    }
}

impl Pace {
    /// Waits for this request's turn: at once while the server is under its rate.
    async fn turn(&self) {
        let period = Duration::from_secs(1) / ANSWERS_PER_SECOND;
        let at = {
            let mut next = self.next.lock().unwrap_or_else(|p| p.into_inner());
            let at = (*next).max(Instant::now());
            *next = at + period;
            at
        };
        tokio::time::sleep_until(at).await;
    }
}

/// How one connection ended (its error is only the client's misbehaviour: not logged).
type ClosedConnection = Result<(), hyper::Error>;

/// One HTTP/1.1 connection with the header-read and write-stall bounds.
fn connection(
    stream: TcpStream,
    app: Router,
) -> http1::Connection<TokioIo<WriteDeadline>, TowerToHyperService<Router>> {
    http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .serve_connection(
            TokioIo::new(WriteDeadline::new(stream)),
            TowerToHyperService::new(app),
        )
}

/// A stream whose writes fail with `TimedOut` once one has made no progress for
/// [`WRITE_STALL_TIMEOUT`]: hyper has no write timeout of its own.
struct WriteDeadline {
    stream: TcpStream,
    /// Armed when a write first finds the socket full; disarmed by any progress.
    stall: Pin<Box<Sleep>>,
    armed: bool,
}

impl WriteDeadline {
    fn new(stream: TcpStream) -> Self {
        WriteDeadline {
            stream,
            stall: Box::pin(tokio::time::sleep(WRITE_STALL_TIMEOUT)),
            armed: false,
        }
    }

    /// `poll`'s answer, or `TimedOut` when it has been pending past the bound.
    fn bounded<T>(
        &mut self,
        cx: &mut Context<'_>,
        poll: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if poll.is_ready() {
            self.armed = false;
            return poll;
        }
        if !self.armed {
            self.armed = true;
            self.stall
                .as_mut()
                .reset(Instant::now() + WRITE_STALL_TIMEOUT);
        }
        match self.stall.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client read nothing for the write-stall bound",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncRead for WriteDeadline {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for WriteDeadline {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.stream).poll_write(cx, buf);
        this.bounded(cx, poll)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.stream).poll_write_vectored(cx, bufs);
        this.bounded(cx, poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.stream).poll_flush(cx);
        this.bounded(cx, poll)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.stream).poll_shutdown(cx);
        this.bounded(cx, poll)
    }
}
