//! Redlock over N independent Redis nodes, written over redis-rs.
//!
//! One attempt sends `SET key token NX PX ttl GET` to every node in parallel, each bounded by the
//! node timeout, and reads from the answers who holds the key:
//! - our token on a majority, inside the validity: `Won`;
//! - another token on a majority: `Lost` at once, never retried (that slot is taken);
//! - neither (a split vote, or too few nodes answered): release what we took (and what we may
//!   have taken on nodes that did not answer), wait a short random delay and try again, within a
//!   bounded number of attempts. After that: `Unavailable`. The racer first in line (its token
//!   sorts before every other it saw) keeps what it took and tries again after a short delay.
//!
//! The nodes are a [`Nodes`] pool: a suspect node gets every request but is not waited for.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use rand::Rng;
use tokio::time::Instant;

use super::{Acquire, Lease, SlotKey, Token, Unavailable, UnavailableReason};
use crate::redis::{Claim, NodeError, NodeErrorKind, NodeReply, NodeUrl, Nodes, Replies};

pub use crate::redis::quorum;

/// Default bound on one node's answer.
pub const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(50);
/// Default attempts after a split vote before giving up as `Unavailable`.
pub const DEFAULT_RETRY_COUNT: u32 = 5;
/// Default upper bound of the random delay between attempts.
pub const DEFAULT_RETRY_DELAY: Duration = Duration::from_millis(40);
/// Bound on one node's answer to the release or extension of a held lease. Longer than the
/// node timeout: neither is on a race's path, and a release lost to a busy node keeps the
/// job's running lease (and so its next slots) held until the lease's TTL runs out.
pub const LEASE_TIMEOUT: Duration = Duration::from_secs(1);
/// A racer first in line after a split vote tries again after this share of `retry_delay`: long
/// enough for the others' releases to land (one round trip), far shorter than their delay.
const FIRST_IN_LINE_SHARE: u32 = 8;
/// The first pause before a failed release is asked again ([`Redlock::release_retrying`]):
/// about the Sentinel follower's least gap between two resolutions.
const RELEASE_RETRY_FIRST: Duration = Duration::from_millis(100);
/// The longest pause between two tries of a failed release: the lease is gone within about
/// this much of the new primary's being followed.
const RELEASE_RETRY_MAX: Duration = Duration::from_millis(800);
/// Clock drift allowance: 1% of the TTL plus 2 ms (the Redlock spec's figures).
const DRIFT_FACTOR: f64 = 0.01;
const DRIFT_FIXED: Duration = Duration::from_millis(2);

/// How the lock races.
#[derive(Debug, Clone)]
pub struct LockConfig {
    /// Bound on each node's answer in one attempt.
    pub node_timeout: Duration,
    /// Extra attempts after a split vote (0: one attempt only).
    pub retry_count: u32,
    /// Upper bound of the random delay before another attempt.
    pub retry_delay: Duration,
}

impl Default for LockConfig {
    fn default() -> Self {
        LockConfig {
            node_timeout: DEFAULT_NODE_TIMEOUT,
            retry_count: DEFAULT_RETRY_COUNT,
            retry_delay: DEFAULT_RETRY_DELAY,
        }
    }
}

/// A Redlock over independent nodes, for one replica.
#[derive(Debug)]
pub struct Redlock {
    /// Shared with the history, the rate budget and the fleet clock: one view of node health.
    nodes: Arc<Nodes>,
    replica: String,
    config: LockConfig,
}

/// The tally of one attempt's answers.
#[derive(Debug, Default)]
struct Tally {
    own: usize,
    /// Tokens of other holders, with the number of nodes each holds.
    others: Vec<(Token, usize)>,
    errors: Vec<NodeError>,
}

impl Tally {
    fn of<'r>(replies: impl IntoIterator<Item = &'r NodeReply>) -> Self {
        let mut tally = Tally::default();
        for reply in replies {
            match reply {
                NodeReply::Acquired => tally.own += 1,
                NodeReply::Held(token) => match tally.others.iter_mut().find(|(t, _)| t == token) {
                    Some((_, n)) => *n += 1,
                    None => tally.others.push((token.clone(), 1)),
                },
                NodeReply::Failed(e) => tally.errors.push(e.clone()),
            }
        }
        tally
    }

    fn majority_holder(&self, quorum: usize) -> Option<&Token> {
        self.others
            .iter()
            .find(|(_, n)| *n >= quorum)
            .map(|(t, _)| t)
    }

    fn answered(&self, nodes: usize) -> usize {
        nodes - self.errors.len()
    }
}

/// Each node's part in a release over its tries ([`Redlock::release_retrying`]).
struct ReleaseTries {
    /// The node no longer holds the lease: removed by a try.
    removed: Vec<bool>,
    /// A try on the node failed or was not waited for.
    failed: Vec<bool>,
}

impl ReleaseTries {
    fn new(nodes: usize) -> Self {
        ReleaseTries {
            removed: vec![false; nodes],
            failed: vec![false; nodes],
        }
    }

    fn removed(&self) -> usize {
        self.removed.iter().filter(|r| **r).count()
    }
}

/// One key's race, through the attempts of [`Redlock::acquire_many`].
#[derive(Debug)]
struct Race {
    /// The key raced for, as the lease will name it.
    key: SlotKey,
    /// The token is ours for every attempt: a node that took an earlier attempt's SET still
    /// counts as ours.
    claim: Claim,
    state: RaceState,
}

#[derive(Debug)]
enum RaceState {
    /// Not decided yet: no attempt, or a split vote (the last tally, for the report).
    Open(Tally),
    Decided(Acquire),
}

impl Race {
    fn new(key: SlotKey, ttl: Duration, replica: &str) -> Self {
        Race {
            claim: Claim {
                key: key.as_str().to_owned(),
                token: Token::new(replica),
                ttl,
            },
            key,
            state: RaceState::Open(Tally::default()),
        }
    }

    fn is_open(&self) -> bool {
        matches!(self.state, RaceState::Open(_))
    }

    fn is_won(&self) -> bool {
        matches!(self.state, RaceState::Decided(Acquire::Won(_)))
    }

    /// Open after a split vote in which every other token seen sorts after ours. Racers of one
    /// split see the same tokens, so one of them is first in line: it keeps what it took and
    /// tries again almost at once, while the others give theirs back and wait the random delay.
    /// Only the timing depends on it: a win still needs our token on a majority.
    fn is_first_in_line(&self) -> bool {
        match &self.state {
            RaceState::Open(tally) => tally
                .others
                .iter()
                .all(|(token, _)| token.as_str() > self.claim.token.as_str()),
            RaceState::Decided(_) => false,
        }
    }

    /// Reads one attempt's tally: ours on a majority inside the validity, another's on a
    /// majority, or still open.
    fn decide(&mut self, tally: Tally, quorum: usize, elapsed: Duration) {
        if tally.own >= quorum
            && let Some(validity) = validity(self.claim.ttl, elapsed)
        {
            self.state = RaceState::Decided(Acquire::Won(Lease {
                key: self.key.clone(),
                token: self.claim.token.clone(),
                validity,
                valid_until: Instant::now() + validity,
                contested: !tally.others.is_empty(),
            }));
            return;
        }
        self.state = match tally.majority_holder(quorum) {
            Some(holder) => RaceState::Decided(Acquire::Lost {
                holder: holder.clone(),
            }),
            None => RaceState::Open(tally),
        };
    }

    /// The outcome; a race still open after every attempt is `Unavailable`.
    fn finish(self, lock: &Redlock, attempts: u32) -> Acquire {
        match self.state {
            RaceState::Decided(acquire) => acquire,
            RaceState::Open(tally) => Acquire::Unavailable(lock.unavailable(&tally, attempts)),
        }
    }
}

/// Validity left after an attempt that took `elapsed`: ttl − elapsed − drift.
pub fn validity(ttl: Duration, elapsed: Duration) -> Option<Duration> {
    let drift = ttl.mul_f64(DRIFT_FACTOR) + DRIFT_FIXED;
    ttl.checked_sub(elapsed)?
        .checked_sub(drift)
        .filter(|v| !v.is_zero())
}

impl Redlock {
    /// Prepares a pool of connections to the independent nodes `urls` (opened lazily, reopened
    /// in the background).
    pub fn new(
        urls: &[NodeUrl],
        replica: &str,
        config: LockConfig,
        ca_file: Option<&[u8]>,
    ) -> Result<Self, crate::redis::NodeSetupError> {
        let nodes = Nodes::connect(urls, config.node_timeout, ca_file, replica)?;
        Ok(Self::over(Arc::new(nodes), replica, config))
    }

    /// A lock over an existing pool (its `node_timeout` is the pool's).
    pub fn over(nodes: Arc<Nodes>, replica: &str, config: LockConfig) -> Self {
        Redlock {
            nodes,
            replica: replica.to_owned(),
            config,
        }
    }

    /// How many nodes the lock spans.
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// The pool, with its view of node health.
    pub fn nodes(&self) -> &Arc<Nodes> {
        &self.nodes
    }

    fn quorum(&self) -> usize {
        quorum(self.nodes.len())
    }

    /// Who holds each of `keys`, by one node's account: a covering candidate's look before it
    /// races ([`crate::slot`]). The node is this replica's own pick (spreading the looks of a
    /// fleet over the nodes), or the next one up when the view suspects it. `None` when no
    /// node is up or the one asked did not answer: the caller races instead.
    ///
    /// One node suffices because a look only ever saves a race: a key held there is held by a
    /// racer of this slot (a loser gives back what it took), and a key missing there (a node
    /// the winner did not reach, a node restarted empty) only sends the caller to the race,
    /// which the lock still decides on a majority.
    pub async fn look(&self, keys: &[SlotKey]) -> Option<Vec<Option<Token>>> {
        let n = self.nodes.len();
        let preferred = xxhash_rust::xxh3::xxh3_64(self.replica.as_bytes()) % n as u64;
        let i = self.nodes.first_up(preferred as usize)?;
        let keys: Vec<String> = keys.iter().map(|k| k.as_str().to_owned()).collect();
        self.nodes
            .ask_one(i, |node| async move { node.holders(&keys).await })
            .await
            .ok()
    }

    /// Races for `key`; see the module docs for the rules.
    pub async fn acquire(&self, key: &SlotKey, ttl: Duration) -> Acquire {
        let mut race = Race::new(key.clone(), ttl, &self.replica);
        let attempts = self.run(std::slice::from_mut(&mut race)).await;
        race.finish(self, attempts)
    }

    /// Races for every `(key, ttl)` at once, each decided on its own by the module's rules; the
    /// answers come in the order asked. One attempt is one pipelined round trip per node for
    /// each 250 keys of the batch (`KEYS_PER_REQUEST`): jobs due at the same instant cost a
    /// node a request per 250, not one each.
    pub async fn acquire_many(&self, claims: &[(SlotKey, Duration)]) -> Vec<Acquire> {
        let mut races: Vec<Race> = claims
            .iter()
            .map(|(key, ttl)| Race::new(key.clone(), *ttl, &self.replica))
            .collect();
        let attempts = self.run(&mut races).await;
        races
            .into_iter()
            .map(|r| r.finish(self, attempts))
            .collect()
    }

    /// Runs attempts until every race is decided or the retries run out; the attempts made.
    async fn run(&self, races: &mut [Race]) -> u32 {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let started = Instant::now();
            let mut open: Vec<&mut Race> = races.iter_mut().filter(|r| r.is_open()).collect();
            let replies = self.ask_until_decided(&open).await;
            let elapsed = started.elapsed();
            for (race, replies) in open.iter_mut().zip(&replies) {
                race.decide(Tally::of(replies.iter().flatten()), self.quorum(), elapsed);
            }
            let last = attempt > self.config.retry_count;
            // Whatever did not end as ours goes back: a loss, a split vote before its retry
            // (unless first in line), anything still open after the last attempt.
            let partial = open
                .iter()
                .zip(&replies)
                .filter(|(race, _)| !race.is_won() && (last || !race.is_first_in_line()));
            join_all(partial.map(|(race, replies)| self.release_partial(race, replies))).await;
            if races.iter().all(|r| !r.is_open()) || last {
                return attempt;
            }
            tokio::time::sleep(self.delay_before_retry(races)).await;
        }
    }

    fn unavailable(&self, tally: &Tally, attempts: u32) -> Unavailable {
        let answered = tally.answered(self.nodes.len());
        let reason = if answered < self.quorum() {
            UnavailableReason::NoQuorum {
                answered,
                needed: self.quorum(),
            }
        } else {
            UnavailableReason::SplitVote { attempts }
        };
        Unavailable {
            reason,
            errors: tally.errors.clone(),
        }
    }

    /// Asks every node in parallel, one pipeline each for the whole batch, and reads the
    /// answers as they come; one list of answers per race, one entry per node. A batch of
    /// losers stops as soon as another token holds a majority of each key (`None` marks a node
    /// not waited for; a SET of ours that still lands there is a stray token on a minority,
    /// harmless, gone with its TTL). Otherwise it waits for every node that is not suspect
    /// (each bounded by the node timeout): a winner's key must land on all of them, so that one
    /// node restarted empty still leaves a majority holding it and a late replica loses. A
    /// suspect node gets the SET too but is not waited for, even in a split vote it could
    /// break (the split is retried, and by then an answer from it has made it healthy again):
    /// a hung or dead node costs the replica one node timeout, once. Unless the answers of the
    /// others make no majority: then the suspects are waited for too, within the node timeout
    /// (every node suspect after a moment in which all were slow; without it the race ended
    /// `Unavailable` at once, and a winner's running lease with it).
    async fn ask_until_decided(&self, races: &[&mut Race]) -> Vec<Vec<Option<NodeReply>>> {
        let claims: Arc<[Claim]> = races.iter().map(|r| r.claim.clone()).collect();
        let quorum = self.quorum();
        let replies = self
            .nodes
            .ask(
                |node| {
                    let claims = claims.clone();
                    async move { node.acquire_many(&claims).await }
                },
                |replies| {
                    replies.settled_with_majority(quorum)
                        || (0..races.len()).all(|k| lost(replies, k, quorum))
                },
            )
            .await;
        // A suspect node not waited for counts as failed: it is named in an `Unavailable`, and
        // a SET of ours that lands there late is released with the rest.
        let answers: Vec<Option<Result<Vec<NodeReply>, NodeError>>> = replies
            .answers()
            .iter()
            .zip(self.nodes.iter())
            .enumerate()
            .map(|(i, (answer, node))| match answer {
                None if replies.is_suspect(i) => Some(Err(NodeError {
                    node: node.address().to_owned(),
                    kind: NodeErrorKind::Suspect,
                })),
                other => other.clone(),
            })
            .collect();
        (0..races.len())
            .map(|k| {
                answers
                    .iter()
                    .map(|answer| reply_for(answer.as_ref(), k))
                    .collect()
            })
            .collect()
    }

    /// Releases our token on every node that took it or did not answer (a timed-out SET may
    /// have landed). Nodes that answered with another holder are left alone.
    async fn release_partial(&self, race: &Race, replies: &[Option<NodeReply>]) {
        let targets: Vec<String> = self
            .nodes
            .iter()
            .zip(replies)
            .filter(|(_, r)| matches!(r, Some(NodeReply::Acquired | NodeReply::Failed(_))))
            .map(|(node, _)| node.address().to_owned())
            .collect();
        let (key, token) = (race.claim.key.clone(), race.claim.token.clone());
        self.nodes
            .ask_some(
                |node| targets.iter().any(|t| t == node.address()),
                |node| {
                    let (key, token) = (key.clone(), token.clone());
                    async move {
                        node.release_within(key.as_str(), &token, node.timeout())
                            .await
                    }
                },
                Replies::settled,
            )
            .await;
    }

    /// Releases `lease` on every node (each bounded by [`LEASE_TIMEOUT`]); the number of nodes
    /// it was removed from, waiting for a suspect node only while that is short of a majority.
    /// slotcron never releases a won slot (the key must outlive the run); it releases a job's
    /// running lease. Asked again while fewer than a majority removed it and some node's
    /// release failed (no answer, `READONLY`): a Sentinel failover moves the primary, the new
    /// one holds the lease as replicated, and the pool follows it within a resolution. Without
    /// this the lease stays until its TTL and the job's next slots are skipped as overlapping.
    /// Each try after a doubling pause, none starting after `within` (the lease's TTL, past
    /// which it is gone anyway; `Duration::ZERO`: one try).
    pub async fn release_retrying(&self, lease: &Lease, within: Duration) -> usize {
        let deadline = Instant::now() + within;
        let mut tries = ReleaseTries::new(self.node_count());
        let mut pause = RELEASE_RETRY_FIRST;
        loop {
            let failed = self.release_into(lease, &mut tries).await;
            let count = tries.removed();
            if count >= self.quorum() || !failed || Instant::now() + pause >= deadline {
                return count;
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(RELEASE_RETRY_MAX);
        }
    }

    /// One release on every node, noted in `tries`. True when a node failed or was not waited
    /// for: its copy of the lease may still be there.
    async fn release_into(&self, lease: &Lease, tries: &mut ReleaseTries) -> bool {
        let (key, token) = (lease.key.clone(), lease.token.clone());
        let quorum = self.quorum();
        let replies = self
            .nodes
            .ask(
                |node| {
                    let (key, token) = (key.clone(), token.clone());
                    async move {
                        node.release_within(key.as_str(), &token, LEASE_TIMEOUT)
                            .await
                    }
                },
                |r| r.settled() && r.count(|removed| *removed) >= quorum,
            )
            .await;
        let mut failed = false;
        for (i, answer) in replies.into_answers().into_iter().enumerate() {
            match answer {
                Some(Ok(true)) => tries.removed[i] = true,
                // A node whose earlier try failed and that now holds no lease of ours: that
                // try's delete landed with its answer lost (or the lease ran out). Gone either
                // way; counted as removed, so a lost answer does not read as a lease left.
                Some(Ok(false)) if tries.failed[i] => tries.removed[i] = true,
                Some(Ok(false)) => {}
                Some(Err(_)) | None => (tries.failed[i], failed) = (true, true),
            }
        }
        failed
    }

    /// Extends `lease` to `ttl` from now on every node that still holds it. True when a
    /// majority did: the lease is still ours.
    pub async fn extend(&self, lease: &Lease, ttl: Duration) -> bool {
        let (key, token) = (lease.key.clone(), lease.token.clone());
        let quorum = self.quorum();
        let replies = self
            .nodes
            .ask(
                |node| {
                    let (key, token) = (key.clone(), token.clone());
                    async move { node.extend(key.as_str(), &token, ttl, LEASE_TIMEOUT).await }
                },
                |r| r.settled() && r.count(|extended| *extended) >= quorum,
            )
            .await;
        replies.count(|extended| *extended) >= quorum
    }

    /// The wait before another attempt: short when this replica is first in line for every
    /// race still open (it kept its takes; the others are giving theirs back), else random.
    fn delay_before_retry(&self, races: &[Race]) -> Duration {
        let open = races.iter().filter(|r| r.is_open());
        if open.clone().all(Race::is_first_in_line) {
            self.config.retry_delay / FIRST_IN_LINE_SHARE
        } else {
            self.retry_delay()
        }
    }

    fn retry_delay(&self) -> Duration {
        let max = self.config.retry_delay.max(Duration::from_millis(1));
        crate::seed::rng().random_range(max / 4..=max)
    }
}

/// Node answer `answer` as it concerns the `k`-th key of the batch.
fn reply_for(answer: Option<&Result<Vec<NodeReply>, NodeError>>, k: usize) -> Option<NodeReply> {
    match answer? {
        Ok(replies) => replies.get(k).cloned(),
        Err(e) => Some(NodeReply::Failed(e.clone())),
    }
}

/// Whether the answers so far show another token on a majority for the `k`-th key.
fn lost(replies: &Replies<Vec<NodeReply>>, k: usize, quorum: usize) -> bool {
    let own_answers = replies.values().filter_map(|answers| answers.get(k));
    Tally::of(own_answers).majority_holder(quorum).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validity_subtracts_elapsed_and_drift() {
        let ttl = Duration::from_secs(10);
        // drift = 100 ms + 2 ms
        assert_eq!(
            validity(ttl, Duration::from_millis(8)),
            Some(Duration::from_millis(9890))
        );
        assert_eq!(validity(ttl, Duration::from_millis(9898)), None);
        assert_eq!(validity(ttl, Duration::from_secs(11)), None);
    }
}
