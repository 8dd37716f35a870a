//! The pool of Redis nodes one replica talks to, and its one view of their health.
//!
//! Every call that goes to the nodes (the race, releases and extensions, the rate budget, the
//! history, the fleet clock, the readiness probe) fans out through [`Nodes::ask`], which keeps
//! one rule for all of them:
//! - a node that times out or fails without answering is *suspect*; one that answers (even with
//!   an error reply) is healthy again;
//! - every call still sends to every node, so a suspect node's keys stay as complete as they can
//!   and its recovery is noticed by the first answer;
//! - no call waits for a suspect node beyond what its own decision needs: it waits for the nodes
//!   that are not suspect, each bounded by the call's wait, and for a suspect one only while its
//!   answer can still change the decision (say, too few healthy nodes for a majority).
//!
//! The answers a caller stops waiting for are still awaited, in the background, by a task the
//! pool tracks, so every request teaches the view something: a hung node is known as hung by
//! every replica after one timeout, whichever call met it first. Each change of a node's state
//! is logged once (`node`, `replica`, `state`), and `slotcron_redis_node_up` shows this view.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::sync::Notify;
use tokio_util::task::TaskTracker;

use super::layout::Layout;
use super::node::{Node, NodeError};
use super::node_url::{NodeSetupError, NodeUrl};

/// Majority of `n` nodes.
pub fn quorum(n: usize) -> usize {
    n / 2 + 1
}

/// The replica's view of one node: suspect or healthy, changed only by [`Health::observe`].
#[derive(Debug)]
pub(super) struct Health {
    address: String,
    replica: Arc<str>,
    /// True from a request that got no answer until the next answer. An atomic, not a lock:
    /// every answer of every call reads or writes it.
    suspect: AtomicBool,
    /// Kept out of every request: a node not (yet) checked to be an independent primary (see
    /// [`super::independence`]).
    held_out: AtomicBool,
    /// Told when a request gets no answer or `READONLY`: the member's server may have changed
    /// (a Sentinel failover); `None` where a member is one server for good.
    trouble: Option<Arc<Notify>>,
}

impl Health {
    /// A member's view, healthy until a request says otherwise.
    pub(super) fn new(
        address: &str,
        replica: &Arc<str>,
        trouble: Option<Arc<Notify>>,
    ) -> Arc<Self> {
        Arc::new(Health {
            address: address.to_owned(),
            replica: replica.clone(),
            suspect: AtomicBool::new(false),
            held_out: AtomicBool::new(false),
            trouble,
        })
    }

    /// The one health rule: an answer (a value or an error reply) makes the node healthy; a
    /// timeout or a failed connection makes it suspect. Logs the change, once.
    fn observe<T>(&self, result: &Result<T, NodeError>) {
        let suspect = result.as_ref().is_err_and(|e| !e.node_answered());
        let moved = result.as_ref().is_err_and(NodeError::is_read_only);
        if let Some(trouble) = self.trouble.as_ref().filter(|_| suspect || moved) {
            trouble.notify_one();
        }
        if self.suspect.swap(suspect, Ordering::Relaxed) == suspect {
            return;
        }
        match result {
            Err(e) if suspect => tracing::warn!(replica = %self.replica, node = %self.address,
                state = "suspect", error = %e,
                "redis node suspect: calls stop waiting for it until it answers again"),
            _ => tracing::info!(replica = %self.replica, node = %self.address,
                state = "healthy", "redis node answers again: healthy"),
        }
    }

    /// Suspect, or held out.
    fn is_suspect(&self) -> bool {
        self.suspect.load(Ordering::Relaxed) || self.is_held_out()
    }

    fn is_held_out(&self) -> bool {
        self.held_out.load(Ordering::Relaxed)
    }
}

/// One node and the view of it.
#[derive(Debug)]
pub(super) struct Member {
    /// The member's server: one for good, or the primary of the moment (sentinel mode).
    pub(super) node: Arc<Current>,
    pub(super) health: Arc<Health>,
}

/// A member's node now; replaced when its server changes ([`super::sentinel`]). Each request
/// takes the node of its moment, in an `Arc` so the request can outlive the call that sent it
/// (see [`Nodes::ask`]).
#[derive(Debug)]
pub(super) struct Current(RwLock<Arc<Node>>);

impl Current {
    pub(super) fn new(node: Arc<Node>) -> Arc<Self> {
        Arc::new(Current(RwLock::new(node)))
    }

    /// The node now.
    pub(super) fn get(&self) -> Arc<Node> {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// From now on, requests go to `node`.
    pub(super) fn set(&self, node: Arc<Node>) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = node;
    }
}

/// How one node stands in the view, for the readiness probe, the status page and the metric.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeState {
    /// `host:port`.
    pub address: String,
    /// Not suspect: it answered the last request that ended.
    pub up: bool,
}

/// The nodes' answers to one call so far: one slot per node, in the pool's order.
#[derive(Debug)]
pub struct Replies<T> {
    answers: Vec<Option<Result<T, NodeError>>>,
    /// Each node's state in the view, refreshed at each answer.
    suspect: Vec<bool>,
    /// Whether the call went to each node (see [`Nodes::ask_some`]).
    asked: Vec<bool>,
}

impl<T> Replies<T> {
    /// Every node asked that is not suspect has answered: waiting longer is waiting for
    /// suspects.
    pub fn settled(&self) -> bool {
        (0..self.answers.len())
            .all(|i| self.answers[i].is_some() || self.suspect[i] || !self.asked[i])
    }

    /// [`Self::settled`] with a majority of `quorum` answered: short of one, the suspect nodes
    /// are waited for too (each within its request's bound), since only their answers can
    /// still make one. The race's rule: when every node was slow at once (a burst), none is
    /// healthy in the view, and a race that waited for no suspect would fail at once.
    pub fn settled_with_majority(&self, quorum: usize) -> bool {
        self.settled() && self.answered() >= quorum
    }

    /// Each node's answer so far (`None`: still waited for, or not waited for).
    pub fn answers(&self) -> &[Option<Result<T, NodeError>>] {
        &self.answers
    }

    /// The answers that are values.
    pub fn values(&self) -> impl Iterator<Item = &T> {
        self.answers
            .iter()
            .flatten()
            .filter_map(|a| a.as_ref().ok())
    }

    /// The errors so far.
    pub fn errors(&self) -> impl Iterator<Item = &NodeError> {
        self.answers
            .iter()
            .flatten()
            .filter_map(|a| a.as_ref().err())
    }

    /// Nodes that answered with a value.
    pub fn answered(&self) -> usize {
        self.values().count()
    }

    /// Whether node `i` was suspect in the view at the last answer.
    pub fn is_suspect(&self, i: usize) -> bool {
        self.suspect[i]
    }

    /// Nodes asked whose answer is still out.
    pub fn pending(&self) -> usize {
        (0..self.answers.len())
            .filter(|&i| self.answers[i].is_none() && self.asked[i])
            .count()
    }

    /// Values for which `pred` holds.
    pub fn count(&self, pred: impl Fn(&T) -> bool) -> usize {
        self.values().filter(|v| pred(v)).count()
    }

    /// Each node's answer, in pool order (`None`: not waited for).
    pub fn into_answers(self) -> Vec<Option<Result<T, NodeError>>> {
        self.answers
    }
}

/// A request to one node, its answer tagged with the node's place in the pool.
type Pending<T> = BoxFuture<'static, (usize, Result<T, NodeError>)>;

/// The Redis nodes of one replica; shared (`Arc`) by the lock, the history, the rate budget, the
/// fleet clock and the status endpoints.
pub struct Nodes {
    pub(super) members: Vec<Member>,
    /// What the members are, and what follows them ([`super::topology`]).
    pub(super) layout: Layout,
    /// Requests whose callers stopped waiting, awaited to the end of their own bound so that
    /// their outcome reaches the view. Waited for at shutdown ([`Nodes::settle`]).
    pub(super) stragglers: TaskTracker,
}

impl fmt::Debug for Nodes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(
                self.members
                    .iter()
                    .map(|m| m.node.get().address().to_owned()),
            )
            .finish()
    }
}

impl Nodes {
    /// Prepares a connection to each of `urls`, independent servers (redlock mode's nodes, and
    /// sentinel mode's sentinels): opened lazily, reopened in the background, all healthy in the
    /// view until a request says otherwise. The other modes' members: [`Nodes::open`].
    pub fn connect(
        urls: &[NodeUrl],
        node_timeout: Duration,
        ca_file: Option<&[u8]>,
        replica: &str,
    ) -> Result<Self, NodeSetupError> {
        let nodes = (urls.iter())
            .map(|url| Node::new(url, node_timeout, ca_file))
            .collect::<Result<Vec<_>, NodeSetupError>>()?;
        Ok(Self::of(nodes, Layout::Redlock, replica))
    }

    /// Redlock mode's pool over streams `dialer` opens to each of `urls` (the simulation's seam,
    /// [`super::connector`]): the same members, fan-out and health as [`Nodes::connect`]'s.
    pub fn dial(
        urls: &[NodeUrl],
        node_timeout: Duration,
        dialer: &Arc<dyn super::Dial>,
        replica: &str,
    ) -> Self {
        let nodes = (urls.iter())
            .map(|url| Node::dialed(url, node_timeout, dialer.clone()))
            .collect();
        Self::of(nodes, Layout::Redlock, replica)
    }

    /// A pool whose members are `nodes`, each one server (or one cluster) for good, laid out as
    /// `layout`.
    pub(super) fn of(nodes: Vec<Node>, layout: Layout, replica: &str) -> Self {
        let replica: Arc<str> = Arc::from(replica);
        let members = (nodes.into_iter())
            .map(|node| Member {
                health: Health::new(node.address(), &replica, None),
                node: Current::new(Arc::new(node)),
            })
            .collect();
        Nodes {
            members,
            layout,
            stragglers: TaskTracker::new(),
        }
    }

    /// How many nodes.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether the pool has no node.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// How many nodes make a majority.
    pub fn quorum(&self) -> usize {
        quorum(self.members.len())
    }

    /// The nodes, in the configured order, each as it is now.
    pub fn iter(&self) -> impl Iterator<Item = Arc<Node>> + '_ {
        self.members.iter().map(|m| m.node.get())
    }

    /// The view: which nodes are up (not suspect) now.
    pub fn view(&self) -> Vec<NodeState> {
        self.members
            .iter()
            .map(|m| NodeState {
                address: m.node.get().address().to_owned(),
                up: !m.health.is_suspect(),
            })
            .collect()
    }

    /// Sends `request` to every node and gathers the answers until `enough` says the caller's
    /// decision is made, or every node has answered. `enough` sees which nodes are suspect
    /// ([`Replies::settled`]); a rule should wait for a suspect node only when its answer can
    /// still change the decision. Each request is bounded by the wait the caller built into
    /// it; those still out when the caller stops are finished in the background.
    pub async fn ask<T, F, Fut>(
        &self,
        request: F,
        enough: impl Fn(&Replies<T>) -> bool,
    ) -> Replies<T>
    where
        T: Send + 'static,
        F: Fn(Arc<Node>) -> Fut,
        Fut: Future<Output = Result<T, NodeError>> + Send + 'static,
    {
        self.ask_some(|_| true, request, enough).await
    }

    /// [`Self::ask`] to the nodes `to` picks only (the others' answers stay `None`).
    pub async fn ask_some<T, F, Fut>(
        &self,
        to: impl Fn(&Node) -> bool,
        request: F,
        enough: impl Fn(&Replies<T>) -> bool,
    ) -> Replies<T>
    where
        T: Send + 'static,
        F: Fn(Arc<Node>) -> Fut,
        Fut: Future<Output = Result<T, NodeError>> + Send + 'static,
    {
        let asked: Vec<bool> = (self.members.iter())
            .map(|m| !m.health.is_held_out() && to(&m.node.get()))
            .collect();
        let mut pending: FuturesUnordered<Pending<T>> = self
            .members
            .iter()
            .enumerate()
            .filter(|(i, _)| asked[*i])
            .map(|(i, member)| observed(i, member.health.clone(), request(member.node.get())))
            .collect();
        let mut replies = Replies {
            answers: (0..self.members.len()).map(|_| None).collect(),
            suspect: self.suspects(),
            asked,
        };
        while !enough(&replies) {
            let Some((i, answer)) = pending.next().await else {
                break;
            };
            replies.answers[i] = Some(answer);
            replies.suspect = self.suspects();
        }
        if !pending.is_empty() {
            self.stragglers.spawn(finish(pending));
        }
        replies
    }

    /// `request` to node `i` alone, its outcome recorded in the view: a read that one node can
    /// answer (the look before a covering race).
    pub async fn ask_one<T, Fut>(
        &self,
        i: usize,
        request: impl FnOnce(Arc<Node>) -> Fut,
    ) -> Result<T, NodeError>
    where
        T: Send + 'static,
        Fut: Future<Output = Result<T, NodeError>> + Send + 'static,
    {
        let member = &self.members[i];
        let (_, answer) = observed(i, member.health.clone(), request(member.node.get())).await;
        answer
    }

    /// The first node from `from` on (wrapping) that is not suspect; none when every node is.
    pub fn first_up(&self, from: usize) -> Option<usize> {
        let n = self.members.len();
        (0..n)
            .map(|offset| (from + offset) % n)
            .find(|&i| !self.members[i].health.is_suspect())
    }

    /// Keeps node `i` out of every request (no answer of it can count) and down in the view,
    /// until [`Self::admit`]: a node not yet checked to be an independent primary.
    pub fn hold_out(&self, i: usize) {
        self.members[i]
            .health
            .held_out
            .store(true, Ordering::Relaxed);
    }

    /// Lets node `i` back into the requests after [`Self::hold_out`].
    pub fn admit(&self, i: usize) {
        self.members[i]
            .health
            .held_out
            .store(false, Ordering::Relaxed);
    }

    /// Sends `cmd` to every node, each bounded by `wait`, gathering answers as [`Self::ask`].
    pub async fn query<T>(
        &self,
        cmd: redis::Cmd,
        wait: Duration,
        enough: impl Fn(&Replies<T>) -> bool,
    ) -> Replies<T>
    where
        T: redis::FromRedisValue + Send + 'static,
    {
        let cmd = Arc::new(cmd);
        self.ask(
            |node| {
                let cmd = cmd.clone();
                async move { node.query::<T>(&cmd, wait).await }
            },
            enough,
        )
        .await
    }

    /// Sends PING to every node, waiting by the common rule (a suspect node is not waited
    /// for), and returns the view after it: the readiness probe and the status page.
    pub async fn probe(&self, wait: Duration) -> Vec<NodeState> {
        self.ask(
            |node| async move { node.ping_within(wait).await },
            Replies::settled,
        )
        .await;
        self.view()
    }

    /// Waits for the requests still out (each within its bound): at shutdown, so no task
    /// outlives the replica.
    pub async fn settle(&self) {
        self.layout.stop().await;
        self.stragglers.close();
        self.stragglers.wait().await;
        self.stragglers.reopen();
    }

    fn suspects(&self) -> Vec<bool> {
        self.members.iter().map(|m| m.health.is_suspect()).collect()
    }
}

/// `request` to node `i`, its outcome recorded in the view when it ends, whoever awaits it.
fn observed<T, Fut>(i: usize, health: Arc<Health>, request: Fut) -> Pending<T>
where
    T: Send + 'static,
    Fut: Future<Output = Result<T, NodeError>> + Send + 'static,
{
    async move {
        let answer = request.await;
        health.observe(&answer);
        (i, answer)
    }
    .boxed()
}

/// Awaits the requests a caller stopped waiting for.
async fn finish<T>(mut pending: FuturesUnordered<Pending<T>>) {
    while pending.next().await.is_some() {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::NodeErrorKind;

    fn error(kind: NodeErrorKind) -> Result<(), NodeError> {
        Err(NodeError {
            node: "n:1".into(),
            kind,
        })
    }

    #[test]
    fn quorum_is_a_strict_majority() {
        assert_eq!([1, 2, 3, 4, 5].map(quorum), [1, 2, 2, 3, 3]);
    }

    #[test]
    fn a_timeout_or_a_broken_connection_makes_a_node_suspect_and_an_answer_healthy() {
        let health = Health::new("n:1", &Arc::from("r"), None);
        health.observe(&error(NodeErrorKind::Timeout(Duration::from_millis(50))));
        assert!(health.is_suspect());
        // An error reply comes from a node that serves.
        health.observe(&error(NodeErrorKind::Reply("WRONGTYPE".into())));
        assert!(!health.is_suspect());
        health.observe(&error(NodeErrorKind::Down("refused".into())));
        assert!(health.is_suspect());
        health.observe(&Ok::<(), NodeError>(()));
        assert!(!health.is_suspect());
    }

    #[tokio::test]
    async fn no_answer_or_readonly_tells_the_follower_an_error_reply_does_not() {
        let trouble = Arc::new(Notify::new());
        let health = Health::new("n:1", &Arc::from("r"), Some(trouble.clone()));
        let told = || async {
            let wait = tokio::time::timeout(Duration::from_millis(20), trouble.notified());
            wait.await.is_ok()
        };
        health.observe(&error(NodeErrorKind::Reply("WRONGTYPE".into())));
        assert!(!told().await);
        health.observe(&error(NodeErrorKind::ReadOnly(
            "READONLY You can't write against a read only replica.".into(),
        )));
        assert!(told().await);
        health.observe(&error(NodeErrorKind::Down("refused".into())));
        assert!(told().await);
    }

    #[tokio::test]
    async fn a_node_held_out_is_asked_nothing_and_down_in_the_view_until_admitted() {
        let urls: Vec<NodeUrl> = ["redis://127.0.0.1:1", "redis://127.0.0.1:2"]
            .iter()
            .map(|u| NodeUrl::parse(u).unwrap())
            .collect();
        let nodes = Nodes::connect(&urls, Duration::from_millis(50), None, "r").unwrap();
        // No connection is opened: the request answers with the node's name.
        let names = |node: Arc<Node>| async move { Ok(node.address().to_owned()) };
        nodes.hold_out(1);
        let replies = nodes.ask(names, |_| false).await;
        assert!(replies.answers()[0].is_some() && replies.answers()[1].is_none());
        assert_eq!(
            nodes.view().iter().map(|s| s.up).collect::<Vec<_>>(),
            [true, false]
        );
        nodes.admit(1);
        assert_eq!(nodes.ask(names, |_| false).await.answered(), 2);
    }

    #[test]
    fn settled_waits_for_every_node_that_is_not_suspect() {
        let mut replies: Replies<()> = Replies {
            answers: vec![None, None, None],
            suspect: vec![true, false, false],
            asked: vec![true; 3],
        };
        assert!(!replies.settled());
        replies.answers[1] = Some(Ok(()));
        assert!(!replies.settled());
        replies.answers[2] = Some(Ok(()));
        assert!(replies.settled());
        assert_eq!((replies.answered(), replies.pending()), (2, 1));
    }
}
