//! The keyspace of one node: values by key, each with its expiry on the node's own clock.
//! A key whose time has passed is gone at its next access (lazy expiry, as a client sees it),
//! and at each command the keys whose time has passed are deleted ([`Keyspace::sweep`], as
//! redis-server's active expiry deletes them in the background; no reply tells the two apart).
//! Without the sweep, every slot's lock key stayed in the map for the rest of the run, and
//! looking keys up among them was a tenth of a calm simulation's CPU. A key is expired once
//! the clock is strictly past its deadline (`now > when`, redis-server's `keyIsExpired`).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use xxhash_rust::xxh3::Xxh3DefaultBuilder;

use super::args::WRONGTYPE;
use super::lists::List;
use super::resp::Reply;
use super::streams::Stream;
use super::zsets::Zset;

/// What a key holds.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Str(Vec<u8>),
    Zset(Zset),
    Hash(BTreeMap<Vec<u8>, Vec<u8>>),
    Stream(Stream),
    List(List),
}

/// A key's value and its deadline (ms since the epoch on the node's clock), if it has one.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    pub value: Value,
    pub expires_at_ms: Option<i64>,
}

/// Every key of the node (database 0: slotcron selects no other). Looked up by hash (a
/// `BTreeMap`'s comparisons of keys sharing their first dozen bytes were a tenth of a calm
/// simulation's CPU) and never iterated, so no hash order reaches a reply; the hasher is
/// seeded the same in every run all the same.
#[derive(Clone, Debug, Default)]
pub struct Keyspace {
    entries: HashMap<Vec<u8>, Entry, Xxh3DefaultBuilder>,
    /// Every deadline given, soonest first, with its key: what [`Self::sweep`] looks at. A
    /// deadline the key no longer has (deleted, overwritten, expiry moved) is dropped when
    /// its time comes.
    deadlines: BTreeSet<(i64, Vec<u8>)>,
}

/// Two keyspaces are equal when they hold the same live and not yet swept keys; the deadline
/// index is how, not what.
impl PartialEq for Keyspace {
    fn eq(&self, other: &Self) -> bool {
        self.entries == other.entries
    }
}

impl Keyspace {
    /// Deletes every key whose deadline is past at `now_ms` (redis-server's active expiry).
    pub fn sweep(&mut self, now_ms: i64) {
        while let Some((when, _)) = self.deadlines.first() {
            if *when >= now_ms {
                return;
            }
            let (when, key) = self.deadlines.pop_first().expect("the first deadline");
            if self.entries.get(&key).and_then(|e| e.expires_at_ms) == Some(when) {
                self.entries.remove(&key);
            }
        }
    }

    fn index(&mut self, key: &[u8], expires_at_ms: Option<i64>) {
        if let Some(when) = expires_at_ms {
            self.deadlines.insert((when, key.to_vec()));
        }
    }

    /// The live entry of `key` at `now_ms`, removing it first if it has expired.
    pub fn live(&mut self, key: &[u8], now_ms: i64) -> Option<&mut Entry> {
        let expired = self
            .entries
            .get(key)
            .and_then(|e| e.expires_at_ms)
            .is_some_and(|when| now_ms > when);
        if expired {
            self.entries.remove(key);
        }
        self.entries.get_mut(key)
    }

    /// The string at `key` at `now_ms`, looked at from outside: nothing expires or is touched
    /// (the simulator's invariants read the nodes so; no command does).
    pub fn peek(&self, key: &[u8], now_ms: i64) -> Option<&[u8]> {
        let entry = self.entries.get(key)?;
        if entry.expires_at_ms.is_some_and(|when| now_ms > when) {
            return None;
        }
        match &entry.value {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn exists(&mut self, key: &[u8], now_ms: i64) -> bool {
        self.live(key, now_ms).is_some()
    }

    /// Sets `key` to `value`, replacing whatever it held and its deadline.
    pub fn set(&mut self, key: &[u8], value: Value, expires_at_ms: Option<i64>) {
        let entry = Entry {
            value,
            expires_at_ms,
        };
        self.index(key, expires_at_ms);
        self.entries.insert(key.to_vec(), entry);
    }

    /// Removes `key`; true when it was live.
    pub fn remove(&mut self, key: &[u8], now_ms: i64) -> bool {
        self.live(key, now_ms).is_some() && self.entries.remove(key).is_some()
    }

    /// The string at `key`, `None` when missing, `WRONGTYPE` for another type.
    pub fn string(&mut self, key: &[u8], now_ms: i64) -> Result<Option<Vec<u8>>, Reply> {
        match self.live(key, now_ms).map(|e| &e.value) {
            None => Ok(None),
            Some(Value::Str(s)) => Ok(Some(s.clone())),
            Some(_) => Err(Reply::error(WRONGTYPE)),
        }
    }

    /// The value at `key` of the type `pick` accepts, created by `fresh` when missing;
    /// `WRONGTYPE` for another type.
    pub fn typed_or_new<T>(
        &mut self,
        key: &[u8],
        now_ms: i64,
        fresh: impl FnOnce() -> Value,
        pick: impl FnOnce(&mut Value) -> Option<&mut T>,
    ) -> Result<&mut T, Reply> {
        if self.live(key, now_ms).is_none() {
            self.set(key, fresh(), None);
        }
        let entry = self.entries.get_mut(key).expect("just made live");
        pick(&mut entry.value).ok_or_else(|| Reply::error(WRONGTYPE))
    }

    /// The value at `key` of the type `pick` accepts, `None` when missing; `WRONGTYPE` for
    /// another type.
    pub fn typed<T>(
        &mut self,
        key: &[u8],
        now_ms: i64,
        pick: impl FnOnce(&mut Value) -> Option<&mut T>,
    ) -> Result<Option<&mut T>, Reply> {
        match self.live(key, now_ms) {
            None => Ok(None),
            Some(entry) => pick(&mut entry.value)
                .map(Some)
                .ok_or_else(|| Reply::error(WRONGTYPE)),
        }
    }

    /// Removes `key` if it holds an empty collection (Redis deletes an emptied sorted set,
    /// hash or list; an emptied stream stays).
    pub fn drop_if_empty(&mut self, key: &[u8]) {
        let empty = match self.entries.get(key).map(|e| &e.value) {
            Some(Value::Zset(z)) => z.is_empty(),
            Some(Value::Hash(h)) => h.is_empty(),
            Some(Value::List(l)) => l.is_empty(),
            _ => false,
        };
        if empty {
            self.entries.remove(key);
        }
    }

    /// Sets the deadline of a live `key` to `when_ms`; a deadline already past deletes it. True
    /// when the key was live.
    pub fn expire_at(&mut self, key: &[u8], now_ms: i64, when_ms: i64) -> bool {
        let Some(entry) = self.live(key, now_ms) else {
            return false;
        };
        entry.expires_at_ms = Some(when_ms);
        if when_ms <= now_ms {
            self.entries.remove(key);
        } else {
            self.index(key, Some(when_ms));
        }
        true
    }
}
