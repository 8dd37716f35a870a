//! One differential run: the same steps sent to a real server and to the model, the replies
//! compared as redis-rs decodes them.
//!
//! Time. The server runs on its real clock, which the test cannot set (libfaketime does not
//! load into redis-server's jemalloc build), so the model cannot simply be given "the same
//! time". Instead each command is bracketed by two `TIME`s on a connection of the test's own:
//! the server executed the command at some millisecond between them. The model is run at
//! every millisecond of that window (usually one or two), and each run whose reply matches is
//! kept as a hypothesis of the model's state; the next command prunes them. A key that expires
//! inside the window is therefore judged both ways, and the model must match the server for
//! some instant the server could have used; nothing is compared "within a tolerance". `TIME`
//! itself is checked for its shape and for lying inside its window, and the model then runs at
//! exactly the answered instant (so its own `TIME` must give the same answer back).

use std::collections::BTreeMap;

use redis::Value;

use super::generate::{CONNS, Op, RECENT_ID, RECENT_MS};
use super::model::{ConnId, Node, Persistence};
use super::wire::{Real, time_of};

/// A state the model may be in, with the pushes each connection has been sent and not yet
/// read.
#[derive(Clone, PartialEq)]
struct Hypothesis {
    node: Node,
    pending: Vec<Vec<Value>>,
}

/// Hypotheses kept at most (all alike but for an expiry judged either way).
const MAX_HYPOTHESES: usize = 16;

/// How many of the last steps a failure shows.
const TRACE_SHOWN: usize = 40;

pub struct Differential {
    pub real: Real,
    persistence: Persistence,
    hypotheses: Vec<Hypothesis>,
    /// Connections of earlier server processes are gone: each restart numbers them anew.
    generation: u64,
    syncs: u64,
    trace: Vec<String>,
    /// Each connection's protocol and how many channels it listens on, as its replies said:
    /// a subscribed RESP2 connection may not send the `TIME`s that bracket a command.
    protos: [u8; CONNS],
    channels: [i64; CONNS],
    /// What the run exercised, by label (`cmd:set`, `error:WRONGTYPE`, `script:Take`,
    /// `push:resp3`, `restart`): the test requires each that matters to have happened.
    pub coverage: BTreeMap<String, usize>,
    /// Per stream key, the ids its `XADD`s answered, oldest first (what [`RECENT_ID`] reads).
    recent: BTreeMap<Vec<u8>, Vec<String>>,
}

impl Differential {
    /// A run on `real`, emptied first, with the coverage of the runs before it.
    pub fn new(
        mut real: Real,
        persistence: Persistence,
        coverage: BTreeMap<String, usize>,
    ) -> Differential {
        real.reset();
        if persistence != Persistence::None {
            real.save();
        }
        let fresh = Hypothesis {
            node: Node::new(persistence),
            pending: vec![Vec::new(); CONNS],
        };
        Differential {
            real,
            persistence,
            hypotheses: vec![fresh],
            generation: 0,
            syncs: 0,
            trace: Vec::new(),
            protos: [2; CONNS],
            channels: [0; CONNS],
            coverage,
            recent: BTreeMap::new(),
        }
    }

    /// Runs one step on both sides; the error says what differed, with the last steps.
    pub fn step(&mut self, op: &Op) -> Result<(), String> {
        let outcome = match op {
            Op::Command { conn, argv } => self.command(*conn, argv),
            Op::Sleep(ms) => {
                std::thread::sleep(std::time::Duration::from_millis(*ms));
                Ok(format!("sleep {ms} ms"))
            }
            Op::Sync => self.sync(),
            Op::Save => self.save(),
            Op::Restart => self.restart(),
        };
        match outcome {
            Ok(line) => {
                self.trace.push(line);
                Ok(())
            }
            Err(why) => {
                let from = self.trace.len().saturating_sub(TRACE_SHOWN);
                Err(format!(
                    "{why}\n--- the last steps before it ---\n{}",
                    self.trace[from..].join("\n")
                ))
            }
        }
    }

    fn conn_id(&self, conn: usize) -> ConnId {
        ConnId(self.generation * 100 + conn as u64)
    }

    /// `argv` with its [`RECENT_ID`] and [`RECENT_MS`] arguments replaced.
    fn resolve(&self, argv: &[Vec<u8>]) -> Vec<Vec<u8>> {
        let ids = argv.get(1).and_then(|key| self.recent.get(key));
        argv.iter()
            .map(|arg| {
                let text = String::from_utf8_lossy(arg);
                for (prefix, whole) in [(RECENT_ID, true), (RECENT_MS, false)] {
                    let Some(back) = text.strip_prefix(prefix) else {
                        continue;
                    };
                    let back: usize = back.trim_end_matches('}').parse().unwrap_or(0);
                    let id = ids
                        .and_then(|ids| ids.iter().rev().nth(back))
                        .map_or("0-1", String::as_str);
                    let id = if whole {
                        id
                    } else {
                        id.split('-').next().unwrap_or("0")
                    };
                    return id.as_bytes().to_vec();
                }
                arg.clone()
            })
            .collect()
    }

    fn command(&mut self, conn: usize, argv: &[Vec<u8>]) -> Result<String, String> {
        let argv = &self.resolve(argv)[..];
        let id = self.conn_id(conn);
        let frames = self.frames_expected(id, argv);
        // A subscribed RESP2 connection (or one about to be) may not send `TIME`.
        let subscribing = argv[0].eq_ignore_ascii_case(b"SUBSCRIBE");
        let listening = self.protos[conn] == 2 && (self.channels[conn] > 0 || subscribing);
        let (before, got, after) = if listening {
            self.real.beside(conn, argv, frames)?
        } else {
            self.real.bracketed(conn, argv, frames)?
        };
        self.follow(conn, &got);
        let shown = show_argv(argv);
        let instants = if listening {
            // What a subscribed RESP2 connection may send (subscribing, unsubscribing, PING)
            // reads no clock, and anything else is refused: one instant is enough. (A
            // `SUBSCRIBE` refused for a bad argument count touches nothing either.)
            vec![(before, before)]
        } else {
            instants(argv, &got, before, after).ok_or_else(|| {
                format!("{shown}: TIME answered {got:?}, not a time within [{before}, {after}] µs")
            })?
        };
        let mut kept: Vec<Hypothesis> = Vec::new();
        let mut differed = Vec::new();
        for hypothesis in &self.hypotheses {
            for &(now_us, script_time_us) in &instants {
                let mut next = hypothesis.clone();
                let effects = next.node.execute_at(id, now_us, script_time_us, argv);
                let answer = decode_all(&effects.reply);
                if same(argv, &got, &answer) {
                    for (to, bytes) in &effects.pushes {
                        let to = (to.0 % 100) as usize;
                        next.pending[to].push(decode(bytes));
                    }
                    if !kept.contains(&next) {
                        kept.push(next);
                    }
                } else if differed.len() < 3 {
                    differed.push(format!("  model at {now_us} µs: {answer:?}"));
                }
            }
        }
        if kept.is_empty() {
            return Err(format!(
                "conn {conn}: {shown}\n  server: {got:?}\n{}\n(server's window: [{before}, {after}] µs)",
                differed.join("\n")
            ));
        }
        kept.truncate(MAX_HYPOTHESES);
        self.hypotheses = kept;
        self.count_command(argv, &got);
        if let ([name, key, ..], [Value::BulkString(added)]) = (argv, &got[..])
            && name.eq_ignore_ascii_case(b"XADD")
        {
            let ids = self.recent.entry(key.clone()).or_default();
            ids.push(String::from_utf8_lossy(added).into_owned());
            if ids.len() > 400 {
                ids.remove(0);
            }
        }
        Ok(format!("conn {conn}: {shown} -> {got:?}"))
    }

    /// How many frames the server writes for `argv` on `id`, by the model: one reply, and
    /// before it a message to a RESP3 connection that publishes on a channel it listens on.
    /// (A wrong count shows as a difference, or as the read timing out.)
    fn frames_expected(&self, id: ConnId, argv: &[Vec<u8>]) -> usize {
        let mut probe = self.hypotheses[0].node.clone();
        decode_all(&probe.execute(id, 0, argv).reply).len()
    }

    /// Keeps track of what the connection's replies say of it: its protocol (`HELLO`) and how
    /// many channels it listens on (a subscription's confirmation).
    fn follow(&mut self, conn: usize, got: &[Value]) {
        for frame in got {
            let items = match frame {
                Value::Array(items) | Value::Push { data: items, .. } => items.clone(),
                Value::Map(_) => pairs_of(frame)
                    .into_iter()
                    .flat_map(|(k, v)| [k, v])
                    .collect(),
                _ => continue,
            };
            let text = |v: &Value| match v {
                Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                _ => String::new(),
            };
            let kind = items.first().map(text).unwrap_or_default();
            let confirmation = matches!(kind.as_str(), "subscribe" | "unsubscribe");
            if let (true, Some(Value::Int(n))) = (confirmation, items.last()) {
                self.channels[conn] = *n;
            }
            if let Some(at) = items.iter().position(|v| text(v) == "proto")
                && let (Some(Value::Int(p)), true) = (items.get(at + 1), kind == "server")
            {
                self.protos[conn] = *p as u8;
            }
        }
    }

    fn count(&mut self, label: String) {
        *self.coverage.entry(label).or_default() += 1;
    }

    fn count_command(&mut self, argv: &[Vec<u8>], got: &[Value]) {
        let name = String::from_utf8_lossy(&argv[0]).to_ascii_lowercase();
        self.count(format!("cmd:{name}"));
        let refused = got.iter().any(|f| matches!(f, Value::ServerError(_)));
        for frame in got {
            match frame {
                Value::ServerError(e) => self.count(format!("error:{}", e.code())),
                Value::Push { .. } if name == "publish" => self.count("push:own".into()),
                _ => {}
            }
        }
        let script = match name.as_str() {
            "eval" => super::model::recognise_script(&argv[1]),
            "evalsha" => super::model::KNOWN_SCRIPTS
                .iter()
                .find(|(_, text)| redis::Script::new(text).get_hash().as_bytes() == argv[1])
                .map(|(known, _)| *known),
            _ => None,
        };
        if let Some(known) = script {
            let ran = if refused { "refused" } else { "ran" };
            self.count(format!("script:{known:?}:{ran}"));
        }
    }

    /// Each connection's pushes, read up to the reply of a `PING` sent after them, against the
    /// model's.
    fn sync(&mut self) -> Result<String, String> {
        self.syncs += 1;
        let token = format!("sync-{}", self.syncs);
        let ping = vec![b"PING".to_vec(), token.clone().into_bytes()];
        let mut read = Vec::new();
        for conn in 0..CONNS {
            self.real.conns[conn].send(&ping);
            let mut frames = Vec::new();
            loop {
                let frame = self.real.conns[conn].read()?;
                let last = mentions(&frame, &token);
                frames.push(frame);
                if last {
                    break;
                }
            }
            read.push(frames);
        }
        let ids: Vec<ConnId> = (0..CONNS).map(|c| self.conn_id(c)).collect();
        let before = self.hypotheses.len();
        self.hypotheses.retain_mut(|h| {
            let mut matches = true;
            for (conn, frames) in read.iter().enumerate() {
                let mut expected = std::mem::take(&mut h.pending[conn]);
                expected.push(decode(&h.node.execute(ids[conn], 0, &ping).reply));
                matches &= expected == *frames;
            }
            matches
        });
        for frame in read.iter().flat_map(|frames| &frames[..frames.len() - 1]) {
            let resp = if matches!(frame, Value::Push { .. }) {
                3
            } else {
                2
            };
            self.count(format!("push:resp{resp}"));
        }
        if self.hypotheses.is_empty() {
            return Err(format!(
                "pushes differ (of {before} model state(s)): the server sent {read:?}"
            ));
        }
        Ok(format!("sync: {read:?}"))
    }

    fn save(&mut self) -> Result<String, String> {
        // Without persistence the server must not find a dump at its restart.
        if self.persistence != Persistence::None {
            self.real.save();
        }
        self.hypotheses.iter_mut().for_each(|h| h.node.save());
        Ok("save".into())
    }

    fn restart(&mut self) -> Result<String, String> {
        self.real.restart();
        self.count(format!("restart:{:?}", self.persistence));
        (self.protos, self.channels) = ([2; CONNS], [0; CONNS]);
        self.generation += 1;
        for h in &mut self.hypotheses {
            h.node.restart();
            h.pending = vec![Vec::new(); CONNS];
        }
        Ok("restart".into())
    }
}

/// The instants (µs) at which the server may have executed `argv`, each with what a script's
/// `TIME` may have read then: its `TIME` answer for a `TIME`; else each millisecond between the
/// two readings, and for a script each pair of them in order (its `TIME` may read a later
/// millisecond than the one it started in). `None`: a `TIME` answer that is no time within the
/// window.
fn instants(argv: &[Vec<u8>], got: &[Value], before: i64, after: i64) -> Option<Vec<(i64, i64)>> {
    let time = match got {
        [reply] if !matches!(reply, Value::ServerError(_)) => Some(reply),
        _ => None,
    };
    if let (true, Some(time)) = (argv[0].eq_ignore_ascii_case(b"TIME"), time) {
        let answered = time_of(time)?;
        return (before..=after)
            .contains(&answered)
            .then(|| vec![(answered, answered)]);
    }
    let millis: Vec<i64> = (before / 1000..=after / 1000).map(|ms| ms * 1000).collect();
    let script = argv[0].eq_ignore_ascii_case(b"EVAL") || argv[0].eq_ignore_ascii_case(b"EVALSHA");
    let pairs = millis.iter().flat_map(|&start| {
        let next = (script && millis.contains(&(start + 1000))).then_some(start + 1000);
        [Some(start), next]
            .into_iter()
            .flatten()
            .map(move |time| (start, time))
    });
    Some(pairs.collect())
}

/// Every frame in `bytes`.
fn decode_all(mut bytes: &[u8]) -> Vec<Value> {
    let mut frames = Vec::new();
    while !bytes.is_empty() {
        let len = frame_len(bytes).unwrap_or_else(|| {
            panic!(
                "the model wrote bad RESP: {}",
                String::from_utf8_lossy(bytes)
            )
        });
        frames.push(decode(&bytes[..len]));
        bytes = &bytes[len..];
    }
    frames
}

/// The length of the RESP frame at the start of `bytes` (redis-rs's parser reads a frame
/// but does not say where it ended).
fn frame_len(bytes: &[u8]) -> Option<usize> {
    let line_end = bytes.windows(2).position(|w| w == b"\r\n")? + 2;
    let number = || {
        std::str::from_utf8(&bytes[1..line_end - 2])
            .ok()?
            .parse::<i64>()
            .ok()
    };
    match bytes[0] {
        b'$' | b'=' | b'!' => match number()? {
            n if n < 0 => Some(line_end),
            n => Some(line_end + n as usize + 2),
        },
        b'*' | b'>' | b'~' | b'%' | b'|' => {
            let items = match number()? {
                n if n < 0 => return Some(line_end),
                n if matches!(bytes[0], b'%' | b'|') => 2 * n,
                n => n,
            };
            let mut at = line_end;
            for _ in 0..items {
                at += frame_len(&bytes[at..])?;
            }
            Some(at)
        }
        _ => Some(line_end),
    }
}

fn decode(bytes: &[u8]) -> Value {
    redis::parse_redis_value(bytes).unwrap_or_else(|e| {
        panic!(
            "the model wrote bad RESP ({e}): {}",
            String::from_utf8_lossy(bytes)
        )
    })
}

/// Whether `frame` carries `token` (a `PING token` reply, plain or subscribed).
fn mentions(frame: &Value, token: &str) -> bool {
    match frame {
        Value::BulkString(b) => b == token.as_bytes(),
        Value::Array(items) => items.iter().any(|i| mentions(i, token)),
        _ => false,
    }
}

fn show_argv(argv: &[Vec<u8>]) -> String {
    argv.iter()
        .map(|a| {
            let text = String::from_utf8_lossy(a);
            if text.len() > 24 {
                format!("{:?}…", &text[..24])
            } else {
                format!("{text:?}")
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether the server's and the model's replies to `argv` agree, where they may differ in
/// nothing slotcron or redis-rs reads:
/// - `HELLO`: only `proto`, `mode` and `role` (the server's name, version, client id and
///   modules are its own);
/// - `HGETALL`: the fields as a set (redis-server answers in hash-table order);
/// - errors: by code and text, with the texts redis-server 7.0 and valkey 9 word differently
///   made one (a script error's ` script: <sha>,` and [`VALKEY_WORDING`]).
pub fn same(argv: &[Vec<u8>], server: &[Value], model: &[Value]) -> bool {
    let command = String::from_utf8_lossy(&argv[0]).to_ascii_uppercase();
    let normal_all =
        |frames: &[Value]| -> Vec<Value> { frames.iter().map(|f| normal(&command, f)).collect() };
    normal_all(server) == normal_all(model)
}

fn normal(command: &str, value: &Value) -> Value {
    match (command, value) {
        (_, Value::ServerError(e)) => Value::SimpleString(format!(
            "error {} {}",
            e.code(),
            canonical_error(e.details().unwrap_or(""))
        )),
        ("HELLO", _) => {
            let mut pairs = pairs_of(value);
            pairs.retain(|(k, _)| {
                [b"proto".as_slice(), b"mode", b"role"]
                    .iter()
                    .any(|f| *k == Value::BulkString(f.to_vec()))
            });
            Value::Map(pairs)
        }
        ("HGETALL", _) => {
            let mut pairs = pairs_of(value);
            pairs.sort_by_key(|(k, v)| format!("{k:?}{v:?}"));
            Value::Map(pairs)
        }
        _ => value.clone(),
    }
}

/// A map's pairs, from a RESP3 map or a RESP2 flat array.
fn pairs_of(value: &Value) -> Vec<(Value, Value)> {
    match value {
        Value::Map(pairs) => pairs.clone(),
        Value::Array(flat) => flat
            .chunks(2)
            .map(|p| (p[0].clone(), p[1].clone()))
            .collect(),
        other => vec![(other.clone(), Value::Nil)],
    }
}

/// Error texts valkey 9 words differently from redis-server 7.0, as (valkey's, redis-server's):
/// the codes are the same, and neither redis-rs nor slotcron reads the rest.
const VALKEY_WORDING: [(&str, &str); 2] = [
    ("Unbalanced 'xread' list", "Unbalanced XREAD list"),
    (
        "No matching script.",
        "No matching script. Please use EVAL.",
    ),
];

fn canonical_error(details: &str) -> String {
    let mut text = details.to_owned();
    for (valkey, redis) in VALKEY_WORDING {
        if !text.contains(redis) {
            text = text.replace(valkey, redis);
        }
    }
    if let Some(at) = text.find(" script: ") {
        let rest = &text[at + " script: ".len()..];
        let hex = rest.chars().take_while(|c| c.is_ascii_hexdigit()).count();
        if hex == 40 && rest[hex..].starts_with(", ") {
            text = format!("{} script: {}", &text[..at], &rest[hex + 2..]);
        }
    }
    text
}
