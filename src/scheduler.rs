//! The replica: one timeline that sleeps until the next instant a job is due and hands the jobs
//! due then to one race task, which races them as a batch. Every task is tracked; on shutdown
//! no new slot starts and in-flight slots finish (each within its job's timeout) before `run`
//! returns. A reload swaps the timeline for one built from the new file; slots already racing
//! or running finish on the old one.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::Context as _;
use chrono::{DateTime, Utc};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::action::http_client;
use crate::action::rate::Budgets;
use crate::config::{self, CatchUpPolicy, ClockMode, Config, Job};
use crate::fleet_clock::{self, FleetClock};
use crate::history::History;
use crate::lock::{LocalLock, Nodes, Redlock, SlotLock};
use crate::metrics::Metrics;
use crate::race::{Claim, RaceContext, RaceKind, Won};
use crate::schedule::{SharedClock, Slot};
use crate::status;

/// How long start-up waits for the first answer of each Redis node before going on without it.
const STARTUP_PING: Duration = Duration::from_secs(2);
/// Most missed slots a job catches up at start (`catch_up_policy = "all"`).
const MAX_CATCH_UP: usize = 1000;

/// What a replica keeps across reloads: its connections, history and metrics.
#[derive(Clone)]
pub struct Replica {
    pub name: String,
    pub lock: SlotLock,
    pub history: History,
    pub metrics: Arc<Metrics>,
    pub budgets: Budgets,
    pub client: reqwest::Client,
    pub clock: SharedClock,
    /// The prefix the replica started with: a new prefix in a reloaded file waits for a restart,
    /// since replicas reloading at different moments would otherwise race on different keys.
    pub key_prefix: String,
    /// The fleet clock and the nodes it reads, to measure again every minute.
    fleet: Option<(Arc<FleetClock>, Arc<Nodes>)>,
}

impl Replica {
    /// Opens the lock's connections (reporting each node) and builds the shared state.
    pub async fn connect(
        config: &Config,
        name: String,
        clock: SharedClock,
    ) -> anyhow::Result<Self> {
        let key_prefix = config.scheduler.key_prefix.clone();
        let metrics = Arc::new(Metrics::new());
        let Some(redis) = &config.redis else {
            return Ok(Replica {
                lock: SlotLock::Local(Arc::new(LocalLock::new(&name))),
                history: History::local(),
                budgets: Budgets::local(),
                metrics,
                client: http_client().context("building the HTTP client")?,
                clock,
                key_prefix,
                fleet: None,
                name,
            });
        };
        let lock = Redlock::new(&redis.nodes, &name, redis.lock.clone(), redis.ca.as_deref())
            .map_err(anyhow::Error::msg)
            .context("preparing Redis connections")?;
        let lock = Arc::new(lock);
        let nodes = lock.nodes().clone();
        report_nodes(&nodes, &name).await;
        let fleet = FleetClock::new(clock, config.scheduler.clock == ClockMode::Redis);
        fleet_clock::measure_and_report(
            &fleet,
            &nodes,
            &metrics,
            config.scheduler.max_clock_skew,
            &name,
        )
        .await;
        Ok(Replica {
            history: History::Redis {
                nodes: nodes.clone(),
                prefix: key_prefix.clone(),
            },
            budgets: Budgets::Redis {
                nodes: nodes.clone(),
                prefix: key_prefix.clone(),
            },
            lock: SlotLock::Redlock(lock),
            metrics,
            client: http_client().context("building the HTTP client")?,
            clock: fleet.clone(),
            key_prefix,
            fleet: Some((fleet, nodes)),
            name,
        })
    }

    /// The race context for one configuration.
    pub fn context(&self, config: &Config) -> RaceContext {
        RaceContext {
            replica: self.name.clone(),
            lock: self.lock.clone(),
            client: self.client.clone(),
            templates: config.templates.clone(),
            scrubber: config.scrubber.clone(),
            clock: self.clock.clone(),
            key_prefix: self.key_prefix.clone(),
            max_clock_skew: config.scheduler.max_clock_skew,
            history: self.history.clone(),
            metrics: self.metrics.clone(),
            budgets: self.budgets.clone(),
        }
    }
}

/// Builds the race context of one replica (lock connections included).
pub async fn race_context(
    config: &Config,
    replica: String,
    clock: SharedClock,
) -> anyhow::Result<RaceContext> {
    Ok(Replica::connect(config, replica, clock)
        .await?
        .context(config))
}

/// Runs the schedule of `config` as replica `replica` until `shutdown` is cancelled.
pub async fn run(
    config: Config,
    replica: String,
    clock: SharedClock,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    run_with_reload(config, replica, clock, shutdown, None).await
}

/// Like [`run`], reloading the file each time `reloads` receives (SIGHUP in the binary). An
/// invalid new file is logged and the running schedule is kept.
pub async fn run_with_reload(
    config: Config,
    replica: String,
    clock: SharedClock,
    shutdown: CancellationToken,
    reloads: Option<mpsc::Receiver<()>>,
) -> anyhow::Result<()> {
    for warning in &config.warnings {
        tracing::warn!(replica = %replica, "{warning}");
    }
    let replica = Replica::connect(&config, replica, clock).await?;
    run_replica(replica, config, shutdown, reloads).await
}

/// Runs the schedule on an already connected replica (tests reach its metrics and history).
pub async fn run_replica(
    replica: Replica,
    config: Config,
    shutdown: CancellationToken,
    reloads: Option<mpsc::Receiver<()>>,
) -> anyhow::Result<()> {
    let http = config.http;
    let current = Arc::new(RwLock::new(Arc::new(config)));
    let tracker = TaskTracker::new();
    if let Some(http) = http {
        let listener = tokio::net::TcpListener::bind(http.listen)
            .await
            .with_context(|| format!("binding the [http] listen address {}", http.listen))?;
        let state = status::State {
            replica: replica.clone(),
            config: current.clone(),
        };
        tracing::info!(replica = %replica.name, listen = %http.listen, "serving /healthz, /readyz, /metrics and the status page");
        tracker.spawn(status::serve(listener, state, shutdown.clone()));
    }
    if let Some((clock, nodes)) = &replica.fleet {
        tracker.spawn(fleet_clock::keep_measuring(
            clock.clone(),
            nodes.clone(),
            replica.metrics.clone(),
            config_skew(&current),
            replica.name.clone(),
            shutdown.clone(),
        ));
    }
    let mut reloads = reloads;
    let mut first = true;
    loop {
        let config = read(&current);
        let generation = shutdown.child_token();
        start_generation(&replica, &config, &tracker, &generation, first);
        first = false;
        let next = wait_for_reload(&shutdown, &mut reloads, &config).await;
        generation.cancel();
        match next {
            Some(new) => *current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(new),
            None => break,
        }
    }
    tracing::info!(replica = %replica.name, "shutting down: no new slots; waiting for running slots");
    tracker.close();
    tracker.wait().await;
    if let Some(nodes) = replica.lock.nodes() {
        nodes.settle().await;
    }
    tracing::info!(replica = %replica.name, "stopped");
    Ok(())
}

fn config_skew(current: &RwLock<Arc<Config>>) -> Duration {
    read(current).scheduler.max_clock_skew
}

fn read(current: &RwLock<Arc<Config>>) -> Arc<Config> {
    current.read().unwrap_or_else(|p| p.into_inner()).clone()
}

/// Starts the timeline of `config`'s jobs (and, on the first start, the catch-up of missed slots).
fn start_generation(
    replica: &Replica,
    config: &Config,
    tracker: &TaskTracker,
    generation: &CancellationToken,
    first: bool,
) {
    let ctx = Arc::new(replica.context(config));
    tracing::info!(replica = %ctx.replica, jobs = config.jobs.len(), lock = %ctx.lock.describe(),
        config = %config.path.display(), "slotcron started");
    for name in &config.disabled {
        tracing::info!(replica = %ctx.replica, job = %name, "job disabled (enabled = false)");
    }
    for job in &config.jobs {
        if first && job.catch_up.is_some() {
            tracker.spawn(catch_up(ctx.clone(), job.clone()));
        }
    }
    tracker.spawn(timeline(
        ctx,
        config.jobs.clone(),
        tracker.clone(),
        generation.clone(),
    ));
}

/// Waits for shutdown (`None`) or a reload that yields a valid file (`Some`).
async fn wait_for_reload(
    shutdown: &CancellationToken,
    reloads: &mut Option<mpsc::Receiver<()>>,
    old: &Config,
) -> Option<Config> {
    loop {
        let signal = async {
            match reloads {
                Some(rx) => rx.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = shutdown.cancelled() => return None,
            received = signal => {
                if received.is_none() {
                    *reloads = None;
                    continue;
                }
                match config::load(&old.path) {
                    Ok(new) => {
                        warn_about_restart_only_changes(old, &new);
                        tracing::info!(config = %new.path.display(), jobs = new.jobs.len(), "reloaded the configuration");
                        return Some(new);
                    }
                    Err(errors) => tracing::error!(error = %errors,
                        "reload rejected: the new file is invalid; the running schedule is kept"),
                }
            }
        }
    }
}

fn warn_about_restart_only_changes(old: &Config, new: &Config) {
    let nodes = |c: &Config| {
        c.redis
            .as_ref()
            .map(|r| r.nodes.iter().map(ToString::to_string).collect::<Vec<_>>())
    };
    if nodes(old) != nodes(new)
        || old.scheduler.key_prefix != new.scheduler.key_prefix
        || old.http != new.http
    {
        tracing::warn!("changes to [redis], [http] and key_prefix take effect at the next restart");
    }
}

/// Opens each node's connection and logs which answer; a node that is down is not fatal (it
/// starts suspect in the pool's view).
async fn report_nodes(nodes: &Nodes, replica: &str) {
    let pings = nodes
        .ask(
            |node| async move { node.ping_within(STARTUP_PING).await },
            |_| false,
        )
        .await;
    for (node, ping) in nodes.iter().zip(pings.answers()) {
        match ping {
            Some(Ok(())) => {
                tracing::info!(replica = %replica, node = %node.address(), "redis node up");
            }
            Some(Err(e)) => tracing::warn!(replica = %replica, node = %node.address(), error = %e,
                "redis node down at start; reconnecting in the background"),
            None => {}
        }
    }
}

/// The jobs' next slots, earliest first: what the timeline sleeps towards.
struct Timeline {
    jobs: Vec<Arc<Job>>,
    /// (next slot, index into `jobs`); jobs whose schedule has ended are not in it.
    due: BinaryHeap<Reverse<(Slot, usize)>>,
}

impl Timeline {
    fn new(jobs: Vec<Arc<Job>>, now: DateTime<Utc>, replica: &str) -> Self {
        let mut timeline = Timeline {
            jobs,
            due: BinaryHeap::new(),
        };
        for i in 0..timeline.jobs.len() {
            timeline.schedule(i, now, replica);
        }
        timeline
    }

    /// Queues job `i`'s first slot after `after`.
    fn schedule(&mut self, i: usize, after: DateTime<Utc>, replica: &str) {
        match self.jobs[i].schedule.next_after(after) {
            Some(slot) => self.due.push(Reverse((slot, i))),
            None => tracing::warn!(job = %self.jobs[i].name, replica = %replica,
                "the schedule has no further slot"),
        }
    }

    fn next(&self) -> Option<Slot> {
        self.due.peek().map(|Reverse((slot, _))| *slot)
    }

    /// Takes the jobs due at `slot`; each is queued again at its first slot after `after`.
    fn take_due(&mut self, slot: Slot, after: DateTime<Utc>, replica: &str) -> Vec<Arc<Job>> {
        let mut taken = Vec::new();
        while let Some(&Reverse((next, i))) = self.due.peek() {
            if next != slot {
                break;
            }
            self.due.pop();
            taken.push(i);
        }
        for &i in &taken {
            self.schedule(i, after, replica);
        }
        taken.into_iter().map(|i| self.jobs[i].clone()).collect()
    }
}

/// Sleeps until the next instant any job is due and starts one race for every job due then,
/// until shutdown. One timer for the whole schedule, and one batch per instant: a thousand
/// jobs on the same second cost each Redis node one request from this replica, not a
/// thousand (BENCHMARKS.md, scale).
async fn timeline(
    ctx: Arc<RaceContext>,
    jobs: Vec<Arc<Job>>,
    tracker: TaskTracker,
    shutdown: CancellationToken,
) {
    let mut timeline = Timeline::new(jobs, ctx.clock.now(), &ctx.replica);
    while let Some(slot) = timeline.next() {
        if !sleep_until_slot(&ctx.clock, slot, &shutdown).await {
            return;
        }
        // A replica that wakes late still races the slots inside the start window (the race
        // decides); slots older than that belonged to replicas that were awake and are skipped.
        let window = chrono::Duration::from_std(ctx.start_window()).unwrap_or_default();
        let after = slot.instant().max(ctx.clock.now() - window);
        let due = timeline.take_due(slot, after, &ctx.replica);
        tracker.spawn(race_instant(ctx.clone(), due, slot, tracker.clone()));
    }
}

/// Races the jobs due at `slot` as one batch; each win runs in a task of its own.
async fn race_instant(
    ctx: Arc<RaceContext>,
    jobs: Vec<Arc<Job>>,
    slot: Slot,
    tracker: TaskTracker,
) {
    for claim in ctx.claim_many(&jobs, slot, RaceKind::Scheduled).await {
        if let Claim::Won(won) = claim {
            tracker.spawn(run_won(ctx.clone(), won));
        }
    }
}

async fn run_won(ctx: Arc<RaceContext>, won: Won) {
    ctx.run(won).await;
}

/// Runs, once, the slots of `job` inside its catch-up window that have no run record: slots
/// the whole fleet missed (a rollout, a crash loop). They go through the same race, so
/// replicas starting together still run each once.
async fn catch_up(ctx: Arc<RaceContext>, job: Arc<Job>) {
    let Some(catch_up) = job.catch_up else { return };
    let now = ctx.clock.now();
    let from = now - chrono::Duration::from_std(catch_up.window).unwrap_or_default();
    let past: Vec<Slot> = job
        .schedule
        .upcoming(from, MAX_CATCH_UP)
        .into_iter()
        .take_while(|s| s.instant() <= now)
        .collect();
    if past.is_empty() {
        return;
    }
    let recorded = match ctx.history.read(&job.name, past.len() + 16).await {
        Ok(runs) => runs
            .into_iter()
            .map(|r| r.slot)
            .collect::<std::collections::HashSet<_>>(),
        Err(e) => {
            tracing::warn!(job = %job.name, replica = %ctx.replica, error = %e,
                "catch-up skipped: the run history cannot be read, so missed slots cannot be told apart");
            return;
        }
    };
    let mut missed: Vec<Slot> = past.into_iter().filter(|s| !recorded.contains(s)).collect();
    if catch_up.policy == CatchUpPolicy::Latest && missed.len() > 1 {
        missed.drain(..missed.len() - 1);
    }
    for slot in missed {
        tracing::info!(job = %job.name, %slot, replica = %ctx.replica, "catching up a missed slot");
        ctx.race(&job, slot, RaceKind::CatchUp).await;
    }
}

/// Sleeps until the wall clock reaches `slot`. False when shutdown came first.
///
/// The timer runs on the monotonic clock; if the wall clock was stepped back meanwhile the
/// remaining gap is slept again, so a slot never starts before its instant on this replica.
pub async fn sleep_until_slot(
    clock: &SharedClock,
    slot: Slot,
    shutdown: &CancellationToken,
) -> bool {
    loop {
        let Ok(wait) = (slot.instant() - clock.now()).to_std() else {
            return !shutdown.is_cancelled();
        };
        if wait.is_zero() {
            return !shutdown.is_cancelled();
        }
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = shutdown.cancelled() => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::path::Path;

    use super::*;

    fn jobs(schedules: &[(&str, &str)]) -> Vec<Arc<Job>> {
        let text: String = schedules
            .iter()
            .map(|(name, cron)| {
                format!(
                    "[[job]]\nname = \"{name}\"\nschedule = \"{cron}\"\n\
                     [job.action]\ntype = \"log\"\ncontent = \"x\"\n"
                )
            })
            .collect();
        config::parse(Path::new("t.toml"), &text, &HashMap::new())
            .unwrap()
            .jobs
    }

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    fn names(jobs: &[Arc<Job>]) -> Vec<&str> {
        jobs.iter().map(|j| j.name.as_str()).collect()
    }

    #[test]
    fn jobs_due_at_the_same_instant_are_taken_together() {
        let jobs = jobs(&[
            ("every", "* * * * * *"),
            ("even", "*/2 * * * * *"),
            ("odd", "1-59/2 * * * * *"),
        ]);
        let mut timeline = Timeline::new(jobs, at("2026-01-01T10:00:00.500Z"), "r");
        let first = timeline.next().unwrap();
        assert_eq!(first.instant(), at("2026-01-01T10:00:01Z"));
        let due = timeline.take_due(first, first.instant(), "r");
        assert_eq!(names(&due), ["every", "odd"]);
        let second = timeline.next().unwrap();
        assert_eq!(second.instant(), at("2026-01-01T10:00:02Z"));
        let due = timeline.take_due(second, second.instant(), "r");
        let mut due = names(&due);
        due.sort_unstable();
        assert_eq!(due, ["even", "every"]);
    }

    #[test]
    fn a_late_wake_queues_each_job_after_the_given_instant() {
        let jobs = jobs(&[("every", "* * * * * *")]);
        let mut timeline = Timeline::new(jobs, at("2026-01-01T10:00:00Z"), "r");
        let slot = timeline.next().unwrap();
        // Woke 10 s late: the slots of the missed seconds are not queued.
        timeline.take_due(slot, at("2026-01-01T10:00:11Z"), "r");
        assert_eq!(
            timeline.next().unwrap().instant(),
            at("2026-01-01T10:00:12Z")
        );
    }
}
