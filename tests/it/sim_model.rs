//! The simulation's Redis model (tests/sim/model) cannot drift from Redis (issue 30, item 7):
//! generated command sequences, of every command and script slotcron sends, go to the model
//! and to a real redis-server and valkey-server, and the replies must be the same as redis-rs's
//! parser decodes them (tests/it/sim_model/differential.rs says how time is compared). The
//! scripts sent are read from `src/`, so a script changed there fails here until the model
//! covers it; the commands `src/` builds must all be in the model's table.
use crate::common;
mod differential;
mod generate;
#[path = "../sim/model/mod.rs"]
mod model;
mod src_texts;
mod wire;

use std::collections::BTreeMap;
use std::path::Path;

use common::RedisServer;
use model::{ConnId, Node, Persistence};
use redis::Value;

use differential::Differential;
use generate::{CONNS, Generator};
use src_texts::Scripts;
use wire::Real;

/// Steps per generated sequence (and then the rest of a burst): long enough for keys to expire, streams to fill radix-tree
/// nodes and a restart or two to happen within one sequence.
const STEPS: usize = 300;

/// Sequences per persistence mode and server: `(mode, sequences)`. Restarts matter most
/// where something is kept.
const RUNS: [(Persistence, u64); 3] = [
    (Persistence::None, 16),
    (Persistence::Aof, 6),
    (Persistence::Snapshot, 6),
];

/// The server arguments of each persistence mode: AOF with every write on disk before it is
/// acknowledged (the model's `Aof` keeps everything acknowledged); snapshots only at `SAVE`.
fn persistence_args(mode: Persistence) -> &'static [&'static str] {
    match mode {
        Persistence::None | Persistence::Snapshot => &[],
        Persistence::Aof => &["--appendonly", "yes", "--appendfsync", "always"],
    }
}

/// Runs the generated sequences against `bin`; panics with the seed, the step and the last
/// steps at the first difference, or if the sequences left out something that matters.
fn differential_against(bin: &Path, name: &str) {
    let scripts = Scripts::read();
    let mut coverage = BTreeMap::new();
    for (mode, sequences) in RUNS {
        let server = RedisServer::start_bin(bin, persistence_args(mode), &[]);
        let mut real = Real::new(server, CONNS);
        for seed in 0..sequences {
            let mut run = Differential::new(real, mode, coverage);
            let mut generator = Generator::new(seed, &scripts);
            let mut step = 0;
            while step < STEPS || generator.busy() {
                step += 1;
                let op = generator.next_op();
                if let Err(why) = run.step(&op) {
                    panic!(
                        "{name}, persistence {mode:?}, seed {seed}, step {step}: the model differs:\n{why}"
                    );
                }
            }
            (real, coverage) = (run.real, run.coverage);
        }
    }
    eprintln!("{name}: exercised {coverage:?}");
    let missing: Vec<String> = required_coverage()
        .into_iter()
        .filter(|label| !coverage.contains_key(label))
        .collect();
    assert!(
        missing.is_empty(),
        "{name}: the sequences never exercised {missing:?}"
    );
}

/// What the sequences must have exercised: every command `src/` sends, every script run and
/// refused (a wrong type, a missing script), the errors redis-rs tells apart, messages pushed
/// on RESP2 and RESP3 connections, and a restart under each persistence mode.
fn required_coverage() -> Vec<String> {
    let mut labels: Vec<String> = src_texts::commands_sent()
        .iter()
        .map(|name| format!("cmd:{name}"))
        .collect();
    for (known, _) in model::KNOWN_SCRIPTS {
        labels.push(format!("script:{known:?}:ran"));
    }
    // Refused: the lock's scripts (a missing script) and the alert log's (a wrong type).
    for (known, _) in model::KNOWN_SCRIPTS {
        let name = format!("{known:?}");
        if ["Release", "Extend", "Push"].contains(&name.as_str()) {
            labels.push(format!("script:{name}:refused"));
        }
    }
    for code in ["WRONGTYPE", "NOSCRIPT", "ERR"] {
        labels.push(format!("error:{code}"));
    }
    labels.extend(["push:resp2", "push:resp3"].map(String::from));
    labels.extend(RUNS.iter().map(|(mode, _)| format!("restart:{mode:?}")));
    labels
}

#[test]
fn model_answers_as_redis_server_does() {
    let _heavy = common::heavy();
    differential_against(Path::new(&common::redis_server_bin()), "redis-server");
}

#[test]
fn model_answers_as_valkey_server_does() {
    let _heavy = common::heavy();
    let Some(valkey) = common::tools::valkey_server() else {
        return;
    };
    differential_against(&valkey, "valkey-server");
}

/// Every script `src/` sends is one the model runs (it recognises the exact text). The scripts
/// are found by scanning `src/` for `const ..._SCRIPT: &str`, and every script argument of an
/// `EVAL` or `Script::new` in `src/` must be one of them, so a script added to `src/` fails
/// here until the model runs it.
#[test]
fn every_script_slotcron_sends_is_modelled() {
    let declared = Scripts::read().all();
    assert!(
        declared.len() >= model::KNOWN_SCRIPTS.len(),
        "the scan of src/ found fewer scripts than the model runs: {:?}",
        declared.iter().map(|(name, _)| name).collect::<Vec<_>>()
    );
    for (name, text) in &declared {
        assert!(
            model::recognise_script(text.as_bytes()).is_some(),
            "{name} in src/ is not a script the model knows: model it in tests/sim/model/scripts.rs"
        );
    }
    let sent = src_texts::script_arguments();
    assert!(
        sent.len() >= model::KNOWN_SCRIPTS.len(),
        "the scan of src/ missed EVALs: {sent:?}"
    );
    for ident in sent {
        assert!(
            declared
                .iter()
                .any(|(name, _)| name.ends_with(&format!(" {ident}"))),
            "src/ sends {ident} as a script, which is no `const ..._SCRIPT: &str` the scan reads"
        );
    }
}

/// Every command `src/` builds is in the model's table (`SENTINEL`, sent in Sentinel mode
/// only, gets a standalone node's "unknown command", as from redis-server).
#[test]
fn every_command_slotcron_sends_is_modelled() {
    let modelled = model::command_names();
    let sent = src_texts::commands_sent();
    for core in [
        "set",
        "eval",
        "xadd",
        "zadd",
        "hgetall",
        "subscribe",
        "time",
    ] {
        assert!(
            sent.iter().any(|s| s == core),
            "the scan of src/ missed {core}: {sent:?}"
        );
    }
    let missing: Vec<String> = sent
        .into_iter()
        .filter(|name| !modelled.contains(&name.as_str()) && name != "sentinel")
        .collect();
    assert!(
        missing.is_empty(),
        "commands src/ sends that the model lacks: {missing:?}"
    );
}

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

/// What each persistence mode brings back at a restart: nothing, everything, or the last
/// snapshot (stale: the write after it is lost).
#[test]
fn model_restart_keeps_what_its_persistence_keeps() {
    let expect = [
        (Persistence::None, Value::Nil, Value::Nil),
        (Persistence::Aof, bulk("1"), bulk("2")),
        (Persistence::Snapshot, bulk("1"), Value::Nil),
    ];
    for (mode, saved, after_save) in expect {
        let mut n = Node::new(mode);
        run(&mut n, 1, &["SET", "saved", "1"]);
        n.save();
        run(&mut n, 2, &["SET", "after", "2"]);
        n.restart();
        assert_eq!(run(&mut n, 3, &["GET", "saved"]), saved, "{mode:?}");
        assert_eq!(run(&mut n, 3, &["GET", "after"]), after_save, "{mode:?}");
    }
}

/// While loading, data commands and `PING` are refused with `LOADING` (redis-rs's
/// `BusyLoading`), and what redis-server flags `loading` (`TIME`, `HELLO`, `PUBLISH`) answers.
#[test]
fn model_loading_refuses_data_commands() {
    let mut n = Node::new(Persistence::Aof);
    n.set_loading(true);
    for refused in [
        &["GET", "k"][..],
        &["PING"],
        &["EVAL", "return 1", "0"],
        &["WAIT", "0", "0"],
    ] {
        let answer = run(&mut n, 1, refused);
        assert_eq!(
            error_code(&answer).as_deref(),
            Some("LOADING"),
            "{refused:?}"
        );
        let Value::ServerError(e) = answer else {
            unreachable!()
        };
        assert_eq!(e.kind(), Some(redis::ServerErrorKind::BusyLoading));
    }
    for answered in [&["TIME"][..], &["HELLO"], &["PUBLISH", "c", "m"]] {
        assert_eq!(error_code(&run(&mut n, 1, answered)), None, "{answered:?}");
    }
    n.set_loading(false);
    assert_eq!(run(&mut n, 1, &["GET", "k"]), Value::Nil);
}

/// A subscriber's messages are pushes in its own protocol (a RESP3 `>` push after `HELLO 3`),
/// and a disconnect or a restart ends its subscriptions.
#[test]
fn model_pushes_follow_the_subscribers_protocol_and_end_with_it() {
    let mut n = Node::new(Persistence::None);
    let (old, new, publisher) = (ConnId(1), ConnId(2), ConnId(3));
    n.execute(old, 0, &argv(&["SUBSCRIBE", "c"]));
    n.execute(new, 0, &argv(&["HELLO", "3"]));
    n.execute(new, 0, &argv(&["SUBSCRIBE", "c"]));
    let published = n.execute(publisher, 0, &argv(&["PUBLISH", "c", "m"]));
    assert_eq!(published.reply, b":2\r\n");
    let message = |kind: u8| {
        format!(
            "{}3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1\r\nm\r\n",
            kind as char
        )
    };
    assert_eq!(
        published.pushes,
        vec![
            (old, message(b'*').into_bytes()),
            (new, message(b'>').into_bytes())
        ]
    );
    n.disconnect(old);
    assert_eq!(
        n.execute(publisher, 0, &argv(&["PUBLISH", "c", "m"])).reply,
        b":1\r\n"
    );
    n.restart();
    assert_eq!(
        n.execute(publisher, 0, &argv(&["PUBLISH", "c", "m"])).reply,
        b":0\r\n"
    );
}

/// Request frames come off the front of the buffer whole, one at a time; a partial one waits.
#[test]
fn model_parses_request_frames_as_redis_rs_writes_them() {
    let mut pipe = redis::pipe();
    pipe.cmd("SET").arg("k").arg("v").arg("PX").arg(10);
    pipe.cmd("GET").arg("k");
    let packed = pipe.get_packed_pipeline();
    let mut buf = packed[..packed.len() - 3].to_vec();
    assert_eq!(
        model::parse_request(&mut buf),
        Some(argv(&["SET", "k", "v", "PX", "10"]))
    );
    assert_eq!(
        model::parse_request(&mut buf),
        None,
        "GET's frame is not whole yet"
    );
    buf.extend_from_slice(&packed[packed.len() - 3..]);
    assert_eq!(model::parse_request(&mut buf), Some(argv(&["GET", "k"])));
    assert!(buf.is_empty());
}

/// `WAIT` wanting replicas blocks its whole timeout on a standalone node (for ever at 0); the
/// model answers at once and says how long the answer takes.
#[test]
fn model_says_how_long_a_wait_blocks() {
    let delay = |words: &[&str]| model::reply_delay_us(&argv(words));
    assert_eq!(delay(&["WAIT", "1", "200"]), 200_000);
    assert_eq!(delay(&["WAIT", "0", "200"]), 0);
    assert_eq!(delay(&["WAIT", "1", "0"]), i64::MAX);
    assert_eq!(delay(&["GET", "k"]), 0);
}

/// `XDEL` of a node's every entry frees the node (redis-server 7.0 and valkey 9 agree): the
/// next `XADD` starts a new one, so `MAXLEN ~ 5` then keeps the whole new node.
#[test]
fn model_xdel_frees_an_emptied_node() {
    let mut n = Node::new(Persistence::None);
    let mut ids = Vec::new();
    for i in 0..150 {
        let at = 1000 + i;
        match run(
            &mut n,
            at,
            &["XADD", "s", "MAXLEN", "~", "1000", "*", "n", "1"],
        ) {
            Value::BulkString(id) => ids.push(String::from_utf8(id).unwrap()),
            other => panic!("XADD answered {other:?}"),
        }
    }
    for id in &ids[100..] {
        assert_eq!(run(&mut n, 2000, &["XDEL", "s", id]), Value::Int(1));
    }
    assert_eq!(run(&mut n, 2000, &["XDEL", "s", &ids[149]]), Value::Int(0));
    for i in 0..60 {
        run(
            &mut n,
            3000 + i,
            &["XADD", "s", "MAXLEN", "~", "5", "*", "m", "1"],
        );
    }
    match run(&mut n, 4000, &["XRANGE", "s", "-", "+"]) {
        Value::Array(entries) => assert_eq!(entries.len(), 60),
        other => panic!("XRANGE answered {other:?}"),
    }
}
