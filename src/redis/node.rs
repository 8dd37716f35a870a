//! One Redis node: a single multiplexed connection, opened once and reused, with TCP_NODELAY,
//! that reconnects in the background. Every call is bounded by the wait its caller gives; the
//! pool ([`super::Nodes`]) fans calls out to the nodes and keeps their health.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use redis::{ErrorKind, ServerErrorKind};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use super::conn::{Conn, Waits};
use super::connector::{Dial, Dialed};
use super::node_url::{CONNECT_TIMEOUT, NodeSetupError, NodeUrl, client};

/// Retries of a failed (re)connection attempt: none. A failed attempt fails the calls waiting on
/// it at once, and the call that sees the failure starts a new attempt in the background, which
/// the next call uses (a node that comes back is used again within a call or two). With retries
/// (a backoff loop until the node is back), every call
/// to a node that is down (connection refused) would wait for the retry loop, i.e. cost the full
/// node timeout: the slot lock, the running lease, the history write and the release each, which
/// with a job every second made a run outlast its second and the next slot skip as overlapping.
const CONNECT_RETRIES: usize = 0;

/// Why one node did not answer a request as asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeError {
    /// The node, as `host:port`.
    pub node: String,
    /// What went wrong.
    pub kind: NodeErrorKind,
}

impl NodeError {
    /// Whether the server refused a write as a replica (`READONLY`): the primary is not one
    /// (anymore), so the pool asks what follows the member to look again.
    pub fn is_read_only(&self) -> bool {
        matches!(self.kind, NodeErrorKind::ReadOnly(_))
    }

    /// Whether the node itself answered (an error reply, a value of the wrong type): it is up,
    /// only this request failed. A timeout or a broken connection says nothing came back.
    pub fn node_answered(&self) -> bool {
        match self.kind {
            NodeErrorKind::Reply(_) | NodeErrorKind::ReadOnly(_) | NodeErrorKind::Unexpected(_) => {
                true
            }
            NodeErrorKind::Timeout(_) | NodeErrorKind::Down(_) | NodeErrorKind::Suspect => false,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
/// What went wrong with one request to a node.
pub enum NodeErrorKind {
    /// No answer within the caller's wait (down, hung, or slow).
    Timeout(Duration),
    /// No usable answer: the connection failed (refused, dropped), the bytes that came back
    /// are not Redis, or the node says it cannot serve yet (loading its data).
    Down(String),
    /// Not waited for: an earlier request to the node timed out or failed and it has not
    /// answered since (see [`super::pool`]).
    Suspect,
    /// Redis answered this request with an error reply (a wrong type, a script error).
    Reply(String),
    /// Redis refused a write because this server is a replica (`READONLY`, redis-rs's
    /// `ServerErrorKind::ReadOnly`): in sentinel mode, the primary was demoted.
    ReadOnly(String),
    /// Redis answered something that is not a lock answer (a wrong type on the key).
    Unexpected(String),
}

impl NodeErrorKind {
    /// Sorts a redis-rs error: an error reply from a node that serves, or no usable answer.
    pub(super) fn of(e: &redis::RedisError) -> Self {
        if e.kind() == ErrorKind::Server(ServerErrorKind::ReadOnly) {
            return NodeErrorKind::ReadOnly(e.to_string());
        }
        let serving_reply = matches!(e.kind(), ErrorKind::Server(_) | ErrorKind::Extension)
            && e.kind() != ErrorKind::Server(ServerErrorKind::BusyLoading);
        if serving_reply {
            NodeErrorKind::Reply(e.to_string())
        } else {
            NodeErrorKind::Down(e.to_string())
        }
    }
}

impl fmt::Display for NodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            NodeErrorKind::Timeout(t) => {
                write!(f, "{}: no answer within {} ms", self.node, t.as_millis())
            }
            NodeErrorKind::Down(e) | NodeErrorKind::Reply(e) | NodeErrorKind::ReadOnly(e) => {
                write!(f, "{}: {e}", self.node)
            }
            NodeErrorKind::Suspect => write!(
                f,
                "{}: suspect (no answer since a timeout or failure), not waited for",
                self.node
            ),
            NodeErrorKind::Unexpected(e) => write!(f, "{}: unexpected answer: {e}", self.node),
        }
    }
}

/// One Redis node. Its health is not here: the pool keeps one view of it for every call.
pub struct Node {
    address: String,
    /// Kept for the connections the multiplexed one cannot carry (pub/sub for handoffs): the
    /// node's own, or one per seed of a cluster; none for a dialed node (its `conn` dials them).
    pub(super) clients: Vec<redis::Client>,
    /// Cloned per request: the multiplexed connection the scripts (`super::scripts`) use too.
    pub(super) conn: Conn,
    /// A cluster's connections for `WAIT` alone (see [`super::replication`]): a `WAIT` blocks
    /// its connection, and on `conn` it would hold up every race on the shard.
    pub(super) waits: Option<Waits>,
    /// The race's bound on one answer (`node_timeout`).
    timeout: Duration,
    /// Set once the node refuses `SET … NX GET` (Redis < 7.0): the lock's acquire takes the
    /// Lua form from then on ([`super::scripts`]). What this server understands is the node's.
    pub(super) no_set_get: AtomicBool,
}

impl fmt::Debug for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Node")
            .field("address", &self.address)
            .finish()
    }
}

impl Node {
    /// Prepares the node's connection; it is opened lazily and reopened in the background.
    pub fn new(
        url: &NodeUrl,
        timeout: Duration,
        ca_file: Option<&[u8]>,
    ) -> Result<Self, NodeSetupError> {
        let client = client(url, ca_file)?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_number_of_retries(CONNECT_RETRIES);
        let conn =
            ConnectionManager::new_lazy_with_config(client.clone(), config).map_err(|source| {
                NodeSetupError {
                    url: url.clone(),
                    source,
                }
            })?;
        Ok(Node::over(
            url.address(),
            vec![client],
            Conn::Single(conn),
            timeout,
        ))
    }

    /// The node at `url` over streams `dialer` opens (the simulation's seam, see
    /// [`super::connector`]): the same node, pool and health rule above it.
    pub fn dialed(url: &NodeUrl, timeout: Duration, dialer: Arc<dyn Dial>) -> Self {
        let conn = Conn::Dialed(Dialed::new(dialer, &url.address()));
        Node::over(url.address(), Vec::new(), conn, timeout)
    }

    /// A node named `address` that talks through `conn` and subscribes through `clients`.
    pub(super) fn over(
        address: String,
        clients: Vec<redis::Client>,
        conn: Conn,
        timeout: Duration,
    ) -> Self {
        Node {
            address,
            clients,
            conn,
            waits: None,
            timeout,
            no_set_get: AtomicBool::new(false),
        }
    }

    /// The node's `host:port`.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// A dedicated connection subscribed to `channel`, opened within `wait`.
    pub async fn subscribe(
        &self,
        channel: &str,
        wait: Duration,
    ) -> Result<redis::aio::PubSub, NodeError> {
        self.subscribe_via(0, channel, wait).await
    }

    /// Where this node can be subscribed on: one for a node, each seed for a cluster (a
    /// subscriber on any node of a cluster hears every `PUBLISH`).
    pub fn subscription_points(&self) -> usize {
        match self.conn {
            Conn::Dialed(_) => 1,
            _ => self.clients.len(),
        }
    }

    /// [`Self::subscribe`] on subscription point `point` (see [`Self::subscription_points`]).
    pub async fn subscribe_via(
        &self,
        point: usize,
        channel: &str,
        wait: Duration,
    ) -> Result<redis::aio::PubSub, NodeError> {
        let open = async {
            let mut pubsub = match &self.conn {
                Conn::Dialed(dialed) => dialed.pubsub().await?,
                _ => self.clients[point].get_async_pubsub().await?,
            };
            pubsub.subscribe(channel).await?;
            Ok::<_, redis::RedisError>(pubsub)
        };
        match tokio::time::timeout(wait, open).await {
            Ok(Ok(pubsub)) => Ok(pubsub),
            Ok(Err(e)) => Err(self.error(NodeErrorKind::Down(e.to_string()))),
            Err(_) => Err(self.error(NodeErrorKind::Timeout(wait))),
        }
    }

    /// The race's bound on one answer (`node_timeout`).
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// PING with the node timeout. A test entry point (tests/it/redlock.rs opens a node's
    /// connection with it); start-up uses [`Node::ping_within`]. Hidden from the docs.
    #[doc(hidden)]
    pub async fn ping(&self) -> Result<(), NodeError> {
        let mut conn = self.conn.clone();
        self.bounded(redis::cmd("PING").query_async::<String>(&mut conn))
            .await
            .map(drop)
            .map_err(|kind| self.error(kind))
    }

    /// PING bounded by `wait` rather than the race timeout (the first connection takes longer).
    pub async fn ping_within(&self, wait: Duration) -> Result<(), NodeError> {
        self.query::<String>(&redis::cmd("PING"), wait)
            .await
            .map(drop)
    }

    /// Any command, bounded by `wait` (history, budget and clock calls).
    pub async fn query<T: redis::FromRedisValue>(
        &self,
        cmd: &redis::Cmd,
        wait: Duration,
    ) -> Result<T, NodeError> {
        let mut conn = self.conn.clone();
        self.bounded_by(wait, cmd.query_async::<T>(&mut conn))
            .await
            .map_err(|kind| self.error(kind))
    }

    /// A pipeline, bounded by `wait` (the membership heartbeat).
    pub async fn query_pipe<T: redis::FromRedisValue>(
        &self,
        pipe: &redis::Pipeline,
        wait: Duration,
    ) -> Result<T, NodeError> {
        let mut conn = self.conn.clone();
        self.bounded_by(wait, pipe.query_async::<T>(&mut conn))
            .await
            .map_err(|kind| self.error(kind))
    }

    pub(super) async fn bounded<T>(
        &self,
        fut: impl std::future::Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, NodeErrorKind> {
        self.bounded_by(self.timeout, fut).await
    }

    pub(super) async fn bounded_by<T>(
        &self,
        wait: Duration,
        fut: impl std::future::Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, NodeErrorKind> {
        match tokio::time::timeout(wait, fut).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => Err(NodeErrorKind::of(&e)),
            Err(_) => Err(NodeErrorKind::Timeout(wait)),
        }
    }

    pub(super) fn error(&self, kind: NodeErrorKind) -> NodeError {
        NodeError {
            node: self.address.clone(),
            kind,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kind a reply's bytes on the wire get: redis-rs's own parser, as a node reads them.
    fn kind_of(wire: &[u8]) -> NodeErrorKind {
        let Ok(redis::Value::ServerError(reply)) = redis::parse_redis_value(wire) else {
            panic!("not an error reply: {wire:?}");
        };
        NodeErrorKind::of(&redis::RedisError::from(reply))
    }

    #[test]
    fn a_readonly_reply_is_told_from_other_replies_by_its_typed_kind() {
        let refused = kind_of(b"-READONLY You can't write against a read only replica.\r\n");
        assert!(matches!(refused, NodeErrorKind::ReadOnly(_)), "{refused:?}");
        // Redis 7 passes a script's refused write on with its own code.
        let in_script = kind_of(
            b"-READONLY You can't write against a read only replica. script: 4a2, on @user_script:4.\r\n",
        );
        assert!(
            matches!(in_script, NodeErrorKind::ReadOnly(_)),
            "{in_script:?}"
        );
        let other =
            kind_of(b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n");
        assert!(matches!(other, NodeErrorKind::Reply(_)), "{other:?}");
        let error = |kind| NodeError {
            node: "n:1".into(),
            kind,
        };
        let refused = error(refused);
        assert!(refused.is_read_only() && refused.node_answered());
        assert!(!error(other).is_read_only());
    }
}
