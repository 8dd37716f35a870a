//! The lock's side of one node: the compare-and-set scripts a Redlock needs (acquire with the
//! holder in the answer, release and extend only our own token, read the holders) and the
//! token they compare. Keys are plain strings here: what a key names (a slot, a handoff, a
//! running lease) is the lock's business (`crate::lock::SlotKey`), not Redis's.

use std::sync::LazyLock;
use std::sync::atomic::Ordering;
use std::time::Duration;

use rand::Rng;
use redis::{Script, Value};

use super::node::{Node, NodeError, NodeErrorKind};

/// Compare-and-delete: release only our own token.
const RELEASE_SCRIPT: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('DEL', KEYS[1])
end
return 0";

/// Compare-and-expire: extend only our own token (the running lease's watchdog).
const EXTEND_SCRIPT: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0";

/// `SET NX PX` that answers with the holder, for servers older than 7.0 (no `SET … NX GET`).
const ACQUIRE_SCRIPT: &str = r"
local current = redis.call('GET', KEYS[1])
if current then return current end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return false";

/// The release and extend scripts, hashed once for every node (each node loads them on first
/// use: `EVALSHA`, then `SCRIPT LOAD` on `NOSCRIPT`).
static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(RELEASE_SCRIPT));
static EXTEND: LazyLock<Script> = LazyLock::new(|| Script::new(EXTEND_SCRIPT));

/// A lock token: the replica id and a random part, so a loser can name the holder.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Token(String);

impl Token {
    /// A fresh token of `replica`: its name and a random part.
    pub fn new(replica: &str) -> Self {
        let random: u64 = crate::seed::rng().random();
        Token(format!("{replica}:{random:016x}"))
    }

    /// A token read back from a node.
    pub fn from_stored(value: String) -> Self {
        Token(value)
    }

    /// The token as stored.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The replica part of the token (everything before the last `:`).
    pub fn replica(&self) -> &str {
        self.0
            .rsplit_once(':')
            .map_or(&self.0, |(replica, _)| replica)
    }
}

/// One key to acquire: set `key` to `token` for `ttl` unless someone holds it.
#[derive(Debug, Clone)]
pub struct Claim {
    /// The key (a slot's, a handoff's or a running lease's).
    pub key: String,
    /// This replica's token.
    pub token: Token,
    /// How long the lock holds.
    pub ttl: Duration,
}

impl Claim {
    fn ttl_ms(&self) -> u64 {
        self.ttl.as_millis().max(1) as u64
    }
}

/// A node's answers to a pipeline: one per command, or the error that failed them all.
type Answers = Result<Vec<redis::RedisResult<Value>>, NodeErrorKind>;

/// A node's answer to one key of an acquire request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeReply {
    /// The key was free and is now ours (or was already ours).
    Acquired,
    /// Someone else holds the key.
    Held(Token),
    /// The node failed to answer.
    Failed(NodeError),
}

/// The most keys one request to a node carries: a batch (the jobs due at one instant) goes as
/// pipelines of this many, one after the other, each bounded by the node timeout. The timeout
/// bounds a node's answer to one request, not to a batch of any size: one pipeline for a
/// 5,000-job burst took longer than the default 50 ms on 2 busy cores, so every node timed out
/// on every attempt and every slot was `unavailable` (BENCHMARKS.md, "09:00 burst"). A node
/// that answers piece by piece is not hung; a hung one still costs one node timeout (its first
/// piece). 250 keys took 1 to 17 ms there with 9 replicas racing (`lock_us`).
pub const KEYS_PER_REQUEST: usize = 250;

impl Node {
    /// Tries to set each claim's key to its token for its TTL, in pipelines of
    /// [`KEYS_PER_REQUEST`] keys: a round trip per piece of the batch (the jobs due at one
    /// instant), each bounded by the node timeout. Answers who holds each key, in the order of
    /// `claims`; an error reply for one key (a wrong type) fails that key only; a piece without
    /// an answer is the error (the pieces before it are answered, but the node is failed for
    /// the whole batch, so what it took there is released with the rest).
    pub async fn acquire_many(&self, claims: &[Claim]) -> Result<Vec<NodeReply>, NodeError> {
        let mut replies = Vec::with_capacity(claims.len());
        for piece in claims.chunks(KEYS_PER_REQUEST) {
            replies.extend(self.acquire_piece(piece).await?);
        }
        Ok(replies)
    }

    /// One pipeline of [`Self::acquire_many`].
    async fn acquire_piece(&self, claims: &[Claim]) -> Result<Vec<NodeReply>, NodeError> {
        let answers = if self.no_set_get.load(Ordering::Relaxed) {
            self.acquire_lua(claims).await
        } else {
            match self.acquire_set_get(claims).await {
                Ok(answers) if answers.first().is_some_and(is_syntax_error) => {
                    self.no_set_get.store(true, Ordering::Relaxed);
                    self.acquire_lua(claims).await
                }
                other => other,
            }
        };
        let answers = answers.map_err(|kind| self.error(kind))?;
        Ok(claims
            .iter()
            .zip(answers)
            .map(|(claim, answer)| self.reply(&claim.token, answer))
            .collect())
    }

    fn reply(&self, token: &Token, answer: redis::RedisResult<Value>) -> NodeReply {
        let holder = answer
            .map_err(|e| NodeErrorKind::of(&e))
            .and_then(holder_of);
        match holder {
            Ok(None) => NodeReply::Acquired,
            Ok(Some(holder)) if holder == token.as_str() => NodeReply::Acquired,
            Ok(Some(holder)) => NodeReply::Held(Token::from_stored(holder)),
            Err(kind) => NodeReply::Failed(self.error(kind)),
        }
    }

    async fn acquire_set_get(&self, claims: &[Claim]) -> Answers {
        let mut pipe = redis::pipe();
        for claim in claims {
            pipe.cmd("SET")
                .arg(&claim.key)
                .arg(claim.token.as_str())
                .arg("NX")
                .arg("PX")
                .arg(claim.ttl_ms())
                .arg("GET");
        }
        self.pipeline(pipe).await
    }

    /// The Lua form for Redis < 7.0 (`EVAL`, not `EVALSHA`: a pipeline cannot reload a script
    /// the server has dropped, and this path serves only old servers).
    async fn acquire_lua(&self, claims: &[Claim]) -> Answers {
        let mut pipe = redis::pipe();
        for claim in claims {
            pipe.cmd("EVAL")
                .arg(ACQUIRE_SCRIPT)
                .arg(1)
                .arg(&claim.key)
                .arg(claim.token.as_str())
                .arg(claim.ttl_ms());
        }
        self.pipeline(pipe).await
    }

    /// Sends `pipe` bounded by the node timeout; one answer per command, error replies kept apart.
    async fn pipeline(&self, mut pipe: redis::Pipeline) -> Answers {
        pipe.ignore_errors();
        let mut conn = self.conn.clone();
        self.bounded(pipe.query_async::<Vec<redis::RedisResult<Value>>>(&mut conn))
            .await
    }

    /// Deletes `key` only if it still holds `token`, bounded by `wait`. True when it was
    /// deleted.
    pub async fn release_within(
        &self,
        key: &str,
        token: &Token,
        wait: Duration,
    ) -> Result<bool, NodeError> {
        let mut invocation = RELEASE.key(key);
        invocation.arg(token.as_str());
        let mut conn = self.conn.clone();
        self.bounded_by(wait, invocation.invoke_async::<i64>(&mut conn))
            .await
            .map(|n| n == 1)
            .map_err(|kind| self.error(kind))
    }

    /// Resets the TTL of `key` to `ttl` only if it still holds `token`, bounded by `wait`. True
    /// when extended.
    pub async fn extend(
        &self,
        key: &str,
        token: &Token,
        ttl: Duration,
        wait: Duration,
    ) -> Result<bool, NodeError> {
        let mut invocation = EXTEND.key(key);
        invocation
            .arg(token.as_str())
            .arg(ttl.as_millis().max(1) as u64);
        let mut conn = self.conn.clone();
        self.bounded_by(wait, invocation.invoke_async::<i64>(&mut conn))
            .await
            .map(|n| n == 1)
            .map_err(|kind| self.error(kind))
    }

    /// Who holds each of `keys` (an `MGET` per [`KEYS_PER_REQUEST`] keys, one after the other,
    /// each bounded by the node timeout): one node's account, read before a covering race
    /// (`lock::Redlock::look`).
    pub async fn holders(&self, keys: &[String]) -> Result<Vec<Option<Token>>, NodeError> {
        let mut holders = Vec::with_capacity(keys.len());
        for piece in keys.chunks(KEYS_PER_REQUEST) {
            let mut mget = redis::cmd("MGET");
            for key in piece {
                mget.arg(key);
            }
            let values: Vec<Option<String>> = self.query(&mget, self.timeout()).await?;
            holders.extend(values.into_iter().map(|v| v.map(Token::from_stored)));
        }
        Ok(holders)
    }
}

/// Redis < 7.0 refuses `SET … GET` with a syntax error.
fn is_syntax_error(answer: &redis::RedisResult<Value>) -> bool {
    answer
        .as_ref()
        .is_err_and(|e| e.to_string().contains("syntax error"))
}

/// The holder in an acquire answer: nil (we set it) or the stored token.
fn holder_of(value: Value) -> Result<Option<String>, NodeErrorKind> {
    match value {
        Value::Nil | Value::Boolean(false) => Ok(None),
        Value::BulkString(bytes) => String::from_utf8(bytes)
            .map(Some)
            .map_err(|_| NodeErrorKind::Unexpected("a non-UTF-8 value on the slot key".into())),
        Value::SimpleString(s) => Ok(Some(s)),
        other => Err(NodeErrorKind::Unexpected(format!("{other:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_names_the_replica() {
        let t = Token::new("web-7:a");
        assert_eq!(t.replica(), "web-7:a");
        assert_ne!(Token::new("x"), Token::new("x"));
    }
}
