//! RESP on the wire: the replies the model gives, written as redis-server writes them in RESP2
//! and in RESP3 (a connection's `HELLO` picks), and the request frames redis-rs writes.

use std::sync::Arc;

/// One reply, before it is written for a connection's protocol.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    /// `+OK`.
    Ok,
    /// A status line (`+PONG`).
    Simple(String),
    /// An error line, the code first (`ERR ...`, `WRONGTYPE ...`, `NOSCRIPT ...`).
    Error(String),
    Int(i64),
    Bulk(Vec<u8>),
    /// A missing value: `$-1` in RESP2, `_` in RESP3.
    Nil,
    /// A missing array (`XREAD` with nothing to read): `*-1` in RESP2, `_` in RESP3.
    NilArray,
    Array(Vec<Reply>),
    /// A map in RESP3, a flat array of key, value, ... in RESP2.
    Map(Vec<(Reply, Reply)>),
    /// A map in RESP3, an array of `[key, value]` arrays in RESP2 (`XREAD`'s streams).
    Keyed(Vec<(Reply, Reply)>),
    /// A score: `,` in RESP3, a bulk string in RESP2.
    Double(f64),
    /// `ZRANGE ... WITHSCORES`: member, score, ... flat in RESP2; `[member, score]` pairs with
    /// the score a double in RESP3.
    Scored(Vec<(Vec<u8>, f64)>),
    /// Several replies to one command, one after the other (`SUBSCRIBE a b` confirms each
    /// channel on its own).
    Many(Vec<Reply>),
    /// An out-of-band message (`message`, `subscribe`): `>` in RESP3, an array in RESP2.
    Push(Vec<Reply>),
    /// A stream entry, written once when it was added (see [`super::streams::Entry`]).
    Entry(Arc<super::streams::Entry>),
}

impl Reply {
    pub fn bulk(bytes: &[u8]) -> Reply {
        Reply::Bulk(bytes.to_vec())
    }

    pub fn text(text: &str) -> Reply {
        Reply::Bulk(text.as_bytes().to_vec())
    }

    pub fn error(text: impl Into<String>) -> Reply {
        Reply::Error(text.into())
    }

    pub fn is_error(&self) -> bool {
        matches!(self, Reply::Error(_))
    }

    /// The bytes of this reply for a connection speaking RESP `proto` (2 or 3).
    pub fn encode(&self, proto: u8, out: &mut Vec<u8>) {
        match self {
            Reply::Ok => out.extend_from_slice(b"+OK\r\n"),
            Reply::Simple(s) => line(out, b'+', s.as_bytes()),
            Reply::Error(e) => line(out, b'-', e.as_bytes()),
            Reply::Int(n) => line(out, b':', n.to_string().as_bytes()),
            Reply::Bulk(b) => bulk(out, b),
            Reply::Nil if proto >= 3 => out.extend_from_slice(b"_\r\n"),
            Reply::Nil => out.extend_from_slice(b"$-1\r\n"),
            Reply::NilArray if proto >= 3 => out.extend_from_slice(b"_\r\n"),
            Reply::NilArray => out.extend_from_slice(b"*-1\r\n"),
            Reply::Array(items) => aggregate(out, b'*', items, proto),
            Reply::Push(items) if proto >= 3 => aggregate(out, b'>', items, proto),
            Reply::Push(items) => aggregate(out, b'*', items, proto),
            Reply::Double(d) if proto >= 3 => line(out, b',', format_double(*d).as_bytes()),
            Reply::Double(d) => bulk(out, format_double(*d).as_bytes()),
            Reply::Map(pairs) => map(out, pairs, proto),
            Reply::Keyed(pairs) if proto >= 3 => map(out, pairs, proto),
            Reply::Keyed(pairs) => {
                let arrays: Vec<Reply> = pairs
                    .iter()
                    .map(|(k, v)| Reply::Array(vec![k.clone(), v.clone()]))
                    .collect();
                aggregate(out, b'*', &arrays, proto)
            }
            Reply::Scored(pairs) => scored(out, pairs, proto),
            Reply::Many(replies) => replies.iter().for_each(|r| r.encode(proto, out)),
            Reply::Entry(entry) => out.extend_from_slice(&entry.wire),
        }
    }

    /// The bytes of this reply for a connection speaking RESP `proto`.
    pub fn to_bytes(&self, proto: u8) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(proto, &mut out);
        out
    }
}

fn line(out: &mut Vec<u8>, kind: u8, text: &[u8]) {
    out.push(kind);
    out.extend_from_slice(text);
    out.extend_from_slice(b"\r\n");
}

fn bulk(out: &mut Vec<u8>, bytes: &[u8]) {
    line(out, b'$', bytes.len().to_string().as_bytes());
    out.extend_from_slice(bytes);
    out.extend_from_slice(b"\r\n");
}

fn aggregate(out: &mut Vec<u8>, kind: u8, items: &[Reply], proto: u8) {
    line(out, kind, items.len().to_string().as_bytes());
    for item in items {
        item.encode(proto, out);
    }
}

fn map(out: &mut Vec<u8>, pairs: &[(Reply, Reply)], proto: u8) {
    if proto >= 3 {
        line(out, b'%', pairs.len().to_string().as_bytes());
    } else {
        line(out, b'*', (pairs.len() * 2).to_string().as_bytes());
    }
    for (k, v) in pairs {
        k.encode(proto, out);
        v.encode(proto, out);
    }
}

fn scored(out: &mut Vec<u8>, pairs: &[(Vec<u8>, f64)], proto: u8) {
    if proto >= 3 {
        line(out, b'*', pairs.len().to_string().as_bytes());
        for (member, score) in pairs {
            out.extend_from_slice(b"*2\r\n");
            bulk(out, member);
            Reply::Double(*score).encode(proto, out);
        }
    } else {
        line(out, b'*', (pairs.len() * 2).to_string().as_bytes());
        for (member, score) in pairs {
            bulk(out, member);
            bulk(out, format_double(*score).as_bytes());
        }
    }
}

/// A score as redis-server prints it: integral values without a fraction (`1764150000000`),
/// others in the shortest form that reads back the same, `inf`/`-inf` for the infinities.
/// (The sorted sets slotcron keeps hold whole milliseconds only.)
pub fn format_double(d: f64) -> String {
    if d.is_infinite() {
        return if d > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if d.fract() == 0.0 && d.abs() < 1e17 {
        return format!("{}", d as i64);
    }
    format!("{d}")
}

/// Splits one request frame (an array of bulk strings, as redis-rs writes every command) off
/// the front of `buf`; `None` while the frame is incomplete. An inline command (a bare line, as
/// a human's `redis-cli` or a PING probe sends) is split on spaces.
pub fn parse_request(buf: &mut Vec<u8>) -> Option<Vec<Vec<u8>>> {
    let (argv, used) = if buf.first() == Some(&b'*') {
        parse_multibulk(buf)?
    } else {
        parse_inline(buf)?
    };
    buf.drain(..used);
    Some(argv)
}

fn parse_multibulk(buf: &[u8]) -> Option<(Vec<Vec<u8>>, usize)> {
    let (count, mut at) = read_number(buf, 1)?;
    let mut argv = Vec::with_capacity(count.max(0) as usize);
    for _ in 0..count.max(0) {
        if *buf.get(at)? != b'$' {
            return None;
        }
        let (len, start) = read_number(buf, at + 1)?;
        let end = start + len as usize;
        if buf.len() < end + 2 {
            return None;
        }
        argv.push(buf[start..end].to_vec());
        at = end + 2;
    }
    Some((argv, at))
}

fn parse_inline(buf: &[u8]) -> Option<(Vec<Vec<u8>>, usize)> {
    let end = buf.iter().position(|&b| b == b'\n')?;
    let text = &buf[..end];
    let text = text.strip_suffix(b"\r").unwrap_or(text);
    let argv = text
        .split(|&b| b == b' ')
        .filter(|w| !w.is_empty())
        .map(<[u8]>::to_vec)
        .collect();
    Some((argv, end + 1))
}

/// The number after a type byte, up to `\r\n`, and where the next part starts.
fn read_number(buf: &[u8], from: usize) -> Option<(i64, usize)> {
    let rest = buf.get(from..)?;
    let end = rest.windows(2).position(|w| w == b"\r\n")?;
    let n = std::str::from_utf8(&rest[..end]).ok()?.parse().ok()?;
    Some((n, from + end + 2))
}
