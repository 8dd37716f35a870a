//! What the configured URLs are ([`Topology`], `[redis] mode` as the configuration checked it)
//! and what the pool keeps of it once open (`Layout`): plain records, below the pool that
//! holds one and the modes (`super::topology`, `super::sentinel`) that fill them in.

use std::fmt;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

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
    /// Seeds of a Redis Cluster: the whole cluster is the one member ([`super::cluster`]).
    Cluster {
        /// Replicas of the lock key's shard primary that must acknowledge a won lock (`WAIT`).
        wait_replicas: u32,
    },
}

/// What the pool keeps of its topology once open.
#[derive(Debug)]
pub(super) enum Layout {
    /// Independent primaries.
    Redlock,
    /// One member, the primary the sentinels name, followed across failovers.
    Sentinel {
        /// The monitored name, for [`super::Nodes::describe`].
        master: String,
        /// Kept to be stopped at shutdown (and dropped with the pool).
        follower: Follower,
        /// `WAIT`'s count ([`super::Nodes::replicated`]).
        wait_replicas: u32,
    },
    /// One member, a whole Redis Cluster (its client follows the shards' failovers).
    Cluster {
        /// `WAIT`'s count ([`super::Nodes::replicated`]), asked of the lock key's shard primary.
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

/// `[redis] primary_username` and `primary_password`: the primary's credentials when they are
/// not the sentinels' (the `nodes` URLs'); each `None` takes the sentinels' own.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct PrimaryAuth {
    /// The primary's ACL user.
    pub username: Option<String>,
    /// The primary's password: never printed.
    pub password: Option<String>,
}

impl fmt::Debug for PrimaryAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let password = self.password.as_ref().map(|_| "<redacted>");
        f.debug_struct("PrimaryAuth")
            .field("username", &self.username)
            .field("password", &password)
            .finish()
    }
}

/// The task that follows the primary across failovers; stopped and awaited by
/// [`Follower::stop`] (the pool's `settle`), or cancelled when the pool is dropped. Started by
/// `super::sentinel::follow`.
#[derive(Debug)]
pub(super) struct Follower {
    /// Ends the follower and the sentinels' subscriptions.
    stop: CancellationToken,
    /// The follower and the subscriptions, awaited by [`Follower::stop`].
    tasks: TaskTracker,
}

impl Follower {
    /// A follower whose tasks, once spawned on `tasks`, end when `stop` is cancelled.
    pub(super) fn new(stop: CancellationToken, tasks: TaskTracker) -> Self {
        Follower { stop, tasks }
    }

    /// Stops following, and waits for the tasks to end.
    pub(super) async fn stop(&self) {
        self.stop.cancel();
        self.tasks.wait().await;
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}
