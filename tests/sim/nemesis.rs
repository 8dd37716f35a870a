//! Faults: the seeded nemesis of each profile, and the explicit schedules of case files. Each
//! profile says whether it stays inside the Redlock assumptions the README states (at most a
//! minority of nodes lose keys within a key's life, clocks within `max_clock_skew`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::fleet::{self, Running, Shape};
use crate::invariants::Violations;
use crate::receivers::Answering;
use crate::world::Shared;

/// One fault.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Fault {
    /// A node killed; back after `down_s`, empty (no persistence) or with its data (AOF).
    NodeKill {
        node: usize,
        down_s: f64,
        empty: bool,
    },
    /// A node that accepts connections and answers nothing for `for_s`.
    NodeHang { node: usize, for_s: f64 },
    /// A node's clock stepped by `step_ms`.
    NodeClock { node: usize, step_ms: i64 },
    /// A node's clock running `ppm` millionths fast from now on (Redlock's drift allowance is
    /// 1 % of a key's TTL: up to 10000 stays inside the assumptions).
    NodeDrift { node: usize, ppm: i64 },
    /// Every reply of `node` to `replica` (all replicas: none) `ms` late for `for_s`.
    Delay {
        replica: Option<usize>,
        node: usize,
        ms: u64,
        for_s: f64,
    },
    /// The link from `replica` to `node` `ms` long each way from now on: where the replica
    /// stands, not a fault (liveness still judges the slots around it).
    Latency {
        replica: usize,
        node: usize,
        ms: u64,
    },
    /// `replica` cut from `node` (connections reset, dials refused) for `for_s`.
    Cut {
        replica: usize,
        node: usize,
        for_s: f64,
    },
    /// A one-way cut: `replica`'s requests reach `node` and apply, its replies never come back
    /// (each connection falls silent at its first lost reply), for `for_s`; then every
    /// connection of the node is reset, as a stalled TCP stream ends.
    OneWay {
        replica: usize,
        node: usize,
        for_s: f64,
    },
    /// The next `count` replies of `node` lost after their command applied (connection reset).
    LoseReplies { node: usize, count: u32 },
    /// Every connection of `node` reset (subscriptions end).
    ResetNode { node: usize },
    /// A replica killed (SIGKILL: it sends nothing more); a new incarnation after `down_s`.
    ReplicaCrash { replica: usize, down_s: f64 },
    /// A rolling update's step: `replica` told to stop (SIGTERM), awaited, and started again
    /// `down_s` later with the new version of the config (`Shape::rolled_out`).
    Rollout { replica: usize, down_s: f64 },
    /// A replica's wall clock stepped by `step_ms`.
    ReplicaClock { replica: usize, step_ms: i64 },
    /// Every receiver refuses connections for `for_s`.
    ReceiversRefuse { for_s: f64 },
    /// `replica`'s egress broken (its receivers refuse it) for `for_s`: its wins are handed off.
    Egress { replica: usize, for_s: f64 },
    /// Every receiver answers `status` (a 5xx, or 429 with `Retry-After`; 0: a black hole that
    /// answers no connect) for `for_s`.
    ReceiversAnswer { status: u16, for_s: f64 },
    /// Every receiver answers 429 asking for a pause of `retry_after_s` (a rate limit's
    /// window, a maintenance) for `for_s`.
    ReceiversBusy { retry_after_s: f64, for_s: f64 },
    /// The next `count` sends are ambiguous: the receiver acts, then the answer is cut off.
    Ambiguous { count: u32 },
    /// The operator pauses job `j<job>` (`slotcron pause`, through the fleet's control path on
    /// the nodes) from a machine whose clock is `clock_off_s` off, and resumes it after `for_s`.
    Pause {
        job: usize,
        for_s: f64,
        clock_off_s: i64,
    },
}

/// A fault at `at_s` seconds of true time into the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Timed {
    pub at_s: f64,
    #[serde(flatten)]
    pub fault: Fault,
}

/// The profiles, by name, and whether each stays inside the assumptions.
pub const PROFILES: [(&str, bool); 6] = [
    ("calm", true),
    ("nodes", true),
    ("network", true),
    ("replicas", true),
    ("mixed", true),
    ("beyond", false),
];

/// The seeded schedule of `profile` over `horizon_s` seconds.
pub fn schedule(profile: &str, seed: u64, shape: &Shape, horizon_s: u64) -> Vec<Timed> {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed_fa17);
    let mut out = Vec::new();
    // Faults begin after start-up, and end a settle period before the horizon.
    let (first, last) = (20.0, horizon_s as f64 - 30.0);
    let mut at = first;
    while at < last {
        at += rng.random_range(8.0..25.0);
        if at >= last {
            break;
        }
        let kind = match profile {
            "calm" => return out,
            "mixed" => ["nodes", "network", "replicas"][rng.random_range(0..3)],
            other => other,
        };
        if let Some(fault) = one(kind, &mut rng, shape) {
            out.push(Timed {
                at_s: (at * 1000.0).round() / 1000.0,
                fault,
            });
        }
    }
    out
}

/// One fault of kind `kind`.
fn one(kind: &str, rng: &mut StdRng, shape: &Shape) -> Option<Fault> {
    let node = rng.random_range(0..shape.nodes);
    let replica = rng.random_range(0..shape.replicas);
    let skew = shape.max_skew_ms as i64 / 2;
    let pick = match kind {
        "replicas" => rng.random_range(0..6),
        _ => rng.random_range(0..4),
    };
    Some(match (kind, pick) {
        ("nodes", 0) => Fault::NodeKill {
            node,
            down_s: rng.random_range(1.0..6.0),
            empty: false,
        },
        // One node empty at a time, and faults 8 s or more apart: a minority loses keys.
        ("nodes", 1) => Fault::NodeKill {
            node,
            down_s: rng.random_range(1.0..6.0),
            empty: true,
        },
        ("nodes", 2) => Fault::NodeHang {
            node,
            for_s: rng.random_range(1.0..6.0),
        },
        ("nodes", _) => Fault::NodeClock {
            node,
            step_ms: rng.random_range(-skew..=skew),
        },
        ("network", 0) => Fault::Delay {
            replica: Some(replica),
            node,
            ms: rng.random_range(20..400),
            for_s: rng.random_range(1.0..5.0),
        },
        ("network", 1) => Fault::Cut {
            replica,
            node,
            for_s: rng.random_range(1.0..5.0),
        },
        ("network", 2) => Fault::LoseReplies {
            node,
            count: rng.random_range(1..4),
        },
        ("network", _) => Fault::ResetNode { node },
        ("replicas", 0 | 1) => Fault::ReplicaCrash {
            replica,
            down_s: rng.random_range(1.0..8.0),
        },
        ("replicas", 2) => Fault::ReplicaClock {
            replica,
            step_ms: rng.random_range(-skew..=skew),
        },
        ("replicas", 3) => Fault::ReceiversRefuse {
            for_s: rng.random_range(0.5..3.0),
        },
        // The winner's egress broken: its slots are handed off to another candidate.
        ("replicas", 4) => Fault::Egress {
            replica,
            for_s: rng.random_range(1.0..8.0),
        },
        ("replicas", _) => Fault::ReceiversAnswer {
            status: [500, 503, 429, 0][rng.random_range(0..4)],
            for_s: rng.random_range(0.5..3.0),
        },
        ("beyond", 0 | 1) => Fault::NodeKill {
            node: 0,
            down_s: 1.0,
            empty: true,
        },
        ("beyond", 2) => Fault::NodeKill {
            node: 1,
            down_s: 1.0,
            empty: true,
        },
        ("beyond", _) => Fault::ReplicaClock {
            replica,
            step_ms: 3 * shape.max_skew_ms as i64,
        },
        _ => return None,
    })
}

/// What the nemesis acts on.
#[derive(Clone)]
pub struct Target {
    pub world: Shared,
    pub shape: Shape,
    pub replicas: Arc<Mutex<BTreeMap<usize, Running>>>,
    pub violations: Violations,
}

/// Plays `faults` (each in a task of its own, so they overlap as scheduled).
pub fn play(target: &Target, faults: &[Timed]) -> Vec<tokio::task::JoinHandle<()>> {
    faults
        .iter()
        .cloned()
        .map(|timed| tokio::spawn(apply(target.clone(), timed)))
        .collect()
}

async fn apply(t: Target, timed: Timed) {
    let start = t.world.lock().start;
    tokio::time::sleep_until(start + Duration::from_secs_f64(timed.at_s)).await;
    let lasts = lasting(&timed.fault);
    {
        let mut w = t.world.lock();
        let now = w.now_us();
        match timed.fault {
            // One replica's broken egress is no fault of the slot's: the handoff delivers it,
            // so its slots stay judged for liveness; a rolling update's restart neither (the
            // others run the slots meanwhile); a link's latency is where a replica stands.
            Fault::Egress { .. } | Fault::Rollout { .. } | Fault::Latency { .. } => w.faults += 1,
            _ => w.fault(now, now + (lasts * 1e6) as i64),
        }
        let fault = timed.fault.clone();
        w.event(|| format!("fault {fault:?}"));
    }
    if let Fault::Pause { job, for_s, .. } = timed.fault {
        return crate::operator::pause_for(&t.world, &t.shape, job, for_s).await;
    }
    if let Fault::Rollout { replica, down_s } = timed.fault {
        return roll_out(&t, replica, down_s).await;
    }
    begin(&t, &timed.fault);
    if lasts > 0.0 {
        tokio::time::sleep(Duration::from_secs_f64(lasts)).await;
        end(&t, &timed.fault);
    }
}

/// How long a fault lasts (0: at once).
/// One step of a rolling update: `replica` stopped as a deployment stops it (SIGTERM, its runs
/// finished, awaited within its longest timeout), then, `down_s` later, started with the new
/// version of the config.
async fn roll_out(t: &Target, replica: usize, down_s: f64) {
    let name = replica_name(replica);
    let old = t.replicas.lock().unwrap().remove(&replica);
    let stopped = t.world.lock().now_us();
    if let Some(old) = old {
        old.stop.cancel();
        if tokio::time::timeout(crate::run::EXIT_WITHIN, old.task)
            .await
            .is_err()
        {
            t.violations.stuck(&t.world.lock(), &name);
        }
    }
    tokio::time::sleep(Duration::from_secs_f64(down_s)).await;
    let incarnation = {
        let mut w = t.world.lock();
        let started = w.now_us();
        w.rolled.insert(name.clone(), (stopped, started));
        w.incarnation.get(&name).copied().unwrap_or_default() + 1
    };
    let running = fleet::start(&t.world, &t.shape, &name, incarnation, &t.violations);
    t.replicas.lock().unwrap().insert(replica, running);
}

fn lasting(fault: &Fault) -> f64 {
    match fault {
        Fault::NodeKill { down_s, .. } | Fault::ReplicaCrash { down_s, .. } => *down_s,
        Fault::NodeHang { for_s, .. }
        | Fault::Delay { for_s, .. }
        | Fault::Cut { for_s, .. }
        | Fault::OneWay { for_s, .. }
        | Fault::ReceiversRefuse { for_s }
        | Fault::ReceiversAnswer { for_s, .. }
        | Fault::ReceiversBusy { for_s, .. }
        | Fault::Egress { for_s, .. }
        | Fault::Pause { for_s, .. } => *for_s,
        _ => 0.0,
    }
}

fn replica_name(i: usize) -> String {
    format!("r{i}")
}

fn begin(t: &Target, fault: &Fault) {
    let mut w = t.world.lock();
    match fault {
        Fault::NodeKill { node, .. } => {
            w.nodes[*node].up = false;
            w.reset_node(*node);
        }
        Fault::NodeHang { node, .. } => w.nodes[*node].hung = true,
        Fault::NodeClock { node, step_ms } => w.nodes[*node].skew_us += step_ms * 1000,
        Fault::NodeDrift { node, ppm } => {
            let now = w.now_us();
            w.nodes[*node].drift(now, *ppm);
        }
        Fault::Delay {
            replica, node, ms, ..
        } => {
            for r in links_of(*replica, &t.shape) {
                w.links.entry((r, *node)).or_default().delay_us = ms * 1000;
            }
        }
        Fault::Latency { replica, node, ms } => {
            let link = (replica_name(*replica), *node);
            w.links.entry(link).or_default().lag_us = ms * 1000;
        }
        Fault::Cut { replica, node, .. } => {
            w.links
                .entry((replica_name(*replica), *node))
                .or_default()
                .cut = true;
            w.reset_node(*node);
        }
        Fault::OneWay { replica, node, .. } => {
            let link = (replica_name(*replica), *node);
            w.links.entry(link).or_default().mute = true;
        }
        Fault::LoseReplies { node, count } => w.nodes[*node].lose_replies += count,
        Fault::ResetNode { node } => w.reset_node(*node),
        Fault::ReplicaCrash { replica, .. } => {
            let name = replica_name(*replica);
            *w.incarnation.entry(name).or_default() += 1_000_000;
            drop(w);
            if let Some(running) = t.replicas.lock().unwrap().get(replica) {
                running.stop.cancel();
            }
        }
        Fault::ReplicaClock { replica, step_ms } => {
            if let Some(skew) = w.replica_skew.get(&replica_name(*replica)) {
                skew.fetch_add(step_ms * 1000, std::sync::atomic::Ordering::Relaxed);
            }
        }
        Fault::ReceiversRefuse { .. } => w.receivers_refuse = true,
        Fault::ReceiversAnswer { status, .. } => {
            w.answering = match status {
                0 => Answering::BlackHole,
                _ => Answering::Status(*status),
            }
        }
        Fault::Egress { replica, .. } => {
            w.egress_broken.insert(replica_name(*replica));
        }
        Fault::ReceiversBusy { retry_after_s, .. } => {
            w.answering = Answering::Busy(Duration::from_secs_f64(*retry_after_s));
        }
        Fault::Ambiguous { count } => w.ambiguous += count,
        Fault::Pause { .. } | Fault::Rollout { .. } => {}
    }
}

fn end(t: &Target, fault: &Fault) {
    let mut w = t.world.lock();
    match fault {
        Fault::NodeKill { node, empty, .. } => {
            if *empty {
                let now = w.now_us();
                w.emptied.push((*node, now));
            }
            let n = &mut w.nodes[*node];
            match empty {
                true => n.model = crate::model::Node::new(crate::model::Persistence::Aof),
                false => n.model.restart(),
            }
            n.up = true;
            n.wake.notify_waiters();
        }
        Fault::NodeHang { node, .. } => {
            w.nodes[*node].hung = false;
            w.nodes[*node].wake.notify_waiters();
        }
        Fault::Delay { replica, node, .. } => {
            for r in links_of(*replica, &t.shape) {
                w.links.entry((r, *node)).or_default().delay_us = 0;
            }
        }
        Fault::Cut { replica, node, .. } => {
            w.links
                .entry((replica_name(*replica), *node))
                .or_default()
                .cut = false;
        }
        Fault::OneWay { replica, node, .. } => {
            let link = (replica_name(*replica), *node);
            w.links.entry(link).or_default().mute = false;
            w.reset_node(*node);
        }
        Fault::ReplicaCrash { replica, .. } => {
            let name = replica_name(*replica);
            let incarnation = w.incarnation.get(&name).copied().unwrap_or_default() + 1;
            drop(w);
            let running = fleet::start(&t.world, &t.shape, &name, incarnation, &t.violations);
            t.replicas.lock().unwrap().insert(*replica, running);
        }
        Fault::ReceiversRefuse { .. } => w.receivers_refuse = false,
        Fault::ReceiversAnswer { .. } | Fault::ReceiversBusy { .. } => {
            w.answering = Answering::Accept
        }
        Fault::Egress { replica, .. } => {
            w.egress_broken.remove(&replica_name(*replica));
        }
        _ => {}
    }
}

fn links_of(replica: Option<usize>, shape: &Shape) -> Vec<String> {
    match replica {
        Some(r) => vec![replica_name(r)],
        None => (0..shape.replicas).map(replica_name).collect(),
    }
}
