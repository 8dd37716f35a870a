//! The replica: one timeline that sleeps until the next instant a job is due and hands the jobs
//! due then to one race task, which races them as a batch. Every task is tracked; on shutdown
//! no new slot starts and in-flight slots finish (each within its job's timeout) before `run`
//! returns. A reload swaps the timeline for one built from the new file; slots already racing
//! or running finish on the old one. With `clock = "local"` a step of the wall clock rebuilds
//! the timeline from the stepped time.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::Context as _;
use chrono::{DateTime, Utc};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::action::http_client;
use crate::action::rate::Budgets;
use crate::config::{self, CatchUpPolicy, ClockMode, Config, Job, MAX_CATCH_UP_ALL};
use crate::control::{covered, paused_intervals, Control, PausedSpan};
use crate::fleet_clock::{self, FleetClock};
use crate::handoff::{HandoffRequest, Handoffs, Seen};
use crate::history::{History, RunRecord};
use crate::liveness::Liveness;
use crate::lock::{LocalLock, Nodes, Redlock, SlotLock};
use crate::membership::{self, Candidates, Membership};
use crate::metrics::Metrics;
use crate::pubsub::Heard;
use crate::race::{Claim, RaceContext, RaceKind, Won, MIN_START_WINDOW};
use crate::schedule::{Schedule, SharedClock, Slot};
use crate::status;
use crate::watermark;

/// How far back a starting replica looks for slots no replica ran.
const MISSED_LOOKBACK: Duration = Duration::from_secs(3600);
/// Most missed slots of one job a starting replica reports one by one (counted and alerted).
const MAX_MISSED_ALERTS: usize = 20;
/// How long start-up waits for the first answer of each Redis node before going on without it.
const STARTUP_PING: Duration = Duration::from_secs(2);

/// What a replica keeps across reloads: its connections, history and metrics.
#[derive(Clone)]
pub struct Replica {
    pub name: String,
    pub lock: SlotLock,
    pub history: History,
    pub metrics: Arc<Metrics>,
    pub budgets: Budgets,
    /// Where slots this replica cannot deliver are offered, and offers are heard.
    pub handoffs: Handoffs,
    /// The fleet-wide pauses this replica honours.
    pub control: Control,
    /// The fleet's live replicas, among which each slot's candidates are ranked.
    pub membership: Membership,
    pub client: reqwest::Client,
    pub clock: SharedClock,
    /// The prefix the replica started with: a new prefix in a reloaded file waits for a restart,
    /// since replicas reloading at different moments would otherwise race on different keys.
    pub key_prefix: String,
    /// The timeline's watchdog, read by `/healthz`.
    pub liveness: Arc<Liveness>,
    /// The fleet clock and the nodes it reads, to measure again every minute.
    fleet: Option<(Arc<FleetClock>, Arc<Nodes>)>,
    /// Cancelled when the replica shuts down (not on a reload); see [`RaceContext::shutdown`].
    shutdown: CancellationToken,
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
                handoffs: Handoffs::Off,
                control: Control::Off,
                membership: Membership::Off,
                metrics,
                client: http_client().context("building the HTTP client")?,
                clock,
                key_prefix,
                liveness: Arc::default(),
                fleet: None,
                shutdown: CancellationToken::new(),
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
        let membership = join_the_fleet(config, &nodes, &name, fleet.clone()).await;
        Ok(Replica {
            membership,
            history: History::Redis {
                nodes: nodes.clone(),
                prefix: key_prefix.clone(),
            },
            budgets: Budgets::Redis {
                nodes: nodes.clone(),
                prefix: key_prefix.clone(),
            },
            handoffs: Handoffs::redis(nodes.clone(), &key_prefix),
            control: Control::redis(nodes.clone(), &key_prefix),
            lock: SlotLock::Redlock(lock),
            metrics,
            client: http_client().context("building the HTTP client")?,
            clock: fleet.clone(),
            key_prefix,
            liveness: Arc::default(),
            fleet: Some((fleet, nodes)),
            shutdown: CancellationToken::new(),
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
            handoffs: self.handoffs.clone(),
            control: self.control.clone(),
            membership: self.membership.clone(),
            candidates: config.scheduler.candidates,
            candidate_stagger: config.scheduler.candidate_stagger,
            alerts: Arc::new(config.alerts.clone()),
            shutdown: self.shutdown.clone(),
        }
    }
}

/// The membership of a replica ranking candidates (`Off` with `candidates = "all"`), its view
/// of the fleet read once before its timeline starts; it announces itself when the timeline
/// runs ([`Membership::spawn`]), so it races its slots before the others count on it.
async fn join_the_fleet(
    config: &Config,
    nodes: &Arc<Nodes>,
    name: &str,
    clock: SharedClock,
) -> Membership {
    if config.scheduler.candidates == Candidates::All {
        return Membership::Off;
    }
    let start_window = config.scheduler.max_clock_skew.max(MIN_START_WINDOW);
    let membership = Membership::redis(
        nodes.clone(),
        &config.scheduler.key_prefix,
        name,
        clock,
        group_of(config),
        start_window,
    );
    membership.read().await;
    membership
}

/// The membership group of `config`: its job names.
fn group_of(config: &Config) -> String {
    membership::group(config.jobs.iter().map(|j| j.name.as_str()))
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
    mut replica: Replica,
    config: Config,
    shutdown: CancellationToken,
    reloads: Option<mpsc::Receiver<()>>,
) -> anyhow::Result<()> {
    replica.shutdown = shutdown.clone();
    let http = config.http;
    let current = Arc::new(RwLock::new(Arc::new(config)));
    let tracker = TaskTracker::new();
    if let Some(http) = http {
        serve_status(&replica, &current, http.listen, &tracker, &shutdown).await?;
    }
    listen_to_the_fleet(&replica, &current, &tracker, &shutdown);
    let mut reloads = reloads;
    let mut first = true;
    loop {
        let config = read(&current);
        let generation = shutdown.child_token();
        start_generation(&replica, &config, &tracker, &generation, first);
        first = false;
        let next = wait_for_reload(&shutdown, &mut reloads, &config).await;
        generation.cancel();
        let Some(new) = next else { break };
        replica.membership.regroup(group_of(&new)).await;
        *current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(new);
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

/// Binds `listen` and serves `/healthz`, `/readyz`, `/metrics` and the status page.
async fn serve_status(
    replica: &Replica,
    current: &Arc<RwLock<Arc<Config>>>,
    listen: std::net::SocketAddr,
    tracker: &TaskTracker,
    shutdown: &CancellationToken,
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("binding the [http] listen address {listen}"))?;
    let state = status::Sources {
        name: replica.name.clone(),
        lock: replica.lock.clone(),
        history: replica.history.clone(),
        control: replica.control.clone(),
        metrics: replica.metrics.clone(),
        clock: replica.clock.clone(),
        liveness: replica.liveness.clone(),
        membership: replica.membership.clone(),
        config: current.clone(),
    };
    tracing::info!(replica = %replica.name, %listen, "serving /healthz, /readyz, /metrics and the status page");
    tracker.spawn(status::serve(listener, state, shutdown.clone()));
    Ok(())
}

/// The replica's lifetime tasks that follow the fleet rather than the schedule: the fleet
/// clock's measurements, the pauses and the handoff offers (none in standalone mode).
fn listen_to_the_fleet(
    replica: &Replica,
    current: &Arc<RwLock<Arc<Config>>>,
    tracker: &TaskTracker,
    shutdown: &CancellationToken,
) {
    if let Some((clock, nodes)) = &replica.fleet {
        tracker.spawn(fleet_clock::keep_measuring(
            clock.clone(),
            nodes.clone(),
            replica.metrics.clone(),
            config_skew(current),
            replica.name.clone(),
            shutdown.clone(),
        ));
    }
    replica.membership.spawn(tracker, shutdown);
    let names = current.clone();
    replica.control.watch(
        move || read(&names).jobs.iter().map(|j| j.name.clone()).collect(),
        tracker,
        shutdown,
    );
    if let Some(offers) = replica.handoffs.listen(tracker, shutdown) {
        tracker.spawn(take_handoffs(
            replica.clone(),
            current.clone(),
            offers,
            tracker.clone(),
            shutdown.clone(),
        ));
    }
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
        if first {
            tracker.spawn(look_back(ctx.clone(), job.clone()));
        } else {
            tracker.spawn(mark_first_seen(ctx.clone(), job.clone()));
        }
    }
    tracker.spawn(timeline(
        ctx,
        replica.liveness.clone(),
        config.jobs.clone(),
        replica.fleet.as_ref().map(|(clock, _)| clock.clone()),
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
        || (old.scheduler.candidates == Candidates::All)
            != (new.scheduler.candidates == Candidates::All)
    {
        tracing::warn!("changes to [redis], [http], key_prefix and between candidates = \"all\" and a count take effect at the next restart");
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
/// thousand (BENCHMARKS.md, scale). Each wake looks for a step of the wall clock (reported by
/// the fleet clock); scheduling on the wall clock (`clock = "local"`), a step rebuilds the
/// timeline from the stepped time, so a step back does not leave it asleep for slots that
/// already passed and a step forward does not race the skipped-over slots one by one.
///
/// Each sleep and wake is reported to `liveness`, so `/healthz` fails when a wake is overdue.
async fn timeline(
    ctx: Arc<RaceContext>,
    liveness: Arc<Liveness>,
    jobs: Vec<Arc<Job>>,
    fleet: Option<Arc<FleetClock>>,
    tracker: TaskTracker,
    shutdown: CancellationToken,
) {
    let mut steps = fleet
        .as_ref()
        .filter(|f| f.schedules_on_wall())
        .map(|f| f.steps());
    let mut timeline = Timeline::new(jobs.clone(), ctx.clock.now(), &ctx.replica);
    while let Some(slot) = timeline.next() {
        let wait = (slot.instant() - ctx.clock.now())
            .to_std()
            .unwrap_or_default();
        liveness.sleeping_until(tokio::time::Instant::now() + wait);
        let wake = wait_until_due(&ctx, slot, fleet.as_deref(), &shutdown, steps.as_mut()).await;
        if wake == Wake::Shutdown {
            return;
        }
        liveness.woke();
        let stepped = fleet
            .as_ref()
            .is_some_and(|f| f.report_step(&ctx.metrics, &ctx.replica));
        if let Some(steps) = steps.as_mut().filter(|_| stepped || wake == Wake::Stepped) {
            steps.borrow_and_update();
            timeline = Timeline::new(jobs.clone(), ctx.clock.now(), &ctx.replica);
            continue;
        }
        // A replica that wakes late still races the slots inside the start window (the race
        // decides); slots older than that belonged to replicas that were awake and are skipped.
        let window = chrono::Duration::from_std(ctx.start_window()).unwrap_or_default();
        let after = slot.instant().max(ctx.clock.now() - window);
        let due = timeline.take_due(slot, after, &ctx.replica);
        tracker.spawn(race_instant(ctx.clone(), due, slot, tracker.clone()));
    }
}

/// What ended a wait for the next slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wake {
    Due,
    /// The wall clock stepped (seen by the fleet clock's measurer meanwhile).
    Stepped,
    Shutdown,
}

/// Sleeps until `slot` is due ([`until_due`]), the wall clock steps under `clock = "local"`
/// (seen after each timer, or announced on `steps` by the measurer), or shutdown.
///
/// Timers run on the monotonic clock; the remaining gap is measured again after each, so a
/// clock stepped back meanwhile never starts a slot before its instant.
async fn wait_until_due(
    ctx: &RaceContext,
    slot: Slot,
    fleet: Option<&FleetClock>,
    shutdown: &CancellationToken,
    steps: Option<&mut watch::Receiver<u64>>,
) -> Wake {
    let stepped = async {
        let announced = match steps {
            Some(rx) => rx.changed().await.is_ok(),
            None => false,
        };
        if !announced {
            std::future::pending::<()>().await;
        }
    };
    tokio::pin!(stepped);
    loop {
        let wait = until_due(ctx, slot);
        if wait.is_zero() {
            return if shutdown.is_cancelled() {
                Wake::Shutdown
            } else {
                Wake::Due
            };
        }
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = shutdown.cancelled() => return Wake::Shutdown,
            _ = &mut stepped => return Wake::Stepped,
        }
        // Between two timers, a step moves a wall-clock timeline's deadline.
        if fleet.is_some_and(|f| f.report_step(&ctx.metrics, &ctx.replica) && f.schedules_on_wall())
        {
            return Wake::Stepped;
        }
    }
}

/// How long until `slot` is due: the timeline's clock must reach it, and so must the fleet
/// clock (they differ under `clock = "local"`) when it is behind by no more than the start
/// window. Further behind, the slot goes to the race at once, whose guard skips it as early:
/// waiting longer would hold up every later slot.
fn until_due(ctx: &RaceContext, slot: Slot) -> Duration {
    let left = |now: DateTime<Utc>| (slot.instant() - now).to_std().unwrap_or_default();
    let fleet = left(ctx.clock.fleet_now());
    let fleet = if fleet <= ctx.start_window() {
        fleet
    } else {
        Duration::ZERO
    };
    left(ctx.clock.now()).max(fleet)
}

/// Races the jobs due at `slot` that this replica is a candidate for, one batch per rank
/// (see [`crate::membership`]).
async fn race_instant(
    ctx: Arc<RaceContext>,
    jobs: Vec<Arc<Job>>,
    slot: Slot,
    tracker: TaskTracker,
) {
    let jobs = ctx.drop_paused(jobs, slot);
    for (rank, jobs) in ctx.by_rank(jobs, slot) {
        tracker.spawn(race_rank(ctx.clone(), jobs, slot, rank, tracker.clone()));
    }
}

/// Races one rank's batch after its stagger (the first rank at once); each win runs in a task
/// of its own. A replica shutting down meanwhile leaves the slot to the higher ranks.
async fn race_rank(
    ctx: Arc<RaceContext>,
    jobs: Vec<Arc<Job>>,
    slot: Slot,
    rank: Option<usize>,
    tracker: TaskTracker,
) {
    let stagger = ctx.stagger(rank);
    if !stagger.is_zero() {
        tokio::select! {
            _ = ctx.shutdown.cancelled() => return,
            _ = tokio::time::sleep(stagger) => {}
        }
    }
    for claim in ctx.claim_many(&jobs, slot, RaceKind::Scheduled, rank).await {
        if let Claim::Won(won) = claim {
            tracker.spawn(run_won(ctx.clone(), won));
        }
    }
}

async fn run_won(ctx: Arc<RaceContext>, won: Won) {
    ctx.run(won).await;
}

/// Takes the fleet's handoff offers until shutdown: each offer (heard once per node) races once
/// for the slot, under the configuration current when it arrives.
async fn take_handoffs(
    replica: Replica,
    current: Arc<RwLock<Arc<Config>>>,
    mut heard: mpsc::Receiver<Heard>,
    tracker: TaskTracker,
    shutdown: CancellationToken,
) {
    let mut seen = Seen::default();
    loop {
        let message = tokio::select! {
            _ = shutdown.cancelled() => return,
            message = heard.recv() => message,
        };
        let Some(message) = message else { return };
        let Heard::Message(payload) = message else {
            continue;
        };
        let Ok(offer) = serde_json::from_str::<HandoffRequest>(&payload) else {
            tracing::debug!(replica = %replica.name, "ignoring a malformed handoff offer");
            continue;
        };
        if !seen.first_time(&offer) {
            continue;
        }
        let config = read(&current);
        let Some(job) = config.jobs.iter().find(|j| j.name == offer.job).cloned() else {
            tracing::debug!(job = %offer.job, replica = %replica.name, "handoff offer for a job this replica does not run");
            continue;
        };
        tracker.spawn(take_handoff(Arc::new(replica.context(&config)), job, offer));
    }
}

async fn take_handoff(ctx: Arc<RaceContext>, job: Arc<Job>, offer: HandoffRequest) {
    ctx.take_over(&job, &offer).await;
}

/// At start: catches up what `job` missed (with `catch_up`), then reports the slots still missed.
async fn look_back(ctx: Arc<RaceContext>, job: Arc<Job>) {
    if job.catch_up.is_some() {
        catch_up(ctx.clone(), job.clone()).await;
    }
    report_missed(ctx, job).await;
}

/// Reports the slots of `job` no replica ran while this one was down: those of the last
/// [`MISSED_LOOKBACK`] after the fleet's watermark (first deploy: none) with no run record and
/// no pause. For each, the replicas starting now race once more (key `…:{slot}:missed`), so the
/// slot is counted (`slotcron_missed_slots_total`) and alerted (`on_failure`) once across the
/// fleet. The newest [`MAX_MISSED_ALERTS`] are reported; an older gap is only logged.
async fn report_missed(ctx: Arc<RaceContext>, job: Arc<Job>) {
    let started = ctx.clock.fleet_now();
    let Ok(watermark) = watermark::first_seen(&ctx.history, &job.name, started).await else {
        return;
    };
    // The slots just before the start may still be running elsewhere (a run is recorded when it
    // ends): judge them once their timeout and start window are over. Later slots are this
    // replica's to race.
    tokio::select! {
        _ = ctx.shutdown.cancelled() => return,
        _ = tokio::time::sleep(job.timeout + ctx.start_window()) => {}
    }
    let lookback = chrono::Duration::from_std(MISSED_LOOKBACK).unwrap_or_default();
    let floor = (started - lookback).max(watermark);
    let Ok(runs) = ctx.history.read(&job.name, MAX_CATCH_UP_ALL).await else {
        return;
    };
    let paused = paused_intervals(&ctx.control.log(&job.name).await);
    let mut missed = missed_slots(
        &job.schedule,
        started,
        floor,
        &runs,
        &paused,
        CatchUpPolicy::All,
    );
    if missed.len() > MAX_MISSED_ALERTS {
        tracing::warn!(job = %job.name, replica = %ctx.replica, missed = missed.len(),
            "{} older missed slots are not reported one by one (see `slotcron history --missed`)",
            missed.len() - MAX_MISSED_ALERTS);
        missed.drain(..missed.len() - MAX_MISSED_ALERTS);
    }
    for slot in missed {
        ctx.report_missed(&job, slot).await;
    }
}

/// Runs, once, the slots of `job` the whole fleet missed (a rollout, a crash loop): those in
/// its catch-up window, after the fleet first scheduled the job (its watermark: a first deploy
/// runs nothing), with no run record. `latest` runs the newest of them, `all` each, oldest
/// first. They go through the same race, so replicas starting together still run each once.
/// Judged on the fleet clock, like the race.
async fn catch_up(ctx: Arc<RaceContext>, job: Arc<Job>) {
    let Some(catch_up) = job.catch_up else { return };
    let now = ctx.clock.fleet_now();
    let watermark = match watermark::first_seen(&ctx.history, &job.name, now).await {
        Ok(watermark) => watermark,
        Err(e) => {
            tracing::warn!(job = %job.name, replica = %ctx.replica, error = %e,
                "catch-up skipped: the fleet's watermark cannot be read, so missed slots cannot be told apart");
            return;
        }
    };
    let window = chrono::Duration::from_std(catch_up.window).unwrap_or_default();
    let floor = (now - window).max(watermark);
    let runs = match ctx.history.read(&job.name, MAX_CATCH_UP_ALL).await {
        Ok(runs) => runs,
        Err(e) => {
            tracing::warn!(job = %job.name, replica = %ctx.replica, error = %e,
                "catch-up skipped: the run history cannot be read, so missed slots cannot be told apart");
            return;
        }
    };
    // A slot the job was paused at was not missed: it is caught up only by `resume --catch-up`.
    let paused = paused_intervals(&ctx.control.log(&job.name).await);
    let missed = missed_slots(&job.schedule, now, floor, &runs, &paused, catch_up.policy);
    for slot in missed {
        tracing::info!(job = %job.name, %slot, replica = %ctx.replica, "catching up a missed slot");
        ctx.race(&job, slot, RaceKind::CatchUp).await;
    }
}

/// Records the watermark of a job a reload gave `catch_up` (or added): from now on the fleet
/// schedules it, so the next start catches up what it misses after this.
async fn mark_first_seen(ctx: Arc<RaceContext>, job: Arc<Job>) {
    if let Err(e) = watermark::first_seen(&ctx.history, &job.name, ctx.clock.fleet_now()).await {
        tracing::warn!(job = %job.name, replica = %ctx.replica, error = %e,
            "the job's watermark could not be recorded; the next start records it");
    }
}

/// The slots to catch up, oldest first: at or before `now`, after `floor`, with no record in
/// `runs` (newest first, as [`History::read`] returns them). When `runs` holds
/// [`MAX_CATCH_UP_ALL`] records it may not reach back to `floor`: slots older than its oldest
/// cannot be told apart from missed ones, and are left. A slot a pause in `paused` covers was
/// not missed. Walks back from `now`, so `latest` is the newest missed slot at any window size.
fn missed_slots(
    schedule: &Schedule,
    now: DateTime<Utc>,
    floor: DateTime<Utc>,
    runs: &[RunRecord],
    paused: &[PausedSpan],
    policy: CatchUpPolicy,
) -> Vec<Slot> {
    let recorded: std::collections::HashSet<Slot> = runs.iter().map(|r| r.slot).collect();
    let horizon = runs
        .last()
        .filter(|_| runs.len() >= MAX_CATCH_UP_ALL)
        .map(|r| r.slot);
    let most = match policy {
        CatchUpPolicy::Latest => 1,
        CatchUpPolicy::All => MAX_CATCH_UP_ALL,
    };
    let mut missed: Vec<Slot> = schedule
        .back_from(now)
        .take_while(|s| s.instant() > floor && horizon.is_none_or(|h| *s >= h))
        .filter(|s| !recorded.contains(s) && !covered(paused, s.instant()))
        .take(most)
        .collect();
    missed.reverse();
    missed
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

    fn ran(job: &Job, slots: impl IntoIterator<Item = DateTime<Utc>>) -> Vec<RunRecord> {
        let mut runs: Vec<RunRecord> = slots
            .into_iter()
            .map(|t| RunRecord {
                job: job.name.clone(),
                slot: Slot::at(t),
                replica: "r".into(),
                started: t,
                finished: Some(t),
                outcome: crate::history::RunState::Done,
                error: None,
                attempts: 1,
                trigger: "schedule".into(),
                fence: crate::schedule::Fence::new(Slot::at(t), 0),
                delivery: None,
                previous_winner: None,
            })
            .collect();
        runs.reverse();
        runs
    }

    fn instants(slots: &[Slot]) -> Vec<String> {
        slots.iter().map(|s| s.rfc3339_utc()).collect()
    }

    #[test]
    fn a_paused_slot_is_not_caught_up_and_latest_is_the_newest_missed_one() {
        let job = &jobs(&[("every", "* * * * * *")])[0];
        let now = at("2026-01-01T10:00:05.500Z");
        let floor = at("2026-01-01T10:00:00.300Z");
        let paused = [(at("2026-01-01T10:00:04Z"), None)];
        let latest = missed_slots(
            &job.schedule,
            now,
            floor,
            &[],
            &paused,
            CatchUpPolicy::Latest,
        );
        assert_eq!(instants(&latest), ["2026-01-01T10:00:03Z"]);
        let all = missed_slots(&job.schedule, now, floor, &[], &paused, CatchUpPolicy::All);
        assert_eq!(
            instants(&all),
            [
                "2026-01-01T10:00:01Z",
                "2026-01-01T10:00:02Z",
                "2026-01-01T10:00:03Z"
            ]
        );
    }

    #[test]
    fn catch_up_runs_the_unrecorded_slots_after_the_floor() {
        let job = &jobs(&[("every", "* * * * * *")])[0];
        let now = at("2026-01-01T10:00:05.500Z");
        let floor = at("2026-01-01T10:00:00.300Z");
        let runs = ran(
            job,
            [at("2026-01-01T10:00:01Z"), at("2026-01-01T10:00:02Z")],
        );
        let latest = missed_slots(&job.schedule, now, floor, &runs, &[], CatchUpPolicy::Latest);
        assert_eq!(instants(&latest), ["2026-01-01T10:00:05Z"]);
        let all = missed_slots(&job.schedule, now, floor, &runs, &[], CatchUpPolicy::All);
        assert_eq!(
            instants(&all),
            [
                "2026-01-01T10:00:03Z",
                "2026-01-01T10:00:04Z",
                "2026-01-01T10:00:05Z"
            ]
        );
    }

    #[test]
    fn a_first_deploy_catches_up_nothing() {
        // The watermark is the start itself: the floor is now.
        let job = &jobs(&[("every", "* * * * * *")])[0];
        let now = at("2026-01-01T10:00:05.500Z");
        for policy in [CatchUpPolicy::Latest, CatchUpPolicy::All] {
            assert!(missed_slots(&job.schedule, now, now, &[], &[], policy).is_empty());
        }
    }

    #[test]
    fn latest_is_the_newest_missed_slot_at_any_window_size() {
        let job = &jobs(&[("every", "* * * * * *")])[0];
        let now = at("2026-01-01T10:00:05.500Z");
        let week_ago = now - chrono::Duration::days(7);
        let latest = missed_slots(
            &job.schedule,
            now,
            week_ago,
            &[],
            &[],
            CatchUpPolicy::Latest,
        );
        assert_eq!(instants(&latest), ["2026-01-01T10:00:05Z"]);
    }

    #[test]
    fn catch_up_never_reaches_past_the_oldest_record_of_a_full_history() {
        let job = &jobs(&[("every", "* * * * * *")])[0];
        let now = at("2026-01-01T10:00:00.500Z");
        // 1000 recorded runs, the newest a second before now; then one slot older is missing.
        let recorded =
            (2..=MAX_CATCH_UP_ALL as i64 + 1).map(|s| now - chrono::Duration::seconds(s));
        let runs = ran(job, recorded.rev());
        assert_eq!(runs.len(), MAX_CATCH_UP_ALL);
        let floor = now - chrono::Duration::hours(1);
        let all = missed_slots(&job.schedule, now, floor, &runs, &[], CatchUpPolicy::All);
        // Only the slots after the history: now's and the one before it.
        assert_eq!(
            instants(&all),
            ["2026-01-01T09:59:59Z", "2026-01-01T10:00:00Z"]
        );
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
