//! One slot's life on one replica: check it is inside its window on the fleet clock (never
//! before its instant, not past the start window), race for the lock (jobs due at the
//! same instant race as one batch), and (for the winner only) hold the job's running lease, run
//! the action inside the lock's validity, and record the run. Each step logs one line with the
//! stable fields `job`, `slot`, `replica`, `outcome`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::action::template::Templates;
use crate::action::{Action, ActionError, Delivery, DeliveryState, SendContext};
use crate::config::{Job, Overlap};
use crate::control::Control;
use crate::handoff::{HandoffRequest, Handoffs};
use crate::history::{History, RunRecord, RunState};
use crate::lock::{Acquire, Lease, SlotKey, SlotLock, Token, Unavailable};
use crate::membership::{self, Candidates, Membership};
use crate::metrics::Metrics;
use crate::schedule::{Fence, SharedClock, Slot};
use crate::secret::Scrubber;

/// Slot keys outlive the latest legitimate racer by this much.
pub const KEY_MARGIN: Duration = Duration::from_secs(5);
/// A replica still races a slot this long after it, even with `max_clock_skew = 0`.
pub const MIN_START_WINDOW: Duration = Duration::from_secs(2);
/// A run still going after this long has its start recorded (it shows as running); a shorter
/// run is recorded once, when it ends. Jobs with `catch_up` record the start at once.
pub const START_RECORD_DELAY: Duration = Duration::from_secs(1);
/// How long a slot's `missed` key is kept: longer than a starting replica looks back.
pub const MISSED_KEY_TTL: Duration = Duration::from_secs(2 * 3600);
/// How long an alert may take, retries included.
pub const ALERT_TIMEOUT: Duration = Duration::from_secs(30);
/// TTL of a job's running lease; the winner extends it every third of this while it runs, so
/// a winner that dies frees the job within this time.
pub const RUNNING_LEASE_TTL: Duration = Duration::from_secs(6);

/// A slot at most this far ahead of the fleet clock is waited for at the race (a re-measured
/// offset, a timer's jitter); further ahead it is skipped as early.
pub const EARLY_WAIT: Duration = Duration::from_secs(1);

/// Why the guard refused a slot.
#[derive(Debug, Clone, Copy)]
enum Outside {
    Early(Duration),
    Late(Duration),
}

/// Why a slot is being raced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RaceKind {
    /// The job's schedule reached the slot.
    Scheduled,
    /// A missed slot run at start (`catch_up`): no start window applies.
    CatchUp,
    /// `slotcron trigger`: now, through the same race.
    Manual,
    /// Another replica won the slot and could not deliver it (see [`crate::handoff`]).
    Handoff,
}

impl RaceKind {
    fn as_str(self) -> &'static str {
        match self {
            RaceKind::Scheduled => "schedule",
            RaceKind::CatchUp => "catch_up",
            RaceKind::Manual => "trigger",
            RaceKind::Handoff => "handoff",
        }
    }
}

/// What one replica needs to race and run slots.
pub struct RaceContext {
    pub replica: String,
    pub lock: SlotLock,
    pub client: reqwest::Client,
    pub templates: Arc<Templates>,
    pub scrubber: Arc<Scrubber>,
    pub clock: SharedClock,
    pub key_prefix: String,
    pub max_clock_skew: Duration,
    pub history: History,
    pub metrics: Arc<Metrics>,
    pub budgets: crate::action::rate::Budgets,
    /// Where a slot this replica could not deliver is offered to the fleet.
    pub handoffs: Handoffs,
    /// The fleet-wide pauses: a paused job's slots are not raced.
    pub control: Control,
    /// The live replicas a slot's candidates are ranked among.
    pub membership: Membership,
    /// `[scheduler] candidates`: how many replicas race each scheduled slot.
    pub candidates: Candidates,
    /// `[scheduler] candidate_stagger`: each further rank waits this much longer to race.
    pub candidate_stagger: Duration,
    /// `[alert.NAME]`: told when a slot of a job with `on_failure` fails or is found missed.
    pub alerts: Arc<BTreeMap<String, Arc<Action>>>,
    /// The replica's shutdown (not a reload's): ends the wait before reporting missed slots,
    /// and tells a handoff offer made while shutting down that this replica no longer listens.
    pub shutdown: CancellationToken,
}

/// How one slot ended on this replica.
#[derive(Debug)]
pub enum SlotResult {
    /// Woke too late to race (paused, overloaded): another replica had the slot.
    Late {
        late: Duration,
    },
    /// Before the slot's instant on the fleet clock (this replica's clock runs ahead): the
    /// slot belongs to the replicas on time.
    Early {
        early: Duration,
    },
    Lost {
        holder: Token,
    },
    Unavailable(Unavailable),
    /// Won, but the job's previous run is still going (`overlap = "skip"`).
    Overlapping {
        holder: Option<Token>,
    },
    Done {
        delivery: Delivery,
        duration: Duration,
    },
    Failed {
        error: String,
        attempts: u32,
        duration: Duration,
        /// Whether the receiver may have acted on an attempt.
        delivery: DeliveryState,
    },
    /// Nothing left this replica (its egress failed, or its lock ran out before the first
    /// byte): the slot was offered to the fleet, which runs it at most once more.
    HandedOff {
        reason: String,
        attempts: u32,
        duration: Duration,
    },
}

impl SlotResult {
    /// The `outcome` field of the slot's final log line.
    pub fn outcome(&self) -> &'static str {
        match self {
            SlotResult::Late { .. } | SlotResult::Early { .. } | SlotResult::Overlapping { .. } => {
                "skipped"
            }
            SlotResult::Lost { .. } => "lost",
            SlotResult::Unavailable(_) => "unavailable",
            SlotResult::Done { .. } => "done",
            SlotResult::Failed { .. } => "failed",
            SlotResult::HandedOff { .. } => "handed_off",
        }
    }
}

/// Why a run did not deliver, scrubbed, with what the receiver may have seen.
#[derive(Debug)]
struct SendFailure {
    error: String,
    attempts: u32,
    delivery: DeliveryState,
    /// Nothing left this replica for a reason of its own: another replica may deliver it.
    local: bool,
}

/// What one run of the action came to, before the handoff decision.
#[derive(Debug)]
struct Ran {
    sent: Result<Delivery, SendFailure>,
    duration: Duration,
    /// From the slot to the action's start, on the fleet clock (as `slotcron_lateness_seconds`).
    lateness: Duration,
}

/// A slot this replica won: its run is still to do ([`RaceContext::run`]).
#[derive(Debug)]
pub struct Won {
    pub job: Arc<Job>,
    pub slot: Slot,
    lease: Lease,
    /// The job's running lease, held while the run goes on (`overlap = "skip"`).
    running: Option<Lease>,
    kind: RaceKind,
    /// This run's fencing token: the slot's, plus one on a handoff.
    fence: Fence,
    /// On a handoff: the replica that had the slot before and could not deliver.
    previous_winner: Option<String>,
    /// On a handoff: every replica that had the slot before.
    excluded: Vec<String>,
}

/// What one race is for, as its log line names it.
#[derive(Clone, Copy)]
struct Entry<'a> {
    job: &'a Arc<Job>,
    slot: Slot,
    kind: RaceKind,
    /// This replica's rank among the slot's candidates (`None`: every replica races).
    rank: Option<usize>,
    /// The handoff offer raced for, if any: the run then carries its fence and previous winner.
    offer: Option<&'a HandoffRequest>,
}

impl<'a> Entry<'a> {
    fn new(job: &'a Arc<Job>, slot: Slot, kind: RaceKind) -> Self {
        Entry {
            job,
            slot,
            kind,
            rank: None,
            offer: None,
        }
    }
}

/// How a race for one slot ended on this replica.
#[derive(Debug)]
pub enum Claim {
    /// Won: the run is still to do.
    Won(Won),
    /// Nothing to run here: lost, unavailable, too late, or the job's previous run is still
    /// going (already logged and counted).
    Settled(SlotResult),
}

impl RaceContext {
    /// How long after its slot a replica (by its own clock) still races for it.
    pub fn start_window(&self) -> Duration {
        self.max_clock_skew.max(MIN_START_WINDOW)
    }

    /// The slot key's TTL: the run, plus the spread of replicas' clocks, plus the start window.
    /// A replica whose clock lags or that wakes late then still finds the slot taken.
    pub fn key_ttl(&self, job: &Job) -> Duration {
        job.timeout + self.max_clock_skew + self.start_window() + KEY_MARGIN
    }

    /// Races for a scheduled `slot` of `job` and, if won, runs it.
    pub async fn run_slot(&self, job: &Arc<Job>, slot: Slot) -> SlotResult {
        self.race(job, slot, RaceKind::Scheduled).await
    }

    /// Races for `slot` of `job` and, if won, runs it.
    pub async fn race(&self, job: &Arc<Job>, slot: Slot, kind: RaceKind) -> SlotResult {
        match self.claim(job, slot, kind).await {
            Claim::Won(won) => self.run(won).await,
            Claim::Settled(result) => result,
        }
    }

    /// Races for `slot` of `job`: logs the outcome; a win is still to run.
    pub async fn claim(&self, job: &Arc<Job>, slot: Slot, kind: RaceKind) -> Claim {
        if let Some(outside) = self.outside_window(slot, kind).await {
            return Claim::Settled(self.skip(job, slot, outside));
        }
        let key = SlotKey::new(&self.key_prefix, &job.name, slot);
        let raced_at = Instant::now();
        let acquired = self.lock.acquire(&key, self.key_ttl(job)).await;
        let mut claim = self.settle(Entry::new(job, slot, kind), acquired, raced_at.elapsed());
        self.take_running_leases(std::slice::from_mut(&mut claim))
            .await;
        claim
    }

    /// The latest instant a slot may be delivered, on the fleet clock: one job timeout after
    /// the first winner's lock surely lapsed, so a handoff still has a whole timeout to run.
    pub fn handoff_deadline(&self, job: &Job, slot: Slot) -> chrono::DateTime<Utc> {
        let span = self.key_ttl(job) + job.timeout;
        slot.instant() + chrono::Duration::from_std(span).unwrap_or(chrono::Duration::MAX)
    }

    /// Takes a handoff offer for `job`: races for the slot's handoff key and, if won, runs it
    /// with the offer's fence. `None` when the offer is not this replica's to take (it made
    /// it), so nothing is logged.
    pub async fn take_over(&self, job: &Arc<Job>, offer: &HandoffRequest) -> Option<SlotResult> {
        if offer.excludes(&self.replica) {
            return None;
        }
        let slot = offer.slot()?;
        let late = (self.clock.now() - self.handoff_deadline(job, slot)).to_std();
        if let Ok(late) = late {
            tracing::warn!(job = %job.name, %slot, replica = %self.replica, outcome = %"skipped",
                trigger = %"handoff", previous_winner = %offer.previous_winner, reason = %"deadline",
                "the handoff offer came {} ms past the slot's deadline: not taken", late.as_millis());
            self.metrics.slot(&job.name, "skipped");
            return Some(SlotResult::Late { late });
        }
        let key = SlotKey::handoff(&self.key_prefix, &job.name, slot, offer.handoff);
        let raced_at = Instant::now();
        let acquired = self.lock.acquire(&key, self.key_ttl(job)).await;
        let elapsed = raced_at.elapsed();
        let entry = Entry {
            offer: Some(offer),
            ..Entry::new(job, slot, RaceKind::Handoff)
        };
        let mut claim = self.settle(entry, acquired, elapsed);
        self.take_running_leases(std::slice::from_mut(&mut claim))
            .await;
        Some(match claim {
            Claim::Won(won) => self.run(won).await,
            Claim::Settled(result) => result,
        })
    }

    /// Races for `slot` of every job of `jobs` (the jobs due at that instant) as one batch: one
    /// round trip per node for all of them. Logs each outcome, with this replica's `rank` among
    /// the candidates; one claim per job, in order.
    pub async fn claim_many(
        &self,
        jobs: &[Arc<Job>],
        slot: Slot,
        kind: RaceKind,
        rank: Option<usize>,
    ) -> Vec<Claim> {
        if let Some(outside) = self.outside_window(slot, kind).await {
            return jobs
                .iter()
                .map(|job| Claim::Settled(self.skip(job, slot, outside)))
                .collect();
        }
        let keys: Vec<(SlotKey, Duration)> = jobs
            .iter()
            .map(|job| {
                (
                    SlotKey::new(&self.key_prefix, &job.name, slot),
                    self.key_ttl(job),
                )
            })
            .collect();
        let raced_at = Instant::now();
        let acquired = self.lock.acquire_many(&keys).await;
        let elapsed = raced_at.elapsed();
        let mut claims: Vec<Claim> = jobs
            .iter()
            .zip(acquired)
            .map(|(job, acquired)| {
                let entry = Entry {
                    rank,
                    ..Entry::new(job, slot, kind)
                };
                self.settle(entry, acquired, elapsed)
            })
            .collect();
        self.take_running_leases(&mut claims).await;
        claims
    }

    /// `jobs` grouped by this replica's rank among each one's candidates for `slot`, first rank
    /// first; a job this replica is not a candidate for is left to the others (logged at debug
    /// and counted as `standby`). A late member (no heartbeat for [`membership::LATE_AFTER`])
    /// ranked above this replica may have died: this replica moves up one place for it. With
    /// `candidates = "all"`: one group, unranked.
    pub fn by_rank(&self, jobs: Vec<Arc<Job>>, slot: Slot) -> Vec<(Option<usize>, Vec<Arc<Job>>)> {
        let Candidates::Top(k) = self.candidates else {
            return vec![(None, jobs)];
        };
        let live = self.membership.live(&self.replica);
        let late = self.membership.late(&self.replica);
        self.metrics.fleet_replicas(live.len());
        let mut groups: BTreeMap<usize, Vec<Arc<Job>>> = BTreeMap::new();
        for job in jobs {
            let rank = membership::rank(&live, &self.replica, &job.name, slot);
            let covering = late
                .iter()
                .filter(|l| membership::rank(&live, l, &job.name, slot) < rank)
                .count();
            let place = rank - covering;
            if place <= k.get() {
                groups.entry(place).or_default().push(job);
                continue;
            }
            tracing::debug!(job = %job.name, %slot, replica = %self.replica, outcome = %"standby",
                rank, fleet = live.len(), "not one of the slot's {k} candidates: not racing");
            self.metrics.slot(&job.name, "standby");
        }
        groups
            .into_iter()
            .map(|(r, jobs)| (Some(r), jobs))
            .collect()
    }

    /// How long a candidate of `rank` waits after the slot before it races, so the first-ranked
    /// normally wins and the others only cover for it.
    pub fn stagger(&self, rank: Option<usize>) -> Duration {
        let behind = rank.map_or(0, |r| r.saturating_sub(1));
        self.candidate_stagger
            .saturating_mul(u32::try_from(behind).unwrap_or(u32::MAX))
    }

    /// `jobs` less the ones paused at `slot`, each of which logs `paused` and is counted.
    pub fn drop_paused(&self, jobs: Vec<Arc<Job>>, slot: Slot) -> Vec<Arc<Job>> {
        jobs.into_iter()
            .filter(|job| {
                let pause = self.control.paused(&job.name, slot.instant());
                self.metrics.paused(&job.name, pause.is_some());
                let Some(pause) = pause else { return true };
                tracing::info!(job = %job.name, %slot, replica = %self.replica, outcome = %"paused",
                    paused_by = %pause.by, paused_at = %pause.at.to_rfc3339(),
                    until = pause.until.map(|u| u.to_rfc3339()), reason = pause.reason.as_deref(),
                    "the job is paused: slot not raced");
                self.metrics.slot(&job.name, "paused");
                false
            })
            .collect()
    }

    /// The guard before every race, on the fleet clock (not the timeline's): a replica never
    /// races a slot before its instant, whatever its timeline says (a fast or stepped wall
    /// clock under `clock = "local"`, a re-measured fleet offset). A slot up to [`EARLY_WAIT`]
    /// ahead is waited for; one further ahead is skipped as early. A scheduled slot past the
    /// start window is skipped as late.
    async fn outside_window(&self, slot: Slot, kind: RaceKind) -> Option<Outside> {
        let ahead = |now: DateTime<Utc>| {
            (slot.instant() - now)
                .to_std()
                .ok()
                .filter(|d| !d.is_zero())
        };
        if let Some(early) = ahead(self.clock.fleet_now()) {
            if early > EARLY_WAIT {
                return Some(Outside::Early(early));
            }
            tokio::time::sleep(early).await;
            if let Some(early) = ahead(self.clock.fleet_now()) {
                return Some(Outside::Early(early));
            }
        }
        let late = (self.clock.fleet_now() - slot.instant())
            .to_std()
            .unwrap_or_default();
        (kind == RaceKind::Scheduled && late > self.start_window()).then_some(Outside::Late(late))
    }

    /// Logs and counts a slot the guard refused.
    fn skip(&self, job: &Job, slot: Slot, outside: Outside) -> SlotResult {
        match outside {
            Outside::Late(late) => self.skip_late(job, slot, late),
            Outside::Early(early) => self.skip_early(job, slot, early),
        }
    }

    fn skip_early(&self, job: &Job, slot: Slot, early: Duration) -> SlotResult {
        tracing::warn!(job = %job.name, %slot, replica = %self.replica, outcome = %"skipped",
            reason = %"early", early_ms = early.as_millis() as u64,
            "{} ms before the slot on the fleet clock (this replica's clock runs ahead): not racing",
            early.as_millis());
        self.metrics.slot(&job.name, "skipped");
        SlotResult::Early { early }
    }

    fn skip_late(&self, job: &Job, slot: Slot, late: Duration) -> SlotResult {
        tracing::warn!(job = %job.name, %slot, replica = %self.replica, outcome = %"skipped",
            reason = %"late", late_ms = late.as_millis() as u64,
            "woke {} ms after the slot, past the start window: not racing", late.as_millis());
        self.metrics.slot(&job.name, "skipped");
        SlotResult::Late { late }
    }

    /// Logs a race's outcome (the line that names the winner) and counts it.
    fn settle(&self, entry: Entry<'_>, acquired: Acquire, lock_time: Duration) -> Claim {
        self.metrics.lock_latency(lock_time);
        let Entry {
            job,
            slot,
            kind,
            rank,
            offer,
        } = entry;
        let previous_winner = offer.map(|o| o.previous_winner.as_str());
        let settled = match acquired {
            Acquire::Won(lease) => {
                tracing::info!(job = %job.name, %slot, replica = %self.replica, outcome = %"won",
                    trigger = %kind.as_str(), rank, previous_winner, validity_ms = lease.validity.as_millis() as u64,
                    lock_us = lock_time.as_micros() as u64, "won the slot");
                self.metrics.slot(&job.name, "won");
                return Claim::Won(Won {
                    job: job.clone(),
                    slot,
                    lease,
                    running: None,
                    kind,
                    fence: offer.map_or(Fence::new(slot, 0), |o| o.fence(slot)),
                    previous_winner: previous_winner.map(str::to_owned),
                    excluded: offer.map(|o| o.excluded.clone()).unwrap_or_default(),
                });
            }
            Acquire::Lost { holder } => {
                tracing::info!(job = %job.name, %slot, replica = %self.replica, outcome = %"lost",
                    trigger = %kind.as_str(), rank, winner = holder.replica(), "lost the slot to {}", holder.replica());
                SlotResult::Lost { holder }
            }
            Acquire::Unavailable(why) => {
                tracing::warn!(job = %job.name, %slot, replica = %self.replica, outcome = %"unavailable",
                    trigger = %kind.as_str(), rank, error = %why, "lock unavailable: the slot does not run here");
                SlotResult::Unavailable(why)
            }
        };
        self.metrics.slot(&job.name, settled.outcome());
        Claim::Settled(settled)
    }

    /// Runs a won slot (the winner's part) and counts its outcome.
    pub async fn run(&self, won: Won) -> SlotResult {
        let result = self.run_won(&won).await;
        self.metrics.slot(&won.job.name, result.outcome());
        result
    }

    /// The winner's part: the run; then the running lease is released (so the next slot, or
    /// the replica taking a handoff, is not held up); then the ending is logged (handing the
    /// slot off if nothing left this replica) and recorded.
    async fn run_won(&self, won: &Won) -> SlotResult {
        let mut record = self.start_record(won);
        let ran = self.execute(won, &record).await;
        self.release_running(won).await;
        let result = self.conclude(won, ran).await;
        finish_record(&mut record, &result);
        self.history.record(&record).await;
        if let SlotResult::Failed { error, .. } = &result {
            // The winner alone sees its failure: one alert per failed slot across the fleet.
            self.alert(&won.job, won.slot, won.fence, "failed", error)
                .await;
        }
        result
    }

    /// Reports a slot found missed (no replica ran it): the replicas that find it race for its
    /// `missed` key, and the winner counts it and tells the job's alert, so it is reported once
    /// across the fleet. The key outlives the look-back of a replica starting later.
    pub async fn report_missed(&self, job: &Job, slot: Slot) {
        let key = SlotKey::missed(&self.key_prefix, &job.name, slot);
        let Acquire::Won(_) = self.lock.acquire(&key, MISSED_KEY_TTL).await else {
            return;
        };
        tracing::warn!(job = %job.name, %slot, replica = %self.replica, outcome = %"missed",
            "no replica ran this slot");
        self.metrics.missed(&job.name);
        let why = "no replica ran this slot (none was up, or Redis was unavailable to all)";
        self.alert(job, slot, Fence::new(slot, 0), "missed", why)
            .await;
    }

    /// Tells the job's `on_failure` alert that `slot` ended `outcome`. The alert's own failure
    /// is logged and goes no further: an alert never alerts about itself.
    pub async fn alert(&self, job: &Job, slot: Slot, fence: Fence, outcome: &str, error: &str) {
        let Some(name) = &job.on_failure else { return };
        let Some(action) = self.alerts.get(name) else {
            return;
        };
        let deadline = Instant::now() + ALERT_TIMEOUT;
        let ctx = SendContext {
            job: &job.name,
            slot,
            zone: job.zone(),
            replica: &self.replica,
            fence,
            deadline,
            valid_until: deadline,
            about: Some((outcome, error)),
            client: &self.client,
            templates: &self.templates,
            budgets: &self.budgets,
            metrics: &self.metrics,
        };
        match action.execute(&ctx).await {
            Ok(_) => tracing::info!(job = %job.name, %slot, replica = %self.replica, alert = %name,
                about = %outcome, "alert sent"),
            Err(e) => {
                tracing::error!(job = %job.name, %slot, replica = %self.replica, alert = %name,
                about = %outcome, error = %self.scrubber.scrub(&e.to_string()), "the alert could not be sent")
            }
        }
    }

    /// Releases the job's running lease, warning when a majority did not confirm it.
    async fn release_running(&self, won: &Won) {
        let Some(running) = &won.running else { return };
        let released = self.lock.release(running).await;
        if released < self.lock.quorum() {
            tracing::warn!(job = %won.job.name, slot = %won.slot, replica = %self.replica, nodes = released,
                "the running lease was released on {released} node(s), fewer than a majority: \
                the job's slots are skipped as overlapping until it expires (at most {} s)",
                RUNNING_LEASE_TTL.as_secs());
        }
    }

    /// The run's record as it starts: `running`, with its trigger and fence.
    fn start_record(&self, won: &Won) -> RunRecord {
        RunRecord {
            job: won.job.name.clone(),
            slot: won.slot,
            replica: self.replica.clone(),
            started: Utc::now(),
            finished: None,
            outcome: RunState::Running,
            error: None,
            attempts: 0,
            trigger: won.kind.as_str().to_owned(),
            fence: won.fence,
            delivery: None,
            previous_winner: won.previous_winner.clone(),
        }
    }

    /// Takes the running lease of every win in `claims` whose job skips overlapping runs, in
    /// one batch; a win whose job's previous run still holds it (or whose lease cannot be
    /// decided) becomes `skipped`.
    async fn take_running_leases(&self, claims: &mut [Claim]) {
        let waiting: Vec<&mut Claim> = claims
            .iter_mut()
            .filter(|claim| matches!(claim, Claim::Won(won) if won.job.overlap == Overlap::Skip))
            .collect();
        if waiting.is_empty() {
            return;
        }
        let keys: Vec<(SlotKey, Duration)> = waiting
            .iter()
            .filter_map(|claim| match claim {
                Claim::Won(won) => Some(SlotKey::running(&self.key_prefix, &won.job.name)),
                Claim::Settled(_) => None,
            })
            .map(|key| (key, RUNNING_LEASE_TTL))
            .collect();
        let leases = self.lock.acquire_many(&keys).await;
        let mut skipped_runs = Vec::new();
        for (claim, acquired) in waiting.into_iter().zip(leases) {
            let Claim::Won(won) = claim else { continue };
            match self.running_lease(&won.job, won.slot, acquired) {
                Ok(running) => won.running = Some(running),
                Err(skipped) => {
                    // Won, then not run: a run outcome, so races{won} = the sum of runs.
                    self.metrics.run_skipped(&won.job.name);
                    let mut record = self.start_record(won);
                    finish_record(&mut record, &skipped);
                    skipped_runs.push(record);
                    *claim = Claim::Settled(skipped);
                }
            }
        }
        // The winner records the skip, so the ledger shows why the slot did not run.
        for record in &skipped_runs {
            self.history.record(record).await;
        }
    }

    /// The job's running lease, or the `skipped` result when the previous run still holds it.
    fn running_lease(&self, job: &Job, slot: Slot, acquired: Acquire) -> Result<Lease, SlotResult> {
        match acquired {
            Acquire::Won(running) => Ok(running),
            Acquire::Lost { holder } => {
                tracing::warn!(job = %job.name, %slot, replica = %self.replica, outcome = %"skipped",
                    reason = %"overlap", running_on = holder.replica(),
                    "the previous run is still going on {}: slot skipped (overlap = \"skip\")", holder.replica());
                Err(SlotResult::Overlapping {
                    holder: Some(holder),
                })
            }
            Acquire::Unavailable(why) => {
                tracing::warn!(job = %job.name, %slot, replica = %self.replica, outcome = %"skipped",
                    reason = %"overlap", error = %why, "cannot tell whether the previous run is still going: slot skipped");
                Err(SlotResult::Overlapping { holder: None })
            }
        }
    }

    /// Runs the action inside the lease, keeping the running lease alive, while the start of
    /// the run is recorded (at once for `catch_up` jobs, else only once the run is slow; a
    /// history write never delays a send).
    async fn execute(&self, won: &Won, record: &RunRecord) -> Ran {
        let started = Instant::now();
        let run = async {
            let lateness = (self.clock.now() - won.slot.instant())
                .to_std()
                .unwrap_or_default();
            self.metrics.lateness(&won.job.name, lateness);
            let action = self.send(won);
            let sent = match &won.running {
                Some(running) => self.with_watchdog(action, running).await,
                None => action.await,
            };
            let duration = started.elapsed();
            self.metrics.action_duration(&won.job.name, duration);
            Ran {
                sent,
                duration,
                lateness,
            }
        };
        if won.job.catch_up.is_some() {
            // Recorded at once: a slot whose winner dies mid-run must not look missed to the
            // catch-up of a replica starting later.
            tokio::join!(self.history.record(record), run).1
        } else {
            self.record_start_if_slow(record, run).await
        }
    }

    /// Logs how the run ended and counts it; a failure where nothing left this replica is
    /// offered to the fleet instead (once per slot, while its deadline allows).
    async fn conclude(&self, won: &Won, ran: Ran) -> SlotResult {
        let (job, slot) = (&won.job, won.slot);
        let duration_ms = ran.duration.as_millis() as u64;
        let failure = match ran.sent {
            Ok(delivery) => {
                tracing::info!(job = %job.name, %slot, replica = %self.replica, outcome = %"done",
                    trigger = %won.kind.as_str(), fence = won.fence.get(), duration_ms,
                    attempts = delivery.attempts, lateness_ms = ran.lateness.as_millis() as u64, "ran the slot");
                return SlotResult::Done {
                    delivery,
                    duration: ran.duration,
                };
            }
            Err(failure) => failure,
        };
        let failure = match self.offerable(won, failure) {
            Ok(reason) => match self.hand_off(won, reason, ran.duration).await {
                Ok(handed_off) => return handed_off,
                Err(failure) => failure,
            },
            Err(failure) => failure,
        };
        tracing::error!(job = %job.name, %slot, replica = %self.replica, outcome = %"failed",
            trigger = %won.kind.as_str(), fence = won.fence.get(), delivery = %failure.delivery.as_str(),
            duration_ms, attempts = failure.attempts, error = %failure.error, "the slot's action failed");
        SlotResult::Failed {
            error: failure.error,
            attempts: failure.attempts,
            duration: ran.duration,
            delivery: failure.delivery,
        }
    }

    /// The failure as a handoff offer's reason when it may be handed off: nothing left this
    /// replica, the slot has not been handed off already, and its deadline is not past.
    fn offerable(&self, won: &Won, failure: SendFailure) -> Result<SendFailure, SendFailure> {
        let open = self.clock.now() < self.handoff_deadline(&won.job, won.slot);
        if failure.local && won.fence.handoff() < Fence::MAX_HANDOFF && open {
            Ok(failure)
        } else {
            Err(failure)
        }
    }

    /// Offers the slot to the fleet. `HandedOff` when another replica heard the offer; the
    /// failure back (its error saying so) when none did.
    async fn hand_off(
        &self,
        won: &Won,
        failure: SendFailure,
        duration: Duration,
    ) -> Result<SlotResult, SendFailure> {
        let mut excluded = won.excluded.clone();
        excluded.push(self.replica.clone());
        let offer = HandoffRequest {
            job: won.job.name.clone(),
            slot_ms: won.slot.epoch_ms(),
            handoff: won.fence.handoff() + 1,
            previous_winner: self.replica.clone(),
            excluded,
            reason: failure.error.clone(),
        };
        let heard = self
            .handoffs
            .offer(&offer, !self.shutdown.is_cancelled())
            .await;
        if heard == 0 {
            return Err(SendFailure {
                error: format!(
                    "{}; no replica that has not had the slot heard the handoff offer",
                    failure.error
                ),
                ..failure
            });
        }
        tracing::warn!(job = %won.job.name, slot = %won.slot, replica = %self.replica, outcome = %"handed_off",
            trigger = %won.kind.as_str(), fence = won.fence.get(), attempts = failure.attempts,
            duration_ms = duration.as_millis() as u64, reason = %failure.error,
            "nothing left this replica: the slot is handed off to the fleet");
        self.metrics.handoff(&won.job.name);
        Ok(SlotResult::HandedOff {
            reason: failure.error,
            attempts: failure.attempts,
            duration,
        })
    }

    /// Drives `run`; if it is still going after [`START_RECORD_DELAY`], records its start
    /// meanwhile, so the history shows it running. A shorter run is recorded once, at its end:
    /// half the history writes for the usual run of a few milliseconds.
    async fn record_start_if_slow<T>(
        &self,
        record: &RunRecord,
        run: impl std::future::Future<Output = T>,
    ) -> T {
        tokio::pin!(run);
        tokio::select! {
            biased;
            outcome = &mut run => return outcome,
            () = tokio::time::sleep(START_RECORD_DELAY) => {}
        }
        tokio::join!(self.history.record(record), run).1
    }

    /// Runs the job's action for `won`: the deadline is the job's timeout, cut short by the
    /// lock's validity and, on a handoff, by the slot's deadline.
    async fn send(&self, won: &Won) -> Result<Delivery, SendFailure> {
        let job = &won.job;
        let mut deadline = (Instant::now() + job.timeout).min(won.lease.valid_until);
        if won.kind == RaceKind::Handoff {
            let left = (self.handoff_deadline(job, won.slot) - self.clock.now()).to_std();
            deadline = deadline.min(Instant::now() + left.unwrap_or_default());
        }
        let ctx = SendContext {
            job: &job.name,
            slot: won.slot,
            zone: job.zone(),
            replica: &self.replica,
            fence: won.fence,
            deadline,
            valid_until: won.lease.valid_until,
            about: None,
            client: &self.client,
            templates: &self.templates,
            budgets: &self.budgets,
            metrics: &self.metrics,
        };
        let sent = match ctx.check_validity(1, false) {
            Ok(()) => job.action.execute(&ctx).await,
            Err(expired) => Err(expired),
        };
        sent.map_err(|e: ActionError| SendFailure {
            error: self.scrubber.scrub(&e.to_string()),
            attempts: e.attempts(),
            delivery: e.delivery(),
            local: e.is_local(),
        })
    }

    /// Drives `action` while extending the running lease every third of its TTL.
    async fn with_watchdog<T>(
        &self,
        action: impl std::future::Future<Output = T>,
        running: &Lease,
    ) -> T {
        tokio::pin!(action);
        loop {
            tokio::select! {
                result = &mut action => return result,
                _ = tokio::time::sleep(RUNNING_LEASE_TTL / 3) => {
                    if !self.lock.extend(running, RUNNING_LEASE_TTL).await {
                        tracing::warn!(key = %running.key, replica = %self.replica,
                            "could not extend the running lease on a majority; another slot may start");
                    }
                }
            }
        }
    }
}

/// The run's final record: its ending, attempts, error and delivery.
fn finish_record(record: &mut RunRecord, result: &SlotResult) {
    record.finished = Some(Utc::now());
    match result {
        SlotResult::Done { delivery, .. } => {
            record.outcome = RunState::Done;
            record.attempts = delivery.attempts;
        }
        SlotResult::Failed {
            error,
            attempts,
            delivery,
            ..
        } => {
            record.outcome = RunState::Failed;
            record.error = Some(error.clone());
            record.attempts = *attempts;
            record.delivery = Some(*delivery);
        }
        SlotResult::HandedOff {
            reason, attempts, ..
        } => {
            record.outcome = RunState::HandedOff;
            record.error = Some(reason.clone());
            record.attempts = *attempts;
            record.delivery = Some(DeliveryState::NotDelivered);
        }
        SlotResult::Overlapping { holder } => {
            record.outcome = RunState::Skipped;
            record.error = Some(match holder {
                Some(holder) => format!(
                    "overlap: the previous run is still going on {}",
                    holder.replica()
                ),
                None => "overlap: cannot tell whether the previous run is still going".to_owned(),
            });
        }
        SlotResult::Late { .. }
        | SlotResult::Early { .. }
        | SlotResult::Lost { .. }
        | SlotResult::Unavailable(_) => {}
    }
}
