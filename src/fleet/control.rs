//! Fleet-wide control of jobs at run time: pause and resume, without a redeploy.
//!
//! A pause is a record on the Redis nodes (`{key_prefix}:{job}:paused`, JSON: who, when, until,
//! why), written to every node and counted like a lock: it holds once a majority has it, and a
//! read finds it held when any node of an answering majority holds it (a resume is kept under the
//! same key as a tombstone, so the newest change wins and a node that missed a resume cannot bring
//! the pause back). A read that reaches fewer than a majority keeps the last known state and says
//! so. Every change is also appended to the job's pause log (`{key_prefix}:pauses:{job}`, a
//! capped stream the slot ledger reads to tell paused slots from missed ones) and announced on
//! `{key_prefix}:control`, so every replica re-reads that job's state at once instead of asking
//! Redis before each slot. A replica whose subscription was down reads every job again when it
//! comes back.
//!
//! None of this state expires, so a node restarted empty would lose it for good: each read
//! writes the newest change back onto the answering nodes that lack it, and when a node's
//! subscription reopens (it may have come back empty) every job's pause log, watermark and run
//! history is repaired onto it too ([`Control::repair`]), and so is the audit trail. A rolling empty restart of every node,
//! one at a time, so loses nothing. A change is stamped on the nodes' `TIME`, after the newest
//! change it read, so changes order as the fleet saw them, not by the operators' clocks.
//!
//! In sentinel and cluster modes the one primary's replicas are what a failover keeps: a
//! change is acknowledged by them (`WAIT`, as a won slot's lock is) and reported when short, by
//! the CLI and by each replica that hears it (counted). A replica also keeps the newest change
//! of each job it read, and when the nodes answer with an older one or none (a replica promoted
//! without it), writes it back rather than forgetting it ([`Control::refresh`]).
//!
//! Why so long: about 65 of its lines are unit tests; the code is one record (the pause, its
//! tombstone and its log: written, read like a lock, acknowledged, repaired) whose writer and
//! readers change together.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use redis::Value;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::metrics::Metrics;
use crate::record::audit::Audit;
use crate::record::history::History;
use crate::record::watermark;
use crate::redis::pubsub::{self, Heard};
use crate::redis::{Nodes, Replication, Replies};
use crate::time::fleet_clock::{FleetClock, Measurement};
use crate::time::schedule::{Clock, SystemClock};

/// What a replica announces once first subscribed: every replica reads every job's pause again,
/// so a change the nodes lost is written back by a replica that knew it ([`Control::refresh`])
/// soon after a new replica starts, even where no replica saw the loss happen (a cluster's
/// failover: the subscriptions are on the seeds, which stay up). Never a job name (those are
/// `[A-Za-z0-9._-]`).
const EVERY_JOB: &str = "*";
/// Bound on one node's answer to a control read or write.
const CONTROL_TIMEOUT: Duration = Duration::from_millis(500);
/// How long the `WAIT` mark of a pause or resume is kept (the mark only orders the `WAIT`).
const WAIT_MARK_TTL: Duration = Duration::from_secs(1);
/// The first wait before reading again the jobs whose read reached no majority: about the
/// pool's look at a suspect node, so a change announced during a failover is held within a
/// second or two of the nodes answering again.
const REREAD_FIRST: Duration = Duration::from_millis(500);
/// The longest wait between reads again (each doubles it): the reads go on while the nodes
/// cannot answer, each logged per job, so a long outage is not read (and logged) every 500 ms.
const REREAD_MAX: Duration = Duration::from_secs(4);
/// Pause-log entries kept per job and node.
const PAUSE_LOG_CAP: usize = 1000;

/// A job's pause: who paused it, when, until when (`None`: until resumed) and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pause {
    /// Who paused (`$USER@hostname` unless `--by`).
    pub by: String,
    /// When.
    pub at: DateTime<Utc>,
    /// When the pause ends by itself, if it does.
    pub until: Option<DateTime<Utc>>,
    /// Why, shown in logs, the status page and the ledger.
    pub reason: Option<String>,
}

impl Pause {
    /// Its end, if it has one, is after its stamp: else it would never hold.
    fn ends_after_its_stamp(&self) -> Result<(), PauseError> {
        match self.until.filter(|until| *until <= self.at) {
            Some(until) => Err(PauseError::AlreadyOver {
                until,
                now: self.at,
            }),
            None => Ok(()),
        }
    }

    /// Whether the pause holds at `t`.
    pub fn holds_at(&self, t: DateTime<Utc>) -> bool {
        self.at <= t && self.until.is_none_or(|until| t < until)
    }
}

/// When a pause ends by itself, as the operator gave it: judged on the fleet's clock when the
/// pause is taken, never on the clock of the machine it was typed on (a laptop 10 minutes slow
/// would otherwise end `--until 5m` before it began).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Until {
    /// This long after the pause's stamp (the nodes' `TIME`): `--until 2h`.
    After(chrono::Duration),
    /// At this instant: `--until 2026-12-28T09:00:00+08:00`.
    At(DateTime<Utc>),
}

impl Until {
    /// The pause's end when it is stamped `at`; a span too long for the calendar never ends.
    fn end(self, at: DateTime<Utc>) -> DateTime<Utc> {
        match self {
            Until::After(span) => at
                .checked_add_signed(span)
                .unwrap_or(DateTime::<Utc>::MAX_UTC),
            Until::At(until) => until,
        }
    }
}

/// A pause as asked for, before the fleet stamps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PauseOrder {
    /// Who pauses.
    pub by: String,
    /// When it ends by itself (`None`: until resumed).
    pub until: Option<Until>,
    /// Why.
    pub reason: Option<String>,
}

/// Why a pause was not taken.
#[derive(Debug, thiserror::Error)]
pub enum PauseError {
    /// Its end is not after its stamp on the fleet's clock: it would never hold.
    #[error(
        "--until {until} is not after the fleet's time ({now}, the Redis nodes' TIME): the \
        pause would never hold (is this machine's clock off?)"
    )]
    AlreadyOver {
        /// The end asked for.
        until: DateTime<Utc>,
        /// The fleet's time when the pause was to be taken.
        now: DateTime<Utc>,
    },
    /// Another pause holds, and the order does not replace one ([`Existing::Keep`]).
    #[error("already paused by {} since {}", .0.by, .0.at)]
    AlreadyPaused(Box<Pause>),
    /// Fewer than a majority took it.
    #[error(transparent)]
    NoMajority(#[from] NoMajority),
}

/// What a pause does to one that already holds (another operator's, with its own reason and
/// end).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Existing {
    /// Refuse: [`PauseError::AlreadyPaused`] names it.
    Keep,
    /// Replace it; the pause replaced is returned.
    Replace,
}

impl Existing {
    /// The pause `newest` names if it holds at `at` (the one a new pause replaces), or the
    /// refusal that names it.
    fn over(
        self,
        newest: Option<PauseEvent>,
        at: DateTime<Utc>,
    ) -> Result<Option<Pause>, PauseError> {
        match (newest, self) {
            (Some(PauseEvent::Paused(old)), Existing::Keep) if old.holds_at(at) => {
                Err(PauseError::AlreadyPaused(Box::new(old)))
            }
            (Some(PauseEvent::Paused(old)), Existing::Replace) if old.holds_at(at) => Ok(Some(old)),
            _ => Ok(None),
        }
    }
}

impl PauseOrder {
    /// The pause taken at `at` on the fleet's clock.
    fn stamped(&self, at: DateTime<Utc>) -> Pause {
        Pause {
            by: self.by.clone(),
            at,
            until: self.until.map(|until| until.end(at)),
            reason: self.reason.clone(),
        }
    }
}

/// One entry of a job's pause log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum PauseEvent {
    /// A job was paused.
    Paused(Pause),
    /// A job was resumed.
    Resumed {
        /// Who resumed it.
        by: String,
        /// When.
        at: DateTime<Utc>,
    },
}

impl PauseEvent {
    /// When the change was made.
    pub fn at(&self) -> DateTime<Utc> {
        match self {
            PauseEvent::Paused(p) => p.at,
            PauseEvent::Resumed { at, .. } => *at,
        }
    }

    /// A pause key's value: the last change (records written before resumes were kept as
    /// tombstones hold a bare pause).
    fn parse_record(text: &str) -> Option<Self> {
        serde_json::from_str(text)
            .ok()
            .or_else(|| serde_json::from_str(text).ok().map(PauseEvent::Paused))
    }
}

/// What a read of a job's pause found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PauseState {
    /// The newest change an answering majority knows of is this pause (one node is enough).
    Held(Pause),
    /// A majority answered and none holds a pause newer than its resume.
    NotHeld,
    /// Fewer than a majority answered: nothing can be said.
    Unknown {
        /// Nodes that answered.
        answered: usize,
    },
}

/// A pause or resume a majority took, and how many of the primary's replicas acknowledged it
/// (`None` in redlock mode, or with `wait_replicas = 0`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taken<T> {
    /// What the command returns: the pause recorded, or the pause a resume ended.
    pub change: T,
    /// `WAIT`'s count, as for a won slot's lock.
    pub replication: Option<Replication>,
}

impl<T> Taken<T> {
    fn unreplicated(change: T) -> Self {
        Taken {
            change,
            replication: None,
        }
    }

    /// Fewer replicas than `wait_replicas` acknowledged the change: a failover now could lose
    /// it.
    pub fn is_short(&self) -> bool {
        self.replication.is_some_and(|r| r.is_short())
    }
}

/// A pause or resume reached fewer than a majority of the nodes.
#[derive(Debug, thiserror::Error)]
#[error("{acked} of {nodes} Redis node(s) took the change, {needed} needed: {errors}")]
pub struct NoMajority {
    /// Nodes that took the change.
    pub acked: usize,
    /// Nodes in the pool.
    pub nodes: usize,
    /// A majority.
    pub needed: usize,
    /// The failing nodes' errors.
    pub errors: String,
}

/// What one read of the pause state ([`Control::refresh`]) came to.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Refreshed {
    /// The jobs whose newest change the read learned.
    pub learned: Vec<String>,
    /// The jobs whose state no majority answered (each kept its last known state): a change
    /// announced for them is not known yet, so the replica reads them again.
    pub unread: Vec<String>,
}

impl Refreshed {
    /// A read of `jobs` that learned `learned`, `read` when a majority answered.
    fn of(learned: Vec<String>, read: bool, jobs: &[String]) -> Self {
        let unread = if read { Vec::new() } else { jobs.to_vec() };
        Refreshed { learned, unread }
    }
}

/// The pause state a replica honours, and where it is changed.
#[derive(Debug, Clone)]
pub enum Control {
    /// Kept on the Redis nodes, so the whole fleet honours it.
    Redis {
        /// The pool the pauses are kept on.
        nodes: Arc<Nodes>,
        /// The configuration's `key_prefix`.
        prefix: String,
        /// The newest change of each job's pause as last read (or written back), by job: the
        /// scheduler asks this before each slot, and a node that lost it is given it again.
        known: Arc<RwLock<HashMap<String, PauseEvent>>>,
        /// Where a change heard but not acknowledged by the replicas is counted (a running
        /// replica's; the CLI has none).
        metrics: Option<Arc<Metrics>>,
    },
    /// Standalone mode: one replica; pauses are not shared (the CLI needs Redis).
    Off,
}

impl Control {
    /// The fleet's control on `nodes`, under `prefix`.
    pub fn redis(nodes: Arc<Nodes>, prefix: &str) -> Self {
        Control::Redis {
            nodes,
            prefix: prefix.to_owned(),
            known: Arc::default(),
            metrics: None,
        }
    }

    /// The same, counting the changes it hears that the primary's replicas did not acknowledge.
    pub fn counting(self, counted: Arc<Metrics>) -> Self {
        match self {
            Control::Redis {
                nodes,
                prefix,
                known,
                ..
            } => Control::Redis {
                nodes,
                prefix,
                known,
                metrics: Some(counted),
            },
            Control::Off => Control::Off,
        }
    }

    /// The same control (the pauses this replica knows) reading its logs on `nodes`: the
    /// status page's own connections, so its reads never queue ahead of a race's.
    pub fn reading_on(&self, nodes: Arc<Nodes>) -> Self {
        match self {
            Control::Redis {
                prefix,
                known,
                metrics,
                ..
            } => Control::Redis {
                nodes,
                prefix: prefix.clone(),
                known: known.clone(),
                metrics: metrics.clone(),
            },
            Control::Off => Control::Off,
        }
    }

    /// The pause of `job` that holds at `t`, as this replica knows it.
    pub fn paused(&self, job: &str, t: DateTime<Utc>) -> Option<Pause> {
        let Control::Redis { known, .. } = self else {
            return None;
        };
        let known = known.read().unwrap_or_else(|p| p.into_inner());
        match known.get(job) {
            Some(PauseEvent::Paused(pause)) if pause.holds_at(t) => Some(pause.clone()),
            _ => None,
        }
    }

    /// Pauses `job` fleet-wide: stamped and ended on the fleet's clock, then the record on a
    /// majority, the log, the announcement, then the primary's replicas asked to acknowledge it
    /// (sentinel and cluster modes).
    pub async fn pause(&self, job: &str, order: &PauseOrder) -> Result<Taken<Pause>, PauseError> {
        let (taken, _) = self.pause_over(job, order, Existing::Replace).await?;
        Ok(taken)
    }

    /// [`Control::pause`], deciding what becomes of a pause that already holds (on the fleet's
    /// clock at the new one's stamp); returns the one it replaced, if any.
    pub async fn pause_over(
        &self,
        job: &str,
        order: &PauseOrder,
        existing: Existing,
    ) -> Result<(Taken<Pause>, Option<Pause>), PauseError> {
        let Control::Redis { nodes, prefix, .. } = self else {
            return Ok((Taken::unreplicated(order.stamped(Utc::now())), None));
        };
        let newest = read_newest_of(nodes, prefix, job).await;
        let pause = order.stamped(stamp(nodes, newest.as_ref()).await);
        pause.ends_after_its_stamp()?;
        let holding = existing.over(newest, pause.at)?;
        let record = serde_json::to_string(&pause).unwrap_or_default();
        let mut cmd = redis::cmd("SET");
        cmd.arg(pause_key(prefix, job)).arg(record);
        majority(nodes, cmd).await?;
        let replication = self.changed(job, &PauseEvent::Paused(pause.clone())).await;
        let taken = Taken {
            change: pause,
            replication,
        };
        Ok((taken, holding))
    }

    /// Resumes `job` fleet-wide: a tombstone in place of the pause, on a majority, acknowledged
    /// as a pause is. Returns the pause it ended, if one held.
    pub async fn resume(&self, job: &str, by: &str) -> Result<Taken<Option<Pause>>, NoMajority> {
        let Control::Redis { nodes, prefix, .. } = self else {
            return Ok(Taken::unreplicated(None));
        };
        let newest = read_newest_of(nodes, prefix, job).await;
        let event = PauseEvent::Resumed {
            by: by.to_owned(),
            at: stamp(nodes, newest.as_ref()).await,
        };
        let mut cmd = redis::cmd("SET");
        cmd.arg(pause_key(prefix, job))
            .arg(serde_json::to_string(&event).unwrap_or_default());
        majority(nodes, cmd).await?;
        let replication = self.changed(job, &event).await;
        let ended = match newest {
            Some(PauseEvent::Paused(pause)) => Some(pause),
            Some(PauseEvent::Resumed { .. }) | None => None,
        };
        Ok(Taken {
            change: ended,
            replication,
        })
    }

    /// Logs and announces a change (best effort: the record on the nodes is what counts), then
    /// waits for the primary's replicas to have both (`WAIT`, as for a won slot's lock): a
    /// failover to a replica without them would lose the change.
    async fn changed(&self, job: &str, event: &PauseEvent) -> Option<Replication> {
        let Control::Redis { nodes, prefix, .. } = self else {
            return None;
        };
        nodes
            .query::<Value>(
                xadd_log(prefix, job, event),
                CONTROL_TIMEOUT,
                Replies::settled,
            )
            .await;
        let replication = nodes
            .replicated(&pause_key(prefix, job), WAIT_MARK_TTL)
            .await;
        pubsub::publish_all(nodes, &channel(prefix), job, CONTROL_TIMEOUT).await;
        replication
    }

    /// Reads the pause state of every job in `jobs` into what this replica knows (one `MGET`
    /// per node for all of them); a job whose state a majority did not answer keeps its last
    /// known state (logged). A change this replica knows that is newer than any the nodes
    /// answered was lost by them (a failover to a replica that had not received it, a node
    /// restarted empty): it is written back onto them rather than forgotten (logged). Returns
    /// the jobs whose newest change this read learned, and those it could not read.
    pub async fn refresh(&self, jobs: &[String]) -> Refreshed {
        let Control::Redis {
            nodes,
            prefix,
            known,
            ..
        } = self
        else {
            return Refreshed::default();
        };
        let (answered, newest) = read_newest(nodes, prefix, jobs).await;
        let (mut lost, mut learned) = (Vec::new(), Vec::new());
        {
            let mut known = known.write().unwrap_or_else(|p| p.into_inner());
            for (job, newest) in jobs.iter().zip(newest) {
                let kept = known.get(job);
                if answered >= nodes.quorum() && is_newer(kept, newest.as_ref()) {
                    lost.extend(kept.map(|event| (job.clone(), event.clone())));
                    continue;
                }
                if learn(&mut known, job, pause_state(nodes, answered, newest), nodes) {
                    learned.push(job.clone());
                }
            }
        }
        for (job, event) in lost {
            restore(nodes, prefix, &job, &event).await;
        }
        Refreshed::of(learned, answered >= nodes.quorum(), jobs)
    }

    /// A change of `job` heard: the primary's replicas are asked for it too (`WAIT`, sentinel
    /// and cluster modes), so a change `pause` or `resume` could not get acknowledged is
    /// counted and logged where the fleet is watched, not only on the operator's terminal.
    async fn confirm(&self, job: &str) {
        let Control::Redis {
            nodes,
            prefix,
            metrics,
            ..
        } = self
        else {
            return;
        };
        let key = pause_key(prefix, job);
        let Some(replication) = nodes.replicated(&key, WAIT_MARK_TTL).await else {
            return;
        };
        if !replication.is_short() {
            return;
        }
        if let Some(metrics) = metrics {
            metrics.unreplicated_pause_change(job);
        }
        tracing::warn!(
            job,
            acked = replication.acked,
            wanted = replication.wanted,
            "a pause change reached fewer replicas than wait_replicas: a failover now could \
            lose it (this replica keeps it, and writes it back onto a primary that lost it)"
        );
    }

    /// Publishes `payload` on the control channel (a job's name: read it again).
    async fn announce(&self, payload: &str) {
        if let Control::Redis { nodes, prefix, .. } = self {
            pubsub::publish_all(nodes, &channel(prefix), payload, CONTROL_TIMEOUT).await;
        }
    }

    /// Writes the fleet state of every job in `jobs` that does not expire (pause log,
    /// watermark, run history) back onto the nodes that lost it: after a node's subscription
    /// reopened, since the node may have come back empty.
    pub async fn repair(&self, jobs: &[String]) {
        let Control::Redis { nodes, prefix, .. } = self else {
            return;
        };
        let history = History::Redis {
            nodes: nodes.clone(),
            prefix: prefix.clone(),
        };
        for job in jobs {
            repair_log(nodes, prefix, job).await;
            watermark::repair(&history, job).await;
            history.repair(job).await;
        }
    }

    /// The changes of each job of `jobs`'s pause state, oldest first, merged across the
    /// nodes, in order: one `XREAD` per node for all of them (a replica's start reads them
    /// together).
    pub async fn logs(&self, jobs: &[String]) -> Vec<Vec<PauseEvent>> {
        let Control::Redis { nodes, prefix, .. } = self else {
            return vec![Vec::new(); jobs.len()];
        };
        if jobs.is_empty() {
            return Vec::new();
        }
        let keys: Vec<String> = jobs.iter().map(|job| log_key(prefix, job)).collect();
        let mut cmd = redis::cmd("XREAD");
        cmd.arg("STREAMS").arg(&keys);
        for _ in &keys {
            cmd.arg("0-0");
        }
        // Nil when none of the streams holds an entry.
        let reads = nodes
            .query::<Option<Vec<(String, LogEntries)>>>(cmd, CONTROL_TIMEOUT, |r| {
                r.settled() && r.answered() > 0
            })
            .await;
        keys.iter()
            .map(|key| {
                let per_node = reads.values().map(|streams| {
                    let stream = streams.iter().flatten().find(|(k, _)| k == key);
                    stream
                        .map(|(_, entries)| entries.clone())
                        .unwrap_or_default()
                });
                merge_log(per_node.collect())
            })
            .collect()
    }

    /// The changes of `job`'s pause state, oldest first, merged across the nodes.
    pub async fn log(&self, job: &str) -> Vec<PauseEvent> {
        let Control::Redis { nodes, prefix, .. } = self else {
            return Vec::new();
        };
        let mut cmd = redis::cmd("XRANGE");
        cmd.arg(log_key(prefix, job)).arg("-").arg("+");
        // Merged on read, like the history: a node that is not waited for adds nothing.
        let reads = nodes
            .query::<LogEntries>(cmd, CONTROL_TIMEOUT, |r| r.settled() && r.answered() > 0)
            .await;
        merge_log(reads.values().cloned().collect())
    }

    /// Keeps what this replica knows current until shutdown: a read of every job at each
    /// (re)subscription, and of one job at each announcement. `jobs` gives the current names.
    pub fn watch(
        &self,
        jobs: impl Fn() -> Vec<String> + Send + 'static,
        tracker: &TaskTracker,
        shutdown: &CancellationToken,
    ) {
        let Control::Redis { nodes, prefix, .. } = self else {
            return;
        };
        let heard = pubsub::subscribe_all(nodes, &channel(prefix), tracker, shutdown);
        tracker.spawn(follow(self.clone(), heard, jobs, shutdown.clone()));
    }
}

/// What [`follow`] does next: what a subscription carried, or a read again of the jobs whose
/// last read reached no majority.
enum Next {
    Heard(Heard),
    Reread,
}

/// The jobs whose last read reached no majority (each kept its last known state), as while a
/// cluster fails over or the pool holds the nodes suspect: a change heard for them, or made
/// while the subscription was down, is not known yet, and nothing else reads them again until
/// a resubscription. So they are read again, on a deadline that heard messages do not push back.
struct Unread {
    jobs: Vec<String>,
    /// When to read them again (`None`: none unread).
    at: Option<Instant>,
    /// The wait before the next read again, doubled after each one that fails.
    wait: Duration,
}

impl Unread {
    fn new() -> Self {
        Unread {
            jobs: Vec::new(),
            at: None,
            wait: REREAD_FIRST,
        }
    }

    /// Adds what a read left unread; a read that left none after a read again ends the wait.
    fn add(&mut self, read: Refreshed, reread: bool) {
        for job in read.unread {
            if !self.jobs.contains(&job) {
                self.jobs.push(job);
            }
        }
        if self.jobs.is_empty() {
            (self.at, self.wait) = (None, REREAD_FIRST);
        } else if self.at.is_none() || reread {
            self.at = Some(Instant::now() + self.wait);
            self.wait = (self.wait * 2).min(REREAD_MAX);
        }
    }
}

async fn follow(
    control: Control,
    mut heard: mpsc::Receiver<Heard>,
    jobs: impl Fn() -> Vec<String>,
    shutdown: CancellationToken,
) {
    let (mut announced, mut unread) = (false, Unread::new());
    while let Some(next) = next_step(&mut heard, &shutdown, unread.at).await {
        let (read, reread) = match next {
            Next::Heard(message) => {
                let read = on_heard(&control, message, jobs(), &mut announced).await;
                (read, false)
            }
            Next::Reread => {
                let read = control.refresh(&std::mem::take(&mut unread.jobs)).await;
                confirm_all(&control, &read.learned).await;
                (read, true)
            }
        };
        unread.add(read, reread);
    }
}

/// The next thing a subscription carries, or [`Next::Reread`] at `reread_at`. `None` at
/// shutdown.
async fn next_step(
    heard: &mut mpsc::Receiver<Heard>,
    shutdown: &CancellationToken,
    reread_at: Option<Instant>,
) -> Option<Next> {
    let reread = async {
        match reread_at {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    };
    // What was heard first: a read again can wait for it.
    tokio::select! {
        biased;
        message = pubsub::next(heard, shutdown) => message.map(Next::Heard),
        () = reread => Some(Next::Reread),
    }
}

/// What a subscription carried, acted on: a (re)subscription reads every job (and repairs the
/// nodes after a broken connection), an announcement the job it names.
async fn on_heard(
    control: &Control,
    message: Heard,
    jobs: Vec<String>,
    announced: &mut bool,
) -> Refreshed {
    match message {
        Heard::Subscribed { again } => {
            let read = control.refresh(&jobs).await;
            if again {
                control.repair(&jobs).await;
                repair_audit(control).await;
            }
            if !std::mem::replace(announced, true) {
                control.announce(EVERY_JOB).await;
            }
            read
        }
        Heard::Message(every) if every == EVERY_JOB => control.refresh(&jobs).await,
        Heard::Message(job) => {
            let read = control.refresh(&[job]).await;
            confirm_all(control, &read.learned).await;
            read
        }
    }
}

/// [`Control::confirm`] of each job in `jobs`.
async fn confirm_all(control: &Control, jobs: &[String]) {
    for job in jobs {
        control.confirm(job).await;
    }
}

/// The audit trail written back onto a node that may have come back empty, as the jobs'
/// state is ([`Control::repair`]).
async fn repair_audit(control: &Control) {
    if let Control::Redis { nodes, prefix, .. } = control {
        Audit::redis(nodes.clone(), prefix).repair().await;
    }
}

fn pause_key(prefix: &str, job: &str) -> String {
    format!("{prefix}:{job}:paused")
}

fn log_key(prefix: &str, job: &str) -> String {
    format!("{prefix}:pauses:{job}")
}

fn channel(prefix: &str) -> String {
    format!("{prefix}:control")
}

/// Runs `cmd` on every node that is up (the pool's rule: a suspect node is not waited for, so
/// the change lands on every node that can take it); an error unless a majority took it.
async fn majority(nodes: &Nodes, cmd: redis::Cmd) -> Result<(), NoMajority> {
    let needed = nodes.quorum();
    let replies = nodes
        .query::<Value>(cmd, CONTROL_TIMEOUT, Replies::settled)
        .await;
    let acked = replies.answered();
    if acked >= needed {
        return Ok(());
    }
    let errors: Vec<String> = replies.errors().map(ToString::to_string).collect();
    // A node the pool holds suspect (down at its last try) is not waited for: no error of its
    // own, but the message must still say why.
    let errors = if errors.is_empty() {
        "no answer from the rest (down at their last try)".to_owned()
    } else {
        errors.join("; ")
    };
    Err(NoMajority {
        acked,
        nodes: nodes.len(),
        needed,
        errors,
    })
}

/// A job's pause state, read like a lock from `answered` nodes: held when any node of an
/// answering majority holds a pause newer than every resume seen ([`read_newest`]).
fn pause_state(
    nodes: &Nodes,
    answered: usize,
    newest: Option<PauseEvent>,
) -> (PauseState, Option<PauseEvent>) {
    if answered < nodes.quorum() {
        return (PauseState::Unknown { answered }, newest);
    }
    let state = match &newest {
        Some(PauseEvent::Paused(pause)) => PauseState::Held(pause.clone()),
        Some(PauseEvent::Resumed { .. }) | None => PauseState::NotHeld,
    };
    (state, newest)
}

/// Whether `kept`, the change this replica knows, is newer than `read`, the newest the nodes
/// answered (or they answered none).
fn is_newer(kept: Option<&PauseEvent>, read: Option<&PauseEvent>) -> bool {
    match (kept, read) {
        (Some(kept), Some(read)) => kept.at() > read.at(),
        (Some(_), None) => true,
        (None, _) => false,
    }
}

/// What this replica knows of `job` after a read found `state`; whether that is a change it
/// did not know.
fn learn(
    known: &mut HashMap<String, PauseEvent>,
    job: &str,
    state: (PauseState, Option<PauseEvent>),
    nodes: &Nodes,
) -> bool {
    match state {
        (PauseState::Unknown { answered }, _) => tracing::warn!(
            job = %job,
            answered,
            needed = nodes.quorum(),
            paused = matches!(known.get(job), Some(PauseEvent::Paused(_))),
            "pause state not read from a majority of Redis nodes: keeping the last known state"
        ),
        (_, Some(event)) => return known.insert(job.to_owned(), event.clone()) != Some(event),
        (_, None) => {
            known.remove(job);
        }
    }
    false
}

/// Writes `event`, the newest change of `job`'s pause this replica knows, back onto the nodes
/// that answered without it: the record and its pause-log entry (the ledger's), logged.
async fn restore(nodes: &Nodes, prefix: &str, job: &str, event: &PauseEvent) {
    let paused = matches!(event, PauseEvent::Paused(_));
    tracing::warn!(job, paused, at = %event.at(),
        "the Redis nodes lost this job's newest pause change (a failover to a replica that had \
        not received it, or a node restarted empty): written back from this replica's memory");
    let mut cmd = redis::cmd("SET");
    cmd.arg(pause_key(prefix, job))
        .arg(serde_json::to_string(event).unwrap_or_default());
    nodes
        .query::<Value>(cmd, CONTROL_TIMEOUT, Replies::settled)
        .await;
    let log = xadd_log(prefix, job, event);
    nodes
        .query::<Value>(log, CONTROL_TIMEOUT, Replies::settled)
        .await;
    // A replica started since the loss read the nodes without it: it reads the job again.
    pubsub::publish_all(nodes, &channel(prefix), job, CONTROL_TIMEOUT).await;
}

/// [`read_newest`] of one job.
async fn read_newest_of(nodes: &Nodes, prefix: &str, job: &str) -> Option<PauseEvent> {
    read_newest(nodes, prefix, &[job.to_owned()])
        .await
        .1
        .pop()
        .flatten()
}

/// The newest change to each job of `jobs`'s pause that any answering node holds (one `MGET`
/// per node), and how many nodes answered; each change is written back onto the answering
/// nodes that lack it (read-repair), so a node restarted empty holds it again.
async fn read_newest(
    nodes: &Nodes,
    prefix: &str,
    jobs: &[String],
) -> (usize, Vec<Option<PauseEvent>>) {
    let mut cmd = redis::cmd("MGET");
    for job in jobs {
        cmd.arg(pause_key(prefix, job));
    }
    let replies = nodes
        .query::<Vec<Option<String>>>(cmd, CONTROL_TIMEOUT, Replies::settled)
        .await;
    let mut newest_of = Vec::with_capacity(jobs.len());
    for (j, job) in jobs.iter().enumerate() {
        // Each node's record of the job: `None` for a node that did not answer.
        let held: Vec<Option<Option<PauseEvent>>> = replies
            .answers()
            .iter()
            .map(|a| match a {
                Some(Ok(values)) => Some(
                    values
                        .get(j)
                        .cloned()
                        .flatten()
                        .and_then(|text| PauseEvent::parse_record(&text)),
                ),
                _ => None,
            })
            .collect();
        let newest = held
            .iter()
            .flatten()
            .flatten()
            .max_by_key(|e| e.at())
            .cloned();
        if let Some(newest) = &newest {
            let stale: Vec<bool> = held
                .iter()
                .map(|h| h.as_ref().is_some_and(|h| h.as_ref() != Some(newest)))
                .collect();
            write_back(nodes, &pause_key(prefix, job), newest, &stale).await;
        }
        newest_of.push(newest);
    }
    (replies.answered(), newest_of)
}

/// When a change is made, on the fleet's terms: the nodes' `TIME` (as the fleet clock reads
/// it), and never before the newest change already recorded. Changes are ordered by this stamp,
/// so a change always comes after the one it read, whatever the clock of the machine it was
/// typed on: a laptop five minutes fast would otherwise date its pause in the future, where it
/// does not hold yet, and that pause would then win over the resume typed after it.
async fn stamp(nodes: &Nodes, newest: Option<&PauseEvent>) -> DateTime<Utc> {
    let clock = FleetClock::new(Arc::new(SystemClock), true);
    let now = match clock.measure(nodes).await {
        Measurement::NoAnswer => Utc::now(),
        Measurement::First { .. } | Measurement::Again { .. } => clock.fleet_now(),
    };
    newest.map_or(now, |n| now.max(n.at() + chrono::Duration::milliseconds(1)))
}

/// Sets `key` to `event` on the nodes `stale` marks (best effort: the next read tries again).
async fn write_back(nodes: &Nodes, key: &str, event: &PauseEvent, stale: &[bool]) {
    if !stale.contains(&true) {
        return;
    }
    let stale_nodes: Vec<String> = nodes
        .iter()
        .zip(stale)
        .filter(|(_, s)| **s)
        .map(|(n, _)| n.address().to_owned())
        .collect();
    tracing::info!(key, nodes = ?stale_nodes, "pause state repaired onto nodes that lacked it");
    let mut cmd = redis::cmd("SET");
    cmd.arg(key)
        .arg(serde_json::to_string(event).unwrap_or_default());
    let cmd = Arc::new(cmd);
    let targets = stale_nodes;
    nodes
        .ask_some(
            |node| targets.iter().any(|t| t == node.address()),
            |node| {
                let cmd = cmd.clone();
                async move { node.query::<Value>(&cmd, CONTROL_TIMEOUT).await }
            },
            Replies::settled,
        )
        .await;
}

/// Appends to each node that answered the pause-log entries it lacks (a node restarted empty
/// lacks them all), so the ledger keeps telling paused slots from missed ones.
async fn repair_log(nodes: &Nodes, prefix: &str, job: &str) {
    let mut cmd = redis::cmd("XRANGE");
    cmd.arg(log_key(prefix, job)).arg("-").arg("+");
    let reads = nodes
        .query::<LogEntries>(cmd, CONTROL_TIMEOUT, Replies::settled)
        .await;
    let per_node: Vec<Option<Vec<PauseEvent>>> = reads
        .answers()
        .iter()
        .map(|a| match a {
            Some(Ok(entries)) => Some(merge_log(vec![entries.clone()])),
            _ => None,
        })
        .collect();
    let all = merge_log(reads.values().cloned().collect());
    for (i, held) in per_node.iter().enumerate() {
        let Some(held) = held else { continue };
        for event in all.iter().filter(|e| !held.contains(e)) {
            tracing::info!(
                job,
                node = i,
                "pause log entry repaired onto a node that lacked it"
            );
            let cmd = xadd_log(prefix, job, event);
            let _ = nodes
                .ask_one(i, |node| async move {
                    node.query::<Value>(&cmd, CONTROL_TIMEOUT).await
                })
                .await;
        }
    }
}

/// The `XADD` of `event` to `job`'s pause log.
fn xadd_log(prefix: &str, job: &str, event: &PauseEvent) -> redis::Cmd {
    let mut xadd = redis::cmd("XADD");
    xadd.arg(log_key(prefix, job))
        .arg("MAXLEN")
        .arg("~")
        .arg(PAUSE_LOG_CAP)
        .arg("*")
        .arg("event")
        .arg(serde_json::to_string(event).unwrap_or_default());
    xadd
}

/// One node's pause-log entries as `XRANGE` answers them: (id, [(field, value)]).
type LogEntries = Vec<(String, Vec<(String, String)>)>;

/// One log from the nodes' streams: entries by id (each node holds the same ids only by
/// chance, so entries are told apart by content), oldest first.
fn merge_log(nodes: Vec<LogEntries>) -> Vec<PauseEvent> {
    let mut events: Vec<PauseEvent> = Vec::new();
    for entries in nodes {
        for (_, fields) in entries {
            let Some((_, text)) = fields.into_iter().find(|(k, _)| k == "event") else {
                continue;
            };
            if let Ok(event) = serde_json::from_str::<PauseEvent>(&text)
                && !events.contains(&event)
            {
                events.push(event);
            }
        }
    }
    events.sort_by_key(PauseEvent::at);
    events
}

/// A period a job was paused: from, and until (`None`: still paused).
pub type PausedSpan = (DateTime<Utc>, Option<DateTime<Utc>>);

/// Whether one of `spans` covers `t`.
pub fn covered(spans: &[PausedSpan], t: DateTime<Utc>) -> bool {
    spans
        .iter()
        .any(|(from, until)| *from <= t && until.is_none_or(|u| t < u))
}

/// The intervals a job was paused, from its log: `[from, to)`, `to` open while it still is.
pub fn paused_intervals(events: &[PauseEvent]) -> Vec<PausedSpan> {
    let mut intervals = Vec::new();
    let mut open: Option<&Pause> = None;
    for event in events {
        match event {
            PauseEvent::Paused(p) => {
                if let Some(prev) = open.take() {
                    intervals.push((prev.at, Some(prev.until.map_or(p.at, |u| u.min(p.at)))));
                }
                open = Some(p);
            }
            PauseEvent::Resumed { at, .. } => {
                if let Some(p) = open.take() {
                    intervals.push((p.at, Some(p.until.map_or(*at, |u| u.min(*at)))));
                }
            }
        }
    }
    if let Some(p) = open {
        intervals.push((p.at, p.until));
    }
    intervals
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(s, 0).unwrap()
    }

    fn paused(at: i64, until: Option<i64>) -> PauseEvent {
        PauseEvent::Paused(Pause {
            by: "ops".into(),
            at: t(at),
            until: until.map(t),
            reason: None,
        })
    }

    fn resumed(at: i64) -> PauseEvent {
        PauseEvent::Resumed {
            by: "ops".into(),
            at: t(at),
        }
    }

    #[test]
    fn a_pause_holds_from_its_start_until_its_end() {
        let p = Pause {
            by: "ops".into(),
            at: t(10),
            until: Some(t(20)),
            reason: None,
        };
        assert!(!p.holds_at(t(9)));
        assert!(p.holds_at(t(10)) && p.holds_at(t(19)));
        assert!(!p.holds_at(t(20)));
    }

    #[test]
    fn an_until_duration_ends_after_the_fleet_stamp_an_absolute_one_where_it_says() {
        let order = |until| PauseOrder {
            by: "ops".into(),
            until: Some(until),
            reason: None,
        };
        let after = order(Until::After(chrono::Duration::seconds(300)));
        assert_eq!(after.stamped(t(1000)).until, Some(t(1300)));
        assert_eq!(
            order(Until::At(t(1200))).stamped(t(1000)).until,
            Some(t(1200))
        );
    }

    #[test]
    fn intervals_close_at_resume_at_until_or_stay_open() {
        let events = [
            paused(10, None),
            resumed(20),
            paused(30, Some(35)),
            resumed(40),
            paused(50, None),
        ];
        assert_eq!(
            paused_intervals(&events),
            vec![(t(10), Some(t(20))), (t(30), Some(t(35))), (t(50), None)]
        );
    }

    #[test]
    fn the_same_event_from_several_nodes_counts_once() {
        let entry = |e: &PauseEvent| {
            (
                "1-0".to_owned(),
                vec![("event".to_owned(), serde_json::to_string(e).unwrap())],
            )
        };
        let node = vec![entry(&paused(10, None)), entry(&resumed(20))];
        let merged = merge_log(vec![node.clone(), node.clone(), node]);
        assert_eq!(merged, vec![paused(10, None), resumed(20)]);
    }
}
