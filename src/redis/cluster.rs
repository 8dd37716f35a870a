//! Cluster mode: the configured `nodes` are seeds of one Redis Cluster, reached through
//! redis-rs's cluster client, which learns the slot map from them, routes each command to the
//! shard that owns its key's hash slot, follows `MOVED`/`ASK`, and refreshes the map when a
//! primary fails and its replica takes over. To the pool it is one logical member (quorum 1):
//! a cluster already decides which node owns a key, so a majority over shards means nothing.
//!
//! Every key is under one hash tag (`{prefix}:…`, see `crate::config::RedisMode::key_prefix`),
//! so a look's `MGET` over many jobs' keys, a pipeline of acquires and a script's `KEYS` stay
//! in one slot: no `CROSSSLOT`, and no redirection once the map is known.
//!
//! Pub/sub needs nothing of the cluster client: a classic `PUBLISH` on any node reaches the
//! subscribers of every node over the cluster bus, so the member subscribes on each seed (see
//! [`super::Node::subscription_points`]): a seed dead or hung leaves the others hearing, as a
//! node does in redlock mode.

use std::sync::Arc;
use std::time::Duration;

use redis::Value;
use redis::cluster::{ClusterClientBuilder, ClusterConfig};

use super::asking::Asking;
use super::conn::{Cluster, Conn, Waits};
use super::node::Node;
use super::node_url::{CONNECT_TIMEOUT, NodeSetupError, NodeUrl, client};

/// Attempts of one request within the cluster client (its redirections, and its retries while
/// a failover moves a shard); the caller's wait bounds them anyway.
const CLUSTER_RETRIES: u32 = 6;
/// Connections kept for `WAIT`s. A `WAIT` holds its connection up to its timeout (200 ms each
/// while the shard's primary has no replica, right after a failover): on one connection a
/// replica's winners of one second would wait one after another, and a run outlast its second
/// (measured: slots skipped as overlapping). Each opens a socket to every node when first used.
const WAIT_CONNECTIONS: usize = 8;

impl Node {
    /// The one logical member of a cluster whose seeds are `seeds`: its connection is opened
    /// lazily (the first request learns the slot map), and its name is `cluster(seed, …)`.
    pub fn cluster(
        seeds: &[NodeUrl],
        timeout: Duration,
        ca_file: Option<&[u8]>,
    ) -> Result<Self, NodeSetupError> {
        let setup = |source| NodeSetupError {
            url: seeds[0].clone(),
            source,
        };
        let mut builder = ClusterClientBuilder::new(seeds.iter().map(|u| u.expose().as_str()))
            .retries(CLUSTER_RETRIES)
            .connection_timeout(CONNECT_TIMEOUT);
        if let Some(ca) = ca_file {
            builder = builder.certs(redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(ca.to_vec()),
            });
        }
        let redis_rs = builder.build().map_err(setup)?;
        let config = || ClusterConfig::new().set_connection_timeout(CONNECT_TIMEOUT);
        let conn = redis_rs.get_pending_async_connection_with_config(config());
        let clients = (seeds.iter())
            .map(|seed| client(seed, ca_file))
            .collect::<Result<Vec<_>, _>>()?;
        let names: Vec<String> = seeds.iter().map(NodeUrl::address).collect();
        let address = format!("cluster({})", names.join(", "));
        let cluster = Cluster::new(conn, Arc::new(Asking::new(&seeds[0], ca_file)));
        let mut node = Node::over(address, clients, Conn::Cluster(cluster), timeout);
        let conns = (0..WAIT_CONNECTIONS)
            .map(|_| redis_rs.get_pending_async_connection_with_config(config()))
            .collect();
        node.waits = Some(Waits::new(conns));
        Ok(node)
    }
}

/// One range of hash slots and the nodes that serve it (`CLUSTER SLOTS`), for `/readyz` and
/// the status page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shard {
    /// The first and last hash slot of the range.
    pub slots: (u16, u16),
    /// The primary, `host:port`.
    pub primary: String,
    /// Its replicas, `host:port`.
    pub replicas: Vec<String>,
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (first, last) = self.slots;
        write!(f, "slots {first}-{last}: primary {}", self.primary)?;
        match self.replicas.is_empty() {
            true => write!(f, ", no replica"),
            false => write!(f, ", replicas {}", self.replicas.join(" ")),
        }
    }
}

impl Node {
    /// The cluster's shards as the cluster says now, within `wait`; `None` for a node that is
    /// not a cluster, or no answer.
    pub async fn shards(&self, wait: Duration) -> Option<Vec<Shard>> {
        if !matches!(self.conn, Conn::Cluster(_)) {
            return None;
        }
        let mut cmd = redis::cmd("CLUSTER");
        cmd.arg("SLOTS");
        let ranges: Vec<Vec<Value>> = self.query(&cmd, wait).await.ok()?;
        let mut shards: Vec<Shard> = ranges.iter().filter_map(|r| shard(r)).collect();
        shards.sort_by_key(|s| s.slots);
        Some(shards)
    }
}

/// One `CLUSTER SLOTS` entry: first slot, last slot, then the primary and each replica as
/// `[host, port, id, …]`.
fn shard(range: &[Value]) -> Option<Shard> {
    let slot = |v: &Value| redis::from_redis_value_ref::<u16>(v).ok();
    let address = |v: &Value| {
        let node: Vec<Value> = redis::from_redis_value_ref(v).ok()?;
        let host: String = redis::from_redis_value_ref(node.first()?).ok()?;
        let port: u16 = redis::from_redis_value_ref(node.get(1)?).ok()?;
        Some(format!("{host}:{port}"))
    };
    let [first, last, primary, replicas @ ..] = range else {
        return None;
    };
    Some(Shard {
        slots: (slot(first)?, slot(last)?),
        primary: address(primary)?,
        replicas: replicas.iter().filter_map(address).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(host: &str, port: i64) -> Value {
        Value::Array(vec![
            Value::BulkString(host.as_bytes().to_vec()),
            Value::Int(port),
            Value::BulkString(b"0123abcd".to_vec()),
        ])
    }

    #[test]
    fn a_cluster_slots_entry_is_a_shard_with_its_primary_and_replicas() {
        let entry = [
            Value::Int(0),
            Value::Int(5460),
            node("10.0.0.1", 6379),
            node("10.0.0.4", 6379),
        ];
        let both = shard(&entry).unwrap();
        assert_eq!(
            both.to_string(),
            "slots 0-5460: primary 10.0.0.1:6379, replicas 10.0.0.4:6379"
        );
        let alone = shard(&entry[..3]).unwrap().to_string();
        assert_eq!(alone, "slots 0-5460: primary 10.0.0.1:6379, no replica");
        assert_eq!(shard(&entry[..2]), None);
    }
}
