//! What a node keeps across a restart: nothing (`None`), everything (`Aof`: every write was
//! appended before it was acknowledged), or its last snapshot (`Snapshot`: it comes back stale).
//! Whatever it keeps, a restart ends every connection (their subscriptions and protocols) and
//! empties the script cache, as a new redis-server process does: the next `EVALSHA` is
//! `NOSCRIPT`. Deadlines are absolute, so a kept key whose time passed while the node was down
//! is gone at its next access.

use super::keyspace::Keyspace;
use super::{Node, Persistence};

impl Node {
    /// A snapshot point (what a `Snapshot` node comes back with).
    pub fn save(&mut self) {
        self.saved = self.keys.clone();
    }

    /// The node's process restarts.
    pub fn restart(&mut self) {
        self.keys = match self.persistence {
            Persistence::None => Keyspace::default(),
            Persistence::Aof => std::mem::take(&mut self.keys),
            Persistence::Snapshot => self.saved.clone(),
        };
        self.scripts.flush();
        self.conns.clear();
        self.channels = Default::default();
        self.loading = false;
    }
}
