//! The timeline: one timer that sleeps until the next instant a job is due and hands the jobs
//! due then to the race, one batch per candidate rank ([`crate::membership`]). With
//! `clock = "local"` a step of the wall clock rebuilds the timeline from the stepped time.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::Job;
use crate::fleet_clock::FleetClock;
use crate::liveness::Liveness;
use crate::race::{Claim, RaceContext, RaceKind, Won};
use crate::schedule::Slot;

/// The jobs' next slots, earliest first: what the timeline sleeps towards.
struct Timeline {
    jobs: Vec<Arc<Job>>,
    /// (next slot, index into `jobs`); jobs whose schedule has ended are not in it.
    due: BinaryHeap<Reverse<(Slot, usize)>>,
}

impl Timeline {
    /// Queues each job's first slot after `now`.
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

    /// The earliest slot queued: the instant the timeline sleeps towards.
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
pub(crate) async fn timeline(
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
        if wake == Wake::Due {
            // Due by the monotonic timer even when the wall clock stepped meanwhile: the race's
            // guard judges it on the fleet clock, so the slot is still raced on time.
            race_due(&ctx, &mut timeline, slot, &tracker);
        }
        if let Some(steps) = steps.as_mut().filter(|_| stepped || wake == Wake::Stepped) {
            // The stepped clock may now be off the fleet clock past the start window: the
            // replica leaves the candidates at once, before the others count on it again.
            tracker.spawn(ctx.membership.clone().withdraw_if_off());
            steps.borrow_and_update();
            timeline = Timeline::new(jobs.clone(), ctx.clock.now(), &ctx.replica);
        }
    }
}

/// Takes the jobs due at `slot` from the timeline (each queued again at its next slot) and
/// starts their race. A replica that wakes late still races the slots inside the start
/// window (the race decides); slots older than that belonged to replicas that were awake.
fn race_due(ctx: &Arc<RaceContext>, timeline: &mut Timeline, slot: Slot, tracker: &TaskTracker) {
    let window = chrono::Duration::from_std(ctx.start_window()).unwrap_or_default();
    let after = slot.instant().max(ctx.clock.now() - window);
    let due = timeline.take_due(slot, after, &ctx.replica);
    tracker.spawn(race_instant(ctx.clone(), due, slot, tracker.clone()));
}

/// What ended a wait for the next slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wake {
    /// The slot's instant came, on both clocks.
    Due,
    /// The wall clock stepped (seen by the fleet clock's measurer meanwhile).
    Stepped,
    /// The generation ended (shutdown or reload): no new slot starts.
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

/// Races one rank's batch after its stagger (the first rank at once; a later place looks
/// first and leaves the slots it finds held); each win runs in a task of its own. A replica
/// shutting down meanwhile leaves the slot to the higher ranks.
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
    let jobs = ctx.unheld(jobs, slot, rank).await;
    if jobs.is_empty() {
        return;
    }
    for claim in ctx.claim_many(&jobs, slot, RaceKind::Scheduled, rank).await {
        if let Claim::Won(won) = claim {
            tracker.spawn(run_won(ctx.clone(), won));
        }
    }
}

/// Runs one won slot: a named task (not a closure) so that a slow run holds up nothing else.
async fn run_won(ctx: Arc<RaceContext>, won: Won) {
    ctx.run(won).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::log_jobs as jobs;

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
