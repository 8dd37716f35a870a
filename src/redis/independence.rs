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

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use rand::Rng;

use super::node::{Node, NodeError, NodeUrl};
use super::pool::Nodes;

/// One way the configured nodes are not independent primaries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dependence {
    /// The node is a replica (`HELLO` says `role replica`): it refuses every write.
    Replica(NodeUrl),
    /// Two entries reach the same server.
    SameServer(NodeUrl, NodeUrl),
}

impl fmt::Display for Dependence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dependence::Replica(url) => write!(
                f,
                "{url} is a replica (HELLO says role replica): list the primaries only"
            ),
            Dependence::SameServer(a, b) => write!(
                f,
                "{a} and {b} are the same server (a channel subscribed on one is seen on the \
                 other): it would count twice in a majority"
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

/// What the check could tell: the nodes that answered were checked; the others (down at start)
/// were not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    /// Per node, in pool order: whether it answered the check.
    pub answered: Vec<bool>,
}

/// Checks the nodes of `nodes` (configured as `urls`, same order) that answer within `wait`;
/// channels are named under `prefix` (the ACL's `&prefix:*`).
pub async fn check(
    nodes: &Nodes,
    urls: &[NodeUrl],
    prefix: &str,
    wait: Duration,
) -> Result<Checked, NotIndependent> {
    let roles = nodes
        .ask(
            move |node| async move { role(&node, wait).await },
            |_| false,
        )
        .await
        .into_answers();
    let answered: Vec<bool> = roles.iter().map(|r| matches!(r, Some(Ok(_)))).collect();
    let mut found: Vec<Dependence> = roles
        .iter()
        .zip(urls)
        .filter(|(role, _)| matches!(role, Some(Ok(r)) if r != "master" && r != "primary"))
        .map(|(_, url)| Dependence::Replica(url.clone()))
        .collect();
    let same = same_servers(nodes, &answered, prefix, wait).await;
    found.extend(
        same.into_iter()
            .map(|(a, b)| Dependence::SameServer(urls[a].clone(), urls[b].clone())),
    );
    if found.is_empty() {
        Ok(Checked { answered })
    } else {
        Err(NotIndependent(found))
    }
}

/// The node's role, from `HELLO`'s reply (`master`/`primary` or `replica`/`slave`).
async fn role(node: &Node, wait: Duration) -> Result<String, NodeError> {
    let mut hello: HashMap<String, redis::Value> = node.query(&redis::cmd("HELLO"), wait).await?;
    let role = hello.remove("role").map(redis::from_redis_value::<String>);
    match role {
        Some(Ok(role)) => Ok(role.to_lowercase()),
        _ => Err(node.error(super::NodeErrorKind::Unexpected(
            "HELLO's reply has no role".into(),
        ))),
    }
}

/// The pairs `(i, j)`, `i < j`, of answering nodes that are one server: node `j` counts the
/// subscriber of the channel subscribed on node `i`.
async fn same_servers(
    nodes: &Nodes,
    answered: &[bool],
    prefix: &str,
    wait: Duration,
) -> Vec<(usize, usize)> {
    let random: u64 = rand::rng().random();
    let channels: Vec<String> = (0..nodes.len())
        .map(|i| format!("{prefix}:independence:{random:016x}:{i}"))
        .collect();
    // Held until every node has been asked: a subscription lives as long as its connection.
    let mut subscribed = Vec::new();
    for (i, node) in nodes.iter().enumerate().filter(|(i, _)| answered[*i]) {
        if let Ok(sub) = node.subscribe(&channels[i], wait).await {
            subscribed.push((i, sub));
        }
    }
    let mut numsub = redis::cmd("PUBSUB");
    numsub.arg("NUMSUB");
    for (i, _) in &subscribed {
        numsub.arg(&channels[*i]);
    }
    let counts = nodes
        .query::<Vec<(String, i64)>>(numsub, wait, |_| false)
        .await;
    let owner: HashMap<&str, usize> = subscribed
        .iter()
        .map(|(i, _)| (channels[*i].as_str(), *i))
        .collect();
    let mut pairs = Vec::new();
    for (j, answer) in counts.into_answers().into_iter().enumerate() {
        for (channel, count) in answer.and_then(Result::ok).unwrap_or_default() {
            match owner.get(channel.as_str()) {
                Some(&i) if i < j && count > 0 => pairs.push((i, j)),
                _ => {}
            }
        }
    }
    pairs
}
