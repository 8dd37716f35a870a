//! The replicas: each one runs slotcron's own start-up and run path (`replica::run`) on a
//! configuration built from jobs.toml text, its nodes dialed through the simulated network, its
//! wall clock the world's true time plus its own offset, and its jobs' actions swapped for the
//! simulation's receivers (`fn` actions that record what reached them).

use std::sync::atomic::AtomicI64;
use std::sync::Arc;

use slotcron::unstable::action::function::{FnAction, SlotContext};
use slotcron::unstable::action::Action;
use slotcron::unstable::redis::Connector;
use tokio_util::sync::CancellationToken;

use crate::invariants::Violations;
use crate::net;
use crate::world::{Effect, Shared, SimClock};

/// What every replica runs: the fleet's shape.
#[derive(Debug, Clone)]
pub struct Shape {
    pub replicas: usize,
    pub nodes: usize,
    pub jobs: usize,
    /// The Redlock's `max_clock_skew` (ms): skews within it stay inside the assumptions.
    pub max_skew_ms: u64,
}

/// jobs.toml of the simulated fleet: `jobs` jobs every second on `nodes` nodes.
pub fn jobs_toml(shape: &Shape) -> String {
    let nodes: Vec<String> = (0..shape.nodes)
        .map(|i| format!("\"redis://n{i}:6379\""))
        .collect();
    let mut text = format!(
        "[scheduler]\nkey_prefix = \"sim\"\nmax_clock_skew = \"{}ms\"\n\n[redis]\nnodes = [{}]\n",
        shape.max_skew_ms,
        nodes.join(", ")
    );
    for j in 0..shape.jobs {
        text.push_str(&format!(
            "\n[[job]]\nname = \"j{j}\"\nschedule = \"* * * * * *\"\ntimeout = \"5s\"\n\
             [job.action]\ntype = \"log\"\ncontent = \"x\"\n"
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
    config.redis.as_mut().expect("[redis]").connector = Connector::Dial(dialer);
    for job in &mut config.jobs {
        let job = Arc::get_mut(job).expect("a job of its own");
        job.action = Action::Fn(receiver(world, name, incarnation, v));
    }
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

/// The receiver of replica `name`'s incarnation `incarnation`: records each effect (a dead
/// incarnation sends nothing) and checks the invariants it can at once.
fn receiver(world: &Shared, name: &str, incarnation: u64, v: &Violations) -> FnAction {
    let (world, name, v) = (world.clone(), name.to_owned(), v.clone());
    FnAction::of(move |ctx: SlotContext| {
        let outcome = deliver(&world, &name, incarnation, &v, &ctx);
        async move { outcome }
    })
}

fn deliver(
    world: &Shared,
    name: &str,
    incarnation: u64,
    v: &Violations,
    ctx: &SlotContext,
) -> Result<(), String> {
    let mut w = world.lock();
    if !w.alive(name, incarnation) {
        return Err("a dead process sends nothing".to_owned());
    }
    if w.receivers_refuse || w.egress_broken.contains(name) {
        return Err("connection refused".to_owned());
    }
    let effect = Effect {
        job: ctx.job().to_owned(),
        slot_us: ctx.slot().timestamp_micros(),
        fence: ctx.fence(),
        replica: name.to_owned(),
        at_us: w.now_us(),
    };
    let stale = tokio::time::Instant::now() > ctx.deadline();
    w.event(|| {
        format!(
            "effect {} {} fence={} by {}",
            effect.job, effect.slot_us, effect.fence, effect.replica
        )
    });
    v.on_effect(&mut w, &effect, stale);
    w.effects.push(effect);
    if w.ambiguous > 0 {
        w.ambiguous -= 1;
        return Err("the answer was cut off after the receiver acted".to_owned());
    }
    Ok(())
}
