//! The slot lock: a Redlock over independent Redis nodes, or an in-process lock in standalone
//! mode. Outcomes are kept apart in types: `Won`, `Lost { holder }` and `Unavailable` (Redis
//! down or no majority after the retries) are different things to the caller and in the logs.

pub mod local;
pub mod redlock;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::time::schedule::Slot;

use crate::redis::{NodeError, Nodes, Replication};

pub use crate::redis::Token;
pub use local::LocalLock;
pub use redlock::{LockConfig, Redlock};

/// A key the lock races for: one (job, slot), `{key_prefix}:{job}:{slot as epoch ms}`; its
/// handoffs, `{key_prefix}:{job}:{slot as epoch ms}:handoff:{n}`; or a job's running lease,
/// `{key_prefix}:{job}:running`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SlotKey(String);

impl SlotKey {
    /// The key of `job`'s `slot` under `prefix`.
    pub fn new(prefix: &str, job: &str, slot: Slot) -> Self {
        SlotKey(format!("{prefix}:{job}:{}", slot.epoch_ms()))
    }

    /// The key the fleet races for at the slot's `n`th handoff: the same lock, a key per
    /// handoff, so the takers race each other and never an earlier winner's key.
    pub fn handoff(prefix: &str, job: &str, slot: Slot, n: u8) -> Self {
        SlotKey(format!("{prefix}:{job}:{}:handoff:{n}", slot.epoch_ms()))
    }

    /// The key the replicas that find a slot missed race for, so it is reported once.
    pub fn missed(prefix: &str, job: &str, slot: Slot) -> Self {
        SlotKey(format!("{prefix}:{job}:{}:missed", slot.epoch_ms()))
    }

    /// The key the replicas that find a slot ran twice race for, so it is reported once.
    pub fn duplicate(prefix: &str, job: &str, slot: Slot) -> Self {
        SlotKey(format!("{prefix}:{job}:{}:duplicate", slot.epoch_ms()))
    }

    /// The key the replicas race for to send `slot`'s deadline alert (`deadline = "…"`): held
    /// while the alert is sent, kept once it is (see `slot/alerts.rs`).
    pub fn deadline(prefix: &str, job: &str, slot: Slot) -> Self {
        SlotKey(format!("{prefix}:{job}:{}:deadline", slot.epoch_ms()))
    }

    /// The key the replicas race for to send the `recovered` alert that answers the job's
    /// alert about `slot` (its last `failed`, `missed` or `deadline` alert), so it goes once.
    pub fn recovered(prefix: &str, job: &str, slot: Slot) -> Self {
        SlotKey(format!("{prefix}:{job}:{}:recovered", slot.epoch_ms()))
    }

    /// The lease a job's current run holds while it runs (`overlap = "skip"`).
    pub fn running(prefix: &str, job: &str) -> Self {
        SlotKey(format!("{prefix}:{job}:running"))
    }

    /// The key as stored.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SlotKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A won slot: valid until `valid_until`, after which another replica could take it.
#[derive(Debug, Clone)]
pub struct Lease {
    /// The slot held.
    pub key: SlotKey,
    /// This replica's token on it.
    pub token: Token,
    /// How long the lock was known to be held when the race ended.
    pub validity: Duration,
    /// Until when the lock is this replica's.
    pub valid_until: Instant,
    /// Some node held another replica's token when this replica won: a racer of a split vote,
    /// or a holder that a majority of nodes restarted empty forgot (then the slot may run
    /// twice, and the winner looks for the other run in the history).
    pub contested: bool,
}

/// Why the lock could not be decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnavailableReason {
    /// Fewer than a majority of nodes answered.
    NoQuorum {
        /// Nodes that answered.
        answered: usize,
        /// A majority.
        needed: usize,
    },
    /// Every attempt ended with no token on a majority (a split vote) until the retries ran out.
    SplitVote {
        /// Attempts made.
        attempts: u32,
    },
}

impl fmt::Display for UnavailableReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UnavailableReason::NoQuorum { answered, needed } => {
                write!(f, "{answered} node(s) answered, {needed} needed")
            }
            UnavailableReason::SplitVote { attempts } => {
                write!(f, "no majority after {attempts} attempt(s) (split vote)")
            }
        }
    }
}

/// The lock could not be decided: Redis is down or split, which is not the same as losing.
#[derive(Debug, Clone)]
pub struct Unavailable {
    /// Why no decision.
    pub reason: UnavailableReason,
    /// The nodes' errors.
    pub errors: Vec<NodeError>,
}

impl fmt::Display for Unavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.reason)?;
        for e in &self.errors {
            write!(f, "; {e}")?;
        }
        Ok(())
    }
}

/// The result of racing for one slot.
#[derive(Debug, Clone)]
pub enum Acquire {
    /// This replica holds the slot.
    Won(Lease),
    /// Another replica holds the slot.
    Lost {
        /// Its token (its name).
        holder: Token,
    },
    /// No decision: not the same as losing.
    Unavailable(Unavailable),
}

/// The lock a replica races with; cheap to clone (one set of connections per replica).
#[derive(Debug, Clone)]
pub enum SlotLock {
    /// Its pool of nodes is shared with the history, the rate budget and the fleet clock.
    Redlock(Arc<Redlock>),
    /// The in-process lock of standalone mode.
    Local(Arc<LocalLock>),
}

impl SlotLock {
    /// Races for `key` with a lock of `ttl`.
    pub async fn acquire(&self, key: &SlotKey, ttl: Duration) -> Acquire {
        match self {
            SlotLock::Redlock(lock) => lock.acquire(key, ttl).await,
            SlotLock::Local(lock) => lock.acquire(key, ttl),
        }
    }

    /// Races for every `(key, ttl)` at once (a round trip per node per 250 keys); the
    /// answers come in the order asked.
    pub async fn acquire_many(&self, claims: &[(SlotKey, Duration)]) -> Vec<Acquire> {
        match self {
            SlotLock::Redlock(lock) => lock.acquire_many(claims).await,
            SlotLock::Local(lock) => claims
                .iter()
                .map(|(key, ttl)| lock.acquire(key, *ttl))
                .collect(),
        }
    }

    /// Who holds each of `keys`, by one node's account ([`Redlock::look`]); `None` when no
    /// node could tell, and always in standalone mode, where this replica is the only racer.
    pub async fn look(&self, keys: &[SlotKey]) -> Option<Vec<Option<Token>>> {
        match self {
            SlotLock::Redlock(lock) => lock.look(keys).await,
            SlotLock::Local(_) => None,
        }
    }

    /// Releases `lease` where it is still ours, asked again while a node's release failed and
    /// fewer than a majority removed it, for at most `within` ([`Redlock::release_retrying`]);
    /// the number of nodes it was removed from.
    pub async fn release_retrying(&self, lease: &Lease, within: Duration) -> usize {
        match self {
            SlotLock::Redlock(lock) => lock.release_retrying(lease, within).await,
            SlotLock::Local(lock) => lock.release(lease),
        }
    }

    /// Extends `lease` to `ttl` from now; false when it is no longer ours on a majority.
    pub async fn extend(&self, lease: &Lease, ttl: Duration) -> bool {
        match self {
            SlotLock::Redlock(lock) => lock.extend(lease, ttl).await,
            SlotLock::Local(lock) => lock.extend(lease, ttl),
        }
    }

    /// How many replicas of the primary holding `lease` have it ([`Nodes::replicated`]);
    /// `None` where no replica is waited for (redlock mode, standalone).
    pub async fn replicated(&self, lease: &Lease) -> Option<Replication> {
        match self {
            SlotLock::Redlock(lock) => {
                let nodes = lock.nodes();
                nodes.replicated(lease.key.as_str(), lease.validity).await
            }
            SlotLock::Local(_) => None,
        }
    }

    /// How many nodes make a majority (1 in standalone mode).
    pub fn quorum(&self) -> usize {
        match self {
            SlotLock::Redlock(lock) => redlock::quorum(lock.node_count()),
            SlotLock::Local(_) => 1,
        }
    }

    /// The pool of Redis nodes; none in standalone mode.
    pub fn nodes(&self) -> Option<&Arc<Nodes>> {
        match self {
            SlotLock::Redlock(lock) => Some(lock.nodes()),
            SlotLock::Local(_) => None,
        }
    }

    /// A short description for the start-up log line.
    pub fn describe(&self) -> String {
        match self {
            SlotLock::Redlock(lock) => lock.nodes().describe(),
            SlotLock::Local(_) => "in-process (standalone)".to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_layout() {
        let slot = Slot::at(chrono::DateTime::from_timestamp(1_700_000_000, 0).unwrap());
        assert_eq!(
            SlotKey::new("slotcron", "standup", slot).as_str(),
            "slotcron:standup:1700000000000"
        );
    }
}
