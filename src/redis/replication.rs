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
//!
//! In cluster mode redis-rs would send a bare `WAIT` to every primary and keep the smallest
//! count (its routing table says so), which is not the lock's shard's answer: the mark and the
//! `WAIT` go as one pipeline routed by the mark's hash slot to that slot's primary
//! (`route_pipeline`), on one of the cluster member's connections kept for `WAIT`s
//! (`conn::Waits`), so a `WAIT` blocked for its whole timeout holds up no race.

use std::time::Duration;

use redis::cluster_routing::{Route, SingleNodeRoutingInfo, SlotAddr};

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

/// `SET {key}:wait` then `WAIT wanted`, bounded: on a new connection to `node`, or on a
/// cluster's connection for `WAIT`s, routed to the primary of the mark's hash slot.
pub(super) async fn wait(node: &Node, key: &str, ttl: Duration, wanted: u32) -> Replication {
    let mark = format!("{key}:wait");
    let mut pipe = redis::pipe();
    let ttl_ms = ttl.max(Duration::from_secs(1)).as_millis() as u64;
    pipe.cmd("SET").arg(&mark).arg(1).arg("PX").arg(ttl_ms);
    pipe.cmd("WAIT")
        .arg(wanted)
        .arg(WAIT_TIMEOUT.as_millis() as u64);
    let asked = async {
        let replies = match node.waits.as_ref().map(|waits| waits.next()) {
            Some(mut cluster) => {
                let primary = Route::with_key(&mark, SlotAddr::Master);
                let route = SingleNodeRoutingInfo::SpecificNode(primary);
                cluster.route_pipeline(pipe, 0, 2, route).await?
            }
            None => {
                let mut conn = node.clients[0].get_multiplexed_async_connection().await?;
                pipe.query_async::<Vec<redis::Value>>(&mut conn).await?
            }
        };
        let acked = replies.last().ok_or_else(|| no_reply("WAIT"))?;
        Ok::<_, redis::RedisError>(redis::from_redis_value_ref::<u32>(acked)?)
    };
    let bound = WAIT_TIMEOUT + node.timeout() + super::node_url::FIRST_CONNECTION_WAIT;
    let acked = match node.bounded_by(bound, asked).await {
        Ok(acked) => acked,
        Err(kind) => {
            let error = node.error(kind);
            tracing::debug!(error = %error, "WAIT not answered: counted as no replica");
            0
        }
    };
    Replication { acked, wanted }
}

/// The error for a pipeline that came back without `command`'s reply.
fn no_reply(command: &str) -> redis::RedisError {
    let what = format!("the pipeline came back without {command}'s reply");
    redis::RedisError::from((redis::ErrorKind::Client, "missing reply", what))
}
