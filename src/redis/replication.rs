//! `WAIT`: a winner's lock acknowledged by the primary's replicas before its action runs, in
//! the modes whose lock lives on one primary with replicas (sentinel, cluster). A failover
//! promotes a replica; a lock it had not received is lost with the old primary, and a racer
//! asking the new one wins the slot again. `WAIT` closes most of that window.
//!
//! `WAIT` counts the replicas that acknowledged the writes of *its own connection*. It is not
//! sent on the node's shared connection: it blocks that connection for up to its timeout (a
//! new primary has no replica yet), and every race, release and heartbeat of the replica
//! queued behind it would outlast `node_timeout`. So a connection of its own writes a mark
//! (`{key}:wait`) and waits for it: the primary's replication stream is one ordered log, and
//! the lock's write was acknowledged before the mark was sent, so a replica that has the mark
//! has the lock. The mark's key starts with the lock's, so a hash tag in it keeps both on one
//! shard (cluster mode).

use std::time::Duration;

use super::node::Node;

/// How long the winner waits for the replicas: in a healthy pair an acknowledgement takes
/// about a round trip (well under a millisecond on a LAN); with no replica attached it is
/// the whole wait, paid by each slot's winner until a replica is back.
pub const WAIT_TIMEOUT: Duration = Duration::from_millis(200);

/// How many replicas had a winner's lock before its action ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Replication {
    /// Replicas that acknowledged (0 also when the primary could not be asked).
    pub acked: u32,
    /// `[redis] wait_replicas`.
    pub wanted: u32,
}

impl Replication {
    /// Fewer replicas than wanted acknowledged: a failover now could lose the lock.
    pub fn is_short(&self) -> bool {
        self.acked < self.wanted
    }
}

/// `SET {key}:wait` then `WAIT wanted` on a new connection to `node`, bounded.
pub(super) async fn wait(node: &Node, key: &str, ttl: Duration, wanted: u32) -> Replication {
    let mut pipe = redis::pipe();
    let ttl_ms = ttl.max(Duration::from_secs(1)).as_millis() as u64;
    pipe.cmd("SET")
        .arg(format!("{key}:wait"))
        .arg(1)
        .arg("PX")
        .arg(ttl_ms)
        .ignore();
    pipe.cmd("WAIT")
        .arg(wanted)
        .arg(WAIT_TIMEOUT.as_millis() as u64);
    let asked = async {
        let mut conn = node.client.get_multiplexed_async_connection().await?;
        pipe.query_async::<(u32,)>(&mut conn).await
    };
    let bound = WAIT_TIMEOUT + node.timeout() + super::sentinel::RESOLVE_WAIT;
    let acked = match node.bounded_by(bound, asked).await {
        Ok((acked,)) => acked,
        Err(kind) => {
            let error = node.error(kind);
            tracing::debug!(error = %error, "WAIT not answered: counted as no replica");
            0
        }
    };
    Replication { acked, wanted }
}
