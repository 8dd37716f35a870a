//! Handoffs: a slot whose winner could not deliver it, for a reason local to that winner (its
//! egress is broken, or its lock ran out before the first byte left), is offered to the rest of
//! the fleet, which races for it once more through the same lock.
//!
//! The offer is a Redis pub/sub message on every node (`PUBLISH {key_prefix}:handoff`, see
//! [`crate::redis::pubsub`]): an offer reaches every replica in one hop and a fleet where all is well
//! sends and reads nothing: no loser polls for the winner's fate. An offer that arrives from
//! several nodes is taken once (see [`Intake`]).

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::redis::Nodes;
use crate::redis::pubsub::{self, Heard};
use crate::time::schedule::{Fence, Slot};

/// Bound on one node's `PUBLISH`: an offer is made once, off the race path.
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(1);
/// Offers remembered to drop the copies that the other nodes deliver.
const SEEN_CAP: usize = 4096;

/// One offer: run `job`'s `slot` as handoff number `handoff` (its fence), since
/// `previous_winner` could not deliver it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandoffRequest {
    /// The job whose slot is offered.
    pub job: String,
    /// The slot, epoch milliseconds (as in the slot key).
    pub slot_ms: i64,
    /// The handoff number the taker runs with: its fence is the slot's plus this.
    pub handoff: u8,
    /// The replica that handed the slot off.
    pub previous_winner: String,
    /// Every replica that had the slot (the previous winner included): none takes it again.
    #[serde(default)]
    pub excluded: Vec<String>,
    /// Why it could not deliver (scrubbed).
    pub reason: String,
}

impl HandoffRequest {
    /// The slot offered, if the message holds a valid one.
    pub fn slot(&self) -> Option<Slot> {
        chrono::DateTime::from_timestamp_millis(self.slot_ms).map(Slot::at)
    }

    /// Whether `replica` already had the slot (and so may not take it).
    pub fn excludes(&self, replica: &str) -> bool {
        self.previous_winner == replica || self.excluded.iter().any(|r| r == replica)
    }

    /// The fencing token of the run that takes this offer.
    pub fn fence(&self, slot: Slot) -> Fence {
        Fence::new(slot, self.handoff)
    }
}

/// Where offers are made: the Redis nodes, or nowhere in standalone mode (one replica).
#[derive(Debug, Clone)]
pub enum Handoffs {
    /// Offers go out over the nodes' pub/sub.
    Redis {
        /// The pool to publish on.
        nodes: Arc<Nodes>,
        /// `{key_prefix}:handoff`.
        channel: String,
    },
    /// Standalone: no one to hand off to.
    Off,
}

impl Handoffs {
    /// Offers over `nodes`, on `{prefix}:handoff`.
    pub fn redis(nodes: Arc<Nodes>, prefix: &str) -> Self {
        Handoffs::Redis {
            nodes,
            channel: format!("{prefix}:handoff"),
        }
    }

    /// Offers `request` on every node. Returns how many subscriptions of replicas that may take
    /// it received it, summed over the nodes: each replica is subscribed once per node, so the
    /// excluded ones are taken off once per node that answered (the offerer among them unless
    /// it has stopped listening, `offerer_listens` false: it is shutting down). 0 means no
    /// replica that may take the slot heard the offer.
    pub async fn offer(&self, request: &HandoffRequest, offerer_listens: bool) -> usize {
        let Handoffs::Redis { nodes, channel } = self else {
            return 0;
        };
        let Ok(payload) = serde_json::to_string(request) else {
            return 0;
        };
        let heard = pubsub::publish_all(nodes, channel, &payload, PUBLISH_TIMEOUT).await;
        let listening = request
            .excluded
            .len()
            .saturating_sub(usize::from(!offerer_listens));
        let excluded = listening * heard.len();
        heard.iter().sum::<usize>().saturating_sub(excluded)
    }

    /// Subscribes to the offers on every node (see [`pubsub`]). The offers arrive on the
    /// returned channel, duplicates included (one per node): the taker's [`Intake`] drops
    /// them. `None` in standalone mode.
    pub fn listen(
        &self,
        tracker: &TaskTracker,
        shutdown: &CancellationToken,
    ) -> Option<mpsc::Receiver<Heard>> {
        match self {
            Handoffs::Redis { nodes, channel } => {
                Some(pubsub::subscribe_all(nodes, channel, tracker, shutdown))
            }
            Handoffs::Off => None,
        }
    }
}

/// The intake of the fleet's offers on this replica: each decoded, and taken once however
/// many nodes deliver it.
pub struct Intake {
    /// The offers as [`Handoffs::listen`] hears them, one copy per node.
    heard: mpsc::Receiver<Heard>,
    /// The offers already taken.
    seen: OffersSeen,
}

impl Intake {
    /// The intake of the offers `heard` brings.
    pub fn new(heard: mpsc::Receiver<Heard>) -> Self {
        Intake {
            heard,
            seen: OffersSeen::default(),
        }
    }

    /// The next offer not taken before; `None` once `shutdown` comes or the subscriptions end.
    /// A message that is no offer is skipped (logged for `replica` at debug).
    pub async fn next(
        &mut self,
        shutdown: &CancellationToken,
        replica: &str,
    ) -> Option<HandoffRequest> {
        while let Some(message) = pubsub::next(&mut self.heard, shutdown).await {
            let Heard::Message(payload) = message else {
                continue;
            };
            let Ok(offer) = serde_json::from_str::<HandoffRequest>(&payload) else {
                tracing::debug!(replica = %replica, "ignoring a malformed handoff offer");
                continue;
            };
            if self.seen.first_time(&offer) {
                return Some(offer);
            }
        }
        None
    }
}

/// The offers already taken: each arrives once per node.
#[derive(Debug, Default)]
struct OffersSeen {
    set: HashSet<(String, i64, u8)>,
    order: VecDeque<(String, i64, u8)>,
}

impl OffersSeen {
    /// True the first time `request` is seen (the oldest are forgotten past `SEEN_CAP`).
    fn first_time(&mut self, request: &HandoffRequest) -> bool {
        let key = (request.job.clone(), request.slot_ms, request.handoff);
        if !self.set.insert(key.clone()) {
            return false;
        }
        self.order.push_back(key);
        if self.order.len() > SEEN_CAP
            && let Some(old) = self.order.pop_front()
        {
            self.set.remove(&old);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offer(job: &str, slot_ms: i64) -> HandoffRequest {
        HandoffRequest {
            job: job.into(),
            slot_ms,
            handoff: 1,
            previous_winner: "r1".into(),
            excluded: vec!["r0".into(), "r1".into()],
            reason: "connection refused".into(),
        }
    }

    #[tokio::test]
    async fn the_intake_takes_each_offer_once_and_skips_what_is_no_offer() {
        let (tx, rx) = mpsc::channel(8);
        let json = serde_json::to_string(&offer("a", 1000)).unwrap();
        let other = serde_json::to_string(&offer("b", 1000)).unwrap();
        for heard in [
            Heard::Message(json.clone()),
            Heard::Subscribed { again: true },
            Heard::Message("{not an offer".into()),
            Heard::Message(json),
            Heard::Message(other),
        ] {
            tx.send(heard).await.unwrap();
        }
        drop(tx);
        let (mut intake, shutdown) = (Intake::new(rx), CancellationToken::new());
        assert_eq!(intake.next(&shutdown, "r2").await, Some(offer("a", 1000)));
        assert_eq!(intake.next(&shutdown, "r2").await, Some(offer("b", 1000)));
        assert_eq!(intake.next(&shutdown, "r2").await, None);
    }

    #[test]
    fn every_replica_that_had_the_slot_is_excluded() {
        let request = offer("a", 1000);
        assert!(request.excludes("r0") && request.excludes("r1"));
        assert!(!request.excludes("r2"));
    }

    #[test]
    fn an_offer_is_taken_once_whatever_the_number_of_nodes_that_deliver_it() {
        let mut seen = OffersSeen::default();
        assert!(seen.first_time(&offer("a", 1000)));
        assert!(!seen.first_time(&offer("a", 1000)));
        assert!(!seen.first_time(&offer("a", 1000)));
        assert!(seen.first_time(&offer("a", 2000)));
        assert!(seen.first_time(&offer("b", 1000)));
    }

    #[test]
    fn the_oldest_offers_are_forgotten_past_the_cap() {
        let mut seen = OffersSeen::default();
        for ms in 0..=SEEN_CAP as i64 {
            assert!(seen.first_time(&offer("a", ms)));
        }
        assert_eq!(seen.order.len(), SEEN_CAP);
        assert!(
            seen.first_time(&offer("a", 0)),
            "the first offer was forgotten"
        );
        assert!(!seen.first_time(&offer("a", SEEN_CAP as i64)));
    }

    #[test]
    fn the_taker_runs_with_the_next_fence() {
        let request = offer("a", 1_795_397_400_000);
        let slot = request.slot().unwrap();
        assert_eq!(request.fence(slot).get(), 1_795_397_400_001);
        assert!(request.fence(slot) > Fence::new(slot, 0));
    }
}
