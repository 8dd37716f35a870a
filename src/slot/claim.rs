//! The race for a slot's lock, for every job due at the instant as one batch (a round trip per
//! node per 250 jobs), and, for each win of a job with `overlap = "skip"`, the job's running lease (one
//! more batch). A win is a [`Won`]: what the run needs, and nothing else.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::Instant;

use super::report::SlotLine;
use super::{Books, RUNNING_LEASE_TTL, Race, SlotResult, Trigger};
use crate::config::{Job, Overlap};
use crate::lock::redlock::validity;
use crate::lock::{Acquire, Lease, SlotKey};
use crate::outcome::Outcome;
use crate::record::history::{RunRecord, RunState};
use crate::time::schedule::{Fence, Slot};

/// A slot this replica won: its run is still to do.
#[derive(Debug)]
pub struct Won {
    /// The job won: the run needs its action and timeout.
    pub job: Arc<Job>,
    /// The slot won: the key, the fence and the history record are the slot's.
    pub slot: Slot,
    /// The slot's lock: the action must finish inside its validity.
    pub(super) lease: Lease,
    /// The job's running lease, held while the run goes on (`overlap = "skip"`).
    pub(super) running: Option<Lease>,
    /// Why the slot was raced: the run's `trigger`; a handoff's carries its offer.
    pub(super) trigger: Trigger,
    /// This run's fencing token: the slot's, plus one on a handoff.
    pub(super) fence: Fence,
    /// When the lock surely ends on the nodes, on the fleet clock: the fleet's time as the race
    /// began plus the key's TTL less drift (the nodes set the key after that). The check after
    /// the win (`confirm`) holds it against the nodes' time then, which a freeze cannot fool.
    pub(super) lock_ends: DateTime<Utc>,
}

impl Won {
    /// The win of `job`'s `slot` with a lock that ends by `lock_ends`; won from a handoff offer,
    /// it carries the offer's fence.
    fn new(
        job: &Arc<Job>,
        slot: Slot,
        trigger: &Trigger,
        lease: Lease,
        lock_ends: DateTime<Utc>,
    ) -> Self {
        Won {
            job: job.clone(),
            slot,
            lease,
            running: None,
            fence: trigger
                .offer()
                .map_or(Fence::new(slot, 0), |o| o.fence(slot)),
            trigger: trigger.clone(),
            lock_ends,
        }
    }

    /// The time now: the fleet clock (the nodes' time, measured again after the win), or the
    /// race's clock standalone.
    pub(super) fn now(&self, race: &Race) -> DateTime<Utc> {
        match race.fleet {
            Some(_) => race.clock.fleet_now(),
            None => race.clock.now(),
        }
    }

    /// From the slot's opening (its instant plus its jitter's delay) to now ([`Won::now`]):
    /// the run's `lateness` as logged and exported.
    pub(super) fn lateness(&self, race: &Race) -> Duration {
        (self.now(race) - race.opens(&self.trigger, &self.job, self.slot))
            .to_std()
            .unwrap_or_default()
    }

    /// What the run's trace says about it, on `replica`.
    pub(super) fn trace_ids<'a>(&'a self, replica: &'a str) -> crate::trace::RunIds<'a> {
        crate::trace::RunIds {
            job: &self.job.name,
            slot: self.slot,
            fence: self.fence,
            trigger: self.trigger.as_str(),
            replica,
        }
    }

    /// The run's record as it starts, on `replica` at `now` (its clock): `running`, with its
    /// trigger and fence.
    pub(super) fn start_record(&self, replica: &str, now: DateTime<Utc>) -> RunRecord {
        RunRecord {
            job: self.job.name.clone(),
            slot: self.slot,
            replica: replica.to_owned(),
            started: now,
            finished: None,
            outcome: RunState::Running,
            error: None,
            attempts: 0,
            trigger: self.trigger.as_str().to_owned(),
            fence: self.fence,
            delivery: None,
            previous_winner: self.trigger.offer().map(|o| o.previous_winner.clone()),
        }
    }

    /// The line of this run's ending: its trigger, fence and duration.
    pub(super) fn line(
        &self,
        outcome: Outcome,
        message: &'static str,
        duration: Duration,
    ) -> SlotLine<'_> {
        SlotLine {
            trigger: Some(&self.trigger),
            fence: Some(self.fence.get()),
            duration_ms: Some(duration.as_millis() as u64),
            ..SlotLine::new(&self.job, self.slot, outcome, message)
        }
    }
}

/// How a race for one slot ended on this replica.
#[derive(Debug)]
pub(super) enum Raced {
    /// Won: the run is still to do (boxed: a win carries its lease, its check and its offer,
    /// several times the size of a settled result).
    Won(Box<Won>),
    /// Won, but not to run: the job's previous run still holds its running lease, or whether
    /// it does cannot be told (`overlap = "skip"`; logged and counted). The slot's life records
    /// it, so the ledger shows why the slot did not run; the claim writes no record.
    Skipped(Box<Won>, SlotResult),
    /// Nothing to run here: lost or unavailable (already logged and counted).
    Settled(SlotResult),
}

/// The key `job`'s `slot` is raced on, and its TTL: the slot's own, or a handoff offer's (which
/// outlives the slot's handoff deadline, so no later taker can win it again).
fn key(race: &Race, trigger: &Trigger, job: &Job, slot: Slot) -> (SlotKey, Duration) {
    match trigger.offer() {
        Some(offer) => (
            SlotKey::handoff(&race.key_prefix, &job.name, slot, offer.handoff),
            race.handoff_key_ttl(job),
        ),
        None => (
            SlotKey::new(&race.key_prefix, &job.name, slot),
            race.key_ttl(job),
        ),
    }
}

/// Races for `slot` of every job of `jobs` as one batch. Logs each outcome, with this
/// replica's `rank` among the candidates; one claim per job, in order.
pub(super) async fn claim(
    race: &Race,
    books: &Books,
    trigger: &Trigger,
    jobs: &[Arc<Job>],
    slot: Slot,
    rank: Option<usize>,
) -> Vec<Raced> {
    let keys: Vec<(SlotKey, Duration)> = jobs
        .iter()
        .map(|job| key(race, trigger, job, slot))
        .collect();
    let (raced_at, began) = (Instant::now(), race.clock.fleet_now());
    let acquired = race.lock.acquire_many(&keys).await;
    let elapsed = raced_at.elapsed();
    let mut claims: Vec<Raced> = jobs
        .iter()
        .zip(&keys)
        .zip(acquired)
        .map(|((job, (_, ttl)), acquired)| {
            let acquired = (acquired, lock_ends(began, *ttl));
            settle(books, trigger, job, slot, rank, acquired, elapsed)
        })
        .collect();
    take_running_leases(race, books, &mut claims).await;
    claims
}

/// When a lock of `ttl` raced for at `began` (the fleet's time) surely ends on the nodes: they
/// set the key after `began`, and it lives `ttl`, less the lock's drift allowance.
fn lock_ends(began: DateTime<Utc>, ttl: Duration) -> DateTime<Utc> {
    let life = validity(ttl, Duration::ZERO).unwrap_or_default();
    began + chrono::Duration::from_std(life).unwrap_or_default()
}

/// Logs a race's outcome (the line that names the winner) and counts it; a win carries the
/// lock's end ([`lock_ends`]).
fn settle(
    books: &Books,
    trigger: &Trigger,
    job: &Arc<Job>,
    slot: Slot,
    rank: Option<usize>,
    (acquired, lock_ends): (Acquire, DateTime<Utc>),
    lock_time: Duration,
) -> Raced {
    books.metrics.lock_latency(lock_time);
    let line = |outcome: Outcome, message: Cow<'static, str>| SlotLine {
        trigger: Some(trigger),
        rank,
        ..SlotLine::new(job, slot, outcome, message)
    };
    match acquired {
        Acquire::Won(lease) => {
            books.report(SlotLine {
                previous_winner: trigger.offer().map(|o| o.previous_winner.as_str()),
                validity_ms: Some(lease.validity.as_millis() as u64),
                lock_us: Some(lock_time.as_micros() as u64),
                ..line(Outcome::Won, "won the slot".into())
            });
            Raced::Won(Box::new(Won::new(job, slot, trigger, lease, lock_ends)))
        }
        Acquire::Lost { holder } => {
            books.report_lost(job, slot, trigger, rank, &holder);
            Raced::Settled(SlotResult::Lost { holder })
        }
        Acquire::Unavailable(why) => {
            books.report(SlotLine {
                error: Some(&why),
                ..line(
                    Outcome::Unavailable,
                    "lock unavailable: the slot does not run here".into(),
                )
            });
            Raced::Settled(SlotResult::Unavailable(why))
        }
    }
}

/// Takes the running lease of every win in `claims` whose job skips overlapping runs, in one
/// batch; a win whose job's previous run still holds it (or whose lease cannot be decided)
/// becomes [`Raced::Skipped`].
async fn take_running_leases(race: &Race, books: &Books, claims: &mut [Raced]) {
    let mut waiting: Vec<&mut Raced> = claims
        .iter_mut()
        .filter(|claim| matches!(claim, Raced::Won(won) if won.job.overlap == Overlap::Skip))
        .collect();
    if waiting.is_empty() {
        return;
    }
    let keys: Vec<(SlotKey, Duration)> = waiting
        .iter()
        .filter_map(|claim| match claim {
            Raced::Won(won) => Some(SlotKey::running(&race.key_prefix, &won.job.name)),
            Raced::Skipped(..) | Raced::Settled(_) => None,
        })
        .map(|key| (key, RUNNING_LEASE_TTL))
        .collect();
    let leases = race.lock.acquire_many(&keys).await;
    for (claim, acquired) in waiting.iter_mut().zip(leases) {
        let Raced::Won(won) = claim else { continue };
        match running_lease(books, &won.job, won.slot, acquired) {
            Ok(running) => won.running = Some(running),
            Err(skipped) => skip(claim, skipped),
        }
    }
}

/// Turns the win `claim` into [`Raced::Skipped`] with `result`. The boxed win moves out of
/// the claim it sits in; the placeholder holds its place only until the line below.
fn skip(claim: &mut Raced, result: SlotResult) {
    let placeholder = Raced::Settled(SlotResult::Standby);
    if let Raced::Won(won) = std::mem::replace(claim, placeholder) {
        *claim = Raced::Skipped(won, result);
    }
}

/// The job's running lease, or the `skipped` result when the previous run still holds it.
fn running_lease(
    books: &Books,
    job: &Job,
    slot: Slot,
    acquired: Acquire,
) -> Result<Lease, SlotResult> {
    let (holder, error, message) = match acquired {
        Acquire::Won(running) => return Ok(running),
        Acquire::Lost { holder } => {
            let message = format!(
                "the previous run is still going on {}: slot skipped (overlap = \"skip\")",
                holder.replica()
            );
            (Some(holder), None, message)
        }
        Acquire::Unavailable(why) => (
            None,
            Some(why),
            "cannot tell whether the previous run is still going: slot skipped".to_owned(),
        ),
    };
    books.report(SlotLine {
        reason: Some("overlap"),
        running_on: holder.as_ref().map(|h| h.replica()),
        error: error.as_ref().map(|e| e as &dyn std::fmt::Display),
        ..SlotLine::new(job, slot, Outcome::Overlapped, message)
    });
    Err(SlotResult::Overlapped { holder })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_ends_its_ttl_less_drift_after_the_race_began_on_the_fleet_clock() {
        let began = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        // 10 s less the drift allowance (1 % + 2 ms): a key set later lives at least this long.
        let ends = lock_ends(began, Duration::from_secs(10));
        assert_eq!((ends - began).num_milliseconds(), 9_898);
    }
}
