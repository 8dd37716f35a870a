//! Fleet membership and the candidates of each slot.
//!
//! Racing every slot on every replica costs each slot replicas × nodes `SET`s and rewards the
//! fastest replica. Instead only the top `k` replicas of a rendezvous hash of (job, slot,
//! replica) race ([`rank`]), the place after them looks out for dead candidates (see
//! `race/candidates.rs`), and the others do not touch Redis for that slot. Every replica
//! derives the same ranking from the same live set, and a replica joining or leaving changes
//! the ranking of only the slots it ranks high in.
//!
//! The live set: each replica writes a heartbeat every [`HEARTBEAT`] into the sorted set
//! `{key_prefix}:members` on every node (member `{group}/{replica}`, score = the fleet clock's
//! time plus [`MEMBER_TTL`]), trims expired members, and reads the set back; the view is the
//! union over the nodes that answered. Each member is kept in the view until its own deadline,
//! so a replica that cannot reach the nodes forgets the others and races more slots, never
//! fewer. A replica always counts itself: it races its slots from its first one, before the
//! others see it. A replica stopping gracefully removes itself and publishes its leaving on
//! `{key_prefix}:members`, so the others rank without it at once; a replica that dies leaves
//! every view within [`MEMBER_TTL`] (plus the clocks' skew under `clock = "local"`).
//!
//! The group: a hash of the job names in the replica's configuration. Replicas rank only among
//! members of their own group, so during a rollout that adds or removes jobs, a replica that
//! does not have a job never counts as its candidate (each group races on its own: more racers
//! for a moment, never fewer; the lock still gives at most once).

use std::collections::{HashMap, HashSet};
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::lock::node::{Node, NodeError};
use crate::lock::nodes::{Nodes, Replies};
use crate::pubsub::{self, Heard};
use crate::schedule::{SharedClock, Slot};

/// How often a replica writes its heartbeat and reads the live set back.
pub const HEARTBEAT: Duration = Duration::from_secs(1);
/// How long a heartbeat keeps a replica in the live set: the bound within which a replica that
/// died leaves every view. Three heartbeats, so a replica slowed for a moment stays in.
pub const MEMBER_TTL: Duration = Duration::from_secs(3);
/// A member not heard from for this long (its latest heartbeat older than one and a half
/// periods) is *late*: it may have died. The replicas ranked below it race in its place, so a
/// dead candidate's slots are covered from this point rather than from its expiry.
pub const LATE_AFTER: Duration = Duration::from_millis(1500);
/// Bound on one node's answer to a heartbeat or a leave.
const MEMBERSHIP_TIMEOUT: Duration = Duration::from_millis(500);
/// The payload prefix of a leave announced on the members channel.
const LEFT: &str = "left ";

/// `[scheduler] candidates`: how many replicas race each slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Candidates {
    /// Every replica races every slot at once; no membership is kept.
    All,
    /// The top `k` of the live replicas, ranked by a rendezvous hash; rank `r` races
    /// `(r - 1)` staggers after the slot, so the first-ranked normally wins.
    Top(NonZeroUsize),
}

/// Default `[scheduler] candidates`: a second candidate covers a first that died.
pub const DEFAULT_CANDIDATES: Candidates = Candidates::Top(NonZeroUsize::MIN.saturating_add(1));
/// Default `[scheduler] candidate_stagger`: longer than a loaded race round trip, so the
/// first-ranked's key is set before the second-ranked asks.
pub const DEFAULT_CANDIDATE_STAGGER: Duration = Duration::from_millis(50);

/// The rendezvous score of `replica` for `slot` of `job`: the same on every replica and
/// version (xxh3 is specified, unlike std's hasher).
pub fn score(job: &str, slot: Slot, replica: &str) -> u64 {
    let mut bytes = Vec::with_capacity(job.len() + replica.len() + 10);
    bytes.extend_from_slice(job.as_bytes());
    bytes.push(0);
    bytes.extend_from_slice(&slot.instant().timestamp_millis().to_le_bytes());
    bytes.push(0);
    bytes.extend_from_slice(replica.as_bytes());
    xxhash_rust::xxh3::xxh3_64(&bytes)
}

/// `me`'s rank (1 = first) among `live` (which holds `me`) for `slot` of `job`: one more than
/// the members scoring higher, ties broken by name.
pub fn rank(live: &[String], me: &str, job: &str, slot: Slot) -> usize {
    let mine = (score(job, slot, me), me);
    1 + live
        .iter()
        .filter(|other| other.as_str() != me)
        .filter(|other| (score(job, slot, other), other.as_str()) > mine)
        .count()
}

/// The group of a configuration: replicas rank only among replicas with the same job names.
pub fn group<'a>(job_names: impl IntoIterator<Item = &'a str>) -> String {
    let mut names: Vec<&str> = job_names.into_iter().collect();
    names.sort_unstable();
    format!(
        "{:016x}",
        xxhash_rust::xxh3::xxh3_64(names.join("\n").as_bytes())
    )
}

/// The fleet as this replica sees it (see the module doc); `Off` in standalone mode or with
/// `candidates = "all"`, where the live set is this replica alone.
#[derive(Clone)]
pub enum Membership {
    /// No membership: every slot is raced.
    Off,
    /// Heartbeats on the Redis nodes.
    Redis(Arc<Fleet>),
}

/// The shared state of [`Membership::Redis`].
pub struct Fleet {
    nodes: Arc<Nodes>,
    key: String,
    channel: String,
    me: String,
    clock: SharedClock,
    /// How far the timeline's clock may be off the fleet clock before this replica's slots
    /// fall outside their start window (the race's guard would skip them): past it, the
    /// replica withdraws from the live set, so the others do not count on it.
    off_bound: Duration,
    /// This replica's group; swapped on a reload that changes the job names.
    group: Mutex<String>,
    /// Other members of this replica's group and when each leaves the view unless heard again.
    /// A std mutex: held for a lookup, never across an await.
    view: Mutex<HashMap<String, Instant>>,
    /// The members whose latest heartbeat was older than [`LATE_AFTER`] at the last read (or
    /// that a majority no longer listed): judged at the read, so this replica's own pace of
    /// reading never makes a member look late.
    late: Mutex<HashSet<String>>,
    /// Held across each write to the nodes (a heartbeat, a leave), so a leave is never
    /// overtaken by a heartbeat that was already on its way (which would announce the replica
    /// again after it left).
    writing: tokio::sync::Mutex<()>,
    /// Whether this replica has left the live set because its clock is off: set by whichever
    /// sees it first (the timeline at a step, or the heartbeat), so it leaves and says so once.
    withdrawn: std::sync::atomic::AtomicBool,
}

impl Membership {
    /// The membership of replica `me` on `nodes`, in `group`; `off_bound` is the start window.
    pub fn redis(
        nodes: Arc<Nodes>,
        prefix: &str,
        me: &str,
        clock: SharedClock,
        group: String,
        off_bound: Duration,
    ) -> Self {
        Membership::Redis(Arc::new(Fleet {
            nodes,
            key: format!("{prefix}:members"),
            channel: format!("{prefix}:members"),
            me: me.to_owned(),
            clock,
            off_bound,
            group: Mutex::new(group),
            view: Mutex::default(),
            late: Mutex::default(),
            writing: tokio::sync::Mutex::default(),
            withdrawn: std::sync::atomic::AtomicBool::new(false),
        }))
    }

    /// The live replicas of this replica's group (itself included), sorted by name.
    pub fn live(&self, me: &str) -> Vec<String> {
        match self {
            Membership::Off => vec![me.to_owned()],
            Membership::Redis(fleet) => fleet.live(),
        }
    }

    /// The live replicas (not `me`) whose latest heartbeat is older than [`LATE_AFTER`].
    pub fn late(&self, me: &str) -> Vec<String> {
        match self {
            Membership::Off => Vec::new(),
            Membership::Redis(fleet) => fleet.late(me),
        }
    }

    /// Reads the live set without announcing this replica (at start, before its timeline runs).
    pub async fn read(&self) {
        if let Membership::Redis(fleet) = self {
            fleet.heartbeat(false).await;
        }
    }

    /// Leaves the live set now if this replica's timeline is off the fleet clock past its
    /// start window (its wall clock just stepped under `clock = "local"`): the heartbeat would
    /// notice only at its next beat, and its slots meanwhile would go unraced.
    pub async fn withdraw_if_off(self) {
        let Membership::Redis(fleet) = self else {
            return;
        };
        fleet.withdraw_if_off().await;
    }

    /// Moves this replica to the group of a reloaded configuration: its old entry is removed
    /// (and its leaving announced) so the old group stops counting it.
    pub async fn regroup(&self, group: String) {
        let Membership::Redis(fleet) = self else {
            return;
        };
        let old = std::mem::replace(&mut *lock(&fleet.group), group.clone());
        if old != group {
            fleet.view_clear();
            fleet.leave(&old).await;
            fleet.heartbeat(true).await;
        }
    }

    /// Starts the heartbeat and the leave listener: they run until `shutdown`, when this
    /// replica removes itself from the live set and announces it.
    pub fn spawn(&self, tracker: &TaskTracker, shutdown: &CancellationToken) {
        let Membership::Redis(fleet) = self else {
            return;
        };
        let heard = pubsub::subscribe_all(&fleet.nodes, &fleet.channel, tracker, shutdown);
        tracker.spawn(listen_for_leaves(fleet.clone(), heard, shutdown.clone()));
        tracker.spawn(beat(fleet.clone(), shutdown.clone()));
    }
}

/// Writes a heartbeat every [`HEARTBEAT`] until shutdown, then leaves. A replica whose
/// timeline is off the fleet clock past its start window (a stepped wall clock under
/// `clock = "local"`) would skip its slots: it withdraws until its clock is back, so its slots
/// go to replicas that race them. Logs the view each time it changes (`members`: the
/// replicas this one ranks among).
async fn beat(fleet: Arc<Fleet>, shutdown: CancellationToken) {
    let mut logged = Vec::new();
    // A fixed rate, not a sleep after each beat: a slow round trip must not stretch the
    // period, or a live member would look late to the others.
    let mut period = tokio::time::interval(HEARTBEAT);
    period.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = period.tick() => {}
        }
        let off = fleet.withdraw_if_off().await;
        fleet.heartbeat(!off).await;
        let live = fleet.live();
        if live != logged {
            tracing::info!(replica = %fleet.me, fleet = live.len(), members = %live.join(","),
                "fleet view changed");
            logged = live;
        }
    }
    let group = lock(&fleet.group).clone();
    fleet.leave(&group).await;
}

/// Drops from the view each replica that announces its leaving.
async fn listen_for_leaves(
    fleet: Arc<Fleet>,
    mut heard: mpsc::Receiver<Heard>,
    shutdown: CancellationToken,
) {
    while let Some(message) = pubsub::next(&mut heard, &shutdown).await {
        if let Heard::Message(payload) = message {
            if let Some(member) = payload.strip_prefix(LEFT) {
                lock(&fleet.view).remove(member);
            }
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

impl Fleet {
    fn member(&self, group: &str) -> String {
        format!("{group}/{}", self.me)
    }

    fn live(&self) -> Vec<String> {
        let now = Instant::now();
        let mut view = lock(&self.view);
        view.retain(|_, until| *until > now);
        let group = lock(&self.group).clone();
        let mut live: Vec<String> = view
            .keys()
            .filter_map(|m| m.split_once('/'))
            .filter(|(g, _)| *g == group)
            .map(|(_, replica)| replica.to_owned())
            .filter(|replica| *replica != self.me)
            .collect();
        live.push(self.me.clone());
        live.sort_unstable();
        live
    }

    fn late(&self, me: &str) -> Vec<String> {
        let group = lock(&self.group).clone();
        lock(&self.late)
            .iter()
            .filter_map(|m| m.split_once('/'))
            .filter(|(g, replica)| *g == group && *replica != me)
            .map(|(_, replica)| replica.to_owned())
            .collect()
    }

    /// Leaves the live set (once) while the timeline's clock is off the fleet clock past the
    /// bound; true while it is.
    async fn withdraw_if_off(&self) -> bool {
        use std::sync::atomic::Ordering;
        let Some(off) = self.off_by() else {
            self.withdrawn.store(false, Ordering::Relaxed);
            return false;
        };
        if !self.withdrawn.swap(true, Ordering::Relaxed) {
            tracing::warn!(replica = %self.me, off_ms = off.as_millis() as u64,
                "this replica's clock is off the fleet clock past the start window: it leaves the \
                fleet's candidates until it is back");
            let group = lock(&self.group).clone();
            self.leave(&group).await;
        }
        true
    }

    /// How far the timeline's clock is off the fleet clock, when past the bound.
    fn off_by(&self) -> Option<Duration> {
        let off = (self.clock.now() - self.clock.fleet_now())
            .abs()
            .to_std()
            .ok()?;
        (off > self.off_bound).then_some(off)
    }

    fn view_clear(&self) {
        lock(&self.view).clear();
    }

    /// One heartbeat on every node (the pool's rule: a suspect node is not waited for):
    /// announces this replica if `announce`, trims the expired, and merges what each node holds.
    async fn heartbeat(&self, announce: bool) {
        let _writing = self.writing.lock().await;
        // Judged again under the lock: a step seen meanwhile has made this replica leave.
        let announce = announce && self.off_by().is_none();
        let now_ms = self.clock.fleet_now().timestamp_millis();
        let ttl_ms = MEMBER_TTL.as_millis() as i64;
        let member = announce.then(|| self.member(&lock(&self.group)));
        let key = self.key.clone();
        let replies = self
            .nodes
            .ask(
                |node| refresh(node, key.clone(), member.clone(), now_ms, ttl_ms),
                Replies::settled,
            )
            .await;
        let read_at = Instant::now();
        let seen = on_a_majority(replies.values(), self.nodes.quorum());
        let mut view = lock(&self.view);
        merge(&mut view, &seen, now_ms, read_at);
        *lock(&self.late) = late_members(&view, &seen, now_ms);
    }

    /// Removes this replica's entry of `group` from every node and tells the fleet.
    async fn leave(&self, group: &str) {
        let _writing = self.writing.lock().await;
        let member = self.member(group);
        let mut cmd = redis::cmd("ZREM");
        cmd.arg(&self.key).arg(&member);
        self.nodes
            .query::<i64>(cmd, MEMBERSHIP_TIMEOUT, Replies::settled)
            .await;
        let payload = format!("{LEFT}{member}");
        pubsub::publish_all(&self.nodes, &self.channel, &payload, MEMBERSHIP_TIMEOUT).await;
    }
}

/// One node's part of a heartbeat: one pipeline of plain commands (no script), so a heartbeat
/// costs each node three commands.
async fn refresh(
    node: Arc<Node>,
    key: String,
    member: Option<String>,
    now_ms: i64,
    ttl_ms: i64,
) -> Result<Vec<(String, i64)>, NodeError> {
    let mut pipe = redis::pipe();
    if let Some(member) = &member {
        pipe.cmd("ZADD")
            .arg(&key)
            .arg(now_ms + ttl_ms)
            .arg(member)
            .ignore();
    }
    pipe.cmd("ZREMRANGEBYSCORE")
        .arg(&key)
        .arg("-inf")
        .arg(now_ms)
        .ignore();
    pipe.cmd("ZRANGE")
        .arg(&key)
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES");
    let (members,): (Vec<(String, i64)>,) = node.query_pipe(&pipe, MEMBERSHIP_TIMEOUT).await?;
    Ok(members)
}

/// The members listed by at least `quorum` of the nodes' answers, each with its latest
/// expiry: a replica whose heartbeats reach only a minority of the nodes cannot win a race,
/// so it is not counted on.
fn on_a_majority<'a>(
    answers: impl Iterator<Item = &'a Vec<(String, i64)>>,
    quorum: usize,
) -> Vec<(String, i64)> {
    let mut seen: HashMap<&str, (usize, i64)> = HashMap::new();
    for members in answers {
        for (member, expires) in members {
            let entry = seen.entry(member).or_insert((0, *expires));
            entry.0 += 1;
            entry.1 = entry.1.max(*expires);
        }
    }
    seen.into_iter()
        .filter(|(_, (nodes, _))| *nodes >= quorum)
        .map(|(member, (_, expires))| (member.to_owned(), expires))
        .collect()
}

/// The members of `view` that `seen` (this read's members and expiries, in fleet-clock ms)
/// shows silent for longer than [`LATE_AFTER`] at `now_ms`, or does not list at all.
fn late_members(
    view: &HashMap<String, Instant>,
    seen: &[(String, i64)],
    now_ms: i64,
) -> HashSet<String> {
    let ttl_ms = MEMBER_TTL.as_millis() as i64;
    let late_ms = LATE_AFTER.as_millis() as i64;
    let fresh: HashSet<&str> = seen
        .iter()
        .filter(|(_, expires)| now_ms - (expires - ttl_ms) <= late_ms)
        .map(|(member, _)| member.as_str())
        .collect();
    view.keys()
        .filter(|m| !fresh.contains(m.as_str()))
        .cloned()
        .collect()
}

/// Keeps each member of `members` (with its expiry in fleet-clock ms) until the later of its
/// deadlines, measured from `read_at` on the monotonic clock.
fn merge(
    view: &mut HashMap<String, Instant>,
    members: &[(String, i64)],
    now_ms: i64,
    read_at: Instant,
) {
    for (member, expires_ms) in members {
        let Ok(left) = u64::try_from(expires_ms - now_ms) else {
            continue;
        };
        let until = read_at + Duration::from_millis(left);
        let entry = view.entry(member.clone()).or_insert(until);
        *entry = (*entry).max(until);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};

    fn slot(ms: i64) -> Slot {
        Slot::at(Utc.timestamp_millis_opt(ms).unwrap())
    }

    fn fleet(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("replica-{i}")).collect()
    }

    #[test]
    fn every_replica_derives_the_same_ranking() {
        let live = fleet(9);
        for s in 0..200 {
            let ranks: Vec<usize> = live
                .iter()
                .map(|me| rank(&live, me, "report", slot(s * 1000)))
                .collect();
            let mut sorted = ranks.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, (1..=9).collect::<Vec<_>>(), "slot {s}: {ranks:?}");
        }
    }

    #[test]
    fn first_ranks_spread_evenly_over_the_fleet() {
        let live = fleet(9);
        let mut firsts: HashMap<&str, usize> = HashMap::new();
        let slots = 9000;
        for s in 0..slots {
            for job in ["a", "b"] {
                let first = live
                    .iter()
                    .find(|me| rank(&live, me, job, slot(s * 1000)) == 1)
                    .unwrap();
                *firsts.entry(first).or_default() += 1;
            }
        }
        let fair = 2 * slots as usize / 9;
        for (replica, count) in firsts {
            let share = count as f64 / fair as f64;
            assert!(
                (0.9..1.1).contains(&share),
                "{replica}: {count} firsts, fair {fair}"
            );
        }
    }

    #[test]
    fn a_replica_leaving_moves_only_the_slots_it_ranked_first_in() {
        let live = fleet(9);
        let without: Vec<String> = live.iter().filter(|r| *r != "replica-4").cloned().collect();
        let first = |set: &[String], s: i64| {
            set.iter()
                .find(|me| rank(set, me, "j", slot(s)) == 1)
                .cloned()
                .unwrap()
        };
        for s in 0..2000 {
            let before = first(&live, s * 1000);
            let after = first(&without, s * 1000);
            if before != "replica-4" {
                assert_eq!(
                    before, after,
                    "slot {s} moved though replica-4 was not first"
                );
            }
        }
    }

    #[test]
    fn the_group_depends_on_the_job_names_only_not_their_order() {
        assert_eq!(group(["a", "b"]), group(["b", "a"]));
        assert_ne!(group(["a", "b"]), group(["a"]));
    }

    #[test]
    fn a_member_on_a_minority_of_nodes_is_not_counted() {
        let a = vec![("g/a".to_owned(), 10), ("g/b".to_owned(), 10)];
        let b = vec![("g/a".to_owned(), 12)];
        let c = vec![("g/c".to_owned(), 10)];
        let seen = on_a_majority([&a, &b, &c].into_iter(), 2);
        assert_eq!(seen, vec![("g/a".to_owned(), 12)]);
    }

    #[test]
    fn a_member_is_late_when_its_heartbeat_is_old_at_the_read_or_missing() {
        let t = Instant::now();
        let view: HashMap<String, Instant> = ["g/fresh", "g/old", "g/gone"]
            .iter()
            .map(|m| (m.to_string(), t))
            .collect();
        let ttl = MEMBER_TTL.as_millis() as i64;
        // At 10 s: "fresh" beat 1 s ago, "old" 2 s ago, "gone" is not listed.
        let seen = vec![
            ("g/fresh".to_owned(), 9_000 + ttl),
            ("g/old".to_owned(), 8_000 + ttl),
        ];
        let late = late_members(&view, &seen, 10_000);
        let mut late: Vec<&str> = late.iter().map(String::as_str).collect();
        late.sort_unstable();
        assert_eq!(late, vec!["g/gone", "g/old"]);
    }

    #[test]
    fn a_member_stays_until_its_latest_deadline() {
        let mut view = HashMap::new();
        let t = Instant::now();
        merge(&mut view, &[("g/a".into(), 4_000)], 1_000, t);
        merge(&mut view, &[("g/a".into(), 2_000)], 1_000, t);
        assert_eq!(view["g/a"], t + Duration::from_millis(3_000));
        merge(&mut view, &[("g/b".into(), 500)], 1_000, t);
        assert!(
            !view.contains_key("g/b"),
            "an expired member is not taken in"
        );
    }
}
