//! The invariants, each by name: checked on every effect a receiver sees, and after the run's
//! settle period. A fault profile beyond the Redlock assumptions drops the ones the README
//! promises only inside them (at most one effect per slot; liveness).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use chrono::DateTime;

use slotcron::unstable::record::history::RunRecord;

use crate::fleet::{JobSpec, Shape};
use crate::world::{EPOCH_US, Effect, World};

/// Liveness looks at slots at least this far from any fault (µs): a slot whose window saw a
/// fault may be lost or handed off; one in calm water must be delivered.
const CALM_US: i64 = 15_000_000;

/// A pause holds from this long after the operator took it (µs): slots already racing when
/// it was taken may still run; from then on every replica heard it (pub/sub, one hop).
const PAUSE_HEARD_US: i64 = 2_000_000;

impl Effect {
    /// A slot of `job` named in a violation that no single effect shows.
    fn of_slot(job: &str, slot_us: i64) -> Effect {
        Effect {
            job: job.to_owned(),
            slot_us,
            fence: 0,
            key: String::new(),
            replica: String::new(),
            at_us: 0,
        }
    }
}

/// The members and scores of the fleet's membership set on `node` (read on a copy, so the
/// node's own state, connection ids included, is untouched).
fn members(node: &crate::model::Node, now_us: i64) -> Vec<(String, f64)> {
    let argv: Vec<Vec<u8>> = ["ZRANGE", "sim:members", "0", "-1", "WITHSCORES"]
        .iter()
        .map(|a| a.as_bytes().to_vec())
        .collect();
    let reply = node
        .clone()
        .execute(crate::model::ConnId(u64::MAX), now_us, &argv)
        .reply;
    let Ok(redis::Value::Array(items)) = redis::parse_redis_value(&reply) else {
        return Vec::new();
    };
    (items.chunks(2))
        .filter_map(|pair| match pair {
            [redis::Value::BulkString(m), redis::Value::BulkString(s)] => Some((
                String::from_utf8_lossy(m).into_owned(),
                String::from_utf8_lossy(s).parse().ok()?,
            )),
            _ => None,
        })
        .collect()
}

/// The lock an effect was sent under, named by its fence: the slot's key, or its `n`th
/// handoff's (the fence is the slot's epoch ms plus `n`).
fn lock_key(e: &Effect) -> String {
    let slot_ms = e.slot_us / 1000;
    match e.fence - slot_ms {
        0 => format!("sim:{}:{slot_ms}", e.job),
        n => format!("sim:{}:{slot_ms}:handoff:{n}", e.job),
    }
}

/// Whether `e` left after its lock ran out on the nodes' own clocks (each node's expiry, with
/// its skew, steps and drift): fewer than a majority still held the key under the sender's
/// token, so another replica could have won it. A node restarted empty since the slot counts
/// as holding: losing keys on a minority is inside the assumptions, and a second run it lets
/// in is `at_most_once`'s to judge. This is the lock as the nodes keep it, not as the sender
/// counts it: a validity computed without the drift allowance sends past it when the nodes'
/// clocks run fast.
fn lapsed_on_the_nodes(w: &World, e: &Effect) -> Option<String> {
    let (key, ours) = (lock_key(e), format!("{}:", e.replica));
    let holding = (w.nodes.iter().enumerate())
        .filter(|(i, node)| {
            let emptied = (w.emptied.iter()).any(|(n, at)| n == i && *at >= e.slot_us);
            let held = node.model.peek(key.as_bytes(), node.clock_us(e.at_us));
            emptied || held.is_some_and(|token| token.starts_with(ours.as_bytes()))
        })
        .count();
    let quorum = w.nodes.len() / 2 + 1;
    (holding < quorum).then(|| {
        format!(
            "sent after its lock {key} ran out on the nodes' clocks: {holding} of {} held it",
            w.nodes.len()
        )
    })
}

/// Whether a version of the config ran at a slot (true time, µs).
type Live<'a> = dyn Fn(i64) -> bool + 'a;

/// A replica races nothing in its first moments (its fleet clock is measured first, the
/// members read): a new version's slots are due from this long after its first replica started.
const START_UP_US: i64 = 1_000_000;

/// Every (job, slot) of the horizon `from_us..to_us` that a running version of the config
/// had: the first version's while some replica had not been told to roll out, the new one's
/// (`Shape::rolled_out`) once some replica started with it ([`START_UP_US`]).
fn due_slots(w: &World, shape: &Shape, (from_us, to_us): (i64, i64)) -> BTreeSet<(String, i64)> {
    let rolled = w.rolled.values();
    let first_live =
        |s: i64| w.rolled.len() < shape.replicas || rolled.clone().any(|(stopped, _)| *stopped > s);
    let new_live = |s: i64| {
        rolled
            .clone()
            .any(|(_, started)| started + START_UP_US <= s)
    };
    let versions: [(&[JobSpec], &Live); 2] =
        [(&shape.jobs, &first_live), (&shape.rolled_out, &new_live)];
    let mut due = BTreeSet::new();
    for (jobs, live) in versions.into_iter().filter(|(jobs, _)| !jobs.is_empty()) {
        for job in crate::fleet::parsed(shape, jobs) {
            let mut after = DateTime::from_timestamp_micros(from_us - 1).expect("an instant");
            while let Some(slot) = job.schedule.next_after(after) {
                let us = slot.instant().timestamp_micros();
                if us >= to_us {
                    break;
                }
                if live(us) {
                    due.insert((job.name.clone(), us));
                }
                after = slot.instant();
            }
        }
    }
    due
}

/// One request that reached a receiver: its fence, replica and `Idempotency-Key`.
type Arrival = (i64, String, String);

/// Runs among arrivals: distinct (fence, replica), a resend being the same run.
fn runs_of(arrivals: &[Arrival]) -> usize {
    let runs: std::collections::BTreeSet<(i64, &str)> =
        arrivals.iter().map(|(f, r, _)| (*f, r.as_str())).collect();
    runs.len()
}

/// One broken invariant.
#[derive(Debug, Clone)]
pub struct Violation {
    pub invariant: &'static str,
    pub job: String,
    pub slot_us: i64,
    pub replicas: Vec<String>,
    pub detail: String,
    pub last_events: Vec<String>,
}

#[derive(Default)]
struct State {
    found: Vec<Violation>,
    /// Per (job, slot): the fence, replica and `Idempotency-Key` of each request that reached
    /// a receiver, in order (a resend too).
    seen: BTreeMap<(String, i64), Vec<Arrival>>,
    /// Per job, the runs a receiver has heard from and not yet acted on, by (slot, fence,
    /// replica): when their first request came (kept for `one_run_at_a_time` only).
    in_flight: BTreeMap<String, BTreeMap<(i64, i64, String), i64>>,
}

/// The run's violations; cloned into every receiver.
#[derive(Clone)]
pub struct Violations {
    inside: bool,
    /// The plan's bound on lateness (µs; `Plan::on_time_ms`), if it has one.
    on_time_us: Option<i64>,
    /// `Plan::one_run_at_a_time`.
    one_run_at_a_time: bool,
    state: Arc<Mutex<State>>,
}

impl Violations {
    /// `inside`: the run's faults stay inside the Redlock assumptions.
    pub fn new(inside: bool) -> Self {
        Violations {
            inside,
            on_time_us: None,
            one_run_at_a_time: false,
            state: Arc::default(),
        }
    }

    /// Also checks that every effect reaches its receiver within `ms` of its slot.
    pub fn on_time(self, ms: Option<u64>) -> Self {
        let on_time_us = ms.map(|ms| ms as i64 * 1000);
        Violations { on_time_us, ..self }
    }

    /// Also checks that a job's runs reach the receivers one at a time (`overlap = "skip"`).
    pub fn one_run_at_a_time(self, on: bool) -> Self {
        Violations {
            one_run_at_a_time: on,
            ..self
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn report(
        &self,
        w: &World,
        invariant: &'static str,
        e: &Effect,
        replicas: Vec<String>,
        detail: String,
    ) {
        self.state().found.push(Violation {
            invariant,
            job: e.job.clone(),
            slot_us: e.slot_us,
            replicas,
            detail,
            last_events: w.last.iter().cloned().collect(),
        });
    }

    /// Checks one effect as it reaches its receiver.
    pub fn on_effect(&self, w: &mut World, e: &Effect, stale: bool) {
        let fleet_now = e.at_us + w.fleet_offset_us();
        if fleet_now < e.slot_us {
            let early = format!(
                "{} µs before its slot on the fleet's time",
                e.slot_us - fleet_now
            );
            self.report(w, "never_early", e, vec![e.replica.clone()], early);
        }
        let late = fleet_now - e.slot_us;
        if self.on_time_us.is_some_and(|bound| late > bound) {
            let detail = format!("{} ms after its slot on the fleet's time", late / 1000);
            self.report(w, "on_time", e, vec![e.replica.clone()], detail);
        }
        if e.slot_us < EPOCH_US {
            let detail = "a slot from before the fleet first scheduled the job (its watermark)";
            self.report(
                w,
                "never_before_deploy",
                e,
                vec![e.replica.clone()],
                detail.to_owned(),
            );
        }
        if stale {
            let detail = "sent after the lock's validity (the run's deadline)".to_owned();
            self.report(w, "never_stale", e, vec![e.replica.clone()], detail);
        }
        if let Some(detail) = lapsed_on_the_nodes(w, e) {
            self.report(w, "never_stale", e, vec![e.replica.clone()], detail);
        }
        self.one_run_of_the_job(w, e);
        let before = {
            let mut state = self.state();
            let seen = state.seen.entry((e.job.clone(), e.slot_us)).or_default();
            let before = seen.clone();
            seen.push((e.fence, e.replica.clone(), e.key.clone()));
            before
        };
        self.on_arrival(w, e, &before);
    }

    /// Notes a request that reached a receiver, acted on or not (a 429, a 5xx): its run is in
    /// flight from then until a request of it is acted on.
    pub fn on_request(&self, e: &Effect) {
        if !self.one_run_at_a_time {
            return;
        }
        let mut state = self.state();
        let runs = state.in_flight.entry(e.job.clone()).or_default();
        let run = (e.slot_us, e.fence, e.replica.clone());
        runs.entry(run).or_insert(e.at_us);
    }

    /// `e`'s run ends with its effect; a run of an earlier slot of the job still in flight
    /// means two runs of the job at once.
    fn one_run_of_the_job(&self, w: &World, e: &Effect) {
        if !self.one_run_at_a_time {
            return;
        }
        let earlier = {
            let mut state = self.state();
            let runs = state.in_flight.entry(e.job.clone()).or_default();
            runs.remove(&(e.slot_us, e.fence, e.replica.clone()));
            (runs.iter())
                .find(|((slot_us, _, _), _)| *slot_us < e.slot_us)
                .map(|(run, since)| (run.clone(), *since))
        };
        if let Some(((slot_us, fence, replica), since)) = earlier {
            let detail = format!(
                "the run of slot {} s (fence {fence}, by {replica}, first request at {} s) \
                 was still in flight",
                (slot_us - EPOCH_US) / 1_000_000,
                (since - EPOCH_US) / 1_000_000
            );
            let replicas = vec![replica, e.replica.clone()];
            self.report(w, "one_run_at_a_time", e, replicas, detail);
        }
    }

    /// Checks an effect against the earlier arrivals `before` of its slot: a resend keeps its
    /// run's key; another run comes under a later fence, and inside the assumptions not at all.
    fn on_arrival(&self, w: &World, e: &Effect, before: &[Arrival]) {
        // A resend (after an answer cut off, a 5xx, a 429) is the same run: one fence, one key.
        let resent = (before.iter()).find(|(f, r, _)| *f == e.fence && *r == e.replica);
        if let Some((_, _, key)) = resent {
            if *key != e.key {
                let detail = format!("resent with key {} after key {key}", e.key);
                self.report(w, "one_key_per_run", e, vec![e.replica.clone()], detail);
            }
            return;
        }
        let replicas = || {
            before
                .iter()
                .map(|(_, r, _)| r.clone())
                .chain([e.replica.clone()])
                .collect()
        };
        // Beyond the assumptions a slot may run twice, under its one fence (listed twice, see
        // `duplicate_listed_twice`); a fence going back is wrong anywhere.
        let behind = |f: i64| f > e.fence || (self.inside && f == e.fence);
        if let Some((fence, _, _)) = before.iter().find(|(f, _, _)| behind(*f)) {
            let detail = format!("fence {} after fence {fence}", e.fence);
            self.report(w, "fences_increase", e, replicas(), detail);
        }
        let runs = runs_of(before) + 1;
        if self.inside && runs > 1 {
            let detail = format!("run {runs} of the slot reached a receiver");
            self.report(w, "at_most_once", e, replicas(), detail);
        }
    }

    /// After the settle period: every calm slot of the horizon delivered (inside the
    /// assumptions). `from_us..to_us`: the horizon, true time.
    pub fn at_end(&self, w: &World, shape: &Shape, horizon: (i64, i64)) {
        self.pauses_held(w);
        if !self.inside {
            return;
        }
        let calm = |slot: i64| {
            !(w.fault_times.iter()).any(|(a, b)| slot + CALM_US > *a && slot - CALM_US < *b)
        };
        for (job, slot) in due_slots(w, shape, horizon) {
            if calm(slot) && !self.state().seen.contains_key(&(job.clone(), slot)) {
                let detail = format!(
                    "slot {} s after the start never reached a receiver",
                    (slot - EPOCH_US) / 1_000_000
                );
                let e = Effect::of_slot(&job, slot);
                self.report(w, "liveness", &e, Vec::new(), detail);
            }
        }
    }

    /// No effect of a paused job for a slot after its pause was heard and before its resume.
    fn pauses_held(&self, w: &World) {
        for (job, from, to) in &w.pauses {
            let to = to.unwrap_or(i64::MAX);
            let held =
                |e: &&Effect| &e.job == job && e.slot_us >= from + PAUSE_HEARD_US && e.slot_us < to;
            for e in w.effects.iter().filter(held) {
                let detail = format!(
                    "ran while paused (pause taken at {} s)",
                    (from - EPOCH_US) / 1_000_000
                );
                self.report(w, "pause_holds", e, vec![e.replica.clone()], detail);
            }
        }
    }

    pub fn found(&self) -> Vec<Violation> {
        self.state().found.clone()
    }

    /// Distinct (job, slot) pairs delivered.
    pub fn delivered(&self) -> usize {
        self.state().seen.len()
    }
}

impl Violations {
    /// At settle: the fleet's history and ledger (`runs`, each job's merged history) agree with
    /// what the receivers saw, slot by slot over `horizon` (true time, µs).
    pub fn ledger_agrees(
        &self,
        w: &World,
        runs: &BTreeMap<String, Option<Vec<RunRecord>>>,
        horizon: (i64, i64),
    ) {
        for (job, runs) in runs {
            let Some(runs) = runs else {
                let e = Effect::of_slot(job, horizon.1);
                let detail = "no majority answered the history read at settle".to_owned();
                self.report(w, "ledger_fate_agrees", &e, Vec::new(), detail);
                continue;
            };
            for (slot_us, entries) in crate::ledger::entries(runs, horizon) {
                let arrived = self.runs_that_arrived(job, slot_us);
                let emptied: std::collections::BTreeSet<usize> = (w.emptied.iter())
                    .filter(|(_, at)| *at > slot_us)
                    .map(|(node, _)| *node)
                    .collect();
                let kept = emptied.len() < w.nodes.len() / 2 + 1;
                let Some((invariant, detail)) =
                    crate::ledger::disagreement(&entries, &arrived, kept)
                else {
                    continue;
                };
                let replicas = arrived.iter().map(|(_, r)| r.clone()).collect();
                self.report(
                    w,
                    invariant,
                    &Effect::of_slot(job, slot_us),
                    replicas,
                    detail,
                );
            }
        }
    }

    /// At settle: every slot that reached receivers from two runs under one fence (a second
    /// run, beyond the assumptions) was reported by the fleet as a duplicate: the race for its
    /// `duplicate` key was won, so the key is on a majority of the nodes (a node emptied after
    /// the second run's send counts as holding it). The race is run by a winner that saw another's token
    /// (`Lease::contested`) and found the other run beside its record.
    pub fn duplicates_reported(&self, w: &World) {
        let twice: Vec<(String, i64)> = (self.state().seen.iter())
            .filter(|(_, arrivals)| runs_of(arrivals) > 1)
            .filter(|(_, arrivals)| arrivals.iter().all(|(f, _, _)| *f == arrivals[0].0))
            .map(|(slot, _)| slot.clone())
            .collect();
        for (job, slot_us) in twice {
            let key = format!("sim:{job}:{}:duplicate", slot_us / 1000);
            let last_sent = (w.effects.iter())
                .filter(|e| e.job == job && e.slot_us == slot_us)
                .map(|e| e.at_us)
                .max()
                .unwrap_or(slot_us);
            let holding = (w.nodes.iter().enumerate())
                .filter(|(i, node)| {
                    let emptied = (w.emptied.iter()).any(|(n, at)| n == i && *at > last_sent);
                    let now = node.clock_us(w.now_us());
                    emptied || node.model.peek(key.as_bytes(), now).is_some()
                })
                .count();
            if holding < w.nodes.len() / 2 + 1 {
                let detail = format!("ran twice under one fence, {key} on {holding} node(s)");
                let e = Effect::of_slot(&job, slot_us);
                self.report(w, "duplicate_reported", &e, Vec::new(), detail);
            }
        }
    }

    /// The distinct (fence, replica) runs of `job`'s slot `slot_us` that reached a receiver.
    fn runs_that_arrived(&self, job: &str, slot_us: i64) -> Vec<(i64, String)> {
        let state = self.state();
        let arrivals = state.seen.get(&(job.to_owned(), slot_us));
        let runs: std::collections::BTreeSet<(i64, String)> = (arrivals.into_iter().flatten())
            .map(|(f, r, _)| (*f, r.clone()))
            .collect();
        runs.into_iter().collect()
    }

    /// Every membership heartbeat on the nodes is scored on the fleet's time: no member's
    /// expiry further ahead than its TTL plus the allowed skew (a score from a local clock
    /// would keep a dead replica ranked, or trim the living).
    pub fn heartbeats_on_fleet_time(&self, w: &World, max_skew_ms: u64) {
        let ttl_ms = slotcron::unstable::fleet::membership::MEMBER_TTL.as_millis() as i64;
        let fleet_ms = (w.now_us() + w.fleet_offset_us()) / 1000;
        let bound = fleet_ms + ttl_ms + max_skew_ms as i64;
        for (i, node) in w.nodes.iter().enumerate().filter(|(_, n)| n.up) {
            for (member, score) in members(&node.model, node.clock_us(w.now_us())) {
                if score as i64 > bound {
                    let e = Effect::of_slot("", 0);
                    let detail = format!(
                        "n{i} holds member {member} expiring at {score} ms, {} ms past the fleet's time",
                        score as i64 - fleet_ms
                    );
                    self.report(w, "heartbeats_on_fleet_time", &e, vec![member], detail);
                }
            }
        }
    }

    /// A replica told to stop that had not exited within its longest timeout.
    pub fn stuck(&self, w: &World, replica: &str) {
        let e = Effect {
            job: String::new(),
            slot_us: 0,
            fence: 0,
            key: String::new(),
            replica: replica.to_owned(),
            at_us: w.now_us(),
        };
        let detail = "told to stop (SIGTERM), still running after its longest timeout".to_owned();
        self.report(w, "exits_on_sigterm", &e, vec![replica.to_owned()], detail);
    }
}
