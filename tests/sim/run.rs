//! One simulated run: a seed, a profile and its fault schedule, on a current-thread tokio
//! runtime with the clock paused (it jumps to the next timer whenever every task waits), the
//! code's randomness seeded from the same seed. Same plan, same trace.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::fleet::{self, JobSpec, Shape};
use crate::invariants::{Violation, Violations};
use crate::nemesis::{self, PROFILES, Target, Timed};
use crate::world::Shared;

/// Start-up: slots before this (s) are not judged for liveness (the fleet clock is measured,
/// the membership read, first).
const WARM_UP_S: u64 = 15;
/// The settle period (s): the horizon's last slots are judged after it.
const SETTLE_S: u64 = 20;
/// A replica told to stop (SIGTERM) exits within its longest timeout: the job timeout (5 s)
/// and the node timeouts of its last writes, with margin.
pub const EXIT_WITHIN: Duration = Duration::from_secs(30);

/// A run's plan: what a case file holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Plan {
    pub name: String,
    pub seed: u64,
    pub profile: String,
    pub inside: bool,
    pub replicas: usize,
    pub nodes: usize,
    pub jobs: usize,
    pub max_skew_ms: u64,
    pub horizon_s: u64,
    /// The jobs, when not `jobs` jobs every second (a named case's own).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub job_specs: Vec<JobSpec>,
    /// `[scheduler] candidates` when not the default (`"all"`: every replica races every slot
    /// at once, so their races meet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidates: Option<String>,
    /// A bound on lateness (ms from the slot to its receiver, on the fleet's time) that every
    /// effect must keep (`on_time`): for a case whose latencies are known and whose races
    /// should each be decided in a couple of attempts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_time_ms: Option<u64>,
    /// Checks that no run of a job reaches a receiver while a run of an earlier slot of that
    /// job is still in flight (`one_run_at_a_time`: the jobs' default `overlap = "skip"`), for
    /// a case whose every run ends in an effect (a run that gave up would stay in flight).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub one_run_at_a_time: bool,
    /// The new version's jobs, for a rolling update (`Fault::Rollout`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rolled_out: Vec<JobSpec>,
    #[serde(default, rename = "fault")]
    pub faults: Vec<Timed>,
}

impl Plan {
    /// The seeded plan of `seed`: its profile picked by the seed, its faults by the nemesis.
    pub fn seeded(seed: u64, jobs: usize, horizon_s: u64) -> Plan {
        let (profile, inside) = PROFILES[(seed % PROFILES.len() as u64) as usize];
        let mut plan = Plan {
            name: format!("seed-{seed}"),
            seed,
            profile: profile.to_owned(),
            inside,
            replicas: 3,
            nodes: 3,
            jobs,
            max_skew_ms: 2000,
            horizon_s,
            job_specs: Vec::new(),
            candidates: None,
            on_time_ms: None,
            one_run_at_a_time: false,
            rolled_out: Vec::new(),
            faults: Vec::new(),
        };
        plan.faults = nemesis::schedule(profile, seed, &plan.shape(), horizon_s);
        plan
    }

    pub fn shape(&self) -> Shape {
        let jobs = match self.job_specs.is_empty() {
            true => fleet::every_second(self.jobs),
            false => self.job_specs.clone(),
        };
        Shape {
            replicas: self.replicas,
            nodes: self.nodes,
            jobs,
            rolled_out: self.rolled_out.clone(),
            candidates: self.candidates.clone(),
            max_skew_ms: self.max_skew_ms,
            catch_up: !matches!(self.profile.as_str(), "calm" | "nodes" | "network"),
        }
    }
}

/// What a run came to.
#[derive(Debug)]
pub struct Outcome {
    pub trace_hash: u64,
    pub slots: usize,
    pub faults: u64,
    pub events: u64,
    pub violations: Vec<Violation>,
}

/// Runs `plan` on a runtime of its own, on this thread.
pub fn run(plan: &Plan) -> Outcome {
    slotcron::unstable::seed::seed_this_thread(plan.seed);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("a runtime");
    let outcome = runtime.block_on(simulate(plan));
    drop(runtime);
    slotcron::unstable::seed::unseed_this_thread();
    outcome
}

async fn simulate(plan: &Plan) -> Outcome {
    let world = Shared::new(plan.nodes);
    let violations = Violations::new(plan.inside)
        .on_time(plan.on_time_ms)
        .one_run_at_a_time(plan.one_run_at_a_time);
    let shape = plan.shape();
    let replicas = Arc::new(Mutex::new(BTreeMap::new()));
    for r in 0..plan.replicas {
        let running = fleet::start(&world, &shape, &format!("r{r}"), 0, &violations);
        replicas.lock().unwrap().insert(r, running);
    }
    let target = Target {
        world: world.clone(),
        shape: shape.clone(),
        replicas: replicas.clone(),
        violations: violations.clone(),
    };
    let faults = nemesis::play(&target, &plan.faults);
    let start = world.lock().start;
    tokio::time::sleep_until(start + Duration::from_secs(plan.horizon_s)).await;
    for fault in faults {
        let _ = fault.await;
    }
    violations.heartbeats_on_fleet_time(&world.lock(), plan.max_skew_ms);
    stop_all(&world, &replicas, &violations).await;
    let runs = crate::ledger::read(&world, &shape).await;
    let w = world.lock();
    let from = crate::world::EPOCH_US + WARM_UP_S as i64 * 1_000_000;
    let to = crate::world::EPOCH_US + (plan.horizon_s - SETTLE_S) as i64 * 1_000_000;
    violations.at_end(&w, &shape, (from, to));
    violations.ledger_agrees(&w, &runs, (from, to));
    violations.duplicates_reported(&w);
    w.write_dump();
    Outcome {
        trace_hash: w.trace_hash(),
        slots: violations.delivered(),
        faults: w.faults,
        events: w.events,
        violations: violations.found(),
    }
}

/// SIGTERM to every replica; each must exit within [`EXIT_WITHIN`].
async fn stop_all(
    world: &Shared,
    replicas: &Mutex<BTreeMap<usize, fleet::Running>>,
    v: &Violations,
) {
    let running: Vec<fleet::Running> = std::mem::take(&mut *replicas.lock().unwrap())
        .into_values()
        .collect();
    for r in &running {
        r.stop.cancel();
    }
    for r in running {
        let name = r.name.clone();
        if tokio::time::timeout(EXIT_WITHIN, r.task).await.is_err() {
            v.stuck(&world.lock(), &name);
        }
    }
}
