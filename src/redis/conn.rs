//! The connection a node talks through ([`Conn`]): one server's, a whole cluster's (with the
//! path a migrating slot's requests take, [`super::asking`]), or one a dialer opened
//! ([`super::connector`]); and a cluster's connections kept for `WAIT`. Below the node, which
//! holds one, and the cluster mode, which builds one.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;
use redis::{Arg, Cmd, Pipeline, RedisFuture, RedisResult, Value};

use super::asking::Asking;
use super::connector::Dialed;

/// A cluster's connections for `WAIT` (see [`super::replication`]), taken in turn.
pub struct Waits {
    conns: Vec<ClusterConnection>,
    next: AtomicUsize,
}

impl Waits {
    /// Takes `conns` in turn.
    pub(super) fn new(conns: Vec<ClusterConnection>) -> Self {
        Waits {
            conns,
            next: AtomicUsize::new(0),
        }
    }

    /// The next connection, in turn.
    pub(super) fn next(&self) -> ClusterConnection {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.conns.len();
        self.conns[i].clone()
    }
}

/// The connection a node talks through: one server's, or a whole cluster's.
#[derive(Clone)]
pub enum Conn {
    /// One server: a multiplexed connection, reopened in the background.
    Single(ConnectionManager),
    /// A Redis Cluster: one connection per node, each command routed by its key's slot.
    Cluster(Cluster),
    /// One server over streams a dialer opens (the simulation's, [`super::connector`]).
    Dialed(Dialed),
}

/// A cluster's connection: redis-rs's, and the path a migrating slot's requests take
/// (`redis::asking`: redis-rs follows `ASK` for one command at best, not in a pipeline).
#[derive(Clone)]
pub struct Cluster {
    conn: ClusterConnection,
    asking: Arc<Asking>,
}

impl Cluster {
    /// redis-rs's connection `conn`, and `asking` for a migrating slot.
    pub(super) fn new(conn: ClusterConnection, asking: Arc<Asking>) -> Self {
        Cluster { conn, asking }
    }

    /// One command: through redis-rs, or command by command while the slot migrates.
    async fn command(&mut self, cmd: &Cmd) -> RedisResult<Value> {
        if !(self.asking.active() && keyed(cmd)) {
            match self.conn.req_packed_command(cmd).await {
                Err(e) if keyed(cmd) && self.asking.seen(&e) => {}
                other => return other,
            }
        }
        let mut answers = self.asking.send(&[cmd]).await?;
        Ok(answers.pop().unwrap_or(Value::Nil))
    }

    /// A pipeline: the same; a transaction (none of slotcron's) is left to redis-rs.
    async fn commands(
        &mut self,
        pipeline: &Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        let followed = !pipeline.is_transaction() && pipeline.cmd_iter().any(keyed);
        if !(self.asking.active() && followed) {
            match self.conn.req_packed_commands(pipeline, offset, count).await {
                Err(e) if followed && self.asking.seen(&e) => {}
                other => return other,
            }
        }
        let commands: Vec<&Cmd> = pipeline.cmd_iter().collect();
        self.asking.send(&commands).await
    }
}

/// Whether `cmd` names one of slotcron's keys (all under one hash tag, `{prefix}:…`, so in
/// the one slot a migration moves); keyless commands (`SCRIPT LOAD`, which redis-rs sends to
/// every primary, `PING`, `TIME`) stay with redis-rs. A key comes before any value in
/// slotcron's commands, so a JSON value's `{` is never mistaken for one.
fn keyed(cmd: &Cmd) -> bool {
    let tagged = |a: Arg<&[u8]>| match a {
        Arg::Simple(word) => word.first() == Some(&b'{') && word.contains(&b'}'),
        _ => false,
    };
    cmd.args_iter().skip(1).any(tagged)
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(conn) => conn.req_packed_command(cmd),
            Conn::Cluster(conn) => Box::pin(conn.command(cmd)),
            Conn::Dialed(conn) => Box::pin(conn.command(cmd)),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(conn) => conn.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(conn) => Box::pin(conn.commands(pipeline, offset, count)),
            Conn::Dialed(conn) => Box::pin(conn.commands(pipeline, offset, count)),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(conn) => conn.get_db(),
            Conn::Cluster(cluster) => cluster.conn.get_db(),
            Conn::Dialed(_) => 0,
        }
    }
}
