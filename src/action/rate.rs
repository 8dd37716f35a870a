//! A fleet-wide rate budget per webhook: a sliding window of sends kept on the Redis nodes, keyed
//! by a hash of the webhook (never the webhook itself). A send is admitted only when every node
//! that answers admits it and a majority answers; otherwise what was admitted is taken back and
//! the sender waits for the window to free a place, inside the job's deadline. A suspect node
//! (see [`crate::redis::pool`]) is asked too but not waited for while the others make a majority.
//!
//! With all nodes up (or the same majority up for every replica) every admitted send is counted
//! on every counting node, so the fleet never sends more than the budget in any window.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::Rng;
use sha2::{Digest, Sha256};
use tokio::time::Instant;

use crate::redis::{Nodes, Replies};

/// Bound on one node's answer to a budget request (a node that is not suspect: a suspect one is
/// not waited for). Above the race's node timeout: the script trims and counts a window.
const BUDGET_TIMEOUT: Duration = Duration::from_millis(200);
/// Wait before asking again when no node said how long to wait.
const FALLBACK_WAIT: Duration = Duration::from_millis(100);

/// Sliding-window admission: returns 0 when admitted, else the milliseconds until a place frees.
const TAKE_SCRIPT: &str = r"
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

/// `rate = "20/min"`: at most `limit` sends per `window`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    /// Sends allowed per window.
    pub limit: u32,
    /// The sliding window.
    pub window: Duration,
}

impl FromStr for Rate {
    type Err = BadRate;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let usage = || BadRate::Syntax(s.to_owned());
        let (count, per) = s.split_once('/').ok_or_else(usage)?;
        let limit: u32 = count.trim().parse().map_err(|_| usage())?;
        let window = match per.trim() {
            "s" | "sec" | "second" => Duration::from_secs(1),
            "min" | "m" | "minute" => Duration::from_secs(60),
            "h" | "hour" => Duration::from_secs(3600),
            other => humantime::parse_duration(other).map_err(|_| usage())?,
        };
        if limit == 0 || window.is_zero() {
            return Err(BadRate::Zero(s.to_owned()));
        }
        Ok(Rate { limit, window })
    }
}

/// A `rate` that does not parse; the message quotes it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum BadRate {
    /// Not `COUNT/WINDOW`.
    #[error("{0:?} is not a rate such as \"20/min\", \"1/s\" or \"100/10m\"")]
    Syntax(String),
    /// A zero count or window.
    #[error("{0:?}: the count and the window must be greater than 0")]
    Zero(String),
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{}",
            self.limit,
            humantime::format_duration(self.window)
        )
    }
}

/// The budget of one webhook: its rate and the hashed key it is counted under.
#[derive(Debug, Clone)]
pub struct Budget {
    /// The limit this budget enforces.
    pub rate: Rate,
    /// First 16 hex digits of the SHA-256 of the webhook URL.
    pub id: String,
}

impl Budget {
    /// The budget of `webhook` (its key is hashed, never stored) at `rate`.
    pub fn new(rate: Rate, webhook: &str) -> Self {
        let digest = Sha256::digest(webhook.as_bytes());
        Budget {
            rate,
            id: hex::encode(&digest[..8]),
        }
    }
}

/// The budget was spent and no place frees before the deadline.
#[derive(Debug, Clone, thiserror::Error)]
#[error("rate budget {rate} spent for this webhook: no place frees within the job's timeout (next in {} ms)", .wait.as_millis())]
pub struct BudgetSpent {
    /// The limit that was reached.
    pub rate: Rate,
    /// How long a place would have taken.
    pub wait: Duration,
}

/// Where budgets are counted.
#[derive(Debug, Clone)]
pub enum Budgets {
    /// Counted on the Redis nodes, so the fleet shares each webhook's budget.
    Redis {
        /// The pool the counts are kept on.
        nodes: Arc<Nodes>,
        /// The configuration's `key_prefix`.
        prefix: String,
    },
    /// Counted in this process: the send times of each webhook.
    Local(Arc<Mutex<HashMap<String, VecDeque<Instant>>>>),
}

impl Budgets {
    /// Budgets counted in this process (standalone mode, one replica).
    pub fn local() -> Self {
        Budgets::Local(Arc::new(Mutex::new(HashMap::new())))
    }

    /// Takes one place in `budget`, waiting for one to free up to `deadline`. Returns how long
    /// it waited.
    pub async fn take(&self, budget: &Budget, deadline: Instant) -> Result<Duration, BudgetSpent> {
        let started = Instant::now();
        let mut waited = false;
        let mut split_retried = false;
        loop {
            let wait = match self.try_take(budget).await {
                // Admitted at once is no wait, however long the nodes took to answer.
                Admission::Admitted if !waited => return Ok(Duration::ZERO),
                Admission::Admitted => return Ok(started.elapsed()),
                // Some nodes admitted and others refused: another replica asked at the same
                // moment, and both took their place back. The place is free again: ask once
                // more after a short random delay instead of waiting a whole window, or two
                // replicas sending at the same instant would both wait for nothing.
                Admission::Split(_) if !split_retried => {
                    split_retried = true;
                    Duration::from_millis(crate::seed::rng().random_range(5..=60))
                }
                Admission::Split(wait) | Admission::Wait(wait) => {
                    // A little jitter so replicas waiting for the same place do not all ask at once.
                    wait + Duration::from_millis(crate::seed::rng().random_range(0..=20))
                }
            };
            if Instant::now() + wait >= deadline {
                return Err(BudgetSpent {
                    rate: budget.rate,
                    wait,
                });
            }
            waited = true;
            tokio::time::sleep(wait).await;
            // A process paused in the sleep wakes past its deadline: it takes no place it could
            // not use (the slot is handed off or failed by the caller).
            if Instant::now() >= deadline {
                return Err(BudgetSpent {
                    rate: budget.rate,
                    wait: Duration::ZERO,
                });
            }
        }
    }

    /// Whether a place was taken; else how long to wait before asking again.
    async fn try_take(&self, budget: &Budget) -> Admission {
        match self {
            Budgets::Redis { nodes, prefix } => {
                take_on_nodes(nodes, &format!("{prefix}:rate:{}", budget.id), budget.rate).await
            }
            Budgets::Local(windows) => {
                let mut windows = windows.lock().unwrap_or_else(|p| p.into_inner());
                let sends = windows.entry(budget.id.clone()).or_default();
                let now = Instant::now();
                while sends
                    .front()
                    .is_some_and(|t| now.duration_since(*t) >= budget.rate.window)
                {
                    sends.pop_front();
                }
                if sends.len() < budget.rate.limit as usize {
                    sends.push_back(now);
                    return Admission::Admitted;
                }
                Admission::Wait(sends.front().map_or(FALLBACK_WAIT, |oldest| {
                    budget
                        .rate
                        .window
                        .saturating_sub(now.duration_since(*oldest))
                }))
            }
        }
    }
}

/// What one request for a place came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Admission {
    /// Every node that answered admitted it, and they were a majority.
    Admitted,
    /// Every answer refused (or too few came): the window is full for this long.
    Wait(Duration),
    /// Some nodes admitted and some refused: another sender asked at the same moment (or a
    /// node lost its window); what was admitted was taken back.
    Split(Duration),
}

/// Asks every node for a place; waits for the nodes that are not suspect, and for suspect ones
/// only while fewer than a majority answered.
async fn take_on_nodes(nodes: &Nodes, key: &str, rate: Rate) -> Admission {
    let member = format!("{:016x}", crate::seed::rng().random::<u64>());
    // A plain EVAL: the budget path is not hot enough to need EVALSHA's script cache.
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(TAKE_SCRIPT)
        .arg(1)
        .arg(key)
        .arg(rate.limit)
        .arg(rate.window.as_millis() as u64)
        .arg(&member);
    let quorum = nodes.quorum();
    let answers = nodes
        .query::<i64>(cmd, BUDGET_TIMEOUT, |r| {
            r.settled() && (r.answered() >= quorum || r.count(|w| *w > 0) > 0)
        })
        .await;
    let admitted = answers.count(|w| *w == 0);
    let refused_wait = answers.values().copied().filter(|w| *w > 0).max();
    if refused_wait.is_none() && answers.answered() >= quorum {
        return Admission::Admitted;
    }
    if admitted > 0 || answers.pending() > 0 {
        let mut undo = redis::cmd("ZREM");
        undo.arg(key).arg(&member);
        nodes
            .query::<i64>(undo, BUDGET_TIMEOUT, Replies::settled)
            .await;
    }
    let wait = refused_wait.map_or(FALLBACK_WAIT, |ms| Duration::from_millis(ms as u64));
    if admitted > 0 {
        Admission::Split(wait)
    } else {
        Admission::Wait(wait)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse() {
        assert_eq!(
            "20/min".parse::<Rate>().unwrap(),
            Rate {
                limit: 20,
                window: Duration::from_secs(60)
            }
        );
        assert_eq!(
            "1/s".parse::<Rate>().unwrap().window,
            Duration::from_secs(1)
        );
        assert_eq!(
            "100/10m".parse::<Rate>().unwrap().window,
            Duration::from_secs(600)
        );
        assert!("0/min".parse::<Rate>().is_err());
        assert!("fast".parse::<Rate>().is_err());
    }

    #[test]
    fn budget_id_hides_the_webhook() {
        let b = Budget::new("20/min".parse().unwrap(), "https://x/send?key=secret");
        assert_eq!(b.id.len(), 16);
        assert!(!b.id.contains("secret"));
    }

    #[tokio::test]
    async fn local_budget_admits_the_limit_then_waits() {
        let budgets = Budgets::local();
        let budget = Budget::new(
            Rate {
                limit: 2,
                window: Duration::from_millis(300),
            },
            "w",
        );
        let soon = Instant::now() + Duration::from_millis(50);
        assert!(budgets.take(&budget, soon).await.is_ok());
        assert!(budgets.take(&budget, soon).await.is_ok());
        assert!(budgets.take(&budget, soon).await.is_err());
        let later = Instant::now() + Duration::from_secs(2);
        let waited = budgets.take(&budget, later).await.unwrap();
        assert!(waited >= Duration::from_millis(200), "{waited:?}");
    }
}
