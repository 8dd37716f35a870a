//! Redlock's premise, checked at start: the nodes are independent primaries. A replica refuses
//! every write (each slot would be `unavailable`), and one server listed under two names counts
//! twice in a majority (a "majority of three" that is one server plus one: the lock's safety
//! gone, silently). Both are found with commands the least-privilege ACL allows (`+@all
//! -@dangerous -@admin`, keys and channels under the key prefix), so no `INFO`, `ROLE` or
//! `CONFIG`:
//! - the role comes from `HELLO` (no arguments: the connection's protocol is kept);
//! - the same server is found by subscribing, on each node, to a channel of its own
//!   (`{prefix}:independence:{random}:{i}`) and asking every node how many subscribers each
//!   channel has (`PUBSUB NUMSUB`): pub/sub is server-wide, so a node that counts another
//!   node's subscriber is that node (whatever its name, port forward or database number).
//!   Nothing is written, so nothing is left to clean up.
//!
//! A node down at start cannot be checked then: start-up goes on without it (as it always has),
//! but it is held out of every request ([`Nodes::hold_out`]) until it is checked, which is tried
//! again every [`RECHECK`] until it answers ([`Unchecked::watch`]). An unchecked node never
//! votes, so a second name of one server coming up late cannot give a second vote even for a
//! moment. Found independent, it is let in ([`Nodes::admit`]); found wrong, it is logged as an
//! error and stays out for good: it counts as a node that is down (the majority is still one of
//! the configured count). The replica does not exit then: every replica finds it at the same
//! moment, and the whole fleet stopping is worse than one node fewer.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::layout::Topology;
use super::node::{Node, NodeError};
use super::node_url::NodeUrl;
use super::pool::{Nodes, Replies};

/// How often a node down at start is tried again, to be checked (the membership heartbeat's
/// period: a node back is let in about when the fleet would see it anyway).
pub const RECHECK: Duration = Duration::from_secs(1);

/// One way the configured nodes are not independent primaries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dependence {
    /// The node is a replica (`HELLO` says `role replica`): it refuses every write.
    Replica(NodeUrl),
    /// The node is part of a Redis Cluster (`CLUSTER INFO` answers): it serves only the keys
    /// of its own hash slots and answers `MOVED` for the others.
    ClusterNode(NodeUrl),
    /// Two entries reach the same server.
    SameServer(NodeUrl, NodeUrl),
    /// The node answered `HELLO` but took no subscription (an ACL without the key prefix's
    /// channels?): whether it is another entry's server cannot be told.
    NoSubscription(NodeUrl),
}

impl fmt::Display for Dependence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dependence::Replica(url) => write!(
                f,
                "{url} is a replica (HELLO says role replica): list the primaries only"
            ),
            Dependence::ClusterNode(url) => write!(
                f,
                "{url} is a node of a Redis Cluster (CLUSTER INFO answers): it refuses the keys \
                 of other shards (MOVED); set mode = \"cluster\" in [redis] and list seed nodes"
            ),
            Dependence::SameServer(a, b) => write!(
                f,
                "{a} and {b} are the same server (a channel subscribed on one is seen on the \
                 other): it would count twice in a majority"
            ),
            Dependence::NoSubscription(url) => write!(
                f,
                "{url} refused a subscription to a channel under the key prefix, so it cannot be \
                 checked (the ACL line needs &PREFIX:*)"
            ),
        }
    }
}

/// The configured node set is not independent: every finding, each naming its URLs.
#[derive(Debug, thiserror::Error)]
#[error("[redis] nodes are not independent primaries, as Redlock needs: {}", list(.0))]
pub struct NotIndependent(pub Vec<Dependence>);

fn list(found: &[Dependence]) -> String {
    found
        .iter()
        .map(Dependence::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// The nodes the start check could not reach (down at start), to check when each first
/// answers.
#[derive(Debug, Clone)]
pub struct Unchecked {
    urls: Arc<[NodeUrl]>,
    prefix: Arc<str>,
    wait: Duration,
    /// Their places in the pool.
    nodes: Vec<usize>,
}

/// [`check`] in redlock mode; `None` in the others, whose primaries have replicas by design
/// (and whose one logical member is not a configured URL).
pub async fn check_for(
    topology: &Topology,
    nodes: &Nodes,
    urls: &[NodeUrl],
    prefix: &str,
    wait: Duration,
) -> Result<Option<Unchecked>, NotIndependent> {
    match topology {
        Topology::Redlock => check(nodes, urls, prefix, wait).await.map(Some),
        Topology::Sentinel { .. } | Topology::Cluster { .. } => Ok(None),
    }
}

/// Checks the nodes of `nodes` (configured as `urls`, same order) that answer within `wait`,
/// not waiting for a node already suspect (start-up's ping found it down or hung: it is checked
/// later); channels are named under `prefix` (the ACL's `&prefix:*`).
pub async fn check(
    nodes: &Nodes,
    urls: &[NodeUrl],
    prefix: &str,
    wait: Duration,
) -> Result<Unchecked, NotIndependent> {
    let roles = nodes
        .ask(
            move |node| async move { role(&node, wait).await },
            Replies::settled,
        )
        .await
        .into_answers();
    let answered: Vec<bool> = roles.iter().map(|r| matches!(r, Some(Ok(_)))).collect();
    let mut found: Vec<Dependence> = (roles.iter().zip(urls))
        .filter_map(|(role, url)| role.as_ref()?.as_ref().ok()?.finding(url))
        .collect();
    let same = same_servers(nodes, &answered, prefix, wait).await;
    let unsubscribed = |i: usize| NotIndependent(vec![Dependence::NoSubscription(urls[i].clone())]);
    let same = same.map_err(unsubscribed)?;
    found.extend(same.into_iter().map(|pair| same_server(urls, pair)));
    if !found.is_empty() {
        return Err(NotIndependent(found));
    }
    let unchecked: Vec<usize> = (0..urls.len()).filter(|&i| !answered[i]).collect();
    unchecked.iter().for_each(|&i| nodes.hold_out(i));
    Ok(Unchecked {
        urls: urls.into(),
        prefix: prefix.into(),
        wait,
        nodes: unchecked,
    })
}

fn same_server(urls: &[NodeUrl], (a, b): (usize, usize)) -> Dependence {
    Dependence::SameServer(urls[a].clone(), urls[b].clone())
}

impl Unchecked {
    /// Checks each node down at start once it answers (one tracked task per node, tried every
    /// [`RECHECK`], ended by `shutdown`): admitted if independent, kept out and logged if not.
    pub fn watch(
        self,
        nodes: &Arc<Nodes>,
        replica: &str,
        tracker: &TaskTracker,
        shutdown: &CancellationToken,
    ) {
        for &i in &self.nodes {
            let (this, nodes, replica) = (self.clone(), nodes.clone(), replica.to_owned());
            let shutdown = shutdown.clone();
            tracker.spawn(async move {
                loop {
                    tokio::select! {
                        biased;
                        _ = shutdown.cancelled() => return,
                        _ = tokio::time::sleep(RECHECK) => {}
                    }
                    if this.check_late(&nodes, i, &replica).await.is_some() {
                        return;
                    }
                }
            });
        }
    }

    /// Checks node `i` against the others; `None` while it does not answer.
    async fn check_late(&self, nodes: &Nodes, i: usize, replica: &str) -> Option<()> {
        let node = nodes.iter().nth(i).expect("a node of the pool");
        let role = role(&node, self.wait).await.ok()?;
        let url = &self.urls[i];
        let mut found: Vec<Dependence> = role.finding(url).into_iter().collect();
        let subscribe_on: Vec<bool> = (0..nodes.len()).map(|j| j == i).collect();
        let same = same_servers(nodes, &subscribe_on, &self.prefix, self.wait).await;
        let same = same.ok()?;
        found.extend(same.into_iter().map(|pair| same_server(&self.urls, pair)));
        if found.is_empty() {
            nodes.admit(i);
            tracing::info!(replica = %replica, node = %url.address(),
                "redis node down at start answers: an independent primary, let in");
        } else {
            tracing::error!(replica = %replica, node = %url.address(), error = %NotIndependent(found),
                "redis node down at start answers but is not an independent primary: kept out (counted as down)");
        }
        Some(())
    }
}

/// What a node says it is: its role, and whether it is part of a cluster.
#[derive(Debug)]
struct Role {
    /// From `HELLO`: `master`/`primary` or `replica`/`slave`, lowercase.
    role: String,
    /// `CLUSTER INFO` answered (a node without cluster support refuses it).
    cluster: bool,
}

impl Role {
    /// Why a node in this role cannot be one of Redlock's independent primaries, if it cannot.
    fn finding(&self, url: &NodeUrl) -> Option<Dependence> {
        if self.cluster {
            Some(Dependence::ClusterNode(url.clone()))
        } else if !is_primary(&self.role) {
            Some(Dependence::Replica(url.clone()))
        } else {
            None
        }
    }
}

/// The node's role, from `HELLO`'s reply, and whether it is a cluster node (`CLUSTER INFO` is
/// in neither `@admin` nor `@dangerous`, so the least-privilege ACL allows it).
async fn role(node: &Node, wait: Duration) -> Result<Role, NodeError> {
    let role = hello_role(node, wait).await?;
    let mut info = redis::cmd("CLUSTER");
    info.arg("INFO");
    let cluster = node.query::<redis::Value>(&info, wait).await.is_ok();
    Ok(Role { role, cluster })
}

/// Whether a `HELLO` role is a primary's.
pub(super) fn is_primary(role: &str) -> bool {
    role == "master" || role == "primary"
}

/// The node's role, from `HELLO`'s reply (`master`/`primary` or `replica`/`slave`), lowercase.
pub(super) async fn hello_role(node: &Node, wait: Duration) -> Result<String, NodeError> {
    let mut hello: HashMap<String, redis::Value> = node.query(&redis::cmd("HELLO"), wait).await?;
    let role = hello.remove("role").map(redis::from_redis_value::<String>);
    let Some(Ok(role)) = role else {
        return Err(node.error(super::NodeErrorKind::Unexpected(
            "HELLO's reply has no role".into(),
        )));
    };
    Ok(role.to_lowercase())
}

/// The pairs `(i, j)`, `i < j`, of nodes that are one server: one of them subscribed to its
/// channel (those `subscribe_on` picks), and the other counts that channel's subscriber.
/// `Err(i)` when node `i` took no subscription (then nothing can be said about it).
async fn same_servers(
    nodes: &Nodes,
    subscribe_on: &[bool],
    prefix: &str,
    wait: Duration,
) -> Result<Vec<(usize, usize)>, usize> {
    let random: u64 = crate::seed::rng().random();
    let channels: Vec<String> = (0..nodes.len())
        .map(|i| format!("{prefix}:independence:{random:016x}:{i}"))
        .collect();
    // Held until every node has been asked: a subscription lives as long as its connection.
    let mut subscribed = Vec::new();
    for (i, node) in nodes.iter().enumerate().filter(|(i, _)| subscribe_on[*i]) {
        subscribed.push((i, node.subscribe(&channels[i], wait).await.map_err(|_| i)?));
    }
    let mut numsub = redis::cmd("PUBSUB");
    numsub.arg("NUMSUB");
    for (i, _) in &subscribed {
        numsub.arg(&channels[*i]);
    }
    let counts = nodes
        .query::<Vec<(String, i64)>>(numsub, wait, Replies::settled)
        .await;
    let owner: HashMap<&str, usize> = subscribed
        .iter()
        .map(|(i, _)| (channels[*i].as_str(), *i))
        .collect();
    let mut pairs = Vec::new();
    for (j, answer) in counts.into_answers().into_iter().enumerate() {
        for (channel, count) in answer.and_then(Result::ok).unwrap_or_default() {
            match owner.get(channel.as_str()) {
                Some(&i) if i != j && count > 0 => pairs.push((i.min(j), i.max(j))),
                _ => {}
            }
        }
    }
    pairs.sort_unstable();
    pairs.dedup();
    Ok(pairs)
}
