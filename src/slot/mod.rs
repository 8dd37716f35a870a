//! One slot's life on one replica, told in the order it happens, from one entry ([`due`])
//! that every trigger goes through: the timeline (`Schedule`), the look-back at start
//! (`CatchUp`), `slotcron trigger` and `resume --catch-up` (`Manual`, `CatchUp`), another
//! replica's handoff offer (`Handoff`), and the tests. The jobs due at one instant go through
//! it together, so their race is one batch (a round trip per node per 250 of them).
//!
//! 1. `paused`: a scheduled slot of a job paused fleet-wide is not raced.
//! 2. `candidates`: this replica's place among each job's candidates (or standby), the wait
//!    of its place, and a later place's look at the keys (a slot found held is left).
//! 3. `guard`: inside the slot's window on the fleet clock (never before its instant, not
//!    past its start window or a handoff's deadline, never on an unmeasured clock).
//! 4. `claim`: the race for the slot's lock, and the job's running lease (`overlap = "skip"`).
//! 5. `confirm` (the winner only): after the win and before the first byte, the fleet clock
//!    measured again; by the nodes' time the lock has not run out and the slot is still inside
//!    its window.
//! 6. `run` (the winner only): the action inside the lock's validity.
//! 7. `conclude`: how the run ended: delivered, failed, or (nothing left this replica)
//!    handed off to the fleet.
//! 8. `record`: the run's history record (and the check for a second run of the slot); a win
//!    the running lease kept from running is recorded right after the claim, with why.
//! 9. `alerts`: a failed slot alerts the job's `on_failure`; missed and duplicated slots are
//!    reported once across the fleet; a `done` run after a failed, missed or deadline alert
//!    sends one `recovered` for the fleet.
//! 10. `deadline` (every replica, for every slot of a job with a `deadline`, won here or not):
//!     at the slot's deadline its fate is read on a majority, and a slot not `done` is alerted
//!     once across the fleet.
//!
//! Each step's ending is one [`Outcome`], logged with the stable fields `job`, `slot`,
//! `replica`, `outcome` and counted, both in one place (`report`).
//!
//! Each step takes only the parts of the replica's [`SlotEnv`] it uses, which [`due`] hands
//! out: [`Books`] (the log line, the counters, the history), [`Race`] (the lock, the clocks,
//! the window and key bounds), [`Contenders`] (pauses, membership, candidates) and [`Outbox`]
//! (the action's client, templates, budgets, alerts, handoffs).

mod alerts;
mod candidates;
mod claim;
mod conclude;
mod confirm;
pub mod deadline;
mod env;
mod guard;
mod paused;
mod record;
mod report;
mod run;
mod told;

pub use alerts::{ALERT_LEASE, ALERT_TIMEOUT, MISSED_KEY_TTL};
pub use candidates::{LOOKOUT_AFTER, stagger_warning};
pub use claim::Won;
pub use conclude::HANDOFF_CLAIM_WAIT;
pub use env::{Books, Contenders, Outbox, Race, SlotEnv};
pub use guard::EARLY_WAIT;
pub use run::START_RECORD_DELAY;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures_util::future::join_all;
use tokio::task::JoinSet;

use crate::action::{Delivery, DeliveryState};
use crate::config::Job;
use crate::fleet::handoff::HandoffRequest;
use crate::lock::{Token, Unavailable};
use crate::outcome::Outcome;
use crate::time::schedule::Slot;
use crate::trace;
use claim::Raced;
use guard::Verdict;

/// Slot keys outlive the latest legitimate racer by this much.
pub const KEY_MARGIN: Duration = Duration::from_secs(5);
/// TTL of a job's running lease; the winner extends it every third of this while it runs, so
/// a winner that dies frees the job within this time.
pub const RUNNING_LEASE_TTL: Duration = Duration::from_secs(6);

/// Why a slot is taken through its life: an argument of the one entry, not a door of its own.
#[derive(Debug, Clone)]
pub enum Trigger {
    /// The job's schedule reached the slot: paused jobs are left, candidates are ranked.
    Schedule,
    /// A missed slot run at start (`catch_up`) or at `resume --catch-up`: no start window
    /// applies.
    CatchUp,
    /// `slotcron trigger`: now, through the same race.
    Manual,
    /// Another replica won the slot and could not deliver it (see [`crate::fleet::handoff`]):
    /// raced on the offer's key, run with its fence.
    Handoff(Arc<HandoffRequest>),
}

impl Trigger {
    /// What the job's function is told (the library's [`crate::Trigger`]): the same four
    /// names, without the offer.
    pub fn kind(&self) -> crate::action::function::Trigger {
        use crate::action::function::Trigger as Kind;
        match self {
            Trigger::Schedule => Kind::Schedule,
            Trigger::CatchUp => Kind::CatchUp,
            Trigger::Manual => Kind::Manual,
            Trigger::Handoff(_) => Kind::Handoff,
        }
    }

    /// The `trigger` of the slot's log lines and run record.
    pub fn as_str(&self) -> &'static str {
        self.kind().as_str()
    }

    /// The handoff offer raced for, if any.
    fn offer(&self) -> Option<&HandoffRequest> {
        match self {
            Trigger::Handoff(offer) => Some(offer),
            _ => None,
        }
    }
}

/// Takes `slot` of every job of `jobs` (the jobs due at that instant) through its life, as
/// `trigger` says: the one entry of the timeline, catch-up, `trigger`, handoff and tests.
/// Returns how each slot ended here, one result per job, in no particular order; none for a
/// handoff offer that is not this replica's to take (it had the slot, or its clock is not
/// measured yet; nothing is logged then).
pub async fn due(
    ctx: &Arc<SlotEnv>,
    trigger: Trigger,
    jobs: Vec<Arc<Job>>,
    slot: Slot,
) -> Vec<SlotResult> {
    let mut ended = Vec::new();
    let (contenders, books) = (&ctx.contenders, &ctx.books);
    let jobs = paused::unpaused(&contenders.control, books, &trigger, jobs, slot, &mut ended);
    let places = candidates::places(contenders, books, &trigger, jobs, slot, &mut ended);
    let races = places
        .into_iter()
        .map(|(rank, jobs)| race_place(ctx, &trigger, jobs, slot, rank));
    for results in join_all(races).await {
        ended.extend(results);
    }
    ended
}

/// [`due`] for one job: its slot's result (`None`: a handoff offer not this replica's).
pub async fn once(
    ctx: &Arc<SlotEnv>,
    trigger: Trigger,
    job: Arc<Job>,
    slot: Slot,
) -> Option<SlotResult> {
    due(ctx, trigger, vec![job], slot).await.pop()
}

/// Races one place's batch: after its wait (the first place at once; a later place looks
/// first and leaves the slots it finds held), inside the window, one claim for the batch, its
/// wins checked on the nodes' clocks together; each win runs in a task of its own, so a slow
/// run holds up nothing else. A replica shutting down during the wait leaves the slots to the
/// higher places.
async fn race_place(
    ctx: &Arc<SlotEnv>,
    trigger: &Trigger,
    jobs: Vec<Arc<Job>>,
    slot: Slot,
    rank: Option<usize>,
) -> Vec<SlotResult> {
    let mut ended = Vec::new();
    let (race, contenders, books) = (&ctx.race, &ctx.contenders, &ctx.books);
    if !candidates::wait_for_place(contenders, &ctx.shutdown, rank).await {
        return ended;
    }
    let jobs = candidates::unheld(race, contenders, books, jobs, slot, rank, &mut ended).await;
    if jobs.is_empty() {
        return ended;
    }
    match guard::judge(race, books, trigger, &jobs, slot).await {
        Verdict::Inside => {}
        Verdict::Outside(outside) => {
            let skip = |job: &Arc<Job>| guard::skip(books, trigger, job, slot, outside);
            ended.extend(jobs.iter().map(skip));
            return ended;
        }
        Verdict::NotOurs => return ended,
    }
    // Read through the race's clock (the seam every wall-clock read goes through).
    let raced_at = SystemTime::from(race.clock.now());
    let mut claims = claim::claim(race, books, trigger, &jobs, slot, rank).await;
    record::skipped(books, &claims, &race.clock).await;
    // The race's span ends with the claim: the check after the win belongs to the run.
    let race_span = (raced_at, SystemTime::from(race.clock.now()));
    confirm::confirm(race, books, &mut claims).await;
    let mut runs = JoinSet::new();
    for raced in claims {
        match raced {
            Raced::Won(won) => drop(runs.spawn(run_won(ctx.clone(), *won, race_span))),
            Raced::Skipped(_, result) | Raced::Settled(result) => ended.push(result),
        }
    }
    ended.extend(runs.join_all().await);
    ended
}

/// A won slot, to its end: the run; a run where nothing left this replica offered to the
/// fleet; the record (and the report of a second run found beside it); the alert of a failure.
/// With traces on, the run is a new trace, `race_span` its race's start and end.
async fn run_won(ctx: Arc<SlotEnv>, won: Won, race_span: (SystemTime, SystemTime)) -> SlotResult {
    let (race, outbox, books) = (&ctx.race, &ctx.outbox, &ctx.books);
    let span = trace::run_span(&won.trace_ids(&books.replica), race_span);
    let (ran, record) = span.within(run::run(race, outbox, books, &won)).await;
    let result = conclude::conclude(&ctx, &won, ran).await;
    let ending = (&result, race.clock.now());
    if let Some(twice) = record::finish(books, &won, record, ending).await {
        alerts::duplicate(&ctx, &won.job, &twice).await;
    }
    alerts::on_failure(&ctx, &won, &result).await;
    if let SlotResult::Done { .. } = result {
        alerts::recovered(&ctx, &won.job, won.slot, alerts::OnLoss::Leave).await;
    }
    result
}

/// How one slot ended on this replica: the head of the outcome family (see [`crate::outcome`]).
/// Its [`Outcome`] is what the slot's log line and counter say; a run's history record keeps
/// its `RunState` (`slot/record.rs`). Each variant is one meaning.
#[derive(Debug)]
pub enum SlotResult {
    /// A scheduled slot of a job paused fleet-wide: not raced.
    Paused,
    /// Not one of the slot's candidates, or the lookout that found the slot held: not raced.
    Standby,
    /// Woke too late to race (paused, overloaded), or a handoff offer came past the slot's
    /// deadline: another replica had the slot. Also a win the check on the nodes' clocks
    /// refused (stale, or its lock lapsed: this replica stood still inside a round trip).
    Late {
        /// How long after the slot (or its deadline) this replica woke, on the fleet clock.
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
    Overlapped {
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
            SlotResult::Paused => Outcome::Paused,
            SlotResult::Standby => Outcome::Standby,
            SlotResult::Late { .. } | SlotResult::Early { .. } | SlotResult::Unmeasured => {
                Outcome::OutOfWindow
            }
            SlotResult::Overlapped { .. } => Outcome::Overlapped,
            SlotResult::Lost { .. } => Outcome::Lost,
            SlotResult::Unavailable(_) => Outcome::Unavailable,
            SlotResult::Done { .. } => Outcome::Done,
            SlotResult::Failed { .. } => Outcome::Failed,
            SlotResult::HandedOff { .. } => Outcome::HandedOff,
        }
    }
}
