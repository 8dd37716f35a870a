//! Hashes as the destinations exchange uses them: `HSET`, `HGETALL`, `HDEL`.

use std::collections::BTreeMap;

use super::args;
use super::keyspace::{Keyspace, Value};
use super::resp::Reply;

type Hash = BTreeMap<Vec<u8>, Vec<u8>>;

fn hash_of(value: &mut Value) -> Option<&mut Hash> {
    match value {
        Value::Hash(h) => Some(h),
        _ => None,
    }
}

/// `HSET key field value [field value ...]`: how many fields are new.
pub fn hset(keys: &mut Keyspace, now_ms: i64, argv: &[Vec<u8>]) -> Reply {
    if !argv.len().is_multiple_of(2) {
        return args::arity("hset");
    }
    let fresh = || Value::Hash(Hash::new());
    let hash = match keys.typed_or_new(&argv[1], now_ms, fresh, hash_of) {
        Ok(h) => h,
        Err(e) => return e,
    };
    let added = argv[2..]
        .chunks(2)
        .filter(|pair| hash.insert(pair[0].clone(), pair[1].clone()).is_none())
        .count();
    Reply::Int(added as i64)
}

/// `HGETALL key`. The order of the fields is the model's (by field bytes): redis-server
/// answers in its hash table's order, which no caller may rely on (slotcron reads the answer
/// into a map), so the differential test compares the fields as a map.
pub fn hgetall(keys: &mut Keyspace, now_ms: i64, argv: &[Vec<u8>]) -> Reply {
    match keys.typed(&argv[1], now_ms, hash_of) {
        Ok(hash) => Reply::Map(
            hash.map(|h| {
                h.iter()
                    .map(|(f, v)| (Reply::bulk(f), Reply::bulk(v)))
                    .collect()
            })
            .unwrap_or_default(),
        ),
        Err(e) => e,
    }
}

/// `HDEL key field [field ...]`: how many were there.
pub fn hdel(keys: &mut Keyspace, now_ms: i64, argv: &[Vec<u8>]) -> Reply {
    let removed = match keys.typed(&argv[1], now_ms, hash_of) {
        Ok(Some(hash)) => argv[2..]
            .iter()
            .filter(|f| hash.remove(*f).is_some())
            .count(),
        Ok(None) => 0,
        Err(e) => return e,
    };
    keys.drop_if_empty(&argv[1]);
    Reply::Int(removed as i64)
}
