//! A model of one Redis node, for the simulation only: exactly the commands and scripts
//! slotcron sends, each node on its own clock, as a synchronous, deterministic state machine
//! (no hash order reaches a reply). The rule that tests never mock Redis still holds everywhere
//! else; this model is kept honest by tests/it/sim_model.rs, which sends generated command
//! sequences to it and to real redis-server and valkey-server processes and requires the same
//! replies, decoded by redis-rs's parser.
//!
//! Layout: [`resp`] (the wire), [`args`] (arguments and error lines), [`keyspace`] (values and
//! expiry), one file per value type ([`strings`], [`zsets`], [`hashes`], [`streams`],
//! [`lists`]),
//! [`pubsub`], [`scripts`] (with [`sha1`]), [`server`] (connection and server commands) and
//! [`persistence`] (save and restart). This file holds the node and the command table.
#![allow(dead_code)]

mod args;
mod hashes;
mod keyspace;
mod lists;
mod persistence;
mod pubsub;
mod resp;
mod scripts;
mod server;
mod sha1;
mod streams;
mod strings;
mod zsets;

use std::collections::BTreeMap;

use keyspace::Keyspace;
// What the simulator uses; a test binary that compiles the model uses some of it only.
#[allow(unused_imports)]
pub use resp::{Reply, parse_request};
#[allow(unused_imports)]
pub use scripts::{KNOWN as KNOWN_SCRIPTS, recognise as recognise_script};

/// What a node keeps across a restart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Persistence {
    /// Nothing: it comes back empty.
    None,
    /// Everything it had acknowledged.
    Aof,
    /// What it had at its last [`Node::save`]: it comes back stale.
    Snapshot,
}

/// A client connection to a node, named by the simulator.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub struct ConnId(pub u64);

/// What one command did: the bytes written to its connection, and messages pushed to other
/// connections (a `PUBLISH`'s subscribers), all RESP as redis-server writes them. A message a
/// RESP3 connection publishes to a channel it listens on itself is in `reply`, before the
/// `PUBLISH` count, as redis-server 7.0 writes it (valkey 9 writes it after; slotcron never
/// publishes on a subscribed connection).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Effects {
    pub reply: Vec<u8>,
    pub pushes: Vec<(ConnId, Vec<u8>)>,
}

/// One connection's state.
#[derive(Clone, Debug, PartialEq)]
struct Conn {
    /// RESP version, 2 until a `HELLO 3`.
    proto: u8,
    /// The id `HELLO` and `CLIENT ID` answer.
    client_id: u64,
}

/// One Redis node.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    persistence: Persistence,
    keys: Keyspace,
    /// The keyspace as of the last [`Node::save`] (what a `Snapshot` node restarts with).
    saved: Keyspace,
    scripts: scripts::ScriptCache,
    conns: BTreeMap<ConnId, Conn>,
    channels: pubsub::Channels,
    /// Replying `LOADING` to data commands (a node reading its data after a restart).
    loading: bool,
    next_client_id: u64,
}

/// One command being executed.
pub struct Call<'a> {
    conn: ConnId,
    /// The instant the command runs at (expiry, `TIME`).
    now_us: i64,
    /// What `TIME` reads inside a script (see [`scripts::Clocks`]).
    script_time_us: i64,
    argv: &'a [Vec<u8>],
    pushes: Vec<(ConnId, Vec<u8>)>,
}

type KeysCommand = fn(&mut Keyspace, i64, &[Vec<u8>]) -> Reply;
type NodeCommand = fn(&mut Node, &mut Call) -> Reply;

#[derive(Clone, Copy)]
enum Handler {
    /// A command on the keyspace alone, at the node's clock in ms.
    Keys(KeysCommand),
    /// A command on the node's connections, scripts or pub/sub.
    Node(NodeCommand),
}

/// One command the model covers, with redis-server's arity (negative: at least) and flags.
struct Spec {
    name: &'static str,
    arity: i32,
    handler: Handler,
    /// Allowed while the node is loading (redis-server's `loading` flag).
    loading: bool,
    /// Allowed on a subscribed RESP2 connection.
    pubsub: bool,
}

const fn keys(name: &'static str, arity: i32, f: KeysCommand) -> Spec {
    Spec {
        name,
        arity,
        handler: Handler::Keys(f),
        loading: false,
        pubsub: false,
    }
}

const fn node(name: &'static str, arity: i32, f: NodeCommand, loading: bool, pubsub: bool) -> Spec {
    Spec {
        name,
        arity,
        handler: Handler::Node(f),
        loading,
        pubsub,
    }
}

/// Every command the model answers; anything else is redis-server's "unknown command".
const COMMANDS: &[Spec] = &[
    keys("get", 2, strings::get),
    keys("set", -3, strings::set),
    keys("mget", -2, strings::mget),
    keys("del", -2, strings::del),
    keys("pexpire", -3, strings::pexpire),
    keys("zadd", -4, zsets::zadd),
    keys("zrem", -3, zsets::zrem),
    keys("zcard", 2, zsets::zcard),
    keys("zrange", -4, zsets::zrange),
    keys("zremrangebyscore", 4, zsets::zremrangebyscore),
    keys("hset", -4, hashes::hset),
    keys("hgetall", 2, hashes::hgetall),
    keys("hdel", -3, hashes::hdel),
    keys("xadd", -5, streams::xadd),
    keys("xrange", -4, streams::xrange_forward),
    keys("xrevrange", -4, streams::xrevrange),
    keys("xread", -4, streams::xread),
    keys("xdel", -3, streams::xdel),
    keys("lrange", 4, lists::lrange),
    node("eval", -3, eval, false, false),
    node("evalsha", -3, evalsha, false, false),
    node("script", -2, script, false, false),
    node("publish", 3, publish, true, false),
    node("subscribe", -2, subscribe, true, true),
    node("unsubscribe", -1, unsubscribe, true, true),
    node("pubsub", -2, pubsub_command, true, false),
    node("ping", -1, server::ping, false, true),
    node("hello", -1, server::hello, true, false),
    node("time", 1, server::time, true, false),
    node("wait", 3, server::wait, false, false),
    node("client", -2, server::client, true, false),
    node("select", 2, server::select, true, false),
    node("auth", -2, server::auth, true, false),
    node("cluster", -2, server::cluster, true, false),
    node("asking", 1, server::cluster, false, false),
];

/// The lowercase names of every command the model answers.
pub fn command_names() -> Vec<&'static str> {
    COMMANDS.iter().map(|c| c.name).collect()
}

/// How long redis-server takes to answer `argv` on a standalone node, in µs, when it blocks:
/// `WAIT n timeout` with `n > 0` waits its whole timeout for replicas it does not have (for
/// ever when the timeout is 0: `i64::MAX`); anything else answers at once (0).
pub fn reply_delay_us(argv: &[Vec<u8>]) -> i64 {
    let [name, replicas, timeout] = argv else {
        return 0;
    };
    match (
        args::is(name, "WAIT"),
        args::int(replicas),
        args::int(timeout),
    ) {
        (true, Ok(n), Ok(0)) if n > 0 => i64::MAX,
        (true, Ok(n), Ok(ms)) if n > 0 && ms > 0 => ms.saturating_mul(1000),
        _ => 0,
    }
}

impl Node {
    pub fn new(persistence: Persistence) -> Node {
        Node {
            persistence,
            keys: Keyspace::default(),
            saved: Keyspace::default(),
            scripts: scripts::ScriptCache::default(),
            conns: BTreeMap::new(),
            channels: pubsub::Channels::default(),
            loading: false,
            next_client_id: 1,
        }
    }

    /// The string at `key` at this node's clock `now_us`, as an observer sees it: the node's
    /// state is not touched (no expiry, no sweep).
    pub fn peek(&self, key: &[u8], now_us: i64) -> Option<&[u8]> {
        self.keys.peek(key, now_us.div_euclid(1000))
    }

    /// One command from connection `conn`, executed at this node's own clock `now_us` (µs since
    /// the epoch; `TIME` answers it, expiry is judged on it).
    pub fn execute(&mut self, conn: ConnId, now_us: i64, argv: &[Vec<u8>]) -> Effects {
        self.execute_at(conn, now_us, now_us, argv)
    }

    /// [`Self::execute`], with a script's `TIME` reading `script_time_us` rather than `now_us`
    /// (redis-server's live clock may tick to the next millisecond during a script: the
    /// differential test tries both; the simulator has no use for it).
    pub fn execute_at(
        &mut self,
        conn: ConnId,
        now_us: i64,
        script_time_us: i64,
        argv: &[Vec<u8>],
    ) -> Effects {
        let mut call = Call {
            conn,
            now_us,
            script_time_us,
            argv,
            pushes: Vec::new(),
        };
        let reply = self.answer(&mut call);
        let proto = self.conn(conn).proto;
        let (own, pushes): (Vec<_>, Vec<_>) =
            call.pushes.into_iter().partition(|(to, _)| *to == conn);
        let mut bytes: Vec<u8> = own.into_iter().flat_map(|(_, push)| push).collect();
        reply.encode(proto, &mut bytes);
        Effects {
            reply: bytes,
            pushes,
        }
    }

    /// The reply to one command, before it is written.
    fn answer(&mut self, call: &mut Call) -> Reply {
        let argv = call.argv;
        let Some(first) = argv.first() else {
            return Reply::Many(Vec::new());
        };
        let name = String::from_utf8_lossy(first).to_ascii_lowercase();
        let Some(spec) = COMMANDS.iter().find(|c| c.name == name) else {
            return args::unknown_command(argv);
        };
        let n = argv.len() as i32;
        if (spec.arity > 0 && n != spec.arity) || n < spec.arity.abs() {
            return args::arity(spec.name);
        }
        if self.subscribed_resp2(call.conn) && !spec.pubsub {
            let name = full_name(spec, argv);
            return Reply::error(format!(
                "ERR Can't execute '{name}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context"
            ));
        }
        if self.loading && !spec.loading {
            return Reply::error(args::LOADING);
        }
        self.keys.sweep(call.now_us.div_euclid(1000));
        match spec.handler {
            Handler::Keys(f) => f(&mut self.keys, call.now_us.div_euclid(1000), argv),
            Handler::Node(f) => f(self, call),
        }
    }

    /// Drops `conn`'s subscriptions and per-connection state (it closed).
    pub fn disconnect(&mut self, conn: ConnId) {
        self.channels.drop_conn(conn);
        self.conns.remove(&conn);
    }

    /// Replies `LOADING ...` to data commands while `loading`.
    pub fn set_loading(&mut self, loading: bool) {
        self.loading = loading;
    }

    /// The state of `conn`, made on its first command.
    fn conn(&mut self, conn: ConnId) -> &mut Conn {
        let next = &mut self.next_client_id;
        self.conns.entry(conn).or_insert_with(|| {
            *next += 1;
            Conn {
                proto: 2,
                client_id: *next - 1,
            }
        })
    }

    /// Whether `conn` is a RESP2 connection with a subscription (it may then only subscribe,
    /// unsubscribe and ping).
    fn subscribed_resp2(&self, conn: ConnId) -> bool {
        let proto = self.conns.get(&conn).map_or(2, |c| c.proto);
        proto == 2 && self.channels.count(conn) > 0
    }
}

/// A command's name as redis-server's errors spell it: `pubsub|numsub` for a subcommand.
fn full_name(spec: &Spec, argv: &[Vec<u8>]) -> String {
    let containers = ["pubsub", "client", "cluster", "script"];
    match argv.get(1) {
        Some(sub) if containers.contains(&spec.name) => {
            format!(
                "{}|{}",
                spec.name,
                String::from_utf8_lossy(sub).to_ascii_lowercase()
            )
        }
        _ => spec.name.to_owned(),
    }
}

impl Call<'_> {
    fn clocks(&self) -> scripts::Clocks {
        scripts::Clocks {
            start_us: self.now_us,
            time_us: self.script_time_us,
        }
    }
}

fn eval(node: &mut Node, call: &mut Call) -> Reply {
    scripts::eval(
        &mut node.scripts,
        &mut node.keys,
        call.clocks(),
        call.argv,
        false,
    )
}

fn evalsha(node: &mut Node, call: &mut Call) -> Reply {
    scripts::eval(
        &mut node.scripts,
        &mut node.keys,
        call.clocks(),
        call.argv,
        true,
    )
}

fn script(node: &mut Node, call: &mut Call) -> Reply {
    scripts::script(&mut node.scripts, call.argv)
}

fn subscribe(node: &mut Node, call: &mut Call) -> Reply {
    node.conn(call.conn);
    node.channels.subscribe(call.conn, &call.argv[1..])
}

fn unsubscribe(node: &mut Node, call: &mut Call) -> Reply {
    node.channels.unsubscribe(call.conn, &call.argv[1..])
}

/// `PUBLISH channel message`: the count, and the message pushed to each subscriber in its
/// connection's protocol.
fn publish(node: &mut Node, call: &mut Call) -> Reply {
    let (receivers, message) = node.channels.publish(&call.argv[1], &call.argv[2]);
    for receiver in &receivers {
        let proto = node.conn(*receiver).proto;
        call.pushes.push((*receiver, message.to_bytes(proto)));
    }
    Reply::Int(receivers.len() as i64)
}

/// `PUBSUB NUMSUB channel ...` (the one subcommand slotcron sends).
fn pubsub_command(node: &mut Node, call: &mut Call) -> Reply {
    let argv = call.argv;
    if args::is(&argv[1], "NUMSUB") {
        node.channels.numsub(&argv[2..])
    } else if ["CHANNELS", "NUMPAT", "SHARDCHANNELS", "SHARDNUMSUB"]
        .iter()
        .any(|w| args::is(&argv[1], w))
    {
        args::unmodelled("PUBSUB other than NUMSUB")
    } else {
        args::unknown_subcommand("PUBSUB", &argv[1])
    }
}
