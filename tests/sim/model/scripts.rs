//! `EVAL`, `EVALSHA` and `SCRIPT`: slotcron's Lua scripts, each run natively, recognised by its
//! exact text (or its SHA-1). The texts below are copies of the constants in `src/`; the
//! differential test (tests/it/sim_model.rs) reads the constants from `src/` and sends them,
//! so a script changed there is an "unknown script" error here and fails that test, instead of
//! the model silently running the old semantics.
//!
//! The script cache works as redis-server's: `EVAL` and `SCRIPT LOAD` cache a script, `EVALSHA`
//! of an uncached one is `NOSCRIPT` (redis-rs's `Script` then sends `SCRIPT LOAD` and retries),
//! and a restart empties it. Errors of a `redis.call` inside a script carry redis-server 7's
//! suffix, ` script: <sha>, on @user_script:<line>.`.

use std::collections::BTreeMap;

use super::args::{self, NOSCRIPT};
use super::keyspace::Keyspace;
use super::resp::Reply;
use super::{lists, sha1, streams, strings, zsets};

/// `src/redis/scripts.rs` `RELEASE_SCRIPT`.
const RELEASE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('DEL', KEYS[1])
end
return 0";

/// `src/redis/scripts.rs` `EXTEND_SCRIPT`.
const EXTEND: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0";

/// `src/redis/scripts.rs` `ACQUIRE_SCRIPT`.
const ACQUIRE: &str = r"
local current = redis.call('GET', KEYS[1])
if current then return current end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return false";

/// `src/record/history.rs` `RECORD_AND_READ_SCRIPT`.
const RECORD_AND_READ: &str = "
redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', unpack(ARGV, 4))
local found = {}
for _, entry in ipairs(redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', ARGV[2])) do
  local fields = entry[2]
  for i = 1, #fields, 2 do
    if fields[i] == 'fence' and fields[i + 1] == ARGV[3] then table.insert(found, entry) end
  end
end
return found";

/// `src/record/watermark.rs` `FIRST_SEEN_SCRIPT`.
const FIRST_SEEN: &str = "for _, key in ipairs(KEYS) do redis.call('SET', key, ARGV[1], 'NX') end \
    return redis.call('MGET', unpack(KEYS))";

/// `src/action/rate.rs` `TAKE_SCRIPT`.
const TAKE: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[1]) then
    redis.call('ZADD', KEYS[1], now, ARGV[3])
    redis.call('PEXPIRE', KEYS[1], window)
    return 0
end
local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return math.max(1, tonumber(oldest[2]) + window - now)";

/// `src/record/alerts.rs` `PUSH_SCRIPT`.
const PUSH: &str = "redis.call('LPUSH', KEYS[1], ARGV[1]) \
    redis.call('LTRIM', KEYS[1], 0, tonumber(ARGV[2]) - 1) return 1";

/// The scripts slotcron sends, by meaning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Known {
    Release,
    Extend,
    Acquire,
    RecordAndRead,
    FirstSeen,
    Take,
    Push,
}

/// Every script the model runs, with its text.
pub const KNOWN: [(Known, &str); 7] = [
    (Known::Release, RELEASE),
    (Known::Extend, EXTEND),
    (Known::Acquire, ACQUIRE),
    (Known::RecordAndRead, RECORD_AND_READ),
    (Known::FirstSeen, FIRST_SEEN),
    (Known::Take, TAKE),
    (Known::Push, PUSH),
];

/// The script a text is, if the model knows it.
pub fn recognise(text: &[u8]) -> Option<Known> {
    KNOWN
        .iter()
        .find(|(_, known)| known.as_bytes() == text)
        .map(|(kind, _)| *kind)
}

/// The error for a script text the model does not know: names it by SHA-1 and first line.
fn unknown_script(text: &[u8]) -> Reply {
    let shown = args::lossy(text);
    let first = shown.trim().lines().next().unwrap_or("").to_owned();
    Reply::error(format!(
        "ERR sim model: unknown script {} ({first} ...): a script of src/ changed; model it in tests/sim/model/scripts.rs",
        sha1::hex(text)
    ))
}

/// The node's script cache: SHA-1 to script.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ScriptCache {
    loaded: BTreeMap<String, Known>,
}

impl ScriptCache {
    /// Caches `text`; its SHA-1, or the error for an unknown script.
    fn load(&mut self, text: &[u8]) -> Result<(String, Known), Reply> {
        let known = recognise(text).ok_or_else(|| unknown_script(text))?;
        let sha = sha1::hex(text);
        self.loaded.insert(sha.clone(), known);
        Ok((sha, known))
    }

    pub fn flush(&mut self) {
        self.loaded.clear();
    }
}

/// The two clocks a script sees, in µs: the instant its command started, at which every key's
/// expiry is judged and `PEXPIRE` counts from (the command time snapshot of redis-server 7.2+
/// and valkey; 7.0 counts `PEXPIRE` from its live clock, which the differential test covers by
/// also trying the later instant for both), and what `redis.call('TIME')` reads, which runs on
/// (a microsecond later it may be the next millisecond).
#[derive(Clone, Copy)]
pub struct Clocks {
    pub start_us: i64,
    pub time_us: i64,
}

/// `EVAL script numkeys key ... arg ...`, or `EVALSHA sha numkeys ...` when `by_sha`.
pub fn eval(
    cache: &mut ScriptCache,
    keys: &mut Keyspace,
    clocks: Clocks,
    argv: &[Vec<u8>],
    by_sha: bool,
) -> Reply {
    let numkeys = match args::int(&argv[2]) {
        Ok(n) if n > (argv.len() - 3) as i64 => {
            return Reply::error("ERR Number of keys can't be greater than number of args");
        }
        Ok(n) if n < 0 => return Reply::error("ERR Number of keys can't be negative"),
        Ok(n) => n as usize,
        Err(e) => return e,
    };
    let found = if by_sha {
        let sha = args::lossy(&argv[1]).to_ascii_lowercase();
        match cache.loaded.get(&sha) {
            Some(known) => Ok((sha, *known)),
            None => Err(Reply::error(NOSCRIPT)),
        }
    } else {
        cache.load(&argv[1])
    };
    let (sha, known) = match found {
        Ok(found) => found,
        Err(e) => return e,
    };
    let (k, a) = argv[3..].split_at(numkeys);
    let mut run = Run {
        keys,
        clocks,
        sha,
        k,
        a,
    };
    match run.script(known) {
        Ok(reply) | Err(reply) => reply,
    }
}

/// `SCRIPT LOAD | EXISTS | FLUSH`.
pub fn script(cache: &mut ScriptCache, argv: &[Vec<u8>]) -> Reply {
    let sub = argv[1].to_ascii_uppercase();
    match (sub.as_slice(), argv.len()) {
        (b"LOAD", 3) => match cache.load(&argv[2]) {
            Ok((sha, _)) => Reply::text(&sha),
            Err(e) => e,
        },
        (b"LOAD", _) => args::arity("script|load"),
        (b"EXISTS", n) if n >= 3 => Reply::Array(
            argv[2..]
                .iter()
                .map(|sha| args::lossy(sha).to_ascii_lowercase())
                .map(|sha| Reply::Int(cache.loaded.contains_key(&sha) as i64))
                .collect(),
        ),
        (b"EXISTS", _) => args::arity("script|exists"),
        (b"FLUSH", 2) => {
            cache.flush();
            Reply::Ok
        }
        _ => args::unknown_subcommand("SCRIPT", &argv[1]),
    }
}

/// One script's run: its keys and arguments, and its clocks.
struct Run<'a> {
    keys: &'a mut Keyspace,
    clocks: Clocks,
    sha: String,
    k: &'a [Vec<u8>],
    a: &'a [Vec<u8>],
}

type Command = fn(&mut Keyspace, i64, &[Vec<u8>]) -> Reply;

impl Run<'_> {
    /// The command's instant in ms (expiry, `PEXPIRE`).
    fn now_ms(&self) -> i64 {
        self.clocks.start_us.div_euclid(1000)
    }

    /// `redis.call(...)` at `line` of the script: an error reply raises, with the script's
    /// suffix.
    fn call(&mut self, line: u32, command: Command, argv: &[&[u8]]) -> Result<Reply, Reply> {
        let argv: Vec<Vec<u8>> = argv.iter().map(|a| a.to_vec()).collect();
        match command(self.keys, self.now_ms(), &argv) {
            Reply::Error(e) => Err(Reply::error(format!(
                "{e} script: {}, on @user_script:{line}.",
                self.sha
            ))),
            reply => Ok(reply),
        }
    }

    /// `KEYS[1]` and `ARGV[1..=n]`, or the error for a call the model does not cover.
    fn key_and_args(&self, n: usize) -> Result<(&[u8], Vec<&[u8]>), Reply> {
        match (self.k, self.a.len() >= n) {
            ([key], true) => Ok((key, self.a.iter().map(Vec::as_slice).collect())),
            _ => Err(args::unmodelled(
                "a script called with other keys or arguments",
            )),
        }
    }

    fn script(&mut self, known: Known) -> Result<Reply, Reply> {
        match known {
            Known::Release => self.release(),
            Known::Extend => self.extend(),
            Known::Acquire => self.acquire(),
            Known::RecordAndRead => self.record_and_read(),
            Known::FirstSeen => self.first_seen(),
            Known::Take => self.take(),
            Known::Push => self.push(),
        }
    }

    /// Whether `key` holds `token` (`redis.call('GET', key) == token`, at `line`).
    fn holds(&mut self, line: u32, key: &[u8], token: &[u8]) -> Result<bool, Reply> {
        let held = self.call(line, strings::get, &[b"GET", key])?;
        Ok(held == Reply::bulk(token))
    }

    fn release(&mut self) -> Result<Reply, Reply> {
        let (key, a) = self.key_and_args(1)?;
        let (key, token) = (key.to_vec(), a[0].to_vec());
        if self.holds(2, &key, &token)? {
            return self.call(3, strings::del, &[b"DEL", &key]);
        }
        Ok(Reply::Int(0))
    }

    fn extend(&mut self) -> Result<Reply, Reply> {
        let (key, a) = self.key_and_args(2)?;
        let (key, token, ttl) = (key.to_vec(), a[0].to_vec(), a[1].to_vec());
        if self.holds(2, &key, &token)? {
            return self.call(3, strings::pexpire, &[b"PEXPIRE", &key, &ttl]);
        }
        Ok(Reply::Int(0))
    }

    fn acquire(&mut self) -> Result<Reply, Reply> {
        let (key, a) = self.key_and_args(2)?;
        let (key, token, ttl) = (key.to_vec(), a[0].to_vec(), a[1].to_vec());
        match self.call(2, strings::get, &[b"GET", &key])? {
            Reply::Nil => {}
            current => return Ok(current),
        }
        self.call(4, strings::set, &[b"SET", &key, &token, b"PX", &ttl])?;
        Ok(Reply::Nil)
    }

    fn record_and_read(&mut self) -> Result<Reply, Reply> {
        let (key, a) = self.key_and_args(3)?;
        let key = key.to_vec();
        let (cap, look, fence) = (a[0].to_vec(), a[1].to_vec(), a[2].to_vec());
        let mut xadd: Vec<&[u8]> = vec![b"XADD", &key, b"MAXLEN", b"~", &cap, b"*"];
        let fields: Vec<Vec<u8>> = a[3..].iter().map(|f| f.to_vec()).collect();
        xadd.extend(fields.iter().map(Vec::as_slice));
        self.call(2, streams::xadd, &xadd)?;
        let newest = self.call(
            4,
            streams::xrevrange,
            &[b"XREVRANGE", &key, b"+", b"-", b"COUNT", &look],
        )?;
        let Reply::Array(entries) = newest else {
            return Ok(Reply::Array(Vec::new()));
        };
        let mut found = Vec::new();
        for entry in entries {
            let matches = match &entry {
                Reply::Entry(e) => (e.fields.iter())
                    .filter(|(name, value)| name == b"fence" && *value == fence)
                    .count(),
                _ => 0,
            };
            found.extend(std::iter::repeat_n(entry, matches));
        }
        Ok(Reply::Array(found))
    }

    fn first_seen(&mut self) -> Result<Reply, Reply> {
        let Some(at) = self.a.first().cloned() else {
            return Err(args::unmodelled("FIRST_SEEN_SCRIPT without its time"));
        };
        let keys: Vec<Vec<u8>> = self.k.to_vec();
        for key in &keys {
            self.call(1, strings::set, &[b"SET", key, &at, b"NX"])?;
        }
        let mut mget: Vec<&[u8]> = vec![b"MGET"];
        mget.extend(keys.iter().map(Vec::as_slice));
        self.call(1, strings::mget, &mget)
    }

    /// `LPUSH` the line, then `LTRIM` to the newest `tonumber(ARGV[2])` (all on line 1).
    fn push(&mut self) -> Result<Reply, Reply> {
        let (key, a) = self.key_and_args(2)?;
        let (key, line) = (key.to_vec(), a[0].to_vec());
        let Some(cap) = args::lossy(a[1]).trim().parse::<f64>().ok() else {
            return Err(args::unmodelled(
                "PUSH_SCRIPT with a cap that is not a number",
            ));
        };
        self.call(1, lists::lpush, &[b"LPUSH", &key, &line])?;
        let stop = lua_number(cap - 1.0);
        self.call(1, lists::ltrim, &[b"LTRIM", &key, b"0", stop.as_bytes()])?;
        Ok(Reply::Int(1))
    }

    fn take(&mut self) -> Result<Reply, Reply> {
        let (key, a) = self.key_and_args(3)?;
        let key = key.to_vec();
        let number = |arg: &[u8]| args::lossy(arg).trim().parse::<f64>().ok();
        let (Some(limit), Some(window)) = (number(a[0]), number(a[1])) else {
            return Err(args::unmodelled(
                "TAKE_SCRIPT with a limit or window that is not a number",
            ));
        };
        let member = a[2].to_vec();
        // `now`: `TIME`'s seconds * 1000 + floor(microseconds / 1000).
        let now = self.clocks.time_us.div_euclid(1000) as f64;
        let floor = lua_number(now - window);
        self.call(
            5,
            zsets::zremrangebyscore,
            &[b"ZREMRANGEBYSCORE", &key, b"-inf", floor.as_bytes()],
        )?;
        let Reply::Int(count) = self.call(6, zsets::zcard, &[b"ZCARD", &key])? else {
            unreachable!("ZCARD answers an integer")
        };
        if (count as f64) < limit {
            self.call(
                7,
                zsets::zadd,
                &[b"ZADD", &key, lua_number(now).as_bytes(), &member],
            )?;
            self.call(
                8,
                strings::pexpire,
                &[b"PEXPIRE", &key, lua_number(window).as_bytes()],
            )?;
            return Ok(Reply::Int(0));
        }
        let oldest = self.call(
            11,
            zsets::zrange,
            &[b"ZRANGE", &key, b"0", b"0", b"WITHSCORES"],
        )?;
        let Reply::Scored(pairs) = oldest else {
            unreachable!("ZRANGE WITHSCORES answers scored members")
        };
        let Some((_, score)) = pairs.first() else {
            return Err(args::unmodelled(
                "TAKE_SCRIPT on an empty window with limit 0",
            ));
        };
        Ok(Reply::Int((score + window - now).max(1.0) as i64))
    }
}

/// A Lua number as Lua 5.1 turns it into a command argument (`%.14g`).
fn lua_number(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e14 {
        return format!("{}", n as i64);
    }
    let text = format!("{n:.13e}");
    let (mantissa, exponent) = text.split_once('e').unwrap_or((&text, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let mantissa = mantissa.trim_end_matches('0').trim_end_matches('.');
    if (-5..14).contains(&exponent) {
        format!("{}", n)
    } else {
        format!(
            "{mantissa}e{}{:02}",
            if exponent < 0 { '-' } else { '+' },
            exponent.abs()
        )
    }
}
