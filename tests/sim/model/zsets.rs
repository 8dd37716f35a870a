//! Sorted sets as the membership heartbeat and the rate budget use them: `ZADD`, `ZREM`,
//! `ZCARD`, `ZRANGE start stop [WITHSCORES]`, `ZREMRANGEBYSCORE`.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

use super::args::{self, MIN_MAX_NOT_FLOAT, NOT_FLOAT, SYNTAX, is};
use super::keyspace::{Keyspace, Value};
use super::resp::Reply;

/// A score ordered as Redis orders them (no NaN is ever stored).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Score(f64);

impl Eq for Score {}

impl PartialOrd for Score {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Score {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// Members by score, then by member bytes (Redis's order for equal scores).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Zset {
    scores: BTreeMap<Vec<u8>, f64>,
    order: BTreeSet<(Score, Vec<u8>)>,
}

impl Zset {
    pub fn is_empty(&self) -> bool {
        self.scores.is_empty()
    }

    pub fn len(&self) -> usize {
        self.scores.len()
    }

    /// Adds or rescores `member`; true when it is new.
    pub fn add(&mut self, member: &[u8], score: f64) -> bool {
        let old = self.scores.insert(member.to_vec(), score);
        if let Some(old) = old {
            self.order.remove(&(Score(old), member.to_vec()));
        }
        self.order.insert((Score(score), member.to_vec()));
        old.is_none()
    }

    pub fn remove(&mut self, member: &[u8]) -> bool {
        let Some(score) = self.scores.remove(member) else {
            return false;
        };
        self.order.remove(&(Score(score), member.to_vec()))
    }

    /// Members ranked `start..=stop` (negative counts from the end), with their scores.
    pub fn range(&self, start: i64, stop: i64) -> Vec<(Vec<u8>, f64)> {
        let len = self.len() as i64;
        let start = if start < 0 {
            (len + start).max(0)
        } else {
            start
        };
        let stop = if stop < 0 {
            len + stop
        } else {
            stop.min(len - 1)
        };
        if start > stop || start >= len {
            return Vec::new();
        }
        self.order
            .iter()
            .skip(start as usize)
            .take((stop - start + 1) as usize)
            .map(|(score, member)| (member.clone(), score.0))
            .collect()
    }

    /// Removes the members whose score is within `range`; how many.
    pub fn remove_by_score(&mut self, range: &ScoreRange) -> usize {
        let doomed: Vec<(Score, Vec<u8>)> = self
            .order
            .iter()
            .filter(|(score, _)| range.holds(score.0))
            .cloned()
            .collect();
        for (_, member) in &doomed {
            self.remove(member);
        }
        doomed.len()
    }
}

/// `min max` of a `ZREMRANGEBYSCORE`: `(` makes a bound exclusive; `-inf`, `+inf`.
pub struct ScoreRange {
    min: (f64, bool),
    max: (f64, bool),
}

impl ScoreRange {
    pub fn parse(min: &[u8], max: &[u8]) -> Result<ScoreRange, Reply> {
        let bound = |arg: &[u8]| {
            let (text, exclusive) = match arg.strip_prefix(b"(") {
                Some(rest) => (rest, true),
                None => (arg, false),
            };
            args::float(text).map(|v| (v, exclusive))
        };
        match (bound(min), bound(max)) {
            (Some(min), Some(max)) => Ok(ScoreRange { min, max }),
            _ => Err(Reply::error(MIN_MAX_NOT_FLOAT)),
        }
    }

    fn holds(&self, score: f64) -> bool {
        let above = if self.min.1 {
            score > self.min.0
        } else {
            score >= self.min.0
        };
        let below = if self.max.1 {
            score < self.max.0
        } else {
            score <= self.max.0
        };
        above && below
    }
}

fn zset_of(value: &mut Value) -> Option<&mut Zset> {
    match value {
        Value::Zset(z) => Some(z),
        _ => None,
    }
}

/// `ZADD key score member [score member ...]` (no `NX|XX|GT|LT|CH|INCR`: slotcron sends none).
pub fn zadd(keys: &mut Keyspace, now_ms: i64, argv: &[Vec<u8>]) -> Reply {
    let pairs = &argv[2..];
    let options = ["NX", "XX", "GT", "LT", "CH", "INCR"];
    if pairs
        .first()
        .is_some_and(|a| options.iter().any(|o| is(a, o)))
    {
        return args::unmodelled("ZADD with options");
    }
    if !pairs.len().is_multiple_of(2) {
        return Reply::error(SYNTAX);
    }
    let mut scored = Vec::new();
    for pair in pairs.chunks(2) {
        match args::float(&pair[0]) {
            Some(score) => scored.push((score, &pair[1])),
            None => return Reply::error(NOT_FLOAT),
        }
    }
    let fresh = || Value::Zset(Zset::default());
    let zset = match keys.typed_or_new(&argv[1], now_ms, fresh, zset_of) {
        Ok(z) => z,
        Err(e) => return e,
    };
    let added = scored.iter().filter(|(s, m)| zset.add(m, *s)).count();
    Reply::Int(added as i64)
}

/// `ZREM key member [member ...]`.
pub fn zrem(keys: &mut Keyspace, now_ms: i64, argv: &[Vec<u8>]) -> Reply {
    let removed = match keys.typed(&argv[1], now_ms, zset_of) {
        Ok(Some(zset)) => argv[2..].iter().filter(|m| zset.remove(m)).count(),
        Ok(None) => 0,
        Err(e) => return e,
    };
    keys.drop_if_empty(&argv[1]);
    Reply::Int(removed as i64)
}

/// `ZCARD key`.
pub fn zcard(keys: &mut Keyspace, now_ms: i64, argv: &[Vec<u8>]) -> Reply {
    match keys.typed(&argv[1], now_ms, zset_of) {
        Ok(zset) => Reply::Int(zset.map_or(0, |z| z.len() as i64)),
        Err(e) => e,
    }
}

/// `ZRANGE key start stop [WITHSCORES]` (by rank: the form slotcron sends).
pub fn zrange(keys: &mut Keyspace, now_ms: i64, argv: &[Vec<u8>]) -> Reply {
    let mut withscores = false;
    for option in &argv[4..] {
        if is(option, "WITHSCORES") {
            withscores = true;
        } else if ["BYSCORE", "BYLEX", "REV", "LIMIT"]
            .iter()
            .any(|w| is(option, w))
        {
            return args::unmodelled("ZRANGE BYSCORE|BYLEX|REV|LIMIT");
        } else {
            return Reply::error(SYNTAX);
        }
    }
    let (start, stop) = match (args::int(&argv[2]), args::int(&argv[3])) {
        (Ok(start), Ok(stop)) => (start, stop),
        (Err(e), _) | (_, Err(e)) => return e,
    };
    let ranked = match keys.typed(&argv[1], now_ms, zset_of) {
        Ok(zset) => zset.map(|z| z.range(start, stop)).unwrap_or_default(),
        Err(e) => return e,
    };
    if withscores {
        Reply::Scored(ranked)
    } else {
        Reply::Array(ranked.into_iter().map(|(m, _)| Reply::Bulk(m)).collect())
    }
}

/// `ZREMRANGEBYSCORE key min max`.
pub fn zremrangebyscore(keys: &mut Keyspace, now_ms: i64, argv: &[Vec<u8>]) -> Reply {
    let range = match ScoreRange::parse(&argv[2], &argv[3]) {
        Ok(range) => range,
        Err(e) => return e,
    };
    let removed = match keys.typed(&argv[1], now_ms, zset_of) {
        Ok(Some(zset)) => zset.remove_by_score(&range),
        Ok(None) => 0,
        Err(e) => return e,
    };
    keys.drop_if_empty(&argv[1]);
    Reply::Int(removed as i64)
}
