//! The connection's and the server's own commands: `PING`, `HELLO`, `TIME`, `WAIT`, `CLIENT`,
//! `SELECT`, `AUTH`, and what a standalone node answers to the cluster's and Sentinel's.

use super::args::{self, SYNTAX, is};
use super::resp::Reply;
use super::{Call, Node};

/// What `HELLO` names the server: the redis-server the differential test runs (slotcron reads
/// only `role`).
const SERVER: &str = "redis";
const VERSION: &str = "7.0.15";

/// `PING [message]`: in RESP2 a subscribed connection gets `["pong", message]`.
pub fn ping(node: &mut Node, call: &mut Call) -> Reply {
    let message = call.argv.get(1);
    if node.subscribed_resp2(call.conn) {
        let echo = message.map_or(Reply::text(""), |m| Reply::bulk(m));
        return Reply::Array(vec![Reply::text("pong"), echo]);
    }
    match message {
        Some(m) => Reply::bulk(m),
        None => Reply::Simple("PONG".into()),
    }
}

/// `HELLO [protover [AUTH user pass] [SETNAME name]]`: switches the connection's protocol and
/// describes the server, in the new protocol.
pub fn hello(node: &mut Node, call: &mut Call) -> Reply {
    let argv = call.argv;
    let proto = match argv.get(1).map(|v| args::int(v)) {
        None => node.conn(call.conn).proto,
        Some(Ok(v @ 2..=3)) => v as u8,
        Some(Ok(_)) => return Reply::error("NOPROTO unsupported protocol version"),
        Some(Err(_)) => {
            return Reply::error("ERR Protocol version is not an integer or out of range");
        }
    };
    let mut i = 2;
    while i < argv.len() {
        let more = argv.len() - i - 1;
        if is(&argv[i], "AUTH") && more >= 2 {
            if let Err(e) = authenticate(&argv[i + 1]) {
                return e;
            }
            i += 3;
        } else if is(&argv[i], "SETNAME") && more >= 1 {
            i += 2;
        } else {
            let option = args::lossy(&argv[i]);
            return Reply::error(format!("ERR Syntax error in HELLO option '{option}'"));
        }
    }
    let conn = node.conn(call.conn);
    conn.proto = proto;
    let id = conn.client_id;
    let field = |name: &str, value: Reply| (Reply::text(name), value);
    Reply::Map(vec![
        field("server", Reply::text(SERVER)),
        field("version", Reply::text(VERSION)),
        field("proto", Reply::Int(proto as i64)),
        field("id", Reply::Int(id as i64)),
        field("mode", Reply::text("standalone")),
        field("role", Reply::text("master")),
        field("modules", Reply::Array(Vec::new())),
    ])
}

/// The model's nodes have no password: the default user takes any (`nopass`), as a
/// redis-server without `requirepass` does.
fn authenticate(user: &[u8]) -> Result<(), Reply> {
    if user == b"default" {
        Ok(())
    } else {
        Err(Reply::error(
            "WRONGPASS invalid username-password pair or user is disabled.",
        ))
    }
}

/// `AUTH [user] password`.
pub fn auth(_: &mut Node, call: &mut Call) -> Reply {
    match call.argv {
        [_, _] => Reply::error(
            "ERR AUTH <password> called without any password configured for the default user. \
             Are you sure your configuration is correct?",
        ),
        [_, user, _] => authenticate(user).map_or_else(|e| e, |()| Reply::Ok),
        _ => Reply::error(SYNTAX),
    }
}

/// `TIME`: the node's clock, seconds and microseconds.
pub fn time(_: &mut Node, call: &mut Call) -> Reply {
    let (secs, micros) = (
        call.now_us.div_euclid(1_000_000),
        call.now_us.rem_euclid(1_000_000),
    );
    Reply::Array(vec![
        Reply::text(&secs.to_string()),
        Reply::text(&micros.to_string()),
    ])
}

/// `WAIT numreplicas timeout`: a standalone node has no replica, so 0. (redis-server answers
/// at once when `numreplicas` is 0, and after `timeout` otherwise: when to deliver the answer
/// is the simulator's business, see [`super::reply_delay_us`].)
pub fn wait(_: &mut Node, call: &mut Call) -> Reply {
    if let Err(e) = args::int(&call.argv[1]) {
        return e;
    }
    match args::int(&call.argv[2]) {
        Ok(t) if t < 0 => Reply::error("ERR timeout is negative"),
        Ok(_) => Reply::Int(0),
        Err(_) => Reply::error("ERR timeout is not an integer or out of range"),
    }
}

/// `CLIENT SETINFO | SETNAME | ID` (redis-rs sends `SETINFO` on connecting, and ignores the
/// answer: redis-server 7.0 refuses it, 7.2 and later and valkey accept it; the model accepts).
pub fn client(node: &mut Node, call: &mut Call) -> Reply {
    let argv = call.argv;
    let sub = argv[1].to_ascii_uppercase();
    match (sub.as_slice(), argv.len()) {
        (b"SETINFO", 4) if is(&argv[2], "LIB-NAME") || is(&argv[2], "LIB-VER") => Reply::Ok,
        (b"SETINFO", 4) => Reply::error(format!(
            "ERR Unrecognized option '{}'",
            args::lossy(&argv[2])
        )),
        (b"SETINFO", _) => args::arity("client|setinfo"),
        (b"SETNAME", 3) => Reply::Ok,
        (b"SETNAME", _) => args::arity("client|setname"),
        (b"ID", 2) => Reply::Int(node.conn(call.conn).client_id as i64),
        _ => args::unknown_subcommand("CLIENT", &argv[1]),
    }
}

/// `SELECT index`: slotcron uses database 0 only, the only one the model keeps.
pub fn select(_: &mut Node, call: &mut Call) -> Reply {
    match args::int(&call.argv[1]) {
        Ok(0) => Reply::Ok,
        Ok(1..=15) => args::unmodelled("a database other than 0"),
        Ok(_) => Reply::error("ERR DB index is out of range"),
        Err(e) => e,
    }
}

/// `CLUSTER ...` and `ASKING` on a node that is not a cluster member (what the independence
/// check and the cluster mode's probes meet on a standalone node).
pub fn cluster(_: &mut Node, _: &mut Call) -> Reply {
    Reply::error("ERR This instance has cluster support disabled")
}
