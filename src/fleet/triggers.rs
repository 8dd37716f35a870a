//! Triggers asked of the fleet: `slotcron trigger JOB` (and `resume --catch-up`) publishes a [`TriggerRequest`] on
//! `{key_prefix}:trigger` (every node, as a handoff offer is), and every replica that hears it
//! races the named slot through the same entry as a scheduled one, so it runs once across the
//! fleet, on a replica, with the fleet's network and secrets. Each replica that raced publishes
//! how its race ended ([`TriggerReply`]) on the request's own channel, which the CLI waits on:
//! nobody polls. A request arrives once per node: the replica races it once ([`Seen`]).

use std::collections::{HashSet, VecDeque};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::redis::Nodes;
use crate::redis::pubsub;
use crate::time::schedule::Slot;

/// Bound on one node's `PUBLISH`.
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(1);
/// Requests remembered to drop the copies that the other nodes deliver.
const SEEN_CAP: usize = 1024;

/// Run `job`'s `slot` now, asked by `by`; replies go to `{key_prefix}:trigger:{id}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TriggerRequest {
    /// Unique per request: names its reply channel, and drops a node's copy.
    pub id: String,
    /// The job to run.
    pub job: String,
    /// The slot, epoch milliseconds (as in the slot key): chosen once by the asker, on the
    /// fleet's clock, so every replica races the same one.
    pub slot_ms: i64,
    /// Who asked (`$USER@hostname`), for the log.
    pub by: String,
    /// A slot that fell inside a pause (`resume --catch-up`), raced as a catch-up (no start
    /// window), not the current second.
    #[serde(default)]
    pub catch_up: bool,
}

impl TriggerRequest {
    /// The slot asked for, if the message holds a valid one.
    pub fn slot(&self) -> Option<Slot> {
        chrono::DateTime::from_timestamp_millis(self.slot_ms).map(Slot::at)
    }
}

/// How one replica's race of a trigger ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ending {
    /// It won and the run succeeded.
    Done,
    /// It won and the run failed (or was handed off, or came too late or early).
    Failed,
    /// Another replica (or trigger) holds the slot.
    Lost,
    /// The lock could not be decided: Redis unavailable.
    Unavailable,
    /// Not raced: paused, the previous run still going, or not a candidate.
    Skipped,
}

impl Ending {
    /// Whether this replica ran the slot (its reply is the one the asker reports).
    pub fn ran(self) -> bool {
        matches!(self, Ending::Done | Ending::Failed)
    }
}

/// One replica's answer to a [`TriggerRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TriggerReply {
    /// The replica that raced.
    pub replica: String,
    /// How its race ended.
    pub ending: Ending,
    /// The same in words (`done in 12 ms, 1 attempt(s)`, `already run by r2 for this second`).
    pub text: String,
}

/// `{key_prefix}:trigger`: where requests are published.
pub fn request_channel(prefix: &str) -> String {
    format!("{prefix}:trigger")
}

/// `{key_prefix}:trigger:{id}`: where the replicas answer request `id`.
pub fn reply_channel(prefix: &str, id: &str) -> String {
    format!("{prefix}:trigger:{id}")
}

/// Publishes `request` on every node; returns the replicas that heard it on the node that
/// reached most (each replica listens once per node), `None` when no node answered.
pub async fn ask(nodes: &Nodes, prefix: &str, request: &TriggerRequest) -> Option<usize> {
    let payload = serde_json::to_string(request).ok()?;
    let heard =
        pubsub::publish_all(nodes, &request_channel(prefix), &payload, PUBLISH_TIMEOUT).await;
    heard.iter().max().copied()
}

/// Publishes a replica's `reply` to `request` on every node (the asker listens on all).
pub async fn answer(nodes: &Nodes, prefix: &str, request: &TriggerRequest, reply: &TriggerReply) {
    let Ok(payload) = serde_json::to_string(reply) else {
        return;
    };
    let channel = reply_channel(prefix, &request.id);
    pubsub::publish_all(nodes, &channel, &payload, PUBLISH_TIMEOUT).await;
}

/// The requests already raced: each arrives once per node.
#[derive(Debug, Default)]
pub struct Seen {
    set: HashSet<String>,
    order: VecDeque<String>,
}

impl Seen {
    /// True the first time `request` is seen (the oldest are forgotten past `SEEN_CAP`).
    pub fn first_time(&mut self, request: &TriggerRequest) -> bool {
        if !self.set.insert(request.id.clone()) {
            return false;
        }
        self.order.push_back(request.id.clone());
        if self.order.len() > SEEN_CAP {
            self.order.pop_front().map(|old| self.set.remove(&old));
        }
        true
    }
}
