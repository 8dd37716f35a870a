//! The replicas: each one runs slotcron's own start-up and run path (`replica::run`) on a
//! configuration built from jobs.toml text, its nodes dialed through the simulated network, its
//! wall clock the world's true time plus its own offset, and its jobs' `http` actions sent
//! through the HTTP seam to the simulation's receivers (`receivers.rs`).

use std::sync::Arc;
use std::sync::atomic::AtomicI64;

use serde::{Deserialize, Serialize};
use slotcron::unstable::redis::Connector;
use tokio_util::sync::CancellationToken;

use crate::invariants::Violations;
use crate::net;
use crate::world::{Shared, SimClock};

/// One job of the simulated jobs.toml, an `http` action to its own receiver path.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobSpec {
    pub name: String,
    /// Six-field cron (seconds first).
    pub schedule: String,
    pub timeout_s: u64,
}

/// The seeded runs' jobs: `jobs` jobs `j<i>` every second, each with a 5 s timeout.
pub fn every_second(jobs: usize) -> Vec<JobSpec> {
    (0..jobs)
        .map(|j| JobSpec {
            name: format!("j{j}"),
            schedule: "* * * * * *".to_owned(),
            timeout_s: 5,
        })
        .collect()
}

/// What every replica runs: the fleet's shape.
#[derive(Debug, Clone)]
pub struct Shape {
    pub replicas: usize,
    pub nodes: usize,
    /// The jobs every replica starts with.
    pub jobs: Vec<JobSpec>,
    /// The jobs of the new version a rolling update (`Fault::Rollout`) restarts a replica
    /// with (and every later incarnation of it).
    pub rolled_out: Vec<JobSpec>,
    /// `[scheduler] candidates`, when not the default.
    pub candidates: Option<String>,
    /// The Redlock's `max_clock_skew` (ms): skews within it stay inside the assumptions.
    pub max_skew_ms: u64,
    /// The jobs take `catch_up`, which records each run's start at once (a write more per
    /// slot): on where replicas crash (and in the named cases), off where they do not.
    pub catch_up: bool,
}

/// jobs.toml of the simulated fleet: the jobs `jobs` on `nodes` nodes, each an `http` action,
/// with `catch_up` if the shape says (slots the whole fleet missed in the last 30 s run at
/// start).
pub fn jobs_toml(shape: &Shape, jobs: &[JobSpec]) -> String {
    let nodes: Vec<String> = (0..shape.nodes)
        .map(|i| format!("\"redis://n{i}:6379\""))
        .collect();
    let candidates = (shape.candidates.iter())
        .map(|c| format!("candidates = {c}\n"))
        .collect::<String>();
    let mut text = format!(
        "[scheduler]\nkey_prefix = \"sim\"\nmax_clock_skew = \"{}ms\"\n{candidates}\n[redis]\nnodes = [{}]\n",
        shape.max_skew_ms,
        nodes.join(", ")
    );
    let catch_up = match shape.catch_up {
        true => "catch_up = \"30s\"\ncatch_up_policy = \"all\"\n",
        false => "",
    };
    for JobSpec {
        name,
        schedule,
        timeout_s,
    } in jobs
    {
        text.push_str(&format!(
            "\n[[job]]\nname = \"{name}\"\nschedule = \"{schedule}\"\ntimeout = \"{timeout_s}s\"\n\
             {catch_up}[job.action]\ntype = \"http\"\nurl = \"http://receiver.sim/{name}\"\n"
        ));
    }
    text
}

/// The parsed jobs of `jobs` (their schedules, as the replicas read them).
pub fn parsed(shape: &Shape, jobs: &[JobSpec]) -> Vec<Arc<slotcron::unstable::config::Job>> {
    let env: std::collections::HashMap<String, String> = Default::default();
    let path = std::path::Path::new("sim.toml");
    (slotcron::unstable::config::parse(path, &jobs_toml(shape, jobs), &env))
        .expect("sim config")
        .jobs
}

/// A running replica incarnation.
pub struct Running {
    pub name: String,
    pub stop: CancellationToken,
    pub task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

/// Starts incarnation `incarnation` of replica `name`.
pub fn start(
    world: &Shared,
    shape: &Shape,
    name: &str,
    incarnation: u64,
    v: &Violations,
) -> Running {
    let (skew, jobs) = {
        let mut w = world.lock();
        w.incarnation.insert(name.to_owned(), incarnation);
        let jobs = match w.rolled.contains_key(name) {
            true => &shape.rolled_out,
            false => &shape.jobs,
        };
        w.event(|| format!("start {name} #{incarnation}"));
        let skew = (w.replica_skew.entry(name.to_owned()))
            .or_insert_with(|| Arc::new(AtomicI64::new(0)))
            .clone();
        (skew, jobs)
    };
    let env: std::collections::HashMap<String, String> = Default::default();
    let path = std::path::Path::new("sim.toml");
    let mut config =
        slotcron::unstable::config::parse(path, &jobs_toml(shape, jobs), &env).expect("sim config");
    let dialer = net::dialer(world, name, incarnation);
    let redis = config.redis.as_mut().expect("[redis]");
    redis.connector = Connector::Dial(dialer);
    redis.egress = crate::receivers::egress(world, name, incarnation, v);
    let clock = Arc::new(SimClock {
        start: world.lock().start,
        skew_us: skew,
    });
    let stop = CancellationToken::new();
    let task = tokio::spawn(slotcron::unstable::replica::run(
        config,
        name.to_owned(),
        clock,
        stop.clone(),
    ));
    Running {
        name: name.to_owned(),
        stop,
        task,
    }
}
