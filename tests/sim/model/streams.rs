//! Streams as the run history, the pause log and the audit log use them:
//! `XADD key MAXLEN ~ n * field value ...`, `XRANGE key - +`, `XREVRANGE key + -|id COUNT n`,
//! `XREAD STREAMS key ... id ...`, `XDEL key id`.
//!
//! `MAXLEN ~` trims whole nodes of the stream's radix tree only, so how many entries survive a
//! trim depends on where the nodes end. redis-server starts a new node when the last one holds
//! `stream-node-max-entries` (100) entries or would pass `stream-node-max-bytes` (4096) bytes;
//! the model counts entries only. The two agree while 100 entries fit in 4096 bytes (the
//! differential test's entries do); with larger entries redis-server's nodes are smaller and it
//! keeps fewer of the oldest entries past the cap. Either way the newest `n` entries are kept,
//! and slotcron reads only the newest ones (history) or a log far below its cap (pauses).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::args::{self, INVALID_STREAM_ID, SYNTAX, is};
use super::keyspace::{Keyspace, Value};
use super::resp::Reply;

/// An entry id: milliseconds and sequence.
pub type Id = (u64, u64);

/// redis-server's `stream-node-max-entries` default.
const NODE_MAX_ENTRIES: usize = 100;

type Fields = Vec<(Vec<u8>, Vec<u8>)>;

/// One entry: its fields, and its reply (`[id, [field, value, ...]]`) written once when it was
/// added, the same bytes in RESP2 and RESP3. A history read answers hundreds of entries, a
/// run's record looks at the newest 64 (`RECORD_AND_READ_SCRIPT`): shared, not rebuilt.
#[derive(Debug, PartialEq)]
pub struct Entry {
    pub fields: Fields,
    pub wire: Vec<u8>,
}

impl Entry {
    fn new(id: Id, fields: Fields) -> Entry {
        let flat = (fields.iter())
            .flat_map(|(f, v)| [Reply::bulk(f), Reply::bulk(v)])
            .collect();
        let reply = Reply::Array(vec![Reply::text(&format_id(id)), Reply::Array(flat)]);
        Entry {
            wire: reply.to_bytes(2),
            fields,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stream {
    entries: BTreeMap<Id, Arc<Entry>>,
    /// The radix tree's nodes by their first (master) id: `(live, used)` entries, `used`
    /// counting the ones `XDEL` marked deleted too (redis-server starts a new node when
    /// `used` reaches 100, and frees a node whose last live entry is deleted).
    nodes: BTreeMap<Id, (usize, usize)>,
    last_id: Id,
}

impl Stream {
    /// Appends an entry under the next id at `now_ms` (`*`); the id.
    fn append(&mut self, now_ms: i64, fields: Fields) -> Id {
        let ms = now_ms.max(0) as u64;
        let id = if ms > self.last_id.0 {
            (ms, 0)
        } else {
            (self.last_id.0, self.last_id.1 + 1)
        };
        self.entries.insert(id, Arc::new(Entry::new(id, fields)));
        self.last_id = id;
        match self.nodes.last_entry() {
            Some(mut node) if node.get().1 < NODE_MAX_ENTRIES => {
                let (live, used) = node.get_mut();
                *live += 1;
                *used += 1;
            }
            _ => {
                self.nodes.insert(id, (1, 1));
            }
        }
        id
    }

    /// `MAXLEN ~ maxlen`: drops whole nodes from the oldest while the rest still holds
    /// `maxlen` entries.
    fn trim_approx(&mut self, maxlen: usize) {
        while let Some(node) = self.nodes.first_entry() {
            let len = self.entries.len();
            let live = node.get().0;
            if len <= maxlen || len - live < maxlen {
                break;
            }
            node.remove();
            let rest = match self.nodes.first_key_value() {
                Some((&next, _)) => self.entries.split_off(&next),
                None => BTreeMap::new(),
            };
            self.entries = rest;
        }
    }

    /// Deletes the entry `id`, if there is one: its node keeps the place (it still counts
    /// towards the node's 100) until its last live entry goes, and the last id stays.
    fn delete(&mut self, id: Id) -> bool {
        if self.entries.remove(&id).is_none() {
            return false;
        }
        let (&first, node) = self
            .nodes
            .range_mut(..=id)
            .next_back()
            .expect("an entry lies in a node");
        node.0 -= 1;
        if node.0 == 0 {
            self.nodes.remove(&first);
        }
        true
    }

    /// The entries with ids in `from..=to`, oldest first (newest first if `rev`), at most
    /// `count`.
    fn range(&self, from: Id, to: Id, rev: bool, count: Option<usize>) -> Vec<Reply> {
        if from > to {
            return Vec::new();
        }
        let picked = self.entries.range(from..=to);
        let limit = count.unwrap_or(usize::MAX);
        if rev {
            picked.rev().take(limit).map(entry_reply).collect()
        } else {
            picked.take(limit).map(entry_reply).collect()
        }
    }
}

fn entry_reply((_, entry): (&Id, &Arc<Entry>)) -> Reply {
    Reply::Entry(entry.clone())
}

pub fn format_id((ms, seq): Id) -> String {
    format!("{ms}-{seq}")
}

/// An id argument: `ms-seq`, or `ms` with the sequence `missing_seq` gives.
fn parse_id(arg: &[u8], missing_seq: u64) -> Result<Id, Reply> {
    let invalid = || Reply::error(INVALID_STREAM_ID);
    let text = std::str::from_utf8(arg).map_err(|_| invalid())?;
    let number = |s: &str| s.parse::<u64>().map_err(|_| invalid());
    match text.split_once('-') {
        Some((ms, seq)) => Ok((number(ms)?, number(seq)?)),
        None => Ok((number(text)?, missing_seq)),
    }
}

/// A range bound: `-`, `+`, an id, or `(id` (exclusive).
fn parse_bound(arg: &[u8], start: bool) -> Result<Id, Reply> {
    match arg {
        b"-" => return Ok((0, 0)),
        b"+" => return Ok((u64::MAX, u64::MAX)),
        _ => {}
    }
    let (text, exclusive) = match arg.strip_prefix(b"(") {
        Some(rest) => (rest, true),
        None => (arg, false),
    };
    let id = parse_id(text, if start { 0 } else { u64::MAX })?;
    let stepped = match (exclusive, start) {
        (false, _) => Some(id),
        (true, true) => next_id(id),
        (true, false) => previous_id(id),
    };
    stepped.ok_or_else(|| Reply::error("ERR invalid start ID for the interval"))
}

fn next_id((ms, seq): Id) -> Option<Id> {
    match seq.checked_add(1) {
        Some(seq) => Some((ms, seq)),
        None => ms.checked_add(1).map(|ms| (ms, 0)),
    }
}

fn previous_id((ms, seq): Id) -> Option<Id> {
    match seq.checked_sub(1) {
        Some(seq) => Some((ms, seq)),
        None => ms.checked_sub(1).map(|ms| (ms, u64::MAX)),
    }
}

fn stream_of(value: &mut Value) -> Option<&mut Stream> {
    match value {
        Value::Stream(s) => Some(s),
        _ => None,
    }
}

/// The parsed `XADD` arguments before the fields: the trim and where the id is.
struct AddArgs {
    maxlen: Option<usize>,
    id_at: usize,
}

fn parse_add(argv: &[Vec<u8>]) -> Result<AddArgs, Reply> {
    let mut maxlen = None;
    let mut i = 2;
    while i < argv.len() {
        let arg = &argv[i];
        if is(arg, "MAXLEN") && i + 2 < argv.len() {
            if !is(&argv[i + 1], "~") {
                return Err(args::unmodelled("XADD MAXLEN without ~"));
            }
            let n = args::int(&argv[i + 2])?;
            if n < 0 {
                return Err(Reply::error("ERR The MAXLEN argument must be >= 0."));
            }
            maxlen = Some(n as usize);
            i += 3;
        } else if ["NOMKSTREAM", "MINID", "LIMIT"].iter().any(|w| is(arg, w)) {
            return Err(args::unmodelled("XADD NOMKSTREAM|MINID|LIMIT"));
        } else {
            break;
        }
    }
    let fields = argv.len().saturating_sub(i + 1);
    if fields < 2 || fields % 2 == 1 {
        return Err(args::arity("xadd"));
    }
    Ok(AddArgs { maxlen, id_at: i })
}

/// `XADD key [MAXLEN ~ n] * field value [field value ...]`.
pub fn xadd(keys: &mut Keyspace, now_ms: i64, argv: &[Vec<u8>]) -> Reply {
    let add = match parse_add(argv) {
        Ok(add) => add,
        Err(e) => return e,
    };
    if argv[add.id_at] != b"*" {
        return args::unmodelled("XADD with an explicit id");
    }
    let fields: Fields = argv[add.id_at + 1..]
        .chunks(2)
        .map(|pair| (pair[0].clone(), pair[1].clone()))
        .collect();
    let fresh = || Value::Stream(Stream::default());
    let stream = match keys.typed_or_new(&argv[1], now_ms, fresh, stream_of) {
        Ok(s) => s,
        Err(e) => return e,
    };
    let id = stream.append(now_ms, fields);
    if let Some(maxlen) = add.maxlen {
        stream.trim_approx(maxlen);
    }
    Reply::text(&format_id(id))
}

/// `XDEL key id [id ...]`: how many entries it deleted. As redis-server: a missing key is 0
/// and another type `WRONGTYPE` before any id is read; then every id is read (strictly: no
/// `-` or `+`) before any is deleted; an id given twice is deleted once.
pub fn xdel(keys: &mut Keyspace, now_ms: i64, argv: &[Vec<u8>]) -> Reply {
    let stream = match keys.typed(&argv[1], now_ms, stream_of) {
        Ok(Some(stream)) => stream,
        Ok(None) => return Reply::Int(0),
        Err(e) => return e,
    };
    let mut ids = Vec::new();
    for arg in &argv[2..] {
        match parse_id(arg, 0) {
            Ok(id) => ids.push(id),
            Err(e) => return e,
        }
    }
    let deleted = ids.into_iter().filter(|&id| stream.delete(id)).count();
    Reply::Int(deleted as i64)
}

/// `COUNT n` after a range, if given: a syntax error for anything else.
fn parse_count(options: &[Vec<u8>]) -> Result<Option<usize>, Reply> {
    match options {
        [] => Ok(None),
        [word, n] if is(word, "COUNT") => Ok(Some(args::int(n)?.max(0) as usize)),
        _ => Err(Reply::error(SYNTAX)),
    }
}

/// `XRANGE key start end [COUNT n]`, or `XREVRANGE key end start [COUNT n]` when `rev`.
fn xrange(keys: &mut Keyspace, now_ms: i64, argv: &[Vec<u8>], rev: bool) -> Reply {
    let (first, second) = if rev {
        (&argv[3], &argv[2])
    } else {
        (&argv[2], &argv[3])
    };
    let bounds = parse_bound(first, true).and_then(|from| Ok((from, parse_bound(second, false)?)));
    let ((from, to), count) = match bounds.and_then(|b| Ok((b, parse_count(&argv[4..])?))) {
        Ok(parsed) => parsed,
        Err(e) => return e,
    };
    if count == Some(0) {
        return Reply::NilArray;
    }
    match keys.typed(&argv[1], now_ms, stream_of) {
        Ok(Some(stream)) => Reply::Array(stream.range(from, to, rev, count)),
        Ok(None) => Reply::Array(Vec::new()),
        Err(e) => e,
    }
}

/// `XRANGE key start end [COUNT n]`.
pub fn xrange_forward(keys: &mut Keyspace, now_ms: i64, argv: &[Vec<u8>]) -> Reply {
    xrange(keys, now_ms, argv, false)
}

/// `XREVRANGE key end start [COUNT n]`.
pub fn xrevrange(keys: &mut Keyspace, now_ms: i64, argv: &[Vec<u8>]) -> Reply {
    xrange(keys, now_ms, argv, true)
}

/// `XREAD [COUNT n] STREAMS key [key ...] id [id ...]` (no `BLOCK`: slotcron reads the logs
/// at start, it does not wait on them).
pub fn xread(keys: &mut Keyspace, now_ms: i64, argv: &[Vec<u8>]) -> Reply {
    let (count, streams_at) = match parse_read(argv) {
        Ok(parsed) => parsed,
        Err(e) => return e,
    };
    let rest = &argv[streams_at + 1..];
    let (names, ids) = rest.split_at(rest.len() / 2);
    let mut after = Vec::new();
    for (name, id) in names.iter().zip(ids) {
        let last = match keys.typed(name, now_ms, stream_of) {
            Ok(stream) => stream.map_or((0, 0), |s| s.last_id),
            Err(e) => return e,
        };
        match id.as_slice() {
            b"$" => after.push(last),
            _ => match parse_id(id, 0) {
                Ok(id) => after.push(id),
                Err(e) => return e,
            },
        }
    }
    let mut found = Vec::new();
    for (name, id) in names.iter().zip(after) {
        let Some(from) = next_id(id) else { continue };
        let entries = match keys.typed(name, now_ms, stream_of) {
            Ok(Some(stream)) => stream.range(from, (u64::MAX, u64::MAX), false, count),
            _ => Vec::new(),
        };
        if !entries.is_empty() {
            found.push((Reply::bulk(name), Reply::Array(entries)));
        }
    }
    if found.is_empty() {
        Reply::NilArray
    } else {
        Reply::Keyed(found)
    }
}

const UNBALANCED: &str = "ERR Unbalanced XREAD list of streams: for each stream key an ID or \
    '$' must be specified.";

/// `COUNT` and where `STREAMS` is; errors as redis-server reads them.
fn parse_read(argv: &[Vec<u8>]) -> Result<(Option<usize>, usize), Reply> {
    let mut count = None;
    let mut i = 1;
    while i < argv.len() {
        let arg = &argv[i];
        let more = argv.len() - i - 1;
        if is(arg, "STREAMS") {
            if !more.is_multiple_of(2) {
                return Err(Reply::error(UNBALANCED));
            }
            return Ok((count, i));
        } else if is(arg, "COUNT") && more >= 1 {
            // `COUNT 0` (or less) reads without a limit, as no `COUNT` does.
            count = Some(args::int(&argv[i + 1])?)
                .filter(|&n| n > 0)
                .map(|n| n as usize);
            i += 2;
        } else if is(arg, "BLOCK") {
            return Err(args::unmodelled("XREAD BLOCK"));
        } else {
            return Err(Reply::error(SYNTAX));
        }
    }
    Err(Reply::error(SYNTAX))
}
