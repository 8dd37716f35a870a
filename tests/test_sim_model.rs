//! The simulation's Redis model (tests/sim/model) against real redis-server and valkey-server.
#[path = "sim/model/mod.rs"]
mod model;

use model::{ConnId, Node, Persistence};
use redis::Value;

fn argv(words: &[&str]) -> Vec<Vec<u8>> {
    words.iter().map(|w| w.as_bytes().to_vec()).collect()
}

fn run(node: &mut Node, now_ms: i64, words: &[&str]) -> Value {
    let effects = node.execute(ConnId(1), now_ms * 1000, &argv(words));
    redis::parse_redis_value(&effects.reply).unwrap()
}

fn bulk(text: &str) -> Value {
    Value::BulkString(text.as_bytes().to_vec())
}

fn error_code(value: &Value) -> Option<String> {
    match value {
        Value::ServerError(e) => Some(e.code().to_owned()),
        _ => None,
    }
}

/// A lock's life on the model: claimed with `SET NX PX GET`, refused to another claimer while
/// held, still held at its deadline and gone one millisecond after (redis-server's rule).
#[test]
fn model_lock_claim_expires_on_the_node_clock() {
    let mut n = Node::new(Persistence::None);
    assert_eq!(
        run(&mut n, 1000, &["SET", "k", "a", "NX", "PX", "100", "GET"]),
        Value::Nil
    );
    assert_eq!(
        run(&mut n, 1050, &["SET", "k", "b", "NX", "PX", "100", "GET"]),
        bulk("a")
    );
    assert_eq!(run(&mut n, 1100, &["GET", "k"]), bulk("a"));
    assert_eq!(run(&mut n, 1101, &["GET", "k"]), Value::Nil);
    run(&mut n, 1101, &["ZADD", "z", "1", "m"]);
    assert_eq!(
        error_code(&run(&mut n, 1101, &["GET", "z"])).as_deref(),
        Some("WRONGTYPE")
    );
}

/// `EVALSHA` of a script the node has not cached is `NOSCRIPT`; after `SCRIPT LOAD` it runs; a
/// restart empties the cache again, whatever the node keeps of its data.
#[test]
fn model_script_cache_is_lost_at_restart() {
    let mut n = Node::new(Persistence::Aof);
    let (_, release) = model::KNOWN_SCRIPTS[0];
    let sha = match run(&mut n, 1, &["SCRIPT", "LOAD", release]) {
        Value::BulkString(sha) => String::from_utf8(sha).unwrap(),
        other => panic!("SCRIPT LOAD answered {other:?}"),
    };
    assert_eq!(
        sha,
        redis::Script::new(release).get_hash(),
        "redis-rs's SHA-1"
    );
    run(&mut n, 1, &["SET", "k", "tok"]);
    assert_eq!(
        run(&mut n, 2, &["EVALSHA", &sha, "1", "k", "tok"]),
        Value::Int(1)
    );
    n.restart();
    let again = run(&mut n, 3, &["EVALSHA", &sha, "1", "k", "tok"]);
    assert_eq!(error_code(&again).as_deref(), Some("NOSCRIPT"));
}
