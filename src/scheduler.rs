//! The timeline's timer: it sleeps until the next instant a job is due (the queue of
//! [`crate::time::timeline`]) and hands the jobs due then to their slot's life
//! ([`crate::slot::due`]), as one batch. With
//! `clock = "local"` a step of the wall clock rebuilds the timeline from the stepped time.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::{oneshot, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::Job;
use crate::ops::liveness::{Liveness, Raced};
use crate::slot::{SlotEnv, SlotResult, Trigger};
use crate::time::fleet_clock::{FleetClock, JUMP_BOUND};
use crate::time::schedule::Slot;
use crate::time::timeline::{Due, Timeline};

/// Sleeps until the next instant any job is due and starts one race for every job due then,
/// until shutdown. One timer for the whole schedule, and one batch per instant: a thousand
/// jobs on the same second cost each Redis node four requests from this replica (250 keys
/// each), not a thousand (BENCHMARKS.md, scale). Nothing is armed before the fleet clock is measured. Each
/// wake looks for a step of the wall clock and for a wake later than planned (a freeze: the
/// fleet clock measures again); the timeline is re-armed from the clock's time when the fleet
/// clock jumps, and (scheduling on the wall clock, `clock = "local"`) when the wall clock
/// steps, so a step back does not leave it asleep for slots that already passed and a step
/// forward does not race the skipped-over slots one by one.
///
/// `handover` is the previous generation's (a reload, a regroup): the instant it was waiting
/// for when it ended, which this one races rather than starting after "now". On shutdown this
/// one sends its own on `hand_on`. Each sleep and wake is reported to `liveness`, so
/// `/healthz` fails when a wake is overdue.
pub(crate) async fn timeline(
    ctx: Arc<SlotEnv>,
    liveness: Arc<Liveness>,
    jobs: Vec<Arc<Job>>,
    generation: Generation,
    tracker: TaskTracker,
) {
    let Generation {
        fleet,
        shutdown,
        handover,
        hand_on,
    } = generation;
    let Some(from) = armed_from(&ctx, fleet.as_deref(), &shutdown, handover).await else {
        return;
    };
    let mut rearms = fleet.as_ref().map(|f| f.rearms());
    let (clock, replica) = (&ctx.race.clock, &ctx.books.replica);
    let prefix = &ctx.race.key_prefix;
    let mut timeline = Timeline::new(jobs.clone(), from, prefix, replica);
    while let Some(due) = timeline.next() {
        let wait = (due.at - clock.now()).to_std().unwrap_or_default();
        let deadline = tokio::time::Instant::now() + wait;
        liveness.sleeping_until(deadline);
        let wake = wait_until_due(&ctx, due.at, fleet.as_deref(), &shutdown, rearms.as_mut()).await;
        if wake == Wake::Shutdown {
            let _ = hand_on.send(due.at - chrono::Duration::microseconds(1));
            return;
        }
        liveness.woke();
        if let Some(f) = &fleet {
            look_for_a_freeze(f, &ctx, deadline);
        }
        if wake == Wake::Due {
            // Due by the monotonic timer even when the wall clock stepped meanwhile: the race's
            // guard judges it on the fleet clock, so the slot is still raced on time.
            race_due(&ctx, &liveness, &mut timeline, due, &tracker);
        }
        let rearm =
            |r: &&mut watch::Receiver<u64>| wake == Wake::Rearm || r.has_changed().unwrap_or(false);
        if let Some(rearms) = rearms.as_mut().filter(rearm) {
            // The stepped clock may now be off the fleet clock past the start window: the
            // replica leaves the candidates at once, before the others count on it again.
            tracker.spawn(ctx.contenders.membership.clone().withdraw_if_off());
            rearms.borrow_and_update();
            timeline = Timeline::new(jobs.clone(), clock.now(), prefix, replica);
        }
    }
}

/// What ties one generation's timeline to the replica and to the generations before and after.
pub(crate) struct Generation {
    /// The fleet clock with `[redis]`: measured before anything is armed; re-arms on jumps.
    pub fleet: Option<Arc<FleetClock>>,
    /// Cancelled when this generation ends (a reload, shutdown).
    pub shutdown: CancellationToken,
    /// The previous generation's pending instant, if there was one.
    pub handover: Option<oneshot::Receiver<DateTime<Utc>>>,
    /// Where this generation leaves its pending instant when it ends.
    pub hand_on: oneshot::Sender<DateTime<Utc>>,
}

/// The instant a new timeline arms after, once the fleet clock has been measured (`None`:
/// shutdown came first; nothing is armed or handed on, so the next generation arms from its
/// own "now"): the clock's time, or just before the slot the previous generation was waiting
/// for when that is earlier (a reload at the slot's instant hands the slot over instead of
/// dropping it; the race's guard still judges it on the fleet clock).
async fn armed_from(
    ctx: &SlotEnv,
    fleet: Option<&FleetClock>,
    shutdown: &CancellationToken,
    handover: Option<oneshot::Receiver<DateTime<Utc>>>,
) -> Option<DateTime<Utc>> {
    if let Some(fleet) = fleet
        && !fleet.until_measured(shutdown).await
    {
        return None;
    }
    let pending = match handover {
        Some(handover) => handover.await.ok(),
        None => None,
    };
    let now = ctx.race.clock.now();
    Some(pending.map_or(now, |pending| pending.min(now)))
}

/// After a wake: a step of the wall clock is reported, and a wake that came more than
/// [`JUMP_BOUND`] after `deadline` (the process or its VM stood still) has the fleet clock
/// measured again at once.
fn look_for_a_freeze(fleet: &FleetClock, ctx: &SlotEnv, deadline: tokio::time::Instant) {
    fleet.report_step(&ctx.books.metrics, &ctx.books.replica);
    if tokio::time::Instant::now().saturating_duration_since(deadline) > JUMP_BOUND {
        fleet.suspect();
    }
}

/// Takes the jobs due at `due` from the timeline (each queued again at its next slot) and
/// starts their race, on the nominal slot. A replica that wakes late still races the slots
/// inside the start window (the race decides); slots older than that belonged to replicas
/// that were awake.
fn race_due(
    ctx: &Arc<SlotEnv>,
    liveness: &Arc<Liveness>,
    timeline: &mut Timeline<Job>,
    due: Due,
    tracker: &TaskTracker,
) {
    let window = chrono::Duration::from_std(ctx.race.start_window()).unwrap_or_default();
    let after = due.at.max(ctx.race.clock.now() - window);
    let jobs = timeline.take_due(due, after, &ctx.books.replica);
    tracker.spawn(race_instant(ctx.clone(), liveness.clone(), jobs, due.slot));
}

/// What ended a wait for the next slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wake {
    /// The slot's instant came, on both clocks.
    Due,
    /// The timeline must be re-armed: the fleet clock jumped, or the wall clock stepped
    /// under `clock = "local"`.
    Rearm,
    /// The generation ended (shutdown or reload): no new slot starts.
    Shutdown,
}

/// Sleeps until the instant `at` a slot is due ([`until_due`]), a re-arm is announced on `rearms` (a jump of
/// the fleet clock; a step of the wall clock under `clock = "local"`, also seen after each
/// timer), or shutdown.
///
/// Timers run on the monotonic clock; the remaining gap is measured again after each, so a
/// clock stepped back meanwhile never starts a slot before its instant.
async fn wait_until_due(
    ctx: &SlotEnv,
    at: DateTime<Utc>,
    fleet: Option<&FleetClock>,
    shutdown: &CancellationToken,
    rearms: Option<&mut watch::Receiver<u64>>,
) -> Wake {
    let stepped = async {
        let announced = match rearms {
            Some(rx) => rx.changed().await.is_ok(),
            None => false,
        };
        if !announced {
            std::future::pending::<()>().await;
        }
    };
    tokio::pin!(stepped);
    loop {
        let wait = until_due(ctx, at);
        if wait.is_zero() {
            return if shutdown.is_cancelled() {
                Wake::Shutdown
            } else {
                Wake::Due
            };
        }
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => return Wake::Shutdown,
            _ = tokio::time::sleep(wait) => {}
            _ = &mut stepped => return Wake::Rearm,
        }
        // Between two timers, a step moves a wall-clock timeline's deadline.
        if fleet.is_some_and(|f| {
            f.report_step(&ctx.books.metrics, &ctx.books.replica) && f.schedules_on_wall()
        }) {
            return Wake::Rearm;
        }
    }
}

/// How long until the instant `at` a slot is due: the timeline's clock must reach it, and so must the fleet
/// clock (they differ under `clock = "local"`) when it is behind by no more than the start
/// window. Further behind, the slot goes to the race at once, whose guard skips it as early:
/// waiting longer would hold up every later slot.
fn until_due(ctx: &SlotEnv, at: DateTime<Utc>) -> Duration {
    let left = |now: DateTime<Utc>| (at - now).to_std().unwrap_or_default();
    let fleet = left(ctx.race.clock.fleet_now());
    let fleet = if fleet <= ctx.race.start_window() {
        fleet
    } else {
        Duration::ZERO
    };
    left(ctx.race.clock.now()).max(fleet)
}

/// Takes the jobs due at `slot` through their slot's life, as one batch ([`crate::slot::due`]):
/// a named task (not a closure), so a slow race or run holds up no later slot.
async fn race_instant(ctx: Arc<SlotEnv>, liveness: Arc<Liveness>, jobs: Vec<Arc<Job>>, slot: Slot) {
    let results = crate::slot::due(&ctx, Trigger::Schedule, jobs, slot).await;
    if let Some(raced) = raced(&results) {
        liveness.raced(raced);
    }
}

/// Whether an instant's races reached the lock's verdict, for `/readyz`; `None` when none of
/// them raced (paused, standby, out of the window: they say nothing of the nodes).
fn raced(results: &[SlotResult]) -> Option<Raced> {
    let mut no_majority = false;
    for result in results {
        match result {
            SlotResult::Lost { .. }
            | SlotResult::Overlapped { .. }
            | SlotResult::Done { .. }
            | SlotResult::Failed { .. }
            | SlotResult::HandedOff { .. } => return Some(Raced::Verdict),
            SlotResult::Unavailable(_) => no_majority = true,
            SlotResult::Paused
            | SlotResult::Standby
            | SlotResult::Late { .. }
            | SlotResult::Early { .. }
            | SlotResult::Unmeasured => {}
        }
    }
    no_majority.then_some(Raced::NoMajority)
}

// The timeline's queue (`time::timeline`) is tested here, with jobs parsed as the replica's:
// building a `Job` needs `config`, which sits above `time`.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::log_jobs as jobs;
    use crate::time::jitter;

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
        let mut timeline = Timeline::new(jobs, at("2026-01-01T10:00:00.500Z"), "p", "r");
        let first = timeline.next().unwrap();
        assert_eq!(first.at, at("2026-01-01T10:00:01Z"));
        let due = timeline.take_due(first, first.at, "r");
        assert_eq!(names(&due), ["every", "odd"]);
        let second = timeline.next().unwrap();
        assert_eq!(second.at, at("2026-01-01T10:00:02Z"));
        let due = timeline.take_due(second, second.at, "r");
        let mut due = names(&due);
        due.sort_unstable();
        assert_eq!(due, ["even", "every"]);
    }

    #[test]
    fn a_late_wake_queues_each_job_after_the_given_instant() {
        let jobs = jobs(&[("every", "* * * * * *")]);
        let mut timeline = Timeline::new(jobs, at("2026-01-01T10:00:00Z"), "p", "r");
        let slot = timeline.next().unwrap();
        // Woke 10 s late: the slots of the missed seconds are not queued.
        timeline.take_due(slot, at("2026-01-01T10:00:11Z"), "r");
        assert_eq!(timeline.next().unwrap().at, at("2026-01-01T10:00:12Z"));
    }

    #[test]
    fn a_jittered_slot_is_due_at_its_delay_and_batched_apart_from_the_nominal_instant() {
        let mut jobs = jobs(&[("plain", "0 * * * * *"), ("spread", "0 * * * * *")]);
        let jitter = Duration::from_secs(30);
        Arc::get_mut(&mut jobs[1]).unwrap().jitter = jitter;
        let nominal = Slot::at(at("2026-01-01T10:01:00Z"));
        let delayed = jitter::delayed(nominal, jitter::delay("p", "spread", nominal, jitter));
        assert!(delayed > nominal.instant(), "this slot's delay is not zero");
        let mut timeline = Timeline::new(jobs.clone(), at("2026-01-01T10:00:30Z"), "p", "r");
        let first = timeline.next().unwrap();
        assert_eq!((first.at, first.slot), (nominal.instant(), nominal));
        assert_eq!(names(&timeline.take_due(first, first.at, "r")), ["plain"]);
        let second = timeline.next().unwrap();
        assert_eq!((second.at, second.slot), (delayed, nominal));
        assert_eq!(
            names(&timeline.take_due(second, second.at, "r")),
            ["spread"]
        );
        // Armed between the nominal and the delayed instant, the slot is still due.
        let mid = nominal.instant() + chrono::Duration::milliseconds(1);
        let rearmed = Timeline::new(
            jobs,
            mid.min(delayed - chrono::Duration::milliseconds(1)),
            "p",
            "r",
        );
        assert_eq!(rearmed.next().unwrap().slot, nominal);
    }
}
