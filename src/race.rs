//! One slot's life on one replica: check it is inside its window on the fleet clock (never
//! before its instant, not past the start window), race for the lock (jobs due at the
//! same instant race as one batch), and (for the winner only) hold the job's running lease, run
//! the action inside the lock's validity, and record the run. Each step logs one line with the
//! stable fields `job`, `slot`, `replica`, `outcome`.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::Instant;

use crate::action::template::Templates;
use crate::action::{ActionError, Delivery, SendContext};
use crate::config::{Job, Overlap};
use crate::history::{History, RunRecord, RunState};
use crate::lock::{Acquire, Lease, SlotKey, SlotLock, Token, Unavailable};
use crate::metrics::Metrics;
use crate::schedule::{SharedClock, Slot};
use crate::secret::Scrubber;

/// Slot keys outlive the latest legitimate racer by this much.
pub const KEY_MARGIN: Duration = Duration::from_secs(5);
/// A replica still races a slot this long after it, even with `max_clock_skew = 0`.
pub const MIN_START_WINDOW: Duration = Duration::from_secs(2);
/// A run still going after this long has its start recorded (it shows as running); a shorter
/// run is recorded once, when it ends. Jobs with `catch_up` record the start at once.
pub const START_RECORD_DELAY: Duration = Duration::from_secs(1);
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
}

impl RaceKind {
    fn as_str(self) -> &'static str {
        match self {
            RaceKind::Scheduled => "schedule",
            RaceKind::CatchUp => "catch_up",
            RaceKind::Manual => "trigger",
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
        }
    }
}

/// A slot this replica won: its run is still to do ([`RaceContext::run`]).
#[derive(Debug)]
pub struct Won {
    pub job: Arc<Job>,
    pub slot: Slot,
    lease: Lease,
    /// The job's running lease, held while the run goes on (`overlap = "skip"`).
    running: Option<Lease>,
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
        let mut claim = self.settle(job, slot, kind, acquired, raced_at.elapsed());
        self.take_running_leases(std::slice::from_mut(&mut claim))
            .await;
        claim
    }

    /// Races for `slot` of every job of `jobs` (the jobs due at that instant) as one batch: one
    /// round trip per node for all of them. Logs each outcome; one claim per job, in order.
    pub async fn claim_many(&self, jobs: &[Arc<Job>], slot: Slot, kind: RaceKind) -> Vec<Claim> {
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
            .map(|(job, acquired)| self.settle(job, slot, kind, acquired, elapsed))
            .collect();
        self.take_running_leases(&mut claims).await;
        claims
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
    fn settle(
        &self,
        job: &Arc<Job>,
        slot: Slot,
        kind: RaceKind,
        acquired: Acquire,
        lock_time: Duration,
    ) -> Claim {
        self.metrics.lock_latency(lock_time);
        let settled = match acquired {
            Acquire::Won(lease) => {
                tracing::info!(job = %job.name, %slot, replica = %self.replica, outcome = %"won",
                    trigger = %kind.as_str(), validity_ms = lease.validity.as_millis() as u64,
                    lock_us = lock_time.as_micros() as u64, "won the slot");
                self.metrics.slot(&job.name, "won");
                return Claim::Won(Won {
                    job: job.clone(),
                    slot,
                    lease,
                    running: None,
                });
            }
            Acquire::Lost { holder } => {
                tracing::info!(job = %job.name, %slot, replica = %self.replica, outcome = %"lost",
                    winner = holder.replica(), "lost the slot to {}", holder.replica());
                SlotResult::Lost { holder }
            }
            Acquire::Unavailable(why) => {
                tracing::warn!(job = %job.name, %slot, replica = %self.replica, outcome = %"unavailable",
                    error = %why, "lock unavailable: the slot does not run here");
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

    /// The winner's part: the run, then (after the running lease is released, so the next slot
    /// is not held up) the run's record.
    async fn run_won(&self, won: &Won) -> SlotResult {
        let (job, slot) = (&won.job, won.slot);
        let (result, record) = self
            .execute(job, slot, &won.lease, won.running.as_ref())
            .await;
        if let Some(running) = &won.running {
            let released = self.lock.release(running).await;
            if released < self.lock.quorum() {
                tracing::warn!(job = %job.name, %slot, replica = %self.replica, nodes = released,
                    "the running lease was released on {released} node(s), fewer than a majority: \
                    the job's slots are skipped as overlapping until it expires (at most {} s)",
                    RUNNING_LEASE_TTL.as_secs());
            }
        }
        self.history.record(&record).await;
        result
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
        for (claim, acquired) in waiting.into_iter().zip(leases) {
            let Claim::Won(won) = claim else { continue };
            match self.running_lease(&won.job, won.slot, acquired) {
                Ok(running) => won.running = Some(running),
                Err(skipped) => {
                    self.metrics.slot(&won.job.name, skipped.outcome());
                    *claim = Claim::Settled(skipped);
                }
            }
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
    /// history write never delays a send). Logs the end; returns the
    /// result and the run's final record.
    async fn execute(
        &self,
        job: &Job,
        slot: Slot,
        lease: &Lease,
        running: Option<&Lease>,
    ) -> (SlotResult, RunRecord) {
        let started = Instant::now();
        let mut record = RunRecord {
            job: job.name.clone(),
            slot,
            replica: self.replica.clone(),
            started: Utc::now(),
            finished: None,
            outcome: RunState::Running,
            error: None,
            attempts: 0,
        };
        let run = async {
            let result = if Instant::now() >= lease.valid_until {
                Err((
                    "lock validity expired before the send (was the process paused?): not sent"
                        .to_owned(),
                    0,
                ))
            } else {
                self.metrics.lateness(
                    &job.name,
                    (self.clock.now() - slot.instant())
                        .to_std()
                        .unwrap_or_default(),
                );
                let action = self.send(job, slot, lease);
                match running {
                    Some(running) => self.with_watchdog(action, running).await,
                    None => action.await,
                }
            };
            let duration = started.elapsed();
            self.metrics.action_duration(&job.name, duration);
            self.log_end(job, slot, result, duration)
        };
        let outcome = if job.catch_up.is_some() {
            // Recorded at once: a slot whose winner dies mid-run must not look missed to the
            // catch-up of a replica starting later.
            tokio::join!(self.history.record(&record), run).1
        } else {
            self.record_start_if_slow(&record, run).await
        };
        record.finished = Some(Utc::now());
        match &outcome {
            SlotResult::Failed {
                error, attempts, ..
            } => {
                record.outcome = RunState::Failed;
                record.error = Some(error.clone());
                record.attempts = *attempts;
            }
            SlotResult::Done { delivery, .. } => {
                record.outcome = RunState::Done;
                record.attempts = delivery.attempts;
            }
            _ => {}
        }
        (outcome, record)
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

    async fn send(&self, job: &Job, slot: Slot, lease: &Lease) -> Result<Delivery, (String, u32)> {
        let ctx = SendContext {
            job: &job.name,
            slot,
            zone: job.zone(),
            replica: &self.replica,
            deadline: (Instant::now() + job.timeout).min(lease.valid_until),
            client: &self.client,
            templates: &self.templates,
            budgets: &self.budgets,
            metrics: &self.metrics,
        };
        job.action
            .execute(&ctx)
            .await
            .map_err(|e: ActionError| (self.scrubber.scrub(&e.to_string()), e.attempts()))
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

    fn log_end(
        &self,
        job: &Job,
        slot: Slot,
        result: Result<Delivery, (String, u32)>,
        duration: Duration,
    ) -> SlotResult {
        let duration_ms = duration.as_millis() as u64;
        match result {
            Ok(delivery) => {
                let lateness_ms = (self.clock.now() - slot.instant()).num_milliseconds();
                tracing::info!(job = %job.name, %slot, replica = %self.replica, outcome = %"done",
                    duration_ms, attempts = delivery.attempts, lateness_ms, "ran the slot");
                SlotResult::Done { delivery, duration }
            }
            Err((error, attempts)) => {
                tracing::error!(job = %job.name, %slot, replica = %self.replica, outcome = %"failed",
                    duration_ms, attempts, error = %error, "the slot's action failed");
                SlotResult::Failed {
                    error,
                    attempts,
                    duration,
                }
            }
        }
    }
}
