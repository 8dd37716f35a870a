//! The replica: start-up and lifetime. Connects the node pool (reporting each node), measures
//! the fleet clock, joins the fleet's membership, serves the status endpoints and listens to
//! the fleet (pauses, handoff offers, trigger requests); then runs one generation of the schedule per
//! configuration ([`crate::scheduler`]'s timeline and, at the first start, the look-back of
//! [`crate::catch_up`]). Every task is tracked; on shutdown no new slot starts and in-flight
//! slots finish (each within its job's timeout) before [`run_with_reload`] returns. A reload swaps the
//! generation for one built from the new file; slots already racing or running finish on the
//! old one.
//!
//! Why so long: besides the lifetime, the replica's listeners to the fleet start here, and two
//! of them take slots from it (handoff offers, `slotcron trigger` requests): each is a short
//! loop over the replica's own state (its current config, its slot context, its tracker), and
//! apart from the lifetime they share they would only pass that state back in.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::Context as _;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::action::egress::Http;
use crate::action::http_client;
use crate::action::rate::Budgets;
use crate::catch_up;
use crate::config::Candidates;
#[cfg(not(feature = "server"))]
use crate::config::SERVER_COMPILED_OUT;
use crate::config::{self, ClockMode, Config, Job};
use crate::fleet::control::Control;
use crate::fleet::destinations;
use crate::fleet::handoff::{HandoffRequest, Handoffs, Intake};
use crate::fleet::membership::{Group, Membership};
use crate::fleet::triggers::{self, TriggerReply, TriggerRequest};
use crate::lock::{LocalLock, Redlock, SlotLock};
use crate::metrics::{Metrics, ReloadResult};
use crate::ops::liveness::Liveness;
#[cfg(feature = "server")]
use crate::ops::status;
use crate::record::audit::{Audit, AuditAction, AuditEntry};
use crate::record::history::History;
use crate::redis::pubsub::{self, Heard};
use crate::redis::{Connector, Nodes, independence};
use crate::scheduler;
use crate::slot::{Books, Contenders, Outbox, Race, SlotEnv, Trigger};
use crate::time::fleet_clock::{self, FleetClock};
use crate::time::schedule::SharedClock;

/// How long start-up waits for the first answer of each Redis node before going on without it.
const STARTUP_PING: Duration = Duration::from_secs(2);

/// What a replica keeps across reloads: its connections, history and metrics.
#[derive(Clone)]
pub struct Replica {
    /// The replica's id (`--replica-id`): its lock tokens and log lines name it.
    pub name: String,
    /// The lock's connections, opened once: a reload keeps racing on the same nodes.
    pub lock: SlotLock,
    /// The run history, shared by every generation and the status page.
    pub history: History,
    /// The audit trail: this replica's reloads and config hash changes, and the library's
    /// pauses, resumes and triggers.
    pub audit: Audit,
    /// One registry for the replica's life: counters keep counting across reloads.
    pub metrics: Arc<Metrics>,
    /// The rate budgets: a reload must not hand a job a fresh budget mid-minute.
    pub budgets: Budgets,
    /// Where slots this replica cannot deliver are offered, and offers are heard.
    pub handoffs: Handoffs,
    /// The fleet-wide pauses this replica honours.
    pub control: Control,
    /// The fleet's live replicas, among which each slot's candidates are ranked.
    pub membership: Membership,
    /// One HTTP client (and connection pool) for every action of every generation.
    pub client: Http,
    /// The clock slots are scheduled and judged on: the fleet clock with `[redis]`.
    pub clock: SharedClock,
    /// The prefix the replica started with: a new prefix in a reloaded file waits for a restart,
    /// since replicas reloading at different moments would otherwise race on different keys.
    pub key_prefix: String,
    /// The timeline's watchdog, read by `/healthz`.
    pub liveness: Arc<Liveness>,
    /// The fleet clock and the nodes it reads, to measure again every minute.
    fleet: Option<(Arc<FleetClock>, Arc<Nodes>)>,
    /// The nodes down at start, checked when each first answers.
    unchecked: Option<independence::Unchecked>,
    /// Cancelled when the replica shuts down (not on a reload); see [`SlotEnv::shutdown`].
    shutdown: CancellationToken,
}

impl Replica {
    /// Opens the lock's connections (reporting each node) and builds the shared state.
    pub async fn connect(
        config: &Config,
        name: String,
        clock: SharedClock,
    ) -> anyhow::Result<Self> {
        let client = http_client().context("building the HTTP client")?;
        let egress = config.redis.as_ref().map(|r| r.egress.clone());
        let client = client.through(egress.unwrap_or_default());
        match &config.redis {
            None => Ok(Replica::standalone(config, name, clock, client)),
            Some(redis) => Replica::fleet(config, redis, name, clock, client).await,
        }
    }

    /// A replica without `[redis]`: the lock, history and budgets live in this process.
    fn standalone(config: &Config, name: String, clock: SharedClock, client: Http) -> Self {
        Replica {
            lock: SlotLock::Local(Arc::new(LocalLock::new(&name))),
            history: History::local(),
            audit: Audit::local(),
            budgets: Budgets::local(),
            handoffs: Handoffs::Off,
            control: Control::Off,
            membership: Membership::Off,
            metrics: Arc::new(Metrics::new()),
            client,
            clock,
            key_prefix: config.scheduler.key_prefix.clone(),
            liveness: Arc::default(),
            fleet: None,
            unchecked: None,
            shutdown: CancellationToken::new(),
            name,
        }
    }

    /// A replica of a fleet: every shared state lives on the Redis nodes, and slots are
    /// scheduled on the fleet clock, measured before the first one.
    async fn fleet(
        config: &Config,
        redis: &config::RedisConfig,
        name: String,
        clock: SharedClock,
        client: Http,
    ) -> anyhow::Result<Self> {
        let metrics = Arc::new(Metrics::new());
        let nodes = open_nodes(redis, &name).await?;
        let lock = Arc::new(Redlock::over(Arc::new(nodes), &name, redis.lock.clone()));
        let nodes = lock.nodes().clone();
        report_nodes(&nodes, &name).await;
        let prefix = config.scheduler.key_prefix.clone();
        let (urls, topology) = (&redis.nodes, &redis.topology());
        let unchecked =
            independence::check_for(topology, &nodes, urls, &prefix, STARTUP_PING).await?;
        let skew = config.scheduler.max_clock_skew;
        let fleet = FleetClock::new(clock, config.scheduler.clock == ClockMode::Redis);
        fleet_clock::measure_and_report(&fleet, &nodes, &metrics, skew, &name).await;
        let membership = join_the_fleet(config, &nodes, &name, fleet.clone()).await;
        Ok(Replica {
            membership,
            history: History::Redis {
                nodes: nodes.clone(),
                prefix: prefix.clone(),
            },
            budgets: Budgets::Redis {
                nodes: nodes.clone(),
                prefix: prefix.clone(),
            },
            audit: Audit::redis(nodes.clone(), &prefix),
            handoffs: Handoffs::redis(nodes.clone(), &prefix),
            control: Control::redis(nodes.clone(), &prefix).counting(metrics.clone()),
            lock: SlotLock::Redlock(lock),
            metrics,
            client,
            clock: fleet.clone(),
            key_prefix: prefix,
            liveness: Arc::default(),
            fleet: Some((fleet, nodes)),
            unchecked,
            shutdown: CancellationToken::new(),
            name,
        })
    }

    /// The slot context for one configuration.
    pub fn context(&self, config: &Config) -> Arc<SlotEnv> {
        self.context_until(config, &self.shutdown)
    }

    /// The slot context for one configuration, ended by `shutdown` (the library handle's, for
    /// the runs it starts outside the schedule).
    pub fn context_until(&self, config: &Config, shutdown: &CancellationToken) -> Arc<SlotEnv> {
        let books = Books::new(
            self.name.clone(),
            self.metrics.clone(),
            self.history.clone(),
            self.key_prefix.clone(),
        );
        let race = Race::new(
            self.lock.clone(),
            self.clock.clone(),
            self.fleet.as_ref().map(|(clock, _)| clock.clone()),
            self.key_prefix.clone(),
            config.scheduler.max_clock_skew,
        );
        let (control, membership) = (self.control.clone(), self.membership.clone());
        let contenders = Contenders::new(control, membership, &config.scheduler);
        let (client, budgets) = (self.client.clone(), self.budgets.clone());
        let outbox = Outbox::new(client, budgets, self.handoffs.clone(), config);
        Arc::new(SlotEnv::new(
            books,
            race,
            contenders,
            outbox,
            shutdown.clone(),
        ))
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
    let start_window = config.scheduler.start_window();
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

/// The membership group of `config`: its jobs' names and definitions.
fn group_of(config: &Config) -> Group {
    Group::of(&config.jobs)
}

/// Builds the race context of one replica (lock connections included).
///
/// The test seam: tests race single slots on it ([`SlotEnv::run_slot`]) without a timeline.
#[doc(hidden)]
pub async fn race_context(
    config: &Config,
    replica: String,
    clock: SharedClock,
) -> anyhow::Result<Arc<SlotEnv>> {
    Ok(Replica::connect(config, replica, clock)
        .await?
        .context(config))
}

/// Runs the schedule of `config` as replica `replica` until `shutdown` is cancelled.
///
/// The test seam: benches and tests run a replica without reloads; the binary goes through
/// [`run_with_reload`].
#[doc(hidden)]
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
    warn_at_start(&config, &replica);
    let replica = Replica::connect(&config, replica, clock).await?;
    run_replica(replica, config, shutdown, reloads).await
}

/// Logs what `check` warns about (the configuration's warnings and a stagger that outlasts the
/// start window), once, before the replica connects: the binary's start and the library's.
pub fn warn_at_start(config: &Config, replica: &str) {
    let stagger = crate::slot::stagger_warning(&config.scheduler);
    for warning in config.warnings.iter().chain(&stagger) {
        tracing::warn!(replica = %replica, "{warning}");
    }
}

/// Runs the schedule on an already connected replica (tests reach its metrics and history).
pub async fn run_replica(
    mut replica: Replica,
    config: Config,
    shutdown: CancellationToken,
    reloads: Option<mpsc::Receiver<()>>,
) -> anyhow::Result<()> {
    replica.shutdown = shutdown.clone();
    if let Some(endpoint) = &config.otlp_endpoint {
        install_traces(endpoint, &replica.name);
    }
    let http = config.http;
    let current = Arc::new(RwLock::new(Arc::new(config)));
    let tracker = TaskTracker::new();
    if let Some(http) = http {
        serve_status(&replica, &current, http.listen, &tracker, &shutdown).await?;
    }
    // Before the first slot, so a paused job is honoured from it (the subscriptions' own reads
    // run concurrently with the timeline).
    let names: Vec<String> = read(&current).jobs.iter().map(|j| j.name.clone()).collect();
    replica.control.refresh(&names).await;
    tracker.spawn(audit_start(replica.clone(), read(&current).hash.clone()));
    listen_to_the_fleet(&replica, &current, &tracker, &shutdown);
    let mut reloads = reloads;
    let mut first = true;
    let mut handover = None;
    loop {
        let config = read(&current);
        let generation = shutdown.child_token();
        let (hand_on, next_handover) = tokio::sync::oneshot::channel();
        let ties = scheduler::Generation {
            fleet: replica.fleet.as_ref().map(|(clock, _)| clock.clone()),
            shutdown: generation.clone(),
            handover: handover.replace(next_handover),
            hand_on,
        };
        start_generation(&replica, &config, &tracker, ties, first);
        first = false;
        let next = wait_for_reload(&replica, &shutdown, &tracker, &mut reloads, &config).await;
        generation.cancel();
        let Some(new) = next else { break };
        replica.membership.regroup(group_of(&new)).await;
        *current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(new);
    }
    drain(&replica, tracker).await;
    Ok(())
}

/// Waits for the running slots and the fleet tasks, settles the nodes' writes and flushes the
/// last runs' spans, before the process exits.
async fn drain(replica: &Replica, tracker: TaskTracker) {
    tracing::info!(replica = %replica.name, "shutting down: no new slots; waiting for running slots");
    tracker.close();
    tracker.wait().await;
    if let Some(nodes) = replica.lock.nodes() {
        nodes.settle().await;
    }
    // The flush waits on the runtime: from a blocking thread.
    drop(tokio::task::spawn_blocking(crate::trace::shutdown).await);
    tracing::info!(replica = %replica.name, "stopped");
}

/// Binds `listen` and serves `/healthz`, `/readyz`, `/metrics` and the status page.
#[cfg(feature = "server")]
async fn serve_status(
    replica: &Replica,
    current: &Arc<RwLock<Arc<Config>>>,
    listen: std::net::SocketAddr,
    tracker: &TaskTracker,
    shutdown: &CancellationToken,
) -> anyhow::Result<()> {
    let state = status::Sources {
        name: replica.name.clone(),
        lock: replica.lock.clone(),
        history: replica.history.clone(),
        control: replica.control.clone(),
        audit: replica.audit.clone(),
        metrics: replica.metrics.clone(),
        clock: replica.clock.clone(),
        liveness: replica.liveness.clone(),
        membership: replica.membership.clone(),
        config: current.clone(),
        pages: Arc::default(),
        races: tokio::runtime::Handle::current(),
    };
    status::spawn(listen, state, tracker, shutdown).await
}

/// Without the `server` feature the loader refuses `[http]` (and `Fleet::http`), so this is not
/// reached; were it, the replica stops rather than run without the endpoints it was told to serve.
#[cfg(not(feature = "server"))]
async fn serve_status(
    _: &Replica,
    _: &Arc<RwLock<Arc<Config>>>,
    listen: std::net::SocketAddr,
    _: &TaskTracker,
    _: &CancellationToken,
) -> anyhow::Result<()> {
    anyhow::bail!("cannot serve {listen}: {SERVER_COMPILED_OUT}")
}

/// The replica's lifetime tasks that follow the fleet rather than the schedule: the fleet
/// clock's measurements, the check of nodes down at start, the pauses and the handoff offers
/// (none in standalone mode).
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
    if let (Some(unchecked), Some((_, nodes))) = (&replica.unchecked, &replica.fleet) {
        unchecked
            .clone()
            .watch(nodes, &replica.name, tracker, shutdown);
    }
    replica.membership.spawn(tracker, shutdown);
    compare_destinations(replica, current, tracker, shutdown);
    let names = current.clone();
    replica.control.watch(
        move || read(&names).jobs.iter().map(|j| j.name.clone()).collect(),
        tracker,
        shutdown,
    );
    if let Some((_, nodes)) = &replica.fleet {
        let channel = triggers::request_channel(&replica.key_prefix);
        let requests = pubsub::subscribe_all(nodes, &channel, tracker, shutdown);
        tracker.spawn(take_triggers(
            replica.clone(),
            current.clone(),
            requests,
            tracker.clone(),
            shutdown.clone(),
        ));
    }
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

/// Compares where this replica's jobs send with the other replicas on its prefix (see
/// [`destinations`]); nothing in standalone mode.
fn compare_destinations(
    replica: &Replica,
    current: &Arc<RwLock<Arc<Config>>>,
    tracker: &TaskTracker,
    shutdown: &CancellationToken,
) {
    let Some((_, nodes)) = &replica.fleet else {
        return;
    };
    let config = current.clone();
    tracker.spawn(destinations::keep_comparing(
        nodes.clone(),
        (replica.key_prefix.clone(), replica.name.clone()),
        replica.clock.clone(),
        move || destinations::Own::of(&read(&config)),
        shutdown.clone(),
    ));
}

/// The current file's `max_clock_skew`: the fleet clock's measurer logs offsets past it.
fn config_skew(current: &RwLock<Arc<Config>>) -> Duration {
    read(current).scheduler.max_clock_skew
}

/// The current configuration; a writer that panicked left a whole `Arc`, so poison is ignored.
fn read(current: &RwLock<Arc<Config>>) -> Arc<Config> {
    current.read().unwrap_or_else(|p| p.into_inner()).clone()
}

/// Starts the timeline of `config`'s jobs (and, on the first start, the catch-up of missed
/// slots); `generation` ties it to its cancellation and to the timelines before and after.
fn start_generation(
    replica: &Replica,
    config: &Config,
    tracker: &TaskTracker,
    generation: scheduler::Generation,
    first: bool,
) {
    let ctx = replica.context(config);
    // Once per process: a reload says `reloaded` instead (wait_for_reload).
    if first {
        tracing::info!(replica = %ctx.books.replica, jobs = config.jobs.len(), lock = %ctx.race.lock.describe(),
            config = %config.path.display(), "slotcron started");
    }
    for name in &config.disabled {
        tracing::info!(replica = %ctx.books.replica, job = %name, "job disabled (enabled = false)");
    }
    if first {
        tracker.spawn(catch_up::look_back(ctx.clone(), config.jobs.clone()));
    } else {
        tracker.spawn(catch_up::mark_first_seen(ctx.clone(), config.jobs.clone()));
    }
    tracker.spawn(crate::slot::deadline::watch(
        ctx.clone(),
        config.jobs.clone(),
        generation.fleet.clone(),
        generation.shutdown.clone(),
        tracker.clone(),
    ));
    tracker.spawn(scheduler::timeline(
        ctx,
        replica.liveness.clone(),
        config.jobs.clone(),
        generation,
        tracker.clone(),
    ));
}

/// Waits for shutdown (`None`) or a reload that yields a valid file (`Some`); `tracker` keeps
/// the reloads' audit writes.
async fn wait_for_reload(
    replica: &Replica,
    shutdown: &CancellationToken,
    tracker: &TaskTracker,
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
            biased;
            _ = shutdown.cancelled() => return None,
            received = signal => {
                if received.is_none() {
                    *reloads = None;
                    continue;
                }
                if let Some(new) = reload(replica, old, tracker).await {
                    return Some(new);
                }
            }
        }
    }
}

/// Reads the file again: `reloaded` and the new config, or `reload rejected` with the errors (a
/// panic while checking is one; the schedule is kept); counted in `slotcron_config_reloads_total`.
/// Either way it is recorded in the audit trail, with the config hash change or the errors, by
/// a task of `tracker`: off the reload's path, so a hung node never delays the new schedule.
async fn reload(replica: &Replica, old: &Config, tracker: &TaskTracker) -> Option<Config> {
    let entry = AuditEntry::new(replica.clock.now(), &replica.name, AuditAction::Reload);
    match config::reload(old).await {
        Ok(new) => {
            for warning in config::restart_only_changes(old, &new) {
                tracing::warn!(replica = %replica.name, "{warning}");
            }
            replica.metrics.config_reload(ReloadResult::Applied);
            tracing::info!(replica = %replica.name, config = %new.path.display(),
                jobs = new.jobs.len(), config_hash = %new.hash, "reloaded");
            let entry = entry.detail(config::hash_change(&old.hash, &new.hash));
            tracker.spawn(record_reload(
                replica.clone(),
                entry,
                Some(new.hash.clone()),
            ));
            Some(new)
        }
        Err(errors) => {
            replica.metrics.config_reload(ReloadResult::Rejected);
            tracing::error!(replica = %replica.name, config = %old.path.display(),
                error = %errors, "reload rejected");
            let rejected = AuditEntry {
                action: AuditAction::ReloadRejected,
                reason: Some(errors.to_string()),
                ..entry.detail(format!("config hash {} kept", old.hash))
            };
            tracker.spawn(record_reload(replica.clone(), rejected, None));
            None
        }
    }
}

/// Records a reload's audit entry and, when it applied a file, that file's hash as the one
/// this replica runs (what its next start compares with).
async fn record_reload(replica: Replica, entry: AuditEntry, now_running: Option<String>) {
    replica.audit.note(&entry).await;
    if let Some(hash) = now_running {
        replica.audit.config_hash_seen(&replica.name, &hash).await;
    }
}

/// At start: records in the audit trail that this replica now runs a configuration other
/// than the one it last ran (a deploy, an edit applied by a restart). Nothing on a first start.
async fn audit_start(replica: Replica, hash: String) {
    let Some(previous) = replica.audit.config_hash_seen(&replica.name, &hash).await else {
        return;
    };
    let entry = AuditEntry::new(replica.clock.now(), &replica.name, AuditAction::ConfigHash);
    replica
        .audit
        .note(&entry.detail(config::hash_change(&previous, &hash)))
        .await;
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

/// Takes the fleet's handoff offers until shutdown: each offer (heard once per node) races once
/// for the slot, under the configuration current when it arrives.
async fn take_handoffs(
    replica: Replica,
    current: Arc<RwLock<Arc<Config>>>,
    heard: mpsc::Receiver<Heard>,
    tracker: TaskTracker,
    shutdown: CancellationToken,
) {
    let mut offers = Intake::new(heard);
    while let Some(offer) = offers.next(&shutdown, &replica.name).await {
        let config = read(&current);
        let Some(job) = config.jobs.iter().find(|j| j.name == offer.job).cloned() else {
            tracing::debug!(job = %offer.job, replica = %replica.name, "handoff offer for a job this replica does not run");
            continue;
        };
        tracker.spawn(take_handoff(replica.context(&config), job, offer));
    }
}

/// Races each slot `slotcron trigger` asks of the fleet (once, however many nodes carry the
/// request) and answers the asker with how the race ended here.
async fn take_triggers(
    replica: Replica,
    current: Arc<RwLock<Arc<Config>>>,
    mut heard: mpsc::Receiver<Heard>,
    tracker: TaskTracker,
    shutdown: CancellationToken,
) {
    let mut seen = triggers::Seen::default();
    while let Some(message) = pubsub::next(&mut heard, &shutdown).await {
        let Heard::Message(payload) = message else {
            continue;
        };
        let Ok(request) = serde_json::from_str::<TriggerRequest>(&payload) else {
            tracing::debug!(replica = %replica.name, "ignoring a malformed trigger request");
            continue;
        };
        if !seen.first_time(&request) {
            continue;
        }
        let config = read(&current);
        let Some(job) = config.jobs.iter().find(|j| j.name == request.job).cloned() else {
            tracing::debug!(job = %request.job, replica = %replica.name, "trigger for a job this replica does not run");
            continue;
        };
        tracker.spawn(take_trigger(
            replica.clone(),
            replica.context(&config),
            job,
            request,
        ));
    }
}

/// Races one triggered slot as `slotcron trigger` would have in its own process, then answers
/// on the request's channel: a named task, so a slow run holds up no other request.
async fn take_trigger(replica: Replica, ctx: Arc<SlotEnv>, job: Arc<Job>, request: TriggerRequest) {
    let (Some(slot), Some((_, nodes))) = (request.slot(), &replica.fleet) else {
        return;
    };
    tracing::info!(job = %job.name, slot = %slot, replica = %replica.name, by = %request.by,
        "trigger asked of the fleet");
    let trigger = if request.catch_up {
        Trigger::CatchUp
    } else {
        Trigger::Manual
    };
    let Some(result) = crate::slot::once(&ctx, trigger, job, slot).await else {
        return;
    };
    let (ending, text) = result.told();
    let reply = TriggerReply {
        replica: replica.name.clone(),
        ending,
        text,
    };
    triggers::answer(nodes, &replica.key_prefix, &request, &reply).await;
}

/// Takes one handoff offer: a named task, so a slow handoff run holds up no other offer.
async fn take_handoff(ctx: Arc<SlotEnv>, job: Arc<Job>, offer: HandoffRequest) {
    let Some(slot) = offer.slot() else { return };
    crate::slot::once(&ctx, Trigger::Handoff(Arc::new(offer)), job, slot).await;
}

/// Starts exporting a trace per won run to `endpoint`, over the actions' own HTTP client (so
/// its TLS and proxy settings); without a client, the replica runs without traces, saying so.
fn install_traces(endpoint: &url::Url, replica: &str) {
    match crate::action::http_client() {
        Ok(client) => crate::trace::install(endpoint, replica, (*client).clone()),
        Err(e) => tracing::warn!(%endpoint, replica, error = %e,
            "traces: cannot build the HTTP client; running without traces"),
    }
}

/// The node pool, through the connector the configuration names: TCP (production) or a dialer
/// (the simulation's in-memory pipes).
async fn open_nodes(redis: &config::RedisConfig, name: &str) -> anyhow::Result<Nodes> {
    let (urls, timeout, ca) = (&redis.nodes, redis.lock.node_timeout, redis.ca.as_deref());
    Ok(match &redis.connector {
        Connector::Tcp => Nodes::open(urls, timeout, ca, &redis.topology(), name)
            .await
            .context("preparing Redis connections")?,
        Connector::Dial(dialer) => Nodes::dial(urls, timeout, dialer, name),
    })
}
