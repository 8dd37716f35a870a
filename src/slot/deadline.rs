//! A job's `deadline`: a slot not `done` that long after its instant is alerted once across
//! the fleet. Every replica arms the deadline of every slot of such a job, not only of the
//! slots it won: the replica that ran a slot may be dead by its deadline, and a slot nobody
//! ran has no winner at all. At the deadline each replica reads the slot's fate on a majority
//! of the nodes (its run records) and, when it is not `done`, races for the slot's `deadline`
//! alert (`alerts::send_once`, which also survives the death of the replica that wins it).
//!
//! The same look backs up the recovery: a slot `done` by its deadline, whose job's last alert
//! still awaits a recovery (its winner died before sending it), has the recovery raced here.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::SlotEnv;
use super::alerts::{self, Alert, OnLoss};
use crate::config::Job;
use crate::lock::SlotKey;
use crate::outcome::Outcome;
use crate::record::history::{RunRecord, RunState};
use crate::time::fleet_clock::FleetClock;
use crate::time::schedule::Slot;

/// Runs of the job read to find the slot's: a deadline ends before the next slot, so the
/// slot's runs (a handoff's, a trigger's between) are among the newest few.
const FATE_LOOK: usize = 20;

/// The deadlines of every slot of `jobs` (those with a `deadline`), earliest first: each is
/// checked in a task of its own at its time on the fleet clock, until `shutdown`.
pub async fn watch(
    ctx: Arc<SlotEnv>,
    jobs: Vec<Arc<Job>>,
    fleet: Option<Arc<FleetClock>>,
    shutdown: CancellationToken,
    tracker: TaskTracker,
) {
    let jobs: Vec<Arc<Job>> = jobs.into_iter().filter(|j| j.deadline.is_some()).collect();
    if jobs.is_empty() {
        return;
    }
    if let Some(fleet) = &fleet
        && !fleet.until_measured(&shutdown).await
    {
        return;
    }
    let mut due = Deadlines::new(jobs, ctx.race.clock.now());
    while let Some((at, slot, job)) = due.next() {
        if !sleep_until(&ctx, at, &shutdown).await {
            return;
        }
        tracker.spawn(check(ctx.clone(), job, slot));
    }
}

/// Sleeps until `at` on the replica's clock (measured again after each timer: a clock stepped
/// meanwhile moves it); false on shutdown.
async fn sleep_until(ctx: &SlotEnv, at: DateTime<Utc>, shutdown: &CancellationToken) -> bool {
    loop {
        let wait = (at - ctx.race.clock.now()).to_std().unwrap_or_default();
        if wait.is_zero() {
            return !shutdown.is_cancelled();
        }
        tokio::select! {
            biased;
            _ = tokio::time::sleep(wait) => {}
            _ = shutdown.cancelled() => return false,
        }
    }
}

/// The deadline of each job's next slot, earliest first.
struct Deadlines {
    jobs: Vec<Arc<Job>>,
    /// (deadline, slot, index into `jobs`).
    heap: BinaryHeap<Reverse<(DateTime<Utc>, Slot, usize)>>,
}

impl Deadlines {
    /// Each job's first slot whose deadline is after `now`.
    fn new(jobs: Vec<Arc<Job>>, now: DateTime<Utc>) -> Self {
        let mut deadlines = Deadlines {
            jobs,
            heap: BinaryHeap::new(),
        };
        for i in 0..deadlines.jobs.len() {
            let after = now - deadline_of(&deadlines.jobs[i]);
            deadlines.queue(i, after);
        }
        deadlines
    }

    /// Queues job `i`'s first slot after `after`.
    fn queue(&mut self, i: usize, after: DateTime<Utc>) {
        let job = &self.jobs[i];
        if let Some(slot) = job.schedule.next_after(after) {
            let at = slot.instant() + deadline_of(job);
            self.heap.push(Reverse((at, slot, i)));
        }
    }

    /// The next deadline: its time, its slot and its job; the job's next slot queued.
    fn next(&mut self) -> Option<(DateTime<Utc>, Slot, Arc<Job>)> {
        let Reverse((at, slot, i)) = self.heap.pop()?;
        self.queue(i, slot.instant());
        Some((at, slot, self.jobs[i].clone()))
    }
}

/// The job's deadline as a chrono duration (zero for a job without one: never queued).
fn deadline_of(job: &Job) -> chrono::Duration {
    let deadline = job.deadline.unwrap_or(Duration::ZERO);
    chrono::Duration::from_std(deadline).unwrap_or_default()
}

/// At `slot`'s deadline: its fate read on a majority, then its deadline alert or the job's
/// recovery raced.
async fn check(ctx: Arc<SlotEnv>, job: Arc<Job>, slot: Slot) {
    let runs = match ctx.books.history.read(&job.name, FATE_LOOK).await {
        Ok(runs) => runs,
        Err(e) => {
            tracing::warn!(job = %job.name, %slot, replica = %ctx.books.replica, error = %e,
                "the slot's fate could not be read at its deadline: no deadline alert judged");
            return;
        }
    };
    let paused = ctx.contenders.control.paused(&job.name, slot.instant());
    let of_slot: Vec<&RunRecord> = runs.iter().filter(|r| r.slot == slot).collect();
    let holder = match of_slot.is_empty() {
        true => holder(&ctx, &job, slot).await,
        false => None,
    };
    match at_deadline(&of_slot, paused.is_some(), holder.as_deref()) {
        AtDeadline::Done => alerts::recovered(&ctx, &job, slot, OnLoss::Watch).await,
        AtDeadline::Failed | AtDeadline::Paused => {}
        AtDeadline::Late(reason) => {
            let key = SlotKey::deadline(&ctx.race.key_prefix, &job.name, slot);
            let alert = Alert::new(&job, slot, Outcome::Deadline, reason);
            alerts::send_once(&ctx, &alert, &key, OnLoss::Watch).await;
        }
    }
}

/// The replica holding `slot`'s key, by one node's account: a run younger than its first
/// record ([`super::START_RECORD_DELAY`]) is known only by its key.
async fn holder(ctx: &SlotEnv, job: &Job, slot: Slot) -> Option<String> {
    let key = SlotKey::new(&ctx.race.key_prefix, &job.name, slot);
    let held = ctx.race.lock.look(&[key]).await?;
    held.into_iter()
        .next()
        .flatten()
        .map(|token| token.replica().to_owned())
}

/// A slot's fate at its deadline, as its run records tell it.
#[derive(Debug, PartialEq, Eq)]
enum AtDeadline {
    /// A run of it ended `done`.
    Done,
    /// Its run failed: the `failed` alert told already.
    Failed,
    /// Not raced: the job was paused at the slot.
    Paused,
    /// Not done: the reason the alert gives.
    Late(String),
}

/// The fate of a slot whose runs are `runs` (any order), `paused` when a pause held at it,
/// `holder` the replica holding its key when no run is recorded.
fn at_deadline(runs: &[&RunRecord], paused: bool, holder: Option<&str>) -> AtDeadline {
    if runs.iter().any(|r| r.outcome == RunState::Done) {
        return AtDeadline::Done;
    }
    let Some(latest) = runs.iter().max_by_key(|r| (r.fence, r.started)) else {
        return if paused {
            AtDeadline::Paused
        } else if let Some(holder) = holder {
            AtDeadline::Late(format!(
                "still running on {holder} (won, no run record yet)"
            ))
        } else {
            AtDeadline::Late(
                "pending: no replica has recorded a run of the slot (not raced, or its winner died at once)"
                    .to_owned(),
            )
        };
    };
    let (by, since) = (&latest.replica, latest.started.to_rfc3339());
    AtDeadline::Late(match latest.outcome {
        RunState::Done => return AtDeadline::Done,
        RunState::Failed => return AtDeadline::Failed,
        RunState::Running => format!("still running on {by} (started {since})"),
        RunState::HandedOff => format!(
            "handed off by {by} ({}) and not done since",
            latest
                .error
                .as_deref()
                .unwrap_or("nothing left the replica")
        ),
        RunState::Overlapped => {
            format!("skipped by {by}: the job's previous run was still going (overlap = \"skip\")")
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::schedule::Fence;

    fn run(state: RunState, handoff: u8, replica: &str) -> RunRecord {
        let slot = Slot::at(DateTime::from_timestamp(600, 0).unwrap());
        RunRecord {
            fence: Fence::new(slot, handoff),
            ..RunRecord::test("j", slot, replica, state)
        }
    }

    fn late(runs: &[RunRecord]) -> String {
        let runs: Vec<&RunRecord> = runs.iter().collect();
        match at_deadline(&runs, false, None) {
            AtDeadline::Late(reason) => reason,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_slot_not_done_is_late_with_the_reason_of_its_latest_run() {
        assert!(late(&[run(RunState::Running, 0, "a")]).starts_with("still running on a"));
        let handed = [
            run(RunState::HandedOff, 0, "a"),
            run(RunState::Running, 1, "b"),
        ];
        assert!(
            late(&handed).starts_with("still running on b"),
            "{}",
            late(&handed)
        );
        assert!(late(&[run(RunState::HandedOff, 0, "a")]).starts_with("handed off by a"));
        assert!(late(&[]).starts_with("pending"));
        let won = at_deadline(&[], false, Some("c"));
        assert_eq!(
            won,
            AtDeadline::Late("still running on c (won, no run record yet)".into())
        );
    }

    #[test]
    fn a_done_failed_or_paused_slot_is_not_late() {
        let done = [
            run(RunState::HandedOff, 0, "a"),
            run(RunState::Done, 1, "b"),
        ];
        let done: Vec<&RunRecord> = done.iter().collect();
        assert_eq!(at_deadline(&done, false, None), AtDeadline::Done);
        let failed = run(RunState::Failed, 0, "a");
        assert_eq!(at_deadline(&[&failed], false, None), AtDeadline::Failed);
        assert_eq!(at_deadline(&[], true, None), AtDeadline::Paused);
    }

    /// Jobs parsed from `(name, cron, deadline)`, each alerting `ops`.
    fn jobs(specs: &[(&str, &str, &str)]) -> Vec<Arc<Job>> {
        let mut text = String::from("[alert.ops]\ntype = \"log\"\ncontent = \"x\"\n");
        for (name, cron, deadline) in specs {
            text += &format!(
                "[[job]]\nname = \"{name}\"\nschedule = \"{cron}\"\ndeadline = \"{deadline}\"\n\
                 on_failure = \"ops\"\n[job.action]\ntype = \"log\"\ncontent = \"x\"\n"
            );
        }
        let env: std::collections::HashMap<String, String> = Default::default();
        let path = std::path::Path::new("t.toml");
        crate::config::parse(path, &text, &env).unwrap().jobs
    }

    #[test]
    fn each_slot_s_deadline_comes_in_order_across_jobs() {
        let jobs = jobs(&[("a", "*/10 * * * * *", "5s"), ("b", "*/15 * * * * *", "2s")]);
        let now = DateTime::parse_from_rfc3339("2026-01-01T10:00:03Z")
            .unwrap()
            .to_utc();
        let mut due = Deadlines::new(jobs, now);
        let order: Vec<(String, i64)> = (0..4)
            .map(|_| due.next().unwrap())
            .map(|(at, _, job)| (job.name.clone(), at.timestamp() % 60))
            .collect();
        // a: the slot of :00 is still within its deadline at :03 (due :05).
        let expected = [("a", 5), ("a", 15), ("b", 17), ("a", 25)];
        let expected: Vec<(String, i64)> = expected
            .iter()
            .map(|(j, s)| ((*j).to_owned(), *s))
            .collect();
        assert_eq!(order, expected);
    }
}
