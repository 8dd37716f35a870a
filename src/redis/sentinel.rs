//! Sentinel mode: `nodes` are the sentinels, and the lock lives on the one primary they name.
//! The pool holds that primary as its one member ([`super::Nodes`], quorum 1); this module
//! finds it and follows it across failovers:
//! - at start, the sentinels are asked `SENTINEL get-master-addr-by-name NAME`, and the address
//!   most of them give is checked with `HELLO` (its `role` must be `master`: never a replica)
//!   before any request goes to it;
//! - then a `Follower` task re-resolves when a sentinel announces `+switch-master` for the
//!   name (each sentinel's pub/sub, through [`super::pubsub`]), and when a request to the
//!   primary fails without an answer or with `READONLY` (the primary was demoted): the pool's
//!   health rule notifies it. A new primary, checked the same way, replaces the member's node
//!   (the old one's requests end on their own bounds).
//!
//! Why this is built here rather than taken from redis-rs 1.x's `sentinel` feature: its
//! `Sentinel`/`SentinelClient` resolve the primary when a connection is opened (asking the
//! sentinels, then `ROLE` on the answer) and cache it, but nothing follows `+switch-master` or
//! drops a connection to a primary that was demoted (redis-rs #1438, open): a multiplexed
//! connection that stays open stays on the old server. Its check also uses `ROLE`, which the
//! least-privilege ACL line refuses (`NOPERM` on Redis 7.0); `HELLO` is allowed. What is missing is
//! small (a subscription per sentinel, one resolve), and the pool already has every piece.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::layout::{Follower, PrimaryAuth};
use super::node::{Node, NodeError};
use super::node_url::{FIRST_CONNECTION_WAIT, NodeSetupError, NodeUrl};
use super::pool::{Current, Nodes, Replies};
use super::pubsub::{self, Heard};

/// The sentinels' channel announcing a failover: `NAME old-ip old-port new-ip new-port`.
const SWITCH_MASTER: &str = "+switch-master";
/// Least time between two resolutions: a primary that is down fails every request, and each
/// failure asks for a resolution; the sentinels need not hear all of them.
const RESOLVE_GAP: Duration = Duration::from_millis(100);

/// No sentinel named a primary that is one.
#[derive(Debug, thiserror::Error)]
#[error("no sentinel of [redis] nodes names a primary for master {master:?}: {why}")]
pub struct NoPrimary {
    /// The monitored name (`master`).
    pub master: String,
    /// What the sentinels and the candidates answered.
    pub why: String,
}

/// How to reach the primary: the sentinels, the name they know it by, how to connect to it.
pub(super) struct Sentinels {
    /// The name asked for, and looked for in `+switch-master` announcements.
    master: String,
    /// The sentinels, a pool of their own (their health kept like the data nodes').
    pool: Arc<Nodes>,
    /// A sentinel's URL with the primary's credentials: the host and port are the resolution's.
    template: NodeUrl,
    /// The data nodes' `node_timeout`, for each primary's node.
    node_timeout: Duration,
    /// `ca_file`: a `rediss://` primary is checked against the same roots as the sentinels.
    ca: Option<Vec<u8>>,
}

impl fmt::Debug for Sentinels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Sentinels({} via {:?})", self.master, self.pool)
    }
}

impl Sentinels {
    /// The sentinels of `urls`, for `master`; nothing is opened yet.
    pub(super) fn new(
        urls: &[NodeUrl],
        master: &str,
        auth: &PrimaryAuth,
        node_timeout: Duration,
        ca: Option<&[u8]>,
        replica: &str,
    ) -> Result<Self, NodeSetupError> {
        let pool = Nodes::connect(urls, node_timeout, ca, replica)?;
        Ok(Sentinels {
            master: master.to_owned(),
            pool: Arc::new(pool),
            template: with_auth(&urls[0], auth),
            node_timeout,
            ca: ca.map(<[u8]>::to_vec),
        })
    }

    /// The monitored name.
    pub(super) fn master(&self) -> &str {
        &self.master
    }

    /// The primary now: the address most sentinels name that `HELLO` says is a primary,
    /// `current` reused when it is that address.
    pub(super) async fn resolve(
        &self,
        current: Option<&Arc<Node>>,
        wait: Duration,
    ) -> Result<Arc<Node>, NoPrimary> {
        let candidates = self.candidates(wait).await?;
        let mut refused = Vec::new();
        for (host, port) in candidates {
            let node = match current.filter(|n| n.address() == format!("{host}:{port}")) {
                Some(node) => node.clone(),
                None => Arc::new(self.node_at(&host, port).map_err(|e| self.no(e))?),
            };
            match super::independence::hello_role(&node, wait).await {
                Ok(role) if super::independence::is_primary(&role) => return Ok(node),
                Ok(role) => refused.push(format!("{} is a {role}", node.address())),
                Err(e) => refused.push(e.to_string()),
            }
        }
        Err(self.no(refused.join("; ")))
    }

    /// The addresses the sentinels name, the most named first.
    async fn candidates(&self, wait: Duration) -> Result<Vec<(String, u16)>, NoPrimary> {
        let mut cmd = redis::cmd("SENTINEL");
        cmd.arg("get-master-addr-by-name").arg(&self.master);
        let replies = (self.pool)
            .query::<Option<(String, u16)>>(cmd, wait, Replies::settled)
            .await;
        let mut votes: HashMap<(String, u16), usize> = HashMap::new();
        for address in replies.values().flatten() {
            *votes.entry(address.clone()).or_default() += 1;
        }
        if votes.is_empty() {
            let errors: Vec<String> = replies.errors().map(NodeError::to_string).collect();
            let why = match errors.is_empty() {
                true => "the sentinels do not monitor that name".to_owned(),
                false => errors.join("; "),
            };
            return Err(self.no(why));
        }
        let mut ranked: Vec<_> = votes.into_iter().collect();
        ranked.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        Ok(ranked.into_iter().map(|(address, _)| address).collect())
    }

    /// A node for the primary at `host:port`, with the primary's credentials.
    fn node_at(&self, host: &str, port: u16) -> Result<Node, NodeSetupError> {
        let mut url = self.template.expose().clone();
        // A host the sentinels name always fits a redis:// URL.
        let _ = url.set_host(Some(host));
        let _ = url.set_port(Some(port));
        let url = NodeUrl::parse(url.as_str()).expect("a sentinel URL with another host and port");
        Node::new(&url, self.node_timeout, self.ca.as_deref())
    }

    fn no(&self, why: impl ToString) -> NoPrimary {
        NoPrimary {
            master: self.master.clone(),
            why: why.to_string(),
        }
    }
}

/// `url` with the primary's credentials where they are given.
fn with_auth(url: &NodeUrl, auth: &PrimaryAuth) -> NodeUrl {
    let mut url = url.expose().clone();
    if let Some(user) = &auth.username {
        let _ = url.set_username(user);
    }
    if let Some(password) = &auth.password {
        let _ = url.set_password(Some(password));
    }
    NodeUrl::parse(url.as_str()).expect("a sentinel URL with other credentials")
}

/// Starts following the primary `sentinels` name: `current` is replaced by each new primary; `trouble` is notified by
/// the pool when a request to it fails without an answer or with `READONLY`.
pub(super) fn follow(
    sentinels: Arc<Sentinels>,
    current: Arc<Current>,
    trouble: Arc<Notify>,
    replica: Arc<str>,
) -> Follower {
    let (stop, tasks) = (CancellationToken::new(), TaskTracker::new());
    let heard = pubsub::subscribe_all(&sentinels.pool, SWITCH_MASTER, &tasks, &stop);
    let follow = Follow {
        sentinels,
        current,
        trouble,
        replica,
        stop: stop.clone(),
    };
    tasks.spawn(follow.run(heard));
    tasks.close();
    Follower::new(stop, tasks)
}

/// The follower's state.
struct Follow {
    /// Where a resolution asks.
    sentinels: Arc<Sentinels>,
    /// The pool member's node, replaced by each new primary.
    current: Arc<Current>,
    /// Notified by the pool's health rule: the primary did not answer, or refused a write.
    trouble: Arc<Notify>,
    /// This replica's name, for the log lines.
    replica: Arc<str>,
    /// Shutdown.
    stop: CancellationToken,
}

impl Follow {
    /// Resolves at each switch-master for the name, each (re)subscription (an announcement may
    /// have been missed) and each trouble the pool reports, until stopped.
    async fn run(self, mut heard: tokio::sync::mpsc::Receiver<Heard>) {
        let announcement = format!("{} ", self.sentinels.master);
        loop {
            tokio::select! {
                biased;
                _ = self.trouble.notified() => {}
                message = pubsub::next(&mut heard, &self.stop) => match message {
                    None => return,
                    Some(Heard::Message(m)) if !m.starts_with(&announcement) => continue,
                    Some(_) => {}
                },
            }
            self.follow_once().await;
            tokio::select! {
                biased;
                _ = self.stop.cancelled() => return,
                _ = tokio::time::sleep(RESOLVE_GAP) => {}
            }
        }
    }

    /// One resolution: a new primary replaces the member's node, and is logged.
    async fn follow_once(&self) {
        let now = self.current.get();
        let wait = self.sentinels.node_timeout.max(FIRST_CONNECTION_WAIT);
        match self.sentinels.resolve(Some(&now), wait).await {
            Ok(node) if node.address() != now.address() => {
                tracing::warn!(replica = %self.replica, master = %self.sentinels.master,
                    primary = %node.address(), previous = %now.address(),
                    "redis primary changed (sentinel failover): following it");
                self.current.set(node);
            }
            Ok(_) => {}
            Err(e) => tracing::debug!(replica = %self.replica, error = %e,
                "no primary to follow yet; the current one is kept"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_primary_takes_its_own_credentials_or_the_sentinels() {
        let sentinel = NodeUrl::parse("redis://s:spw@10.0.0.1:26379").unwrap();
        let own = PrimaryAuth {
            username: Some("slot".into()),
            password: Some("ppw".into()),
        };
        let url = with_auth(&sentinel, &own);
        assert_eq!(url.expose().username(), "slot");
        assert_eq!(url.password(), Some("ppw"));
        let same = with_auth(&sentinel, &PrimaryAuth::default());
        assert_eq!(same.password(), Some("spw"));
    }
}
