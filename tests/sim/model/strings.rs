//! Strings and their expiry: `SET` (with `NX`, `PX`, `GET`, as the lock's claim sends it),
//! `GET`, `MGET`, `DEL`, `PEXPIRE`.

use super::args::{self, SYNTAX, is};
use super::keyspace::{Keyspace, Value};
use super::resp::Reply;

/// The options of one `SET`, read before anything is looked up (a syntax error or a bad
/// expiry fails the command whatever the key holds).
#[derive(Default)]
struct SetOptions {
    nx: bool,
    xx: bool,
    get: bool,
    keepttl: bool,
    /// `(unit in ms, value, absolute)`: `EX` is seconds, `PX` milliseconds, `*AT` a deadline.
    expire: Option<(i64, Vec<u8>, bool)>,
}

impl SetOptions {
    fn parse(argv: &[Vec<u8>]) -> Result<SetOptions, Reply> {
        let mut o = SetOptions::default();
        let mut i = 3;
        while i < argv.len() {
            let arg = &argv[i];
            let next = argv.get(i + 1);
            let unit = [("EX", 1000, false), ("PX", 1, false), ("EXAT", 1000, true)]
                .into_iter()
                .chain([("PXAT", 1, true)])
                .find(|(word, _, _)| is(arg, word));
            match unit {
                Some((_, ms, at)) if o.expire.is_none() && !o.keepttl && next.is_some() => {
                    o.expire = Some((ms, next.cloned().unwrap_or_default(), at));
                    i += 1;
                }
                Some(_) => return Err(Reply::error(SYNTAX)),
                None if is(arg, "NX") && !o.xx => o.nx = true,
                None if is(arg, "XX") && !o.nx => o.xx = true,
                None if is(arg, "GET") => o.get = true,
                None if is(arg, "KEEPTTL") && o.expire.is_none() => o.keepttl = true,
                None => return Err(Reply::error(SYNTAX)),
            }
            i += 1;
        }
        Ok(o)
    }

    /// The deadline the options ask for, at `now_ms`.
    fn deadline(&self, now_ms: i64) -> Result<Option<i64>, Reply> {
        let Some((unit, value, absolute)) = &self.expire else {
            return Ok(None);
        };
        let n = args::int(value)?;
        let invalid = || Reply::error("ERR invalid expire time in 'set' command");
        if n <= 0 {
            return Err(invalid());
        }
        let ms = n.checked_mul(*unit).ok_or_else(invalid)?;
        let when = if *absolute {
            Some(ms)
        } else {
            ms.checked_add(now_ms)
        };
        when.map(Some).ok_or_else(invalid)
    }
}

/// `SET key value [NX|XX] [GET] [EX|PX|EXAT|PXAT n|KEEPTTL]`.
pub fn set(keys: &mut Keyspace, now_ms: i64, argv: &[Vec<u8>]) -> Reply {
    let options = match SetOptions::parse(argv) {
        Ok(o) => o,
        Err(e) => return e,
    };
    let deadline = match options.deadline(now_ms) {
        Ok(d) => d,
        Err(e) => return e,
    };
    let key = &argv[1];
    let old = if options.get {
        match keys.string(key, now_ms) {
            Ok(old) => Some(old),
            Err(e) => return e,
        }
    } else {
        None
    };
    let found = keys.exists(key, now_ms);
    let answer = |written: bool| match &old {
        Some(Some(value)) => Reply::bulk(value),
        Some(None) => Reply::Nil,
        None if written => Reply::Ok,
        None => Reply::Nil,
    };
    if (options.nx && found) || (options.xx && !found) {
        return answer(false);
    }
    let kept = options.keepttl.then(|| keys.live(key, now_ms)).flatten();
    let deadline = deadline.or(kept.and_then(|e| e.expires_at_ms));
    keys.set(key, Value::Str(argv[2].clone()), deadline);
    if deadline.is_some_and(|when| when <= now_ms) {
        keys.remove(key, now_ms);
    }
    answer(true)
}

/// `GET key`.
pub fn get(keys: &mut Keyspace, now_ms: i64, argv: &[Vec<u8>]) -> Reply {
    match keys.string(&argv[1], now_ms) {
        Ok(Some(value)) => Reply::Bulk(value),
        Ok(None) => Reply::Nil,
        Err(e) => e,
    }
}

/// `MGET key [key ...]`: a key of another type reads as missing.
pub fn mget(keys: &mut Keyspace, now_ms: i64, argv: &[Vec<u8>]) -> Reply {
    let values = argv[1..]
        .iter()
        .map(|key| match keys.string(key, now_ms) {
            Ok(Some(value)) => Reply::Bulk(value),
            _ => Reply::Nil,
        })
        .collect();
    Reply::Array(values)
}

/// `DEL key [key ...]`.
pub fn del(keys: &mut Keyspace, now_ms: i64, argv: &[Vec<u8>]) -> Reply {
    let removed = argv[1..]
        .iter()
        .filter(|key| keys.remove(key, now_ms))
        .count();
    Reply::Int(removed as i64)
}

/// `PEXPIRE key ms` (the form the lock's extend and the rate budget send; no `NX|XX|GT|LT`).
pub fn pexpire(keys: &mut Keyspace, now_ms: i64, argv: &[Vec<u8>]) -> Reply {
    if argv.len() > 3 {
        return args::unmodelled("PEXPIRE with NX|XX|GT|LT");
    }
    let ms = match args::int(&argv[2]) {
        Ok(ms) => ms,
        Err(e) => return e,
    };
    let Some(when) = ms.checked_add(now_ms) else {
        return Reply::error("ERR invalid expire time in 'pexpire' command");
    };
    Reply::Int(keys.expire_at(&argv[1], now_ms, when) as i64)
}
