//! The fleet's notifications: one subscribed connection per node and channel, kept open until
//! shutdown, so a replica hears what another publishes (a handoff offer, a pause) in one hop,
//! and a fleet where nothing happens sends and reads nothing.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt as _;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::redis::{Nodes, Replies};

/// Bound on opening and subscribing one node's pub/sub connection.
const SUBSCRIBE_TIMEOUT: Duration = Duration::from_secs(2);
/// Wait before subscribing again to a node whose connection failed or closed.
const RESUBSCRIBE_AFTER: Duration = Duration::from_secs(1);
/// Messages queued between the subscribers and their reader.
const QUEUE: usize = 256;

/// What a subscription hears.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Heard {
    /// A message's payload (once per node that carried it).
    Message(String),
    /// A node's subscription was (re)opened: messages sent while it was closed were lost, so a
    /// reader that keeps state reads it again.
    Subscribed {
        /// Not the node's first subscription: its connection broke, so the node may have come
        /// back empty (a restart without persistence) and a reader may repair what it lost.
        again: bool,
    },
}

/// Subscribes to `channel` on every node of `lock` (on every seed of a cluster, so one seed
/// hung or dead leaves the others hearing), each in a tracked task that resubscribes after a
/// failure until `shutdown`.
pub fn subscribe_all(
    nodes: &Arc<Nodes>,
    channel: &str,
    tracker: &TaskTracker,
    shutdown: &CancellationToken,
) -> mpsc::Receiver<Heard> {
    let (tx, rx) = mpsc::channel(QUEUE);
    for (index, node) in nodes.iter().enumerate() {
        for point in 0..node.subscription_points() {
            tracker.spawn(subscribe_node(
                nodes.clone(),
                (index, point),
                channel.to_owned(),
                tx.clone(),
                shutdown.clone(),
            ));
        }
    }
    rx
}

/// Keeps node `index` subscribed to `channel` at subscription `point`, forwarding what it
/// hears, until shutdown.
async fn subscribe_node(
    nodes: Arc<Nodes>,
    (index, point): (usize, usize),
    channel: String,
    heard: mpsc::Sender<Heard>,
    shutdown: CancellationToken,
) {
    let mut again = false;
    loop {
        // Taken again at each subscription: a member's server changes (a Sentinel failover).
        let Some(node) = nodes.iter().nth(index) else {
            return;
        };
        let subscribed = tokio::select! {
            biased;
            _ = shutdown.cancelled() => return,
            subscribed = node.subscribe_via(point, &channel, SUBSCRIBE_TIMEOUT) => subscribed,
        };
        match subscribed {
            Ok(pubsub) => {
                tracing::debug!(node = %node.address(), %channel, "subscribed");
                if heard.send(Heard::Subscribed { again }).await.is_err()
                    || !forward(pubsub, &heard, &shutdown).await
                {
                    return;
                }
                again = true;
                tracing::debug!(node = %node.address(), %channel, "subscription closed; subscribing again");
            }
            Err(e) => tracing::debug!(%channel, error = %e, "cannot subscribe; trying again"),
        }
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(RESUBSCRIBE_AFTER) => {}
        }
    }
}

/// Forwards one subscription's messages until it closes (true) or shutdown (false).
async fn forward(
    pubsub: redis::aio::PubSub,
    heard: &mpsc::Sender<Heard>,
    shutdown: &CancellationToken,
) -> bool {
    let mut messages = pubsub.into_on_message();
    loop {
        let message = tokio::select! {
            biased;
            _ = shutdown.cancelled() => return false,
            message = messages.next() => message,
        };
        let Some(message) = message else { return true };
        let Ok(payload) = message.get_payload::<String>() else {
            continue;
        };
        if heard.send(Heard::Message(payload)).await.is_err() {
            return false;
        }
    }
}

/// The next thing a subscription carries, or `None` at shutdown or once every node's
/// subscriber has stopped: what each reader of a subscription loops on.
pub async fn next(
    heard: &mut mpsc::Receiver<Heard>,
    shutdown: &CancellationToken,
) -> Option<Heard> {
    tokio::select! {
        biased;
        _ = shutdown.cancelled() => None,
        message = heard.recv() => message,
    }
}

/// `PUBLISH channel payload` on every node, each bounded by `wait` (a suspect node is not
/// waited for: the pool's rule). Returns the subscriptions reached per node that answered.
pub async fn publish_all(
    nodes: &Nodes,
    channel: &str,
    payload: &str,
    wait: Duration,
) -> Vec<usize> {
    let mut cmd = redis::cmd("PUBLISH");
    cmd.arg(channel).arg(payload);
    let replies = nodes.query::<usize>(cmd, wait, Replies::settled).await;
    replies.values().copied().collect()
}
