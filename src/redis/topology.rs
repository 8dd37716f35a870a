//! The topology seam (see [`super`]): what the pool's members are (`[redis] mode`), how they
//! are found at start, what follows them, and what a won lock needs of them before its slot
//! runs (`WAIT`, where a primary has replicas).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::task::TaskTracker;

use super::layout::{Layout, Topology};
use super::node::Node;
use super::node_url::{FIRST_CONNECTION_WAIT, NodeSetupError, NodeUrl};
use super::pool::{Current, Health, Member, Nodes};
use super::replication::{self, Replication};
use super::sentinel::{self, NoPrimary, Sentinels};

/// Why the pool could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// A URL's client could not be prepared.
    #[error(transparent)]
    Setup(#[from] NodeSetupError),
    /// Sentinel mode: no sentinel named a primary that is one.
    #[error(transparent)]
    NoPrimary(#[from] NoPrimary),
}

impl Nodes {
    /// The pool of `urls` laid out as `topology`: in redlock mode a member per node; in cluster
    /// mode one member for the whole cluster, `urls` its seeds; in sentinel mode one member, the
    /// primary, found before this returns (an error when no sentinel names one), then followed.
    pub async fn open(
        urls: &[NodeUrl],
        node_timeout: Duration,
        ca: Option<&[u8]>,
        topology: &Topology,
        replica: &str,
    ) -> Result<Self, OpenError> {
        match topology {
            Topology::Redlock => Ok(Self::connect(urls, node_timeout, ca, replica)?),
            Topology::Cluster { wait_replicas } => {
                let cluster = Node::cluster(urls, node_timeout, ca)?;
                let layout = Layout::Cluster {
                    wait_replicas: *wait_replicas,
                };
                Ok(Self::of(vec![cluster], layout, replica))
            }
            Topology::Sentinel {
                master,
                auth,
                wait_replicas,
            } => {
                let sentinels = Sentinels::new(urls, master, auth, node_timeout, ca, replica)?;
                Ok(Self::follow(sentinels, *wait_replicas, replica).await?)
            }
        }
    }

    /// One member, the primary `sentinels` name now, followed from then on.
    async fn follow(
        sentinels: Sentinels,
        wait_replicas: u32,
        replica: &str,
    ) -> Result<Self, NoPrimary> {
        let primary = sentinels.resolve(None, FIRST_CONNECTION_WAIT).await?;
        let (sentinels, trouble) = (Arc::new(sentinels), Arc::new(Notify::new()));
        let name = format!("sentinel master {}", sentinels.master());
        let member = Member {
            health: Health::new(&name, &Arc::from(replica), Some(trouble.clone())),
            node: Current::new(primary),
        };
        let follower = sentinel::follow(
            sentinels.clone(),
            member.node.clone(),
            trouble,
            replica.into(),
        );
        Ok(Nodes {
            members: vec![member],
            layout: Layout::Sentinel {
                master: sentinels.master().to_owned(),
                follower,
                wait_replicas,
            },
            stragglers: TaskTracker::new(),
        })
    }

    /// The mode, and what it rests on now: the nodes' count (redlock), the monitored name and
    /// the primary followed (sentinel), or the seeds (cluster; its shards: [`Node::shards`]).
    /// For the start line and `/readyz`.
    pub fn describe(&self) -> String {
        match &self.layout {
            Layout::Redlock => format!("redlock over {} node(s)", self.len()),
            Layout::Cluster { .. } => format!(
                "one member over a Redis Cluster: {}",
                self.members[0].node.get().address()
            ),
            Layout::Sentinel { master, .. } => format!(
                "sentinel master {:?}, primary {}",
                master,
                self.members[0].node.get().address()
            ),
        }
    }

    /// Waits until the replicas of the primary holding `key` have every write made before
    /// (the winner's lock), bounded: `WAIT wait_replicas` (see [`super::replication`]).
    /// `None` in redlock mode: each node is an independent primary, and the majority itself
    /// keeps a lock through the loss of a node's key; and with `wait_replicas = 0`. In cluster
    /// mode the `WAIT` goes to the primary of `key`'s shard.
    pub async fn replicated(&self, key: &str, ttl: Duration) -> Option<Replication> {
        let wanted = match &self.layout {
            Layout::Redlock => return None,
            Layout::Sentinel { wait_replicas, .. } | Layout::Cluster { wait_replicas } => {
                *wait_replicas
            }
        };
        if wanted == 0 {
            return None;
        }
        let node = self.members[0].node.get();
        Some(replication::wait(&node, key, ttl, wanted).await)
    }
}
