//! The replicas: each one runs slotcron's own start-up and run path (`replica::run`) on a
//! configuration built from jobs.toml text, its nodes dialed through the simulated network, its
//! wall clock the world's true time plus its own offset, and its jobs' `http` actions sent
//! through the HTTP seam to the simulation's receivers (`receivers.rs`).

use std::sync::atomic::AtomicI64;
use std::sync::Arc;

use slotcron::unstable::redis::Connector;
use tokio_util::sync::CancellationToken;

use crate::invariants::Violations;
use crate::net;
use crate::world::{Shared, SimClock};

/// What every replica runs: the fleet's shape.
#[derive(Debug, Clone)]
pub struct Shape {
    pub replicas: usize,
    pub nodes: usize,
    pub jobs: usize,
    /// The Redlock's `max_clock_skew` (ms): skews within it stay inside the assumptions.
    pub max_skew_ms: u64,
    /// The jobs take `catch_up`, which records each run's start at once (a write more per
    /// slot): on where replicas crash (and in the named cases), off where they do not.
    pub catch_up: bool,
}

/// jobs.toml of the simulated fleet: `jobs` jobs every second on `nodes` nodes, each an `http`
/// action, with `catch_up` if the shape says (slots the whole fleet missed in the last 30 s run
/// at start).
pub fn jobs_toml(shape: &Shape) -> String {
    let nodes: Vec<String> = (0..shape.nodes)
        .map(|i| format!("\"redis://n{i}:6379\""))
        .collect();
    let mut text = format!(
        "[scheduler]\nkey_prefix = \"sim\"\nmax_clock_skew = \"{}ms\"\n\n[redis]\nnodes = [{}]\n",
        shape.max_skew_ms,
        nodes.join(", ")
    );
    let catch_up = match shape.catch_up {
        true => "catch_up = \"30s\"\ncatch_up_policy = \"all\"\n",
        false => "",
    };
    for j in 0..shape.jobs {
        text.push_str(&format!(
            "\n[[job]]\nname = \"j{j}\"\nschedule = \"* * * * * *\"\ntimeout = \"5s\"\n{catch_up}\
             [job.action]\ntype = \"http\"\nurl = \"http://receiver.sim/j{j}\"\n"
        ));
    }
    text
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
    let skew = {
        let mut w = world.lock();
        w.incarnation.insert(name.to_owned(), incarnation);
        w.event(|| format!("start {name} #{incarnation}"));
        (w.replica_skew.entry(name.to_owned()))
            .or_insert_with(|| Arc::new(AtomicI64::new(0)))
            .clone()
    };
    let env: std::collections::HashMap<String, String> = Default::default();
    let path = std::path::Path::new("sim.toml");
    let mut config =
        slotcron::unstable::config::parse(path, &jobs_toml(shape), &env).expect("sim config");
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
