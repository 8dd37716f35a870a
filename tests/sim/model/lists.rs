//! Lists as the alert log uses them: `LPUSH key value ...`, `LTRIM key start stop` (both inside
//! `PUSH_SCRIPT`) and `LRANGE key start stop`. An emptied list is deleted, as redis-server does.

use std::collections::VecDeque;

use super::args;
use super::keyspace::{Keyspace, Value};
use super::resp::Reply;

pub type List = VecDeque<Vec<u8>>;

fn list_of(value: &mut Value) -> Option<&mut List> {
    match value {
        Value::List(l) => Some(l),
        _ => None,
    }
}

/// redis-server's index range: negative indices count from the end; `None` when empty.
fn span(len: usize, start: i64, stop: i64) -> Option<(usize, usize)> {
    let len = len as i64;
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
        return None;
    }
    Some((start as usize, stop as usize))
}

/// `LPUSH key value [value ...]`: the new length.
pub fn lpush(keys: &mut Keyspace, now_ms: i64, argv: &[Vec<u8>]) -> Reply {
    let fresh = || Value::List(List::new());
    let list = match keys.typed_or_new(&argv[1], now_ms, fresh, list_of) {
        Ok(l) => l,
        Err(e) => return e,
    };
    for value in &argv[2..] {
        list.push_front(value.clone());
    }
    Reply::Int(list.len() as i64)
}

/// `LTRIM key start stop`.
pub fn ltrim(keys: &mut Keyspace, now_ms: i64, argv: &[Vec<u8>]) -> Reply {
    let (start, stop) = match (args::int(&argv[2]), args::int(&argv[3])) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => return e,
    };
    match keys.typed(&argv[1], now_ms, list_of) {
        Ok(Some(list)) => {
            match span(list.len(), start, stop) {
                Some((from, to)) => {
                    list.truncate(to + 1);
                    list.drain(..from);
                }
                None => list.clear(),
            }
            keys.drop_if_empty(&argv[1]);
            Reply::Ok
        }
        Ok(None) => Reply::Ok,
        Err(e) => e,
    }
}

/// `LRANGE key start stop`.
pub fn lrange(keys: &mut Keyspace, now_ms: i64, argv: &[Vec<u8>]) -> Reply {
    let (start, stop) = match (args::int(&argv[2]), args::int(&argv[3])) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => return e,
    };
    match keys.typed(&argv[1], now_ms, list_of) {
        Ok(Some(list)) => match span(list.len(), start, stop) {
            Some((from, to)) => Reply::Array(
                list.range(from..=to)
                    .map(|v| Reply::Bulk(v.clone()))
                    .collect(),
            ),
            None => Reply::Array(Vec::new()),
        },
        Ok(None) => Reply::Array(Vec::new()),
        Err(e) => e,
    }
}
