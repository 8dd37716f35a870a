//! Fleet membership and the candidates of each slot.
//!
//! Racing every slot on every replica costs each slot replicas × nodes `SET`s and rewards the
//! fastest replica. Instead only the top `k` replicas of a rendezvous hash of (job, slot,
//! replica) race ([`rank`]), the place after them looks out for dead candidates (see
//! `slot/candidates.rs`), and the others do not touch Redis for that slot. Every replica
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
//! The same heartbeat reads and writes this run's token under its id (see `namesakes`), so two
//! live replicas under one id, which the live set counts as one, are told apart and warned about.
//!
//! The group: a hash of each job's name and slot-defining definition (cron, zone, `days` and
//! the calendar's dates; a disabled job is absent) in the replica's configuration. Replicas
//! rank only among members of their own group, so during a rollout that adds, removes or
//! reschedules a job, a slot is ranked only among replicas that have it: each group races the
//! slots it has (a slot both have is raced by both groups, more racers for a moment, and the
//! lock still gives it once), and no slot waits on a replica that does not schedule it. Each
//! group publishes its card ([`GroupCard`]); a replica that sees members of another group reads
//! theirs once and says at info which jobs they define differently, with both hashes.
//!
//! Why so long: 150 of its lines are unit tests; the code is the live set, the groups it is
//! ranked in and the ranking, which share one state (`Fleet`) and one heartbeat. How a slot
//! uses the ranking (race, look, look out or stand by) is in `slot/candidates.rs`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::namesakes::Namesakes;
use crate::config::Job;
use crate::redis::pubsub::{self, Heard};
use crate::redis::{Node, NodeError};
use crate::redis::{Nodes, Replies};
use crate::time::schedule::{SharedClock, Slot};

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

/// What a replica publishes about its configuration beside its heartbeat entry
/// (`{group}/{replica}` in `{key_prefix}:members`): the wire format of the group's card, the
/// JSON value of `{key_prefix}:group:{group}`. Fields may be added beside `jobs`: readers
/// ignore the ones they do not know, and only `jobs` makes the group.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GroupCard {
    /// Each job's name and the hash of its definition ([`definition_hash`]).
    pub jobs: BTreeMap<String, String>,
}

/// How long a group's card is kept on the nodes, and how often a member writes it again: a
/// group no replica runs any more leaves no key behind for long.
const CARD_TTL: Duration = Duration::from_secs(120);
const CARD_EVERY: Duration = Duration::from_secs(30);

/// The hash of a job's slot-defining definition ([`crate::time::schedule::Schedule::definition`]):
/// the same on every replica and version (xxh3 is specified).
pub fn definition_hash(job: &Job) -> String {
    let definition = job.schedule.definition();
    format!("{:016x}", xxhash_rust::xxh3::xxh3_64(definition.as_bytes()))
}

/// A configuration's group: its card, and the id members of the group share.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    id: String,
    card: GroupCard,
}

impl Group {
    /// The group of a configuration's (enabled) jobs.
    pub fn of(jobs: &[Arc<Job>]) -> Self {
        let jobs = jobs
            .iter()
            .map(|job| (job.name.clone(), definition_hash(job)))
            .collect();
        Group::from_card(GroupCard { jobs })
    }

    /// The group whose card is `card`: its id hashes the jobs' names and definitions, in
    /// name order.
    pub fn from_card(card: GroupCard) -> Self {
        let text: Vec<String> = card.jobs.iter().map(|(n, h)| format!("{n}\t{h}")).collect();
        let id = format!(
            "{:016x}",
            xxhash_rust::xxh3::xxh3_64(text.join("\n").as_bytes())
        );
        Group { id, card }
    }

    /// The id in the members' entries.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The jobs on which `theirs` differs from this group: (job, our hash, their hash), a
    /// hash `None` where that side does not have the job.
    pub fn differences<'a>(&'a self, theirs: &'a GroupCard) -> Vec<Difference<'a>> {
        let names: std::collections::BTreeSet<&String> =
            self.card.jobs.keys().chain(theirs.jobs.keys()).collect();
        names
            .into_iter()
            .map(|job| (job.as_str(), self.card.jobs.get(job), theirs.jobs.get(job)))
            .filter(|(_, ours, theirs)| ours != theirs)
            .map(|(job, ours, theirs)| (job, ours.map(String::as_str), theirs.map(String::as_str)))
            .collect()
    }
}

/// A job two groups define differently: (job, our hash, their hash); `None` where absent.
pub type Difference<'a> = (&'a str, Option<&'a str>, Option<&'a str>);

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
    /// This replica's group; swapped on a reload that changes a job's name or definition.
    group: Mutex<Group>,
    /// `{key_prefix}:group:`, the prefix of the groups' cards.
    card_prefix: String,
    /// When this replica last wrote its group's card (`None`: not since it joined the group).
    card_written: Mutex<Option<Instant>>,
    /// The other groups whose cards this replica has compared with its own since it joined
    /// its group: each difference is said once.
    compared: Mutex<HashSet<String>>,
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
    /// This run's token under its id, read and written with each heartbeat: another live
    /// replica under the same id is told apart and warned about.
    namesakes: Namesakes,
}

impl Membership {
    /// The membership of replica `me` on `nodes`, in `group`; `off_bound` is the start window.
    pub fn redis(
        nodes: Arc<Nodes>,
        prefix: &str,
        me: &str,
        clock: SharedClock,
        group: Group,
        off_bound: Duration,
    ) -> Self {
        Membership::Redis(Arc::new(Fleet {
            nodes,
            key: format!("{prefix}:members"),
            channel: format!("{prefix}:members"),
            card_prefix: format!("{prefix}:group:"),
            me: me.to_owned(),
            clock,
            off_bound,
            group: Mutex::new(group),
            view: Mutex::default(),
            late: Mutex::default(),
            writing: tokio::sync::Mutex::default(),
            withdrawn: std::sync::atomic::AtomicBool::new(false),
            card_written: Mutex::default(),
            compared: Mutex::default(),
            namesakes: Namesakes::new(prefix, me),
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
    pub async fn regroup(&self, group: Group) {
        let Membership::Redis(fleet) = self else {
            return;
        };
        let old = std::mem::replace(&mut *lock(&fleet.group), group.clone());
        if old.id != group.id {
            fleet.view_clear();
            *lock(&fleet.card_written) = None;
            lock(&fleet.compared).clear();
            fleet.leave(&old.id).await;
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
            biased;
            _ = shutdown.cancelled() => break,
            _ = period.tick() => {}
        }
        let off = fleet.withdraw_if_off().await;
        fleet.heartbeat(!off).await;
        fleet.compare_groups().await;
        let live = fleet.live();
        if live != logged {
            tracing::info!(replica = %fleet.me, fleet = live.len(), members = %live.join(","),
                "fleet view changed");
            logged = live;
        }
    }
    let group = lock(&fleet.group).id.clone();
    fleet.leave(&group).await;
}

/// Drops from the view each replica that announces its leaving.
async fn listen_for_leaves(
    fleet: Arc<Fleet>,
    mut heard: mpsc::Receiver<Heard>,
    shutdown: CancellationToken,
) {
    while let Some(message) = pubsub::next(&mut heard, &shutdown).await {
        if let Heard::Message(payload) = message
            && let Some(member) = payload.strip_prefix(LEFT)
        {
            lock(&fleet.view).remove(member);
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
        let group = lock(&self.group).id.clone();
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
        let group = lock(&self.group).id.clone();
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
            let group = lock(&self.group).id.clone();
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

    /// The group's card key and JSON when it was not written for [`CARD_EVERY`] (marked
    /// written: a heartbeat that fails is followed by another within a second, and the card
    /// outlives several misses).
    fn card_due(&self) -> Option<(String, String)> {
        let mut written = lock(&self.card_written);
        if written.is_some_and(|at| at.elapsed() < CARD_EVERY) {
            return None;
        }
        *written = Some(Instant::now());
        let group = lock(&self.group);
        let json = serde_json::to_string(&group.card).ok()?;
        Some((format!("{}{}", self.card_prefix, group.id), json))
    }

    /// The members of other groups in the view, by group, leaving out the groups already
    /// compared.
    fn uncompared_groups(&self) -> BTreeMap<String, Vec<String>> {
        let mine = lock(&self.group).id.clone();
        let compared = lock(&self.compared).clone();
        let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (group, replica) in lock(&self.view).keys().filter_map(|m| m.split_once('/')) {
            if group != mine && !compared.contains(group) {
                groups
                    .entry(group.to_owned())
                    .or_default()
                    .push(replica.to_owned());
            }
        }
        groups
    }

    /// Reads the card of each group newly seen in the view and says at info, once per group
    /// (again after a regroup), which jobs its members define differently from this replica.
    async fn compare_groups(&self) {
        for (id, mut replicas) in self.uncompared_groups() {
            replicas.sort_unstable();
            let members = replicas.join(",");
            let card = self.read_card(&id).await;
            lock(&self.compared).insert(id.clone());
            let Some(card) = card else {
                tracing::info!(replica = %self.me, group = %id, members = %members,
                    "members of another group publish no card (an older version, or it just \
                    expired): they rank their slots among themselves");
                continue;
            };
            let mine = lock(&self.group).clone();
            for (job, ours, theirs) in mine.differences(&card) {
                tracing::info!(replica = %self.me, job, ours = ours.unwrap_or("absent"),
                    theirs = theirs.unwrap_or("absent"), group = %id, members = %members,
                    "members define this job differently (a rollout?): each side ranks the \
                    slots it has among the replicas that have them; a slot both have is still \
                    run once");
            }
        }
    }

    /// The card of group `id`, from the first node that has it.
    async fn read_card(&self, id: &str) -> Option<GroupCard> {
        let mut cmd = redis::cmd("GET");
        cmd.arg(format!("{}{id}", self.card_prefix));
        let replies = self
            .nodes
            .query::<Option<String>>(cmd, MEMBERSHIP_TIMEOUT, Replies::settled)
            .await;
        replies
            .values()
            .flatten()
            .find_map(|json| serde_json::from_str(json).ok())
    }

    /// One heartbeat on every node (the pool's rule: a suspect node is not waited for):
    /// announces this replica if `announce`, trims the expired, and merges what each node holds.
    async fn heartbeat(&self, announce: bool) {
        // Scores are fleet-clock times: a guess from an unmeasured clock (a fast one) would
        // trim every other member, so nothing is written or read before it is measured.
        if !self.clock.measured() {
            return;
        }
        let _writing = self.writing.lock().await;
        // Judged again under the lock: a step seen meanwhile has made this replica leave.
        let announce = announce && self.off_by().is_none();
        let now_ms = self.clock.fleet_now().timestamp_millis();
        let ttl_ms = MEMBER_TTL.as_millis() as i64;
        let member = announce.then(|| self.member(&lock(&self.group).id));
        let card = announce.then(|| self.card_due()).flatten();
        let name = self.namesakes.key().to_owned();
        let token = announce.then(|| self.namesakes.value(now_ms));
        let beat = Arc::new(Beat {
            key: self.key.clone(),
            member,
            card,
            name,
            token,
            now_ms,
            ttl_ms,
        });
        let replies = self
            .nodes
            .ask(|node| refresh(node, beat.clone()), Replies::settled)
            .await;
        let read_at = Instant::now();
        self.namesakes
            .look(replies.values().filter_map(|(held, _)| held.as_ref()));
        let members = replies.values().map(|(_, members)| members);
        let seen = on_a_majority(members, self.nodes.quorum());
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

/// One heartbeat's writes and read, the same for every node.
struct Beat {
    /// `{key_prefix}:members`.
    key: String,
    /// This replica's entry, when it announces itself.
    member: Option<String>,
    /// The group's card key and JSON, when it is due to be written again.
    card: Option<(String, String)>,
    /// `{key_prefix}:replica:{id}`, read before this replica's token is written there.
    name: String,
    /// This run's token and the time, when it announces itself.
    token: Option<String>,
    now_ms: i64,
    ttl_ms: i64,
}

/// What a node held under this replica's id before the heartbeat, and its members.
type Refreshed = (Option<String>, Vec<(String, i64)>);

/// One node's part of a heartbeat: one pipeline of plain commands (no script, and none newer
/// than Redis 2.6), so a heartbeat costs each node five commands (six when the group's card is
/// written again).
async fn refresh(node: Arc<Node>, beat: Arc<Beat>) -> Result<Refreshed, NodeError> {
    let mut pipe = redis::pipe();
    pipe.cmd("GET").arg(&beat.name);
    if let Some(token) = &beat.token {
        pipe.cmd("SET")
            .arg(&beat.name)
            .arg(token)
            .arg("PX")
            .arg(beat.ttl_ms)
            .ignore();
    }
    if let Some(member) = &beat.member {
        pipe.cmd("ZADD")
            .arg(&beat.key)
            .arg(beat.now_ms + beat.ttl_ms)
            .arg(member)
            .ignore();
    }
    if let Some((key, card)) = &beat.card {
        let ttl_ms = CARD_TTL.as_millis() as u64;
        pipe.cmd("SET")
            .arg(key)
            .arg(card)
            .arg("PX")
            .arg(ttl_ms)
            .ignore();
    }
    pipe.cmd("ZREMRANGEBYSCORE")
        .arg(&beat.key)
        .arg("-inf")
        .arg(beat.now_ms)
        .ignore();
    pipe.cmd("ZRANGE")
        .arg(&beat.key)
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES");
    node.query_pipe(&pipe, MEMBERSHIP_TIMEOUT).await
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

    fn card(jobs: &[(&str, &str)]) -> GroupCard {
        let jobs = jobs
            .iter()
            .map(|(n, h)| (n.to_string(), h.to_string()))
            .collect();
        GroupCard { jobs }
    }

    #[test]
    fn the_group_depends_on_the_jobs_definitions_not_their_order() {
        let ab = Group::from_card(card(&[("a", "1"), ("b", "2")]));
        assert_eq!(ab, Group::from_card(card(&[("b", "2"), ("a", "1")])));
        assert_ne!(ab.id(), Group::from_card(card(&[("a", "1")])).id());
        let moved = card(&[("a", "1"), ("b", "3")]);
        assert_ne!(ab.id(), Group::from_card(moved.clone()).id());
        assert_eq!(ab.differences(&moved), vec![("b", Some("2"), Some("3"))]);
        let without = card(&[("a", "1")]);
        assert_eq!(ab.differences(&without), vec![("b", Some("2"), None)]);
    }

    #[test]
    fn a_job_moved_to_another_time_or_zone_has_another_definition() {
        let job = |cron: &str, zone: &str| {
            let text = format!(
                "[[job]]\nname = \"j\"\nschedule = \"{cron}\"\ntimezone = \"{zone}\"\n\
                 [job.action]\ntype = \"log\"\ncontent = \"x\"\n"
            );
            let env = std::collections::HashMap::new();
            let config = crate::config::parse(std::path::Path::new("t.toml"), &text, &env);
            definition_hash(&config.unwrap().jobs[0])
        };
        let standup = job("0 30 9 * * *", "Asia/Shanghai");
        assert_eq!(standup, job("0 30 9 * * *", "Asia/Shanghai"));
        assert_ne!(standup, job("0 0 10 * * *", "Asia/Shanghai"));
        assert_ne!(standup, job("0 30 9 * * *", "Europe/Berlin"));
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
