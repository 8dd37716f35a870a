//! The topology seam (see [`super`]): what the pool's members are (`[redis] mode`), how they
//! are found at start, what follows them, and what a won lock needs of them before its slot
//! runs (`WAIT`, where a primary has replicas).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::task::TaskTracker;

use super::node::{NodeSetupError, NodeUrl};
use super::pool::{Current, Health, Member, Nodes};
use super::replication::{self, Replication};
use super::sentinel::{self, Follower, NoPrimary, PrimaryAuth, Sentinels};

/// What the configured URLs are (`[redis] mode`, as the configuration checked it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Topology {
    /// Independent primaries: each a member, a majority decides.
    Redlock,
    /// Sentinels of the primary monitored as `master`: the primary is the one member.
    Sentinel {
        /// The monitored name.
        master: String,
        /// The primary's credentials, when not the sentinels'.
        auth: PrimaryAuth,
        /// Replicas that must acknowledge a won lock (`WAIT`).
        wait_replicas: u32,
    },
    /// Seeds of a Redis Cluster (issue 25's other part builds it: `super::cluster`).
    Cluster,
}

/// What the pool keeps of its topology once open.
#[derive(Debug)]
pub(super) enum Layout {
    /// Independent primaries.
    Redlock,
    /// One member, the primary the sentinels name, followed across failovers.
    Sentinel {
        /// Named by [`Nodes::describe`].
        sentinels: Arc<Sentinels>,
        /// Kept to be stopped at shutdown (and dropped with the pool).
        follower: Follower,
        /// `WAIT`'s count ([`Nodes::replicated`]).
        wait_replicas: u32,
    },
}

impl Layout {
    /// Stops what follows the members (at shutdown), waiting for it.
    pub(super) async fn stop(&self) {
        if let Layout::Sentinel { follower, .. } = self {
            follower.stop().await;
        }
    }
}

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
    /// The pool of `urls` laid out as `topology`. In sentinel mode the primary is found before
    /// this returns (an error when no sentinel names one), then followed.
    pub async fn open(
        urls: &[NodeUrl],
        node_timeout: Duration,
        ca: Option<&[u8]>,
        topology: &Topology,
        replica: &str,
    ) -> Result<Self, OpenError> {
        match topology {
            // Cluster mode: `super::cluster` (issue 25's other part); seeds as nodes until then.
            Topology::Redlock | Topology::Cluster => {
                Ok(Self::connect(urls, node_timeout, ca, replica)?)
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
        let primary = sentinels.resolve(None, sentinel::RESOLVE_WAIT).await?;
        let (sentinels, trouble) = (Arc::new(sentinels), Arc::new(Notify::new()));
        let name = format!("sentinel master {}", sentinels.master());
        let member = Member {
            health: Health::new(&name, &Arc::from(replica), Some(trouble.clone())),
            node: Current::new(primary),
        };
        let follower = Follower::start(
            sentinels.clone(),
            member.node.clone(),
            trouble,
            replica.into(),
        );
        Ok(Nodes {
            members: vec![member],
            layout: Layout::Sentinel {
                sentinels,
                follower,
                wait_replicas,
            },
            stragglers: TaskTracker::new(),
        })
    }

    /// The mode, and what it rests on now: the nodes' count (redlock), or the monitored name
    /// and the primary followed (sentinel). For `/readyz`.
    pub fn describe(&self) -> String {
        match &self.layout {
            Layout::Redlock => format!("redlock over {} node(s)", self.len()),
            Layout::Sentinel { sentinels, .. } => format!(
                "sentinel master {:?}, primary {}",
                sentinels.master(),
                self.members[0].node.get().address()
            ),
        }
    }

    /// Waits until the replicas of the primary holding `key` have every write made before
    /// (the winner's lock), bounded: `WAIT wait_replicas` (see [`super::replication`]).
    /// `None` in redlock mode: each node is an independent primary, and the majority itself
    /// keeps a lock through the loss of a node's key; and with `wait_replicas = 0`.
    pub async fn replicated(&self, key: &str, ttl: Duration) -> Option<Replication> {
        match &self.layout {
            Layout::Redlock
            | Layout::Sentinel {
                wait_replicas: 0, ..
            } => None,
            Layout::Sentinel { wait_replicas, .. } => {
                let node = self.members[0].node.get();
                Some(replication::wait(&node, key, ttl, *wait_replicas).await)
            }
        }
    }
}
