//! A slot migration followed command by command (cluster mode): `ASK` with `ASKING` in front
//! of each redirected command, `TRYAGAIN` retried, `MOVED` followed.
//!
//! Why this is built here rather than left to redis-rs's cluster client (1.8.1, and its main
//! branch as of 2026-08, `cluster_handling/async_connection`): when any reply of a pipeline
//! is `ASK`, `choose_response` (request.rs) retries the *whole* pipeline at the `ASK` target,
//! and `get_redirected_connection` (mod.rs) sends one `ASKING` before it, as a request of its
//! own on the node's shared multiplexed connection. So:
//! - only the pipeline's first command carries the flag: the importing node answers the others
//!   `MOVED` (back to the migrating node), which answers `ASK` again, until the retries run out
//!   (measured: every race `unavailable: … Ask`, and a slot-map refresh at each `MOVED`);
//! - the commands the migrating node had already run (their keys were still there) run again
//!   at the target, where their keys are not: a `SET NX` there wins a key another replica holds;
//! - another request on the shared connection can land between `ASKING` and the command and
//!   take the flag (a replica races a dozen jobs at once), so even one command can bounce.
//!
//! What is missing is small, because every key of slotcron is under one hash tag (one slot,
//! [`super::cluster`]): the answers come back one per command, and only the commands that were
//! redirected go again: the `ASK`ed ones to the target, each as `ASKING` + command inside one
//! pipeline (written in one piece, so nothing lands between them), the `TRYAGAIN`ed ones after
//! [`TRYAGAIN_PAUSE`], the `MOVED` ones to the new owner. It is used only while a migration is
//! seen ([`Asking::active`]): redis-rs keeps every other case (routing, failovers). The limit:
//! the request that first meets a migration is redis-rs's, retried by it as above until it
//! gives up `ASK` (or `TRYAGAIN`); its answer is then taken again on this path.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{Cmd, ErrorKind, Pipeline, RedisError, RedisResult, ServerErrorKind, Value};

use super::node_url::{NodeUrl, client};

/// How long keyed requests keep going through this path after the last `ASK` or `TRYAGAIN`:
/// `redis-cli --cluster reshard` moves a slot in seconds; past it, redis-rs follows the final
/// `MOVED` itself.
const MIGRATION_HOLD: Duration = Duration::from_secs(10);
/// Wait before a command answered `TRYAGAIN` (a multi-key command whose keys are split
/// between the two nodes) is sent again: the keys move a batch at a time.
const TRYAGAIN_PAUSE: Duration = Duration::from_millis(25);
/// Hops one command may take (owner, target, again): the caller's wait bounds them anyway.
const MAX_HOPS: usize = 64;

/// Where a command goes next.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Hop {
    /// To the slot's owner, as the last `MOVED` named it.
    Owner,
    /// To the node an `ASK` named, behind `ASKING`.
    Ask(String),
}

/// A cluster member's path for requests while its slot migrates.
pub(super) struct Asking {
    /// Until when keyed requests take this path; `None`: no migration seen lately.
    until: Mutex<Option<Instant>>,
    /// The slot's owner (`host:port`) as the last `MOVED` named it (or the first `ASK`'s target,
    /// which names it in its `MOVED`).
    owner: Mutex<Option<String>>,
    /// One connection per node, opened when first needed.
    conns: tokio::sync::Mutex<HashMap<String, MultiplexedConnection>>,
    /// A seed's URL: its credentials and scheme, for any node of the cluster.
    template: NodeUrl,
    /// `ca_file`'s roots, for `rediss://`.
    ca: Option<Vec<u8>>,
}

impl Asking {
    pub(super) fn new(template: &NodeUrl, ca: Option<&[u8]>) -> Self {
        Asking {
            until: Mutex::new(None),
            owner: Mutex::new(None),
            conns: tokio::sync::Mutex::default(),
            template: template.clone(),
            ca: ca.map(<[u8]>::to_vec),
        }
    }

    /// Whether a migration was seen within [`MIGRATION_HOLD`].
    pub(super) fn active(&self) -> bool {
        let until = self.until.lock().unwrap_or_else(PoisonError::into_inner);
        until.is_some_and(|u| Instant::now() < u)
    }

    /// Whether redis-rs gave up on `error` because the slot migrates; if so, this path is
    /// taken from now on, starting at the node the `ASK` named.
    pub(super) fn seen(&self, error: &RedisError) -> bool {
        let migrating = matches!(
            error.kind(),
            ErrorKind::Server(ServerErrorKind::Ask | ServerErrorKind::TryAgain)
        );
        if migrating {
            self.hold();
            if let Some((addr, _)) = error.redirect_node() {
                let mut owner = self.owner.lock().unwrap_or_else(PoisonError::into_inner);
                // The target answers `MOVED` to the owner: the next hop learns it.
                owner.get_or_insert_with(|| addr.to_owned());
            }
        }
        migrating
    }

    fn hold(&self) {
        *self.until.lock().unwrap_or_else(PoisonError::into_inner) =
            Some(Instant::now() + MIGRATION_HOLD);
    }

    /// `commands` with their answers one per command, each followed to the node that holds
    /// its key: the whole request's error only when a node could not be reached. A command
    /// still redirected after [`MAX_HOPS`] answers with its last redirection.
    pub(super) async fn send(&self, commands: &[&Cmd]) -> RedisResult<Vec<Value>> {
        let mut answers: Vec<Value> = vec![Value::Nil; commands.len()];
        let mut todo: Vec<(usize, Hop)> = (0..commands.len()).map(|i| (i, Hop::Owner)).collect();
        for _ in 0..MAX_HOPS {
            if todo.is_empty() {
                break;
            }
            let mut next = Vec::new();
            for (hop, indices) in by_hop(&todo) {
                let sent: Vec<&Cmd> = indices.iter().map(|&i| commands[i]).collect();
                let replies = self.hop(&hop, &sent).await?;
                for (i, reply) in indices.into_iter().zip(replies) {
                    if let Some(again) = self.redirected(&reply, &hop) {
                        next.push((i, again));
                    }
                    answers[i] = reply;
                }
            }
            // The same command to the same node again: it was told TRYAGAIN.
            if next.iter().any(|step| todo.contains(step)) {
                tokio::time::sleep(TRYAGAIN_PAUSE).await;
            }
            todo = next;
        }
        Ok(answers)
    }

    /// Where `reply`, an answer at `hop`, sends its command next; `None`: it is the answer.
    fn redirected(&self, reply: &Value, hop: &Hop) -> Option<Hop> {
        let error = match reply {
            Value::ServerError(_) => reply.clone().extract_error().err()?,
            _ => return None,
        };
        let addr = error.redirect_node().map(|(addr, _)| addr.to_owned());
        match (error.kind(), addr) {
            (ErrorKind::Server(ServerErrorKind::Ask), Some(addr)) => {
                self.hold();
                Some(Hop::Ask(addr))
            }
            (ErrorKind::Server(ServerErrorKind::Moved), Some(addr)) => {
                *self.owner.lock().unwrap_or_else(PoisonError::into_inner) = Some(addr);
                Some(Hop::Owner)
            }
            (ErrorKind::Server(ServerErrorKind::TryAgain), _) => {
                self.hold();
                Some(hop.clone())
            }
            _ => None,
        }
    }

    /// `commands` sent in one pipeline to `hop`'s node, `ASKING` before each for an `ASK`.
    async fn hop(&self, hop: &Hop, commands: &[&Cmd]) -> RedisResult<Vec<Value>> {
        let (addr, asking) = match hop {
            Hop::Owner => (self.owner_addr(), false),
            Hop::Ask(addr) => (addr.clone(), true),
        };
        let mut pipe = Pipeline::new();
        for command in commands {
            if asking {
                pipe.cmd("ASKING");
            }
            pipe.add_command((*command).clone());
        }
        let mut conn = self.conn(&addr).await?;
        let replies = match conn.req_packed_commands(&pipe, 0, pipe.len()).await {
            Ok(replies) => replies,
            Err(e) => {
                // The node is gone (a failover meanwhile): redis-rs finds the new owner.
                self.conns.lock().await.remove(&addr);
                *self.until.lock().unwrap_or_else(PoisonError::into_inner) = None;
                return Err(e);
            }
        };
        let step = if asking { 2 } else { 1 };
        Ok(replies.into_iter().skip(step - 1).step_by(step).collect())
    }

    /// The owner as last named; a seed until then (any node answers `MOVED` to the owner).
    fn owner_addr(&self) -> String {
        let owner = self.owner.lock().unwrap_or_else(PoisonError::into_inner);
        owner.clone().unwrap_or_else(|| self.template.address())
    }

    /// The connection to `addr`, opened with the seeds' credentials when first needed.
    async fn conn(&self, addr: &str) -> RedisResult<MultiplexedConnection> {
        let mut conns = self.conns.lock().await;
        if let Some(conn) = conns.get(addr) {
            return Ok(conn.clone());
        }
        let url = self.url_of(addr)?;
        let client = client(&url, self.ca.as_deref()).map_err(|e| e.source)?;
        let conn = client.get_multiplexed_async_connection().await?;
        conns.insert(addr.to_owned(), conn.clone());
        Ok(conn)
    }

    /// The seed's URL with `addr`'s host and port.
    fn url_of(&self, addr: &str) -> RedisResult<NodeUrl> {
        let bad = || RedisError::from((ErrorKind::Client, "bad redirect", addr.to_owned()));
        let (host, port) = addr.rsplit_once(':').ok_or_else(bad)?;
        let mut url = self.template.expose().clone();
        url.set_host(Some(host)).map_err(|_| bad())?;
        url.set_port(Some(port.parse().map_err(|_| bad())?))
            .map_err(|_| bad())?;
        NodeUrl::parse(url.as_str()).map_err(|_| bad())
    }
}

/// `todo`'s commands grouped by where they go, in order.
fn by_hop(todo: &[(usize, Hop)]) -> Vec<(Hop, Vec<usize>)> {
    let mut groups: Vec<(Hop, Vec<usize>)> = Vec::new();
    for (i, hop) in todo {
        match groups.iter_mut().find(|(h, _)| h == hop) {
            Some((_, indices)) => indices.push(*i),
            None => groups.push((hop.clone(), vec![*i])),
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_go_in_groups_by_hop_keeping_their_order() {
        let ask = Hop::Ask("10.0.0.2:6379".into());
        let todo = [(0, Hop::Owner), (1, ask.clone()), (2, Hop::Owner)];
        assert_eq!(
            by_hop(&todo),
            vec![(Hop::Owner, vec![0, 2]), (ask, vec![1])]
        );
    }
}
