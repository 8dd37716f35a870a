//! The window guard before every race: a slot is raced only inside its window on the fleet
//! clock (never before its instant, never past its start window or its key's life; a handoff
//! offer never past the slot's deadline), and only once the fleet clock has been measured; a
//! slot outside is logged and counted as `skipped` with its reason (`early`, `late`,
//! `unmeasured`, `deadline`; and, for a win the check on the nodes' clocks refused (`confirm`),
//! `stale` or `lapsed`).

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::report::SlotLine;
use super::{Books, KEY_MARGIN, Race, SlotResult, Trigger};
use crate::config::Job;
use crate::fleet::handoff::HandoffRequest;
use crate::outcome::Outcome;
use crate::time::jitter;
use crate::time::schedule::Slot;

/// A slot at most this far ahead of the fleet clock is waited for at the race (a re-measured
/// offset, a timer's jitter); further ahead it is skipped as early.
pub const EARLY_WAIT: Duration = Duration::from_secs(1);

/// The guard's verdict on a batch of slots.
#[derive(Debug, Clone, Copy)]
pub(super) enum Verdict {
    /// Inside the window: raced.
    Inside,
    /// Outside: skipped, each logged with its reason.
    Outside(Outside),
    /// A handoff offer this replica does not take (it had the slot, or its clock is not
    /// measured yet): nothing to log, the offer is another replica's.
    NotOurs,
}

/// Why the guard refused a slot.
#[derive(Debug, Clone, Copy)]
pub(super) enum Outside {
    /// This long before the slot on the fleet clock.
    Early(Duration),
    /// This long after the slot, past the start window.
    Late(Duration),
    /// This long past the slot's handoff deadline: the offer is not taken.
    PastDeadline(Duration),
    /// The fleet clock was never measured: no slot is judged on a guess.
    Unmeasured,
    /// Won, but the check on the nodes' clocks before the first byte refused it (`confirm`).
    AfterWin(AfterWin),
}

/// Why a won slot is left by the check on the nodes' clocks (`confirm`).
#[derive(Debug, Clone, Copy)]
pub(super) enum AfterWin {
    /// The nodes' time after the win says this long after the slot, past its start window:
    /// this replica stood still inside a round trip.
    Stale(Duration),
    /// By the nodes' time the lock ran out before the check: this replica stood still
    /// between its `SET` and now.
    Lapsed {
        /// How long after the slot, by the nodes' time.
        late: Duration,
        /// How long ago the lock ran out, by the nodes' time.
        over: Duration,
    },
}

impl AfterWin {
    /// How long after the slot, by the nodes' time.
    fn late(self) -> Duration {
        match self {
            AfterWin::Stale(late) | AfterWin::Lapsed { late, .. } => late,
        }
    }

    /// The reason, message and result of the `skipped` line.
    fn described(self) -> (&'static str, String, SlotResult) {
        let late = self.late();
        let (reason, message) = match self {
            AfterWin::Stale(_) => (
                "stale",
                format!(
                    "won, but the Redis nodes' time says {} ms after the slot, past the start \
                     window (this replica stood still inside a round trip): not running",
                    late.as_millis()
                ),
            ),
            AfterWin::Lapsed { over, .. } => (
                "lapsed",
                format!(
                    "won, but by the Redis nodes' time the lock ran out {} ms ago (this replica \
                     stood still inside a round trip): not running",
                    over.as_millis()
                ),
            ),
        };
        (reason, message, SlotResult::Late { late })
    }
}

/// Judges `slot` of `jobs` (the batch of one instant): a handoff offer by its deadline
/// ([`judge_offer`]), any other slot by its window ([`window`]).
pub(super) async fn judge(
    race: &Race,
    books: &Books,
    trigger: &Trigger,
    jobs: &[Arc<Job>],
    slot: Slot,
) -> Verdict {
    if let Trigger::Handoff(offer) = trigger {
        return match jobs.first() {
            Some(job) => judge_offer(race, books, offer, job, slot).await,
            None => Verdict::NotOurs,
        };
    }
    let ttl = jobs.iter().map(|job| race.key_ttl(job)).min();
    // The timeline's batches share one delayed instant; another caller's batch waits for
    // its latest, so no slot of it is raced early.
    let opens = jobs.iter().map(|job| race.opens(trigger, job, slot)).max();
    let opens = opens.unwrap_or(slot.instant());
    match window(race, books, trigger, opens, ttl.unwrap_or_default()).await {
        Some(outside) => Verdict::Outside(outside),
        None => Verdict::Inside,
    }
}

/// A handoff offer is taken only by a replica that has not had the slot, on a measured clock,
/// before the slot's deadline ([`Race::handoff_deadline`]) and not ahead of the slot. The fleet
/// clock is measured again first, as before every race: an offer read after a freeze (queued
/// in the subscription while the process stood still) is judged on the nodes' time.
async fn judge_offer(
    race: &Race,
    books: &Books,
    offer: &HandoffRequest,
    job: &Job,
    slot: Slot,
) -> Verdict {
    if offer.excludes(&books.replica) {
        return Verdict::NotOurs;
    }
    if !race.clock.measured() {
        tracing::debug!(job = %job.name, replica = %books.replica,
            "handoff offer not taken: the fleet clock is not measured yet");
        return Verdict::NotOurs;
    }
    remeasure(race, books).await;
    let now = race.clock.fleet_now();
    let opens = jitter::delayed(slot, race.delay(job, slot));
    if let Ok(early) = (opens - now).to_std() {
        // An offer follows a win of its slot: one ahead of the fleet clock is judged on a
        // clock that is behind, whatever the deadline says.
        if early > EARLY_WAIT {
            return Verdict::Outside(Outside::Early(early));
        }
    }
    match (now - race.handoff_deadline(job, slot)).to_std() {
        Ok(late) => Verdict::Outside(Outside::PastDeadline(late)),
        Err(_) => Verdict::Inside,
    }
}

/// Measures the fleet clock again (`FleetClock::verify`), with `[redis]`.
async fn remeasure(race: &Race, books: &Books) {
    if let (Some(fleet), Some(nodes)) = (race.fleet.as_ref(), race.lock.nodes()) {
        fleet.verify(nodes, &books.metrics, &books.replica).await;
    }
}

/// How late (on the fleet clock) a scheduled slot may still be raced: its start window, and
/// never past its key's `ttl` less [`KEY_MARGIN`], after which the winner's key may have
/// expired and a second win would run the slot twice. (The start window is below that bound
/// by construction; this keeps it so whatever the window becomes.)
pub(super) fn latest_start(race: &Race, ttl: Duration) -> Duration {
    race.start_window().min(ttl.saturating_sub(KEY_MARGIN))
}

/// The guard before every race, on the fleet clock (not the timeline's), from the instant the
/// slot `opens` (its nominal instant plus its jitter's delay): a replica never races a slot
/// before that instant, whatever its timeline says (a fast or stepped wall clock
/// under `clock = "local"`, a re-measured fleet offset). The fleet clock is measured again
/// first (`FleetClock::verify`), and a clock never measured races nothing. A slot up to
/// [`EARLY_WAIT`] ahead is waited for; one further ahead is skipped as early. A scheduled slot
/// past [`latest_start`] (for keys of `ttl`) is skipped as late.
async fn window(
    race: &Race,
    books: &Books,
    trigger: &Trigger,
    opens: DateTime<Utc>,
    ttl: Duration,
) -> Option<Outside> {
    remeasure(race, books).await;
    if !race.clock.measured() {
        return Some(Outside::Unmeasured);
    }
    let ahead = |now: DateTime<Utc>| (opens - now).to_std().ok().filter(|d| !d.is_zero());
    if let Some(early) = ahead(race.clock.fleet_now()) {
        if early > EARLY_WAIT {
            return Some(Outside::Early(early));
        }
        tokio::time::sleep(early).await;
        if let Some(early) = ahead(race.clock.fleet_now()) {
            return Some(Outside::Early(early));
        }
    }
    let late = (race.clock.fleet_now() - opens)
        .to_std()
        .unwrap_or_default();
    (matches!(trigger, Trigger::Schedule) && late > latest_start(race, ttl))
        .then_some(Outside::Late(late))
}

/// Logs and counts a slot the guard refused.
pub(super) fn skip(
    books: &Books,
    trigger: &Trigger,
    job: &Job,
    slot: Slot,
    outside: Outside,
) -> SlotResult {
    let (reason, message, result) = match outside {
        Outside::Late(late) => (
            "late",
            format!(
                "woke {} ms after the slot, past the start window: not racing",
                late.as_millis()
            ),
            SlotResult::Late { late },
        ),
        Outside::Early(early) => (
            "early",
            format!(
                "{} ms before the slot on the fleet clock (this replica's clock runs ahead): not racing",
                early.as_millis()
            ),
            SlotResult::Early { early },
        ),
        Outside::PastDeadline(late) => (
            "deadline",
            format!(
                "the handoff offer came {} ms past the slot's deadline: not taken",
                late.as_millis()
            ),
            SlotResult::Late { late },
        ),
        Outside::Unmeasured => (
            "unmeasured",
            "the fleet clock is not measured yet (no Redis node answered TIME): not racing"
                .to_owned(),
            SlotResult::Unmeasured,
        ),
        Outside::AfterWin(refused) => refused.described(),
    };
    books.report(skipped_line(trigger, job, slot, outside, reason, message));
    result
}

/// The `skipped` line of a slot the guard refused, with the field its reason carries.
fn skipped_line<'a>(
    trigger: &'a Trigger,
    job: &'a Job,
    slot: Slot,
    outside: Outside,
    reason: &'static str,
    message: String,
) -> SlotLine<'a> {
    let mut line = SlotLine {
        reason: Some(reason),
        ..SlotLine::new(job, slot, Outcome::OutOfWindow, message)
    };
    match outside {
        Outside::Late(late) => line.late_ms = Some(late.as_millis() as u64),
        Outside::AfterWin(refused) => {
            line.trigger = Some(trigger);
            line.late_ms = Some(refused.late().as_millis() as u64);
        }
        Outside::Early(early) => line.early_ms = Some(early.as_millis() as u64),
        Outside::PastDeadline(_) => {
            line.trigger = Some(trigger);
            line.previous_winner = trigger.offer().map(|o| o.previous_winner.as_str());
        }
        Outside::Unmeasured => {}
    }
    line
}
