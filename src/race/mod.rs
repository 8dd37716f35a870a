//! One slot's life on one replica, in the order it happens: check it is inside its window on
//! the fleet clock (never before its instant, not past the start window, never on an
//! unmeasured clock: `guard`), decide whether this replica races, looks or stands by
//! (`candidates`), race for the lock (jobs due at the same instant race as one batch) and take
//! the job's running lease (here); then, for the winner only, run the action inside the lock's
//! validity and record the run (`run`), offer the slot to the fleet when nothing left this
//! replica (`offer`), and alert or report what went wrong (`alerts`). Each step's ending is one
//! [`Outcome`], logged with the stable fields `job`, `slot`, `replica`, `outcome` and counted,
//! both in one place (`report`).

mod alerts;
mod candidates;
mod guard;
mod offer;
mod report;
mod run;

pub use alerts::{ALERT_TIMEOUT, MISSED_KEY_TTL};
pub use candidates::stagger_warning;
pub use guard::EARLY_WAIT;
pub use offer::HANDOFF_CLAIM_WAIT;
pub use run::START_RECORD_DELAY;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::action::template::Templates;
use crate::action::{Action, ActionError, Delivery, DeliveryState, SendContext};
use crate::config::Candidates;
use crate::config::{Job, Overlap};
use crate::fleet::control::Control;
use crate::fleet::handoff::{HandoffRequest, Handoffs};
use crate::fleet::membership::Membership;
use crate::lock::{Acquire, Lease, SlotKey, SlotLock, Token, Unavailable};
use crate::metrics::Metrics;
use crate::outcome::Outcome;
use crate::record::history::{other_run, History, RunRecord, RunState};
use crate::secret::Scrubber;
use crate::time::fleet_clock::FleetClock;
use crate::time::schedule::{Fence, SharedClock, Slot};
use report::SlotLine;
use run::finish_record;

/// Slot keys outlive the latest legitimate racer by this much.
pub const KEY_MARGIN: Duration = Duration::from_secs(5);
/// A replica still races a slot this long after it, even with `max_clock_skew = 0`.
pub const MIN_START_WINDOW: Duration = Duration::from_secs(2);
/// TTL of a job's running lease; the winner extends it every third of this while it runs, so
/// a winner that dies frees the job within this time.
pub const RUNNING_LEASE_TTL: Duration = Duration::from_secs(6);

/// Why a slot is being raced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RaceKind {
    /// The job's schedule reached the slot.
    Scheduled,
    /// A missed slot run at start (`catch_up`): no start window applies.
    CatchUp,
    /// `slotcron trigger`: now, through the same race.
    Manual,
    /// Another replica won the slot and could not deliver it (see [`crate::fleet::handoff`]).
    Handoff,
}

impl RaceKind {
    /// The `trigger` of the slot's log lines and run record.
    fn as_str(self) -> &'static str {
        match self {
            RaceKind::Scheduled => "schedule",
            RaceKind::CatchUp => "catch_up",
            RaceKind::Manual => "trigger",
            RaceKind::Handoff => "handoff",
        }
    }
}

/// What one replica needs to race and run slots, under one configuration: built per
/// generation (`Replica::context` in the `replica` module), so a reload never changes it under a
/// slot already racing or running.
pub struct RaceContext {
    /// This replica's id: the lock's token names it, so the losers' lines say who won.
    pub replica: String,
    /// The Redlock over the nodes (or the in-process lock standalone) the slots are raced on.
    pub lock: SlotLock,
    /// One HTTP client for every action: its connection pool outlives the slots.
    pub client: reqwest::Client,
    /// The configuration's message templates, compiled once at load.
    pub templates: Arc<Templates>,
    /// Removes the configuration's secrets from error texts before they are logged or recorded.
    pub scrubber: Arc<Scrubber>,
    /// The timeline's clock and the fleet clock the window guard judges slots on.
    pub clock: SharedClock,
    /// The fleet clock behind `clock` with `[redis]`: measured again before each race, so a
    /// freeze since the last measurement is seen before a stale slot is raced.
    pub fleet: Option<Arc<FleetClock>>,
    /// Prefixes every Redis key, so fleets (or tests) sharing nodes never race each other.
    pub key_prefix: String,
    /// `[scheduler] max_clock_skew`: widens the start window and the slot keys' TTL, so a
    /// replica whose clock lags still finds the slot taken.
    pub max_clock_skew: Duration,
    /// Where each run is recorded: the ledger, catch-up and `slotcron history` read it.
    pub history: History,
    /// Counts every slot's outcome (where its line is logged) and the races' and runs' timings.
    pub metrics: Arc<Metrics>,
    /// The fleet-wide rate budgets the actions draw on (a robot's 20 messages a minute).
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
        /// How long after the slot this replica woke, on the fleet clock.
        late: Duration,
    },
    /// Before the slot's instant on the fleet clock (this replica's clock runs ahead): the
    /// slot belongs to the replicas on time.
    Early {
        /// How long before the slot this replica's race came, on the fleet clock.
        early: Duration,
    },
    /// The fleet clock was never measured (no Redis node answered `TIME`): not raced.
    Unmeasured,
    /// Another replica holds the slot: it runs there.
    Lost {
        /// The winner's lock token: it names the replica that runs the slot.
        holder: Token,
    },
    /// No majority of nodes could be reached: the slot does not run here (the error lists
    /// each node's), told apart from `Lost` so an outage never reads as someone else's win.
    Unavailable(Unavailable),
    /// Won, but the job's previous run is still going (`overlap = "skip"`).
    Overlapping {
        /// The running lease's holder; `None` when no majority could tell.
        holder: Option<Token>,
    },
    /// Won and delivered.
    Done {
        /// What the receiver answered, and after how many attempts.
        delivery: Delivery,
        /// How long the action took (`duration_ms`).
        duration: Duration,
    },
    /// Won, and the action failed where no other replica could do better (or the slot was
    /// handed off as far as it may be): alerted once, by this replica.
    Failed {
        /// Why, scrubbed of secrets.
        error: String,
        /// How many sends were tried.
        attempts: u32,
        /// How long the action took (`duration_ms`).
        duration: Duration,
        /// Whether the receiver may have acted on an attempt.
        delivery: DeliveryState,
    },
    /// Nothing left this replica (its egress failed, or its lock ran out before the first
    /// byte): the slot was offered to the fleet, which runs it at most once more.
    HandedOff {
        /// Why nothing left this replica, scrubbed: the offer carries it.
        reason: String,
        /// How many sends were tried here.
        attempts: u32,
        /// How long this replica tried.
        duration: Duration,
    },
}

impl SlotResult {
    /// The outcome of the slot's final log line.
    pub fn outcome(&self) -> Outcome {
        match self {
            SlotResult::Late { .. } | SlotResult::Early { .. } | SlotResult::Unmeasured => {
                Outcome::Skipped
            }
            SlotResult::Overlapping { .. } => Outcome::Overlapped,
            SlotResult::Lost { .. } => Outcome::Lost,
            SlotResult::Unavailable(_) => Outcome::Unavailable,
            SlotResult::Done { .. } => Outcome::Done,
            SlotResult::Failed { .. } => Outcome::Failed,
            SlotResult::HandedOff { .. } => Outcome::HandedOff,
        }
    }
}

/// Why a run did not deliver, scrubbed, with what the receiver may have seen.
#[derive(Debug, Clone)]
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
    /// The job won: the run needs its action and timeout.
    pub job: Arc<Job>,
    /// The slot won: the key, the fence and the history record are the slot's.
    pub slot: Slot,
    /// The slot's lock: the action must finish inside its validity.
    lease: Lease,
    /// The job's running lease, held while the run goes on (`overlap = "skip"`).
    running: Option<Lease>,
    /// Why the slot was raced: the run's `trigger`.
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

impl Won {
    /// The win of `entry`'s race; won from a handoff offer, it carries the offer's fence,
    /// previous winner and the replicas that had the slot before.
    fn new(entry: Entry<'_>, lease: Lease) -> Self {
        let Entry {
            job, slot, offer, ..
        } = entry;
        Won {
            job: job.clone(),
            slot,
            lease,
            running: None,
            kind: entry.kind,
            fence: offer.map_or(Fence::new(slot, 0), |o| o.fence(slot)),
            previous_winner: offer.map(|o| o.previous_winner.clone()),
            excluded: offer.map(|o| o.excluded.clone()).unwrap_or_default(),
        }
    }

    /// The line of this run's ending: its trigger, fence and duration.
    fn line(&self, outcome: Outcome, message: &'static str, duration: Duration) -> SlotLine<'_> {
        SlotLine {
            trigger: Some(self.kind),
            fence: Some(self.fence.get()),
            duration_ms: Some(duration.as_millis() as u64),
            ..SlotLine::new(&self.job.name, self.slot, outcome, message)
        }
    }
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
    ///
    /// The test seam: tests and benches race one slot without a timeline; the scheduler races
    /// whole instants through [`RaceContext::claim_many`].
    #[doc(hidden)]
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
        if let Some(outside) = self.outside_window(slot, kind, self.key_ttl(job)).await {
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
        if !self.clock.measured() {
            tracing::debug!(job = %job.name, replica = %self.replica,
                "handoff offer not taken: the fleet clock is not measured yet");
            return None;
        }
        let late = (self.clock.now() - self.handoff_deadline(job, slot)).to_std();
        if let Ok(late) = late {
            let message = format!(
                "the handoff offer came {} ms past the slot's deadline: not taken",
                late.as_millis()
            );
            self.report(SlotLine {
                trigger: Some(RaceKind::Handoff),
                previous_winner: Some(&offer.previous_winner),
                reason: Some("deadline"),
                ..SlotLine::new(&job.name, slot, Outcome::Skipped, message)
            });
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
        let ttl = jobs.iter().map(|job| self.key_ttl(job)).min();
        let ttl = ttl.unwrap_or_default();
        if let Some(outside) = self.outside_window(slot, kind, ttl).await {
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

    /// `jobs` less the ones paused at `slot`, each of which logs `paused` and is counted.
    pub fn drop_paused(&self, jobs: Vec<Arc<Job>>, slot: Slot) -> Vec<Arc<Job>> {
        jobs.into_iter()
            .filter(|job| {
                let pause = self.control.paused(&job.name, slot.instant());
                self.metrics.paused(&job.name, pause.is_some());
                let Some(pause) = pause else { return true };
                self.report(SlotLine {
                    paused_by: Some(&pause.by),
                    paused_at: Some(pause.at.to_rfc3339()),
                    until: pause.until.map(|u| u.to_rfc3339()),
                    reason: pause.reason.as_deref(),
                    ..SlotLine::new(
                        &job.name,
                        slot,
                        Outcome::Paused,
                        "the job is paused: slot not raced",
                    )
                });
                false
            })
            .collect()
    }

    /// Logs a race's outcome (the line that names the winner) and counts it.
    fn settle(&self, entry: Entry<'_>, acquired: Acquire, lock_time: Duration) -> Claim {
        self.metrics.lock_latency(lock_time);
        let Entry {
            job, slot, kind, ..
        } = entry;
        let line = |outcome: Outcome, message: Cow<'static, str>| SlotLine {
            trigger: Some(kind),
            rank: entry.rank,
            ..SlotLine::new(&job.name, slot, outcome, message)
        };
        let settled = match acquired {
            Acquire::Won(lease) => {
                self.report(SlotLine {
                    previous_winner: entry.offer.map(|o| o.previous_winner.as_str()),
                    validity_ms: Some(lease.validity.as_millis() as u64),
                    lock_us: Some(lock_time.as_micros() as u64),
                    ..line(Outcome::Won, "won the slot".into())
                });
                return Claim::Won(Won::new(entry, lease));
            }
            Acquire::Lost { holder } => {
                self.report_lost(entry, &holder);
                SlotResult::Lost { holder }
            }
            Acquire::Unavailable(why) => {
                self.report(SlotLine {
                    error: Some(&why),
                    ..line(
                        Outcome::Unavailable,
                        "lock unavailable: the slot does not run here".into(),
                    )
                });
                SlotResult::Unavailable(why)
            }
        };
        Claim::Settled(settled)
    }

    /// Logs `entry`'s slot as lost to `holder`: after a race, or after a look that found the
    /// slot held ([`RaceContext::unheld`]), so both read the same.
    fn report_lost(&self, entry: Entry<'_>, holder: &Token) {
        let message = format!("lost the slot to {}", holder.replica());
        self.report(SlotLine {
            trigger: Some(entry.kind),
            rank: entry.rank,
            winner: Some(holder.replica()),
            ..SlotLine::new(&entry.job.name, entry.slot, Outcome::Lost, message)
        });
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
                let message = format!(
                    "the previous run is still going on {}: slot skipped (overlap = \"skip\")",
                    holder.replica()
                );
                self.report(SlotLine {
                    reason: Some("overlap"),
                    running_on: Some(holder.replica()),
                    ..SlotLine::new(&job.name, slot, Outcome::Overlapped, message)
                });
                Err(SlotResult::Overlapping {
                    holder: Some(holder),
                })
            }
            Acquire::Unavailable(why) => {
                let message = "cannot tell whether the previous run is still going: slot skipped";
                self.report(SlotLine {
                    reason: Some("overlap"),
                    error: Some(&why),
                    ..SlotLine::new(&job.name, slot, Outcome::Overlapped, message)
                });
                Err(SlotResult::Overlapping { holder: None })
            }
        }
    }
}
