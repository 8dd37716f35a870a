//! The connection seam: where a node's connections come from. In production (`Tcp`) a
//! `redis::Client` opens TCP/TLS sockets and redis-rs's `ConnectionManager` reopens them; a
//! `Dial` connector hands over byte streams it opens itself (the simulation's in-memory pipes to
//! its Redis model, tests/sim/), on which the same redis-rs multiplexed connection, parser and
//! pub/sub run, so replies, errors and dropped connections reach the code exactly as from a
//! socket. Only redlock mode's independent nodes are dialed; Sentinel and Cluster keep their
//! clients (covered by the real-process tests).

use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;

use redis::aio::{ConnectionLike, MultiplexedConnection, PubSub};
use redis::{AsyncConnectionConfig, Cmd, Pipeline, RedisConnectionInfo, RedisResult, Value};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::Mutex;

use super::node_url::CONNECT_TIMEOUT;

/// A byte stream to one node: what a dialer opens.
pub trait Stream: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<S> Stream for S
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    // Nothing to add: any such byte stream carries a connection.
}

/// An opened stream, or why not (refused, unreachable).
pub type Dialing = Pin<Box<dyn Future<Output = io::Result<Box<dyn Stream>>> + Send>>;

/// Opens streams to nodes by address (`host:port` of their URL).
pub trait Dial: Send + Sync + 'static {
    /// A new stream to `address`.
    fn dial(&self, address: &str) -> Dialing;
}

/// Where a replica's node connections come from.
#[derive(Clone, Default)]
pub enum Connector {
    /// TCP (TLS for `rediss://`) through redis-rs's client: production.
    #[default]
    Tcp,
    /// Streams from a dialer (the simulation).
    Dial(Arc<dyn Dial>),
}

impl fmt::Debug for Connector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Connector::Tcp => f.write_str("Tcp"),
            Connector::Dial(_) => f.write_str("Dial"),
        }
    }
}

/// One node's dialed multiplexed connection, opened on first use and again after it broke:
/// what `ConnectionManager` does for a client, with no retries (see `CONNECT_RETRIES`: a
/// failed dial fails the calls waiting on it, the next call dials again).
#[derive(Clone)]
pub struct Dialed {
    dialer: Arc<dyn Dial>,
    address: Arc<str>,
    /// The open connection; a tokio mutex so concurrent first calls share one dial.
    current: Arc<Mutex<Option<MultiplexedConnection>>>,
}

impl Dialed {
    /// A connection to `address` through `dialer`, opened lazily.
    pub fn new(dialer: Arc<dyn Dial>, address: &str) -> Self {
        Dialed {
            dialer,
            address: Arc::from(address),
            current: Arc::default(),
        }
    }

    /// A fresh stream to the node, bounded as a client's connection attempt.
    async fn stream(&self) -> RedisResult<Box<dyn Stream>> {
        match tokio::time::timeout(CONNECT_TIMEOUT, self.dialer.dial(&self.address)).await {
            Ok(opened) => Ok(opened?),
            Err(_) => Err(io::Error::from(io::ErrorKind::TimedOut).into()),
        }
    }

    /// The open connection, or a new one.
    async fn connection(&self) -> RedisResult<MultiplexedConnection> {
        let mut current = self.current.lock().await;
        if let Some(conn) = current.as_ref() {
            return Ok(conn.clone());
        }
        let stream = self.stream().await?;
        let info = RedisConnectionInfo::default();
        let config = AsyncConnectionConfig::new();
        let (conn, driver) = MultiplexedConnection::new_with_config(&info, stream, config).await?;
        // The driver ends when the stream closes; the connection's clones fail from then on.
        tokio::spawn(driver);
        *current = Some(conn.clone());
        Ok(conn)
    }

    /// Forgets the connection after an error that broke it, so the next call dials again.
    async fn after<T>(&self, result: RedisResult<T>) -> RedisResult<T> {
        if let Err(e) = &result
            && e.is_unrecoverable_error()
        {
            self.current.lock().await.take();
        }
        result
    }

    pub(super) async fn command(&self, cmd: &Cmd) -> RedisResult<Value> {
        let mut conn = self.connection().await?;
        let result = conn.req_packed_command(cmd).await;
        self.after(result).await
    }

    pub(super) async fn commands(
        &self,
        pipeline: &Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        let mut conn = self.connection().await?;
        let result = conn.req_packed_commands(pipeline, offset, count).await;
        self.after(result).await
    }

    /// A dedicated pub/sub connection on a stream of its own.
    pub(super) async fn pubsub(&self) -> RedisResult<PubSub> {
        PubSub::new(&RedisConnectionInfo::default(), self.stream().await?).await
    }
}
