//! Generated command sequences: every command and script slotcron sends, in the shapes it
//! sends them, on random keys from small sets (a few per type, now and then one of another
//! type), with short expiries and real waits so keys expire between commands, two connections
//! that subscribe and publish (one of them sometimes on RESP3), restarts and snapshots, and a
//! few malformed commands whose errors redis-rs and slotcron read.

use std::collections::VecDeque;

use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};

use super::src_texts::Scripts;

/// One step of a sequence.
#[derive(Clone, Debug)]
pub enum Op {
    /// A command on connection `conn` (one reply: the sequences subscribe to one channel at a
    /// time).
    Command { conn: usize, argv: Vec<Vec<u8>> },
    /// Real time passes (expiries happen on both sides).
    Sleep(u64),
    /// Reads every connection's pushes so far (`PUBLISH`'s messages) and compares them.
    Sync,
    /// A snapshot point (`SAVE` / `Node::save`).
    Save,
    /// The server's process restarts (`Node::restart`); every connection is new.
    Restart,
}

/// Connections a sequence uses (besides the test's own for `TIME`): 0 sends commands (as
/// redis-rs's multiplexed connection does), 1 mostly subscribes (as its `PubSub` one does).
pub const CONNS: usize = 2;
const SUBSCRIBER: usize = 1;

const STRINGS: [&str; 3] = ["s:a", "s:b", "s:c"];
const ZSETS: [&str; 2] = ["z:a", "z:b"];
const HASHES: [&str; 1] = ["h:a"];
const STREAMS: [&str; 2] = ["x:a", "x:b"];
const LISTS: [&str; 2] = ["l:a", "l:b"];
const CHANNELS: [&str; 2] = ["c:a", "c:b"];
const TOKENS: [&str; 3] = ["r1:00aa", "r2:00bb", "r3:00cc"];

/// The generator's view of one sequence: its randomness and what it knows of the connections
/// (so that a subscribed RESP2 connection is sent what redis-rs would send on one).
pub struct Generator<'a> {
    rng: StdRng,
    scripts: &'a Scripts,
    /// Per connection: its protocol and channels.
    protos: [u8; CONNS],
    channels: [Vec<&'static str>; CONNS],
    /// Script SHA-1s sent by `EVALSHA` (loaded or not).
    shas: Vec<String>,
    /// Steps decided ahead (a burst of appends).
    queued: VecDeque<Op>,
}

impl<'a> Generator<'a> {
    pub fn new(seed: u64, scripts: &'a Scripts) -> Self {
        let shas = [&scripts.release, &scripts.extend]
            .into_iter()
            .map(|s| redis::Script::new(s).get_hash().to_owned());
        Generator {
            rng: StdRng::seed_from_u64(seed),
            scripts,
            protos: [2; CONNS],
            channels: Default::default(),
            shas: shas.collect(),
            queued: VecDeque::new(),
        }
    }

    /// Whether steps decided ahead are still to come (a sequence ends after them, so that a
    /// burst's reads happen).
    pub fn busy(&self) -> bool {
        !self.queued.is_empty()
    }

    /// The next step.
    pub fn next_op(&mut self) -> Op {
        if let Some(op) = self.queued.pop_front() {
            return op;
        }
        let roll = self.rng.random_range(0..200);
        match roll {
            0 => self.burst(),
            1..=12 => Op::Sleep(self.rng.random_range(1..30)),
            13 | 14 => self.restart_or_save(),
            15..=30 => self.pubsub(),
            _ => {
                let conn = self.data_conn(true);
                let argv = self.data_command();
                Op::Command { conn, argv }
            }
        }
    }

    /// Enough appends to one stream to fill radix-tree nodes, so `MAXLEN ~` trims whole ones.
    fn burst(&mut self) -> Op {
        let key = self.pick(&STREAMS);
        let cap = self.pick(&["5", "150"]);
        let conn = self.data_conn(false);
        for n in 0..self.rng.random_range(100..260) {
            let argv = words(&[
                b"XADD",
                &key,
                b"MAXLEN",
                b"~",
                &cap,
                b"*",
                b"n",
                n.to_string().as_bytes(),
            ]);
            self.queued.push_back(Op::Command { conn, argv });
        }
        // Now and then the audit's withdrawals: `XDEL` of many of the newest entries, one at a
        // time, so nodes are emptied and freed, then appends and reads after them.
        if self.rng.random_bool(0.4) {
            for back in 0..self.rng.random_range(1..140) {
                let id = recent_id(back);
                let argv = words(&[b"XDEL", &key, &id]);
                self.queued.push_back(Op::Command { conn, argv });
            }
            // Past a node's worth at a small cap, so where the next node starts shows.
            for n in 0..self.rng.random_range(1..220) {
                let argv = words(&[
                    b"XADD",
                    &key,
                    b"MAXLEN",
                    b"~",
                    b"5",
                    b"*",
                    b"m",
                    n.to_string().as_bytes(),
                ]);
                self.queued.push_back(Op::Command { conn, argv });
            }
            let argv = words(&[b"XRANGE", &key, b"-", b"+"]);
            self.queued.push_back(Op::Command { conn, argv });
        }
        Op::Sleep(0)
    }

    fn restart_or_save(&mut self) -> Op {
        if self.rng.random_bool(0.5) {
            return Op::Save;
        }
        self.protos = [2; CONNS];
        self.channels = Default::default();
        Op::Restart
    }

    /// A connection for a data command: the commands' one, or the subscriber's when it takes
    /// commands (when `refusals`, now and then when it does not, to compare the refusal).
    fn data_conn(&mut self, refusals: bool) -> usize {
        let free = |c: usize| self.protos[c] == 3 || self.channels[c].is_empty();
        if refusals && self.rng.random_bool(0.03) {
            return SUBSCRIBER;
        }
        if free(SUBSCRIBER) && self.rng.random_bool(0.3) {
            return SUBSCRIBER;
        }
        0
    }

    fn key(&mut self, own: &[&str]) -> Vec<u8> {
        let pool: Vec<&str> = if self.rng.random_bool(0.1) {
            [&STRINGS[..], &ZSETS, &HASHES, &STREAMS, &LISTS].concat()
        } else {
            own.to_vec()
        };
        pool.choose(&mut self.rng).unwrap().as_bytes().to_vec()
    }

    fn pick(&mut self, words: &[&str]) -> Vec<u8> {
        words.choose(&mut self.rng).unwrap().as_bytes().to_vec()
    }

    /// A TTL in ms: short, so keys expire within a sequence.
    fn ttl(&mut self) -> Vec<u8> {
        self.rng.random_range(1..40u32).to_string().into_bytes()
    }

    fn data_command(&mut self) -> Vec<Vec<u8>> {
        match self.rng.random_range(0..116) {
            0..=29 => self.lock_command(),
            30..=49 => self.history_command(),
            50..=61 => self.membership_command(),
            62..=69 => self.rate_command(),
            70..=77 => self.control_command(),
            78..=83 => self.server_command(),
            84..=89 => self.script_cache_command(),
            90..=99 => self.malformed_command(),
            100..=107 => self.alert_command(),
            _ => self.audit_command(),
        }
    }
}

/// An argument the differential run replaces, before sending, by the id of the `back`-th
/// newest entry an `XADD` to the command's key answered (`0-1` when none): the generator
/// cannot know the ids the server's clock gives, and `XDEL` needs real ones.
pub const RECENT_ID: &str = "{recent-id:";
/// As [`RECENT_ID`], but the id's milliseconds only (an `XREVRANGE` bound as the audit's
/// `since` sends it).
pub const RECENT_MS: &str = "{recent-ms:";

fn recent_id(back: u32) -> Vec<u8> {
    format!("{RECENT_ID}{back}}}").into_bytes()
}

fn recent_ms(back: u32) -> Vec<u8> {
    format!("{RECENT_MS}{back}}}").into_bytes()
}

fn words(parts: &[&[u8]]) -> Vec<Vec<u8>> {
    parts.iter().map(|p| p.to_vec()).collect()
}

impl Generator<'_> {
    /// The lock: claim (`SET NX PX GET`, or the Lua form), release, extend, read the holders.
    fn lock_command(&mut self) -> Vec<Vec<u8>> {
        let key = self.key(&STRINGS);
        let token = self.pick(&TOKENS);
        let ttl = self.ttl();
        match self.rng.random_range(0..7) {
            0 | 1 => words(&[b"SET", &key, &token, b"NX", b"PX", &ttl, b"GET"]),
            2 => words(&[
                b"EVAL",
                self.scripts.acquire.as_bytes(),
                b"1",
                &key,
                &token,
                &ttl,
            ]),
            3 => self.evalsha_or_eval(0, &[&key], &[&token]),
            4 => self.evalsha_or_eval(1, &[&key], &[&token, &ttl]),
            5 => {
                let (a, b) = (self.key(&STRINGS), self.key(&STRINGS));
                words(&[b"MGET", &key, &a, &b])
            }
            _ => words(&[b"GET", &key]),
        }
    }

    /// `EVALSHA` of script `index` (release 0, extend 1) as redis-rs's `Script` sends it, or
    /// the `EVAL` it falls back to after `NOSCRIPT` and `SCRIPT LOAD`.
    fn evalsha_or_eval(&mut self, index: usize, keys: &[&[u8]], args: &[&[u8]]) -> Vec<Vec<u8>> {
        let text = [&self.scripts.release, &self.scripts.extend][index].clone();
        let mut argv = if self.rng.random_bool(0.8) {
            words(&[b"EVALSHA", self.shas[index].as_bytes()])
        } else {
            words(&[b"EVAL", text.as_bytes()])
        };
        argv.push(keys.len().to_string().into_bytes());
        argv.extend(keys.iter().chain(args).map(|a| a.to_vec()));
        argv
    }

    /// The run history and the pause log: streams.
    fn history_command(&mut self) -> Vec<Vec<u8>> {
        let key = self.key(&STREAMS);
        let fence = self.rng.random_range(1..5u32).to_string().into_bytes();
        let slot = self.rng.random_range(0..1000u32).to_string().into_bytes();
        let cap = self.pick(&["2", "5", "150"]);
        match self.rng.random_range(0..8) {
            0..=2 => {
                let look = self.rng.random_range(1..6u32).to_string().into_bytes();
                let script = self.scripts.record_and_read.as_bytes();
                words(&[
                    b"EVAL", script, b"1", &key, &cap, &look, &fence, b"fence", &fence, b"s", &slot,
                ])
            }
            3 | 4 => words(&[
                b"XADD", &key, b"MAXLEN", b"~", &cap, b"*", b"fence", &fence, b"s", &slot,
            ]),
            5 => {
                let count = self.rng.random_range(1..8u32).to_string().into_bytes();
                words(&[b"XREVRANGE", &key, b"+", b"-", b"COUNT", &count])
            }
            6 => words(&[b"XRANGE", &key, b"-", b"+"]),
            _ => {
                let other = self.key(&STREAMS);
                words(&[b"XREAD", b"STREAMS", &key, &other, b"0-0", b"0-0"])
            }
        }
    }

    /// The alert log: `PUSH_SCRIPT` (push a line, keep the newest `cap`) and `LRANGE 0 n-1`.
    fn alert_command(&mut self) -> Vec<Vec<u8>> {
        let key = self.key(&LISTS);
        match self.rng.random_range(0..5) {
            0..=2 => {
                let line = format!(
                    "{{\"kind\":\"failed\",\"n\":{}}}",
                    self.rng.random_range(0..100u32)
                );
                let cap = self.pick(&["1", "3", "500", "0"]);
                let script = self.scripts.push.as_bytes();
                words(&[b"EVAL", script, b"1", &key, line.as_bytes(), &cap])
            }
            3 => {
                let stop = self.rng.random_range(0..6u32).to_string().into_bytes();
                words(&[b"LRANGE", &key, b"0", &stop])
            }
            _ => {
                let (start, stop) = (
                    self.pick(&["0", "-2", "1", "-9"]),
                    self.pick(&["-1", "2", "-3", "9"]),
                );
                words(&[b"LRANGE", &key, &start, &stop])
            }
        }
    }

    /// The audit trail: `XADD MAXLEN ~`, `XDEL` of an id an `XADD` answered, `XREVRANGE + id|-
    /// COUNT n`, and the config hash's `SET key value GET EX secs`.
    fn audit_command(&mut self) -> Vec<Vec<u8>> {
        let key = self.key(&STREAMS);
        let back = self.rng.random_range(0..6u32);
        let count = self.pick(&["1", "4", "10000"]);
        match self.rng.random_range(0..8) {
            0 | 1 => {
                let cap = self.pick(&["3", "150", "10000"]);
                let job = self.pick(&["j1", "j2"]);
                words(&[
                    b"XADD", &key, b"MAXLEN", b"~", &cap, b"*", b"kind", b"pause", b"job", &job,
                ])
            }
            2 => words(&[b"XDEL", &key, &recent_id(back)]),
            3 => {
                let id = self.pick(&["0-1", "18446744073709551615-0", "nope", "-", "+", "(1"]);
                words(&[b"XDEL", &key, &id])
            }
            4 => words(&[b"XREVRANGE", &key, b"+", &recent_ms(back), b"COUNT", &count]),
            5 => words(&[b"XREVRANGE", &key, b"+", b"-", b"COUNT", &count]),
            _ => {
                let name = self.key(&STRINGS);
                let hash = self.pick(&["h1", "h2"]);
                let secs = self.pick(&["1", "86400"]);
                words(&[b"SET", &name, &hash, b"GET", b"EX", &secs])
            }
        }
    }

    /// The membership heartbeat's commands and the destinations' hash.
    fn membership_command(&mut self) -> Vec<Vec<u8>> {
        let zset = self.key(&ZSETS);
        let member = self.pick(&["m1", "m2", "m3"]);
        let score = self.rng.random_range(0..50i64).to_string().into_bytes();
        match self.rng.random_range(0..9) {
            0 | 1 => words(&[b"ZADD", &zset, &score, &member]),
            2 => words(&[b"ZREMRANGEBYSCORE", &zset, b"-inf", &score]),
            3 => words(&[b"ZRANGE", &zset, b"0", b"-1", b"WITHSCORES"]),
            4 => words(&[b"ZREM", &zset, &member]),
            5 => {
                let name = self.key(&STRINGS);
                let ttl = self.ttl();
                words(&[b"SET", &name, &member, b"PX", &ttl])
            }
            6 => words(&[b"HSET", &self.key(&HASHES), &member, &score]),
            7 => words(&[b"HGETALL", &self.key(&HASHES)]),
            _ => words(&[b"HDEL", &self.key(&HASHES), &member, b"m9"]),
        }
    }

    /// The rate budget: `TAKE_SCRIPT`, and the `ZREM` that takes a place back.
    fn rate_command(&mut self) -> Vec<Vec<u8>> {
        let key = self.key(&ZSETS);
        let member = format!("{:016x}", self.rng.random::<u16>()).into_bytes();
        if self.rng.random_bool(0.2) {
            return words(&[b"ZREM", &key, &member]);
        }
        let limit = self.rng.random_range(1..4u32).to_string().into_bytes();
        let window = self.rng.random_range(2..40u32).to_string().into_bytes();
        words(&[
            b"EVAL",
            self.scripts.take.as_bytes(),
            b"1",
            &key,
            &limit,
            &window,
            &member,
        ])
    }

    /// Pause records, the watermark, and the replication mark with its `WAIT`.
    fn control_command(&mut self) -> Vec<Vec<u8>> {
        let key = self.key(&STRINGS);
        match self.rng.random_range(0..4) {
            0 => words(&[b"SET", &key, b"{\"paused\":true}"]),
            1 => {
                let (a, b) = (self.key(&STRINGS), self.key(&STRINGS));
                let script = self.scripts.first_seen.as_bytes();
                words(&[b"EVAL", script, b"3", &key, &a, &b, b"1764150000000"])
            }
            2 => words(&[b"SET", &key, b"1", b"PX", b"1000"]),
            // slotcron's WAIT wants a replica: a standalone server waits the whole timeout
            // (kept short here) and answers 0, as the model does at once.
            _ if self.rng.random_bool(0.3) => words(&[b"WAIT", b"1", b"5"]),
            _ => words(&[b"WAIT", b"0", b"200"]),
        }
    }

    fn server_command(&mut self) -> Vec<Vec<u8>> {
        match self.rng.random_range(0..8) {
            0 | 1 => words(&[b"TIME"]),
            2 => words(&[b"PING"]),
            3 => words(&[b"HELLO"]),
            4 => words(&[b"CLUSTER", b"INFO"]),
            5 => words(&[b"CLUSTER", b"SLOTS"]),
            6 => words(&[b"ASKING"]),
            _ => words(&[b"SENTINEL", b"get-master-addr-by-name", b"mymaster"]),
        }
    }

    fn script_cache_command(&mut self) -> Vec<Vec<u8>> {
        let index = self.rng.random_range(0..2);
        let text = [&self.scripts.release, &self.scripts.extend][index].clone();
        match self.rng.random_range(0..4) {
            0 | 1 => words(&[b"SCRIPT", b"LOAD", text.as_bytes()]),
            2 => words(&[
                b"SCRIPT",
                b"EXISTS",
                self.shas[0].as_bytes(),
                self.shas[1].as_bytes(),
            ]),
            _ => words(&[b"SCRIPT", b"FLUSH"]),
        }
    }

    /// Commands redis-server refuses, whose errors redis-rs and slotcron read.
    fn malformed_command(&mut self) -> Vec<Vec<u8>> {
        let key = self.key(&STRINGS);
        let bad: [&[&[u8]]; 9] = [
            &[b"SET", &key, b"v", b"PX", b"0"],
            &[b"SET", &key, b"v", b"PX", b"soon"],
            &[b"SET", &key, b"v", b"NX", b"XX"],
            &[b"GET"],
            &[b"ZADD", b"z:a", b"one", b"m"],
            &[b"XRANGE", b"x:a", b"-", b"+", b"COUNT"],
            &[
                b"EVALSHA",
                b"0000000000000000000000000000000000000000",
                b"1",
                &key,
            ],
            &[b"EVAL", b"return 1", b"2", &key],
            &[b"WAIT", b"0", b"soon"],
        ];
        words(bad.choose(&mut self.rng).unwrap())
    }

    /// Subscribing, unsubscribing, publishing, counting, and switching a connection's
    /// protocol.
    fn pubsub(&mut self) -> Op {
        let channel: &'static str = CHANNELS.choose(&mut self.rng).unwrap();
        match self.rng.random_range(0..12) {
            0..=2 => self.subscribe(channel),
            3 | 4 => {
                let conn = SUBSCRIBER;
                self.channels[conn].retain(|c| *c != channel);
                let argv = words(&[b"UNSUBSCRIBE", channel.as_bytes()]);
                Op::Command { conn, argv }
            }
            5..=7 => {
                let conn = 0;
                let message = format!("m{}", self.rng.random::<u8>());
                let argv = words(&[b"PUBLISH", channel.as_bytes(), message.as_bytes()]);
                // The messages are read before the next command: on a subscribed RESP2
                // connection they come between replies.
                self.queued.push_back(Op::Sync);
                Op::Command { conn, argv }
            }
            8 => Op::Sync,
            9 => {
                let conn = self.data_conn(true);
                let argv = words(&[b"PUBSUB", b"NUMSUB", b"c:a", b"c:b"]);
                Op::Command { conn, argv }
            }
            _ => {
                let conn = self.rng.random_range(0..CONNS);
                self.hello(conn)
            }
        }
    }

    /// `SUBSCRIBE` on the subscriber connection (the commands' one never subscribes, so no
    /// connection publishes to itself: slotcron does not, and there redis-server 7.0 writes
    /// the message before the `PUBLISH` count and valkey 9 after it).
    fn subscribe(&mut self, channel: &'static str) -> Op {
        let conn = SUBSCRIBER;
        if !self.channels[conn].contains(&channel) {
            self.channels[conn].push(channel);
        }
        let argv = words(&[b"SUBSCRIBE", channel.as_bytes()]);
        Op::Command { conn, argv }
    }

    /// `HELLO 3` or `HELLO 2` on a connection that is not subscribed (a subscribed RESP2
    /// connection may not send it; redis-rs picks the protocol when it connects).
    fn hello(&mut self, conn: usize) -> Op {
        if !self.channels[conn].is_empty() {
            return Op::Sync;
        }
        let proto = if self.protos[conn] == 2 { 3 } else { 2 };
        self.protos[conn] = proto;
        let argv = words(&[b"HELLO", proto.to_string().as_bytes()]);
        Op::Command { conn, argv }
    }
}
