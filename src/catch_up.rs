//! The look-back at a replica's start: the slots the whole fleet missed while no replica was up
//! (a rollout, a crash loop) are caught up (`catch_up`) and the ones still missed are reported
//! once across the fleet (counted, alerted). Both stop at the job's watermark: a first deploy
//! owes nothing.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures_util::future::join_all;
use tokio::sync::Semaphore;

use crate::config::{CatchUpPolicy, Job, MAX_CATCH_UP_ALL};
use crate::fleet::control::{PausedSpan, covered, paused_intervals};
use crate::record::history::RunRecord;
use crate::record::watermark;
use crate::slot::{SlotEnv, Trigger};
use crate::time::jitter;
use crate::time::schedule::{Schedule, Slot};

/// How far back a starting replica looks for slots no replica ran.
const MISSED_LOOKBACK: Duration = Duration::from_secs(3600);
/// Most missed slots of one job a starting replica reports one by one (counted and alerted).
const MAX_MISSED_ALERTS: usize = 20;
/// How many jobs' history and pause log one replica reads at once. Without a bound a replica
/// with a thousand jobs sends each node a thousand history reads at one instant, queued ahead of
/// the races: measured at 1000 jobs × 5 replicas, that burst timed the races and the running
/// leases' releases out, and thousands of slots were skipped. A few at a time keep the nodes'
/// queues short; the look-back takes longer, the races don't. (The watermarks are one batch.)
pub const LOOK_BACKS_AT_ONCE: usize = 4;

/// At start: records the watermark of every job of `jobs` (one batch), catches up what the
/// jobs with `catch_up` missed, then reports the slots still missed.
pub(crate) async fn look_back(ctx: Arc<SlotEnv>, jobs: Vec<Arc<Job>>) {
    // The look-back reads "now" on the fleet clock: never on an unmeasured guess.
    if !ctx.until_measured().await {
        return;
    }
    let watermarks = watermarks(&ctx, &jobs).await;
    // A slot a job was paused at was not missed. The logs only grow, and a change made after
    // this read covers no slot before it: read once, for both passes.
    let names: Vec<String> = jobs.iter().map(|job| job.name.clone()).collect();
    let logs = ctx.contenders.control.logs(&names).await;
    let paused: Vec<Vec<PausedSpan>> = logs.iter().map(|log| paused_intervals(log)).collect();
    let turns = Semaphore::new(LOOK_BACKS_AT_ONCE);
    let catching = jobs
        .iter()
        .zip(&watermarks)
        .zip(&paused)
        .filter(|((job, _), _)| job.catch_up.is_some())
        .filter_map(|((job, watermark), paused)| Some((job, (*watermark)?, paused)))
        .map(|(job, watermark, paused)| catch_up(&ctx, job, watermark, paused, &turns));
    join_all(catching).await;
    report_missed(&ctx, &jobs, &watermarks, &paused, &turns).await;
}

/// Records the watermark of jobs a reload gave `catch_up` (or added): from now on the fleet
/// schedules them, so the next start catches up what they miss after this.
pub(crate) async fn mark_first_seen(ctx: Arc<SlotEnv>, jobs: Vec<Arc<Job>>) {
    if ctx.until_measured().await {
        watermarks(&ctx, &jobs).await;
    }
}

/// The fleet's watermark of each job of `jobs` (recorded now where none is), in one batch;
/// `None` for a job whose watermark a majority did not answer (logged: its missed slots cannot
/// be told apart).
async fn watermarks(ctx: &SlotEnv, jobs: &[Arc<Job>]) -> Vec<Option<DateTime<Utc>>> {
    let definitions: Vec<String> = jobs.iter().map(|job| job.schedule.definition()).collect();
    let names: Vec<(&str, &str)> = jobs
        .iter()
        .zip(&definitions)
        .map(|(job, definition)| (job.name.as_str(), definition.as_str()))
        .collect();
    let now = ctx.race.clock.fleet_now();
    let read = watermark::first_seen(&ctx.books.history, &names, now).await;
    jobs.iter()
        .zip(read)
        .map(|(job, watermark)| {
            watermark
                .inspect_err(|e| {
                    tracing::warn!(job = %job.name, replica = %ctx.books.replica, error = %e,
                        "the fleet's watermark cannot be read: missed slots cannot be told apart, \
                        so none is caught up or reported; the next start records it");
                })
                .ok()
        })
        .collect()
}

/// What the fleet ran of `job`, read in its turn: `None` when the history cannot be read
/// (logged with `doing`, which names what is given up).
async fn read_runs(
    ctx: &SlotEnv,
    job: &Job,
    turns: &Semaphore,
    doing: &str,
) -> Option<Vec<RunRecord>> {
    let _turn = turns.acquire().await.ok()?;
    match ctx.books.history.read(&job.name, MAX_CATCH_UP_ALL).await {
        Ok(runs) => Some(runs),
        Err(e) => {
            tracing::warn!(job = %job.name, replica = %ctx.books.replica, error = %e,
                "{doing} skipped: the run history cannot be read, so missed slots cannot be told apart");
            None
        }
    }
}

/// Reports the slots no replica ran while this one was down: for each job, those of the last
/// [`MISSED_LOOKBACK`] after the fleet's watermark (first deploy: none) with no run record and
/// no pause. For each, the replicas starting now race once more (key `…:{slot}:missed`), so the
/// slot is counted (`slotcron_missed_slots_total`) and alerted (`on_failure`) once across the
/// fleet. The newest [`MAX_MISSED_ALERTS`] are reported; an older gap is only logged. A job
/// with no slot between its floor and the start (a first deploy) has nothing to read.
async fn report_missed(
    ctx: &SlotEnv,
    jobs: &[Arc<Job>],
    watermarks: &[Option<DateTime<Utc>>],
    paused: &[Vec<PausedSpan>],
    turns: &Semaphore,
) {
    let started = ctx.race.clock.fleet_now();
    // The slots just before the start may still be running elsewhere (a run is recorded when it
    // ends): judge them once their timeout and start window are over. Later slots are this
    // replica's to race.
    // A slot's jitter moves its run that much later.
    let longest = jobs
        .iter()
        .map(|job| job.timeout + job.jitter)
        .max()
        .unwrap_or_default();
    tokio::select! {
        biased;
        _ = ctx.shutdown.cancelled() => return,
        _ = tokio::time::sleep(longest + ctx.race.start_window()) => {}
    }
    let lookback = chrono::Duration::from_std(MISSED_LOOKBACK).unwrap_or_default();
    let owed = jobs.iter().zip(watermarks).zip(paused);
    let owed = owed.filter_map(|((job, watermark), paused)| {
        let floor = (started - lookback).max((*watermark)?);
        let first = job.schedule.back_from(started).next()?;
        (first.instant() > floor).then_some(Missed {
            job,
            started,
            floor,
            paused,
        })
    });
    let reports = owed.map(|missed| missed.report(ctx, turns));
    join_all(reports).await;
}

/// One job's look for slots no replica ran: after `floor` and up to `started`, not `paused`.
struct Missed<'a> {
    job: &'a Job,
    started: DateTime<Utc>,
    floor: DateTime<Utc>,
    paused: &'a [PausedSpan],
}

impl Missed<'_> {
    /// Reports the slots of the job no replica ran, each in a race for its `missed` key.
    async fn report(self, ctx: &SlotEnv, turns: &Semaphore) {
        let job = self.job;
        let Some(runs) = read_runs(ctx, job, turns, "the missed-slot report").await else {
            return;
        };
        let (all, paused) = (CatchUpPolicy::All, self.paused);
        let mut missed = missed_slots(&job.schedule, self.started, self.floor, &runs, paused, all);
        if missed.len() > MAX_MISSED_ALERTS {
            tracing::warn!(job = %job.name, replica = %ctx.books.replica, missed = missed.len(),
                "{} older missed slots are not reported one by one (see `slotcron history --missed`)",
                missed.len() - MAX_MISSED_ALERTS);
            missed.drain(..missed.len() - MAX_MISSED_ALERTS);
        }
        for slot in missed {
            ctx.report_missed(job, slot).await;
        }
    }
}

/// Runs, once, the slots of `job` the whole fleet missed (a rollout, a crash loop): those in
/// its catch-up window, after the fleet first scheduled the job (its `watermark`: a first
/// deploy runs nothing), with no run record. `latest` runs the newest of them, `all` each,
/// oldest first. They go through the same entry as every slot, so replicas starting together
/// still run each once. Judged on the fleet clock, like the race.
async fn catch_up(
    ctx: &Arc<SlotEnv>,
    job: &Arc<Job>,
    watermark: DateTime<Utc>,
    paused: &[PausedSpan],
    turns: &Semaphore,
) {
    let Some(catch_up) = job.catch_up else { return };
    let now = opened_by(job, &ctx.race.key_prefix, ctx.race.clock.fleet_now());
    let window = chrono::Duration::from_std(catch_up.window).unwrap_or_default();
    let floor = (now - window).max(watermark);
    if job
        .schedule
        .back_from(now)
        .next()
        .is_none_or(|s| s.instant() <= floor)
    {
        return;
    }
    let Some(runs) = read_runs(ctx, job, turns, "catch-up").await else {
        return;
    };
    let missed = missed_slots(&job.schedule, now, floor, &runs, paused, catch_up.policy);
    let total = missed.len();
    for (started, slot) in missed.into_iter().enumerate() {
        // No new slot starts after SIGTERM, caught-up ones included.
        if ctx.shutdown.is_cancelled() {
            tracing::warn!(job = %job.name, replica = %ctx.books.replica, left = total - started,
                "catch-up stopped at shutdown: the slots left are not started");
            return;
        }
        tracing::info!(job = %job.name, %slot, replica = %ctx.books.replica, "catching up a missed slot");
        crate::slot::once(ctx, Trigger::CatchUp, job.clone(), slot).await;
    }
}

/// `now`, or just before the latest slot at or before it when that slot has not opened yet
/// (its jitter's delay runs past `now`): that slot is the timeline's to race, at its delayed
/// instant, and catching it up now would send it early. Only the latest can be unopened: a
/// jitter is never larger than the job's interval.
fn opened_by(job: &Job, prefix: &str, now: DateTime<Utc>) -> DateTime<Utc> {
    let unopened = |slot: &Slot| {
        jitter::delayed(*slot, jitter::delay(prefix, &job.name, *slot, job.jitter)) > now
    };
    match job.schedule.back_from(now).next().filter(unopened) {
        Some(slot) => slot.instant() - chrono::Duration::milliseconds(1),
        None => now,
    }
}

/// The slots to catch up, oldest first: at or before `now`, after `floor`, with no record in
/// `runs` (newest first, as [`crate::record::history::History::read`] returns them). When `runs` holds
/// [`MAX_CATCH_UP_ALL`] records it may not reach back to `floor`: slots older than its oldest
/// cannot be told apart from missed ones, and are left. A slot a pause in `paused` covers was
/// not missed. Walks back from `now`, so `latest` is the newest missed slot at any window size.
fn missed_slots(
    schedule: &Schedule,
    now: DateTime<Utc>,
    floor: DateTime<Utc>,
    runs: &[RunRecord],
    paused: &[PausedSpan],
    policy: CatchUpPolicy,
) -> Vec<Slot> {
    let recorded: std::collections::HashSet<Slot> = runs.iter().map(|r| r.slot).collect();
    let horizon = runs
        .last()
        .filter(|_| runs.len() >= MAX_CATCH_UP_ALL)
        .map(|r| r.slot);
    let most = match policy {
        CatchUpPolicy::Latest => 1,
        CatchUpPolicy::All => MAX_CATCH_UP_ALL,
    };
    let mut missed: Vec<Slot> = schedule
        .back_from(now)
        .take_while(|s| s.instant() > floor && horizon.is_none_or(|h| *s >= h))
        .filter(|s| !recorded.contains(s) && !covered(paused, s.instant()))
        .take(most)
        .collect();
    missed.reverse();
    missed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::log_jobs as jobs;

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    fn ran(job: &Job, slots: impl IntoIterator<Item = DateTime<Utc>>) -> Vec<RunRecord> {
        let mut runs: Vec<RunRecord> = slots
            .into_iter()
            .map(|t| {
                RunRecord::test(
                    &job.name,
                    Slot::at(t),
                    "r",
                    crate::record::history::RunState::Done,
                )
            })
            .collect();
        runs.reverse();
        runs
    }

    fn instants(slots: &[Slot]) -> Vec<String> {
        slots.iter().map(|s| s.rfc3339_utc()).collect()
    }

    #[test]
    fn a_paused_slot_is_not_caught_up_and_latest_is_the_newest_missed_one() {
        let job = &jobs(&[("every", "* * * * * *")])[0];
        let now = at("2026-01-01T10:00:05.500Z");
        let floor = at("2026-01-01T10:00:00.300Z");
        let paused = [(at("2026-01-01T10:00:04Z"), None)];
        let latest = missed_slots(
            &job.schedule,
            now,
            floor,
            &[],
            &paused,
            CatchUpPolicy::Latest,
        );
        assert_eq!(instants(&latest), ["2026-01-01T10:00:03Z"]);
        let all = missed_slots(&job.schedule, now, floor, &[], &paused, CatchUpPolicy::All);
        assert_eq!(
            instants(&all),
            [
                "2026-01-01T10:00:01Z",
                "2026-01-01T10:00:02Z",
                "2026-01-01T10:00:03Z"
            ]
        );
    }

    #[test]
    fn catch_up_runs_the_unrecorded_slots_after_the_floor() {
        let job = &jobs(&[("every", "* * * * * *")])[0];
        let now = at("2026-01-01T10:00:05.500Z");
        let floor = at("2026-01-01T10:00:00.300Z");
        let runs = ran(
            job,
            [at("2026-01-01T10:00:01Z"), at("2026-01-01T10:00:02Z")],
        );
        let latest = missed_slots(&job.schedule, now, floor, &runs, &[], CatchUpPolicy::Latest);
        assert_eq!(instants(&latest), ["2026-01-01T10:00:05Z"]);
        let all = missed_slots(&job.schedule, now, floor, &runs, &[], CatchUpPolicy::All);
        assert_eq!(
            instants(&all),
            [
                "2026-01-01T10:00:03Z",
                "2026-01-01T10:00:04Z",
                "2026-01-01T10:00:05Z"
            ]
        );
    }

    #[test]
    fn a_first_deploy_catches_up_nothing() {
        // The watermark is the start itself: the floor is now.
        let job = &jobs(&[("every", "* * * * * *")])[0];
        let now = at("2026-01-01T10:00:05.500Z");
        for policy in [CatchUpPolicy::Latest, CatchUpPolicy::All] {
            assert!(missed_slots(&job.schedule, now, now, &[], &[], policy).is_empty());
        }
    }

    #[test]
    fn latest_is_the_newest_missed_slot_at_any_window_size() {
        let job = &jobs(&[("every", "* * * * * *")])[0];
        let now = at("2026-01-01T10:00:05.500Z");
        let week_ago = now - chrono::Duration::days(7);
        let latest = missed_slots(
            &job.schedule,
            now,
            week_ago,
            &[],
            &[],
            CatchUpPolicy::Latest,
        );
        assert_eq!(instants(&latest), ["2026-01-01T10:00:05Z"]);
    }

    #[test]
    fn catch_up_never_reaches_past_the_oldest_record_of_a_full_history() {
        let job = &jobs(&[("every", "* * * * * *")])[0];
        let now = at("2026-01-01T10:00:00.500Z");
        // 1000 recorded runs, the newest a second before now; then one slot older is missing.
        let recorded =
            (2..=MAX_CATCH_UP_ALL as i64 + 1).map(|s| now - chrono::Duration::seconds(s));
        let runs = ran(job, recorded.rev());
        assert_eq!(runs.len(), MAX_CATCH_UP_ALL);
        let floor = now - chrono::Duration::hours(1);
        let all = missed_slots(&job.schedule, now, floor, &runs, &[], CatchUpPolicy::All);
        // Only the slots after the history: now's and the one before it.
        assert_eq!(
            instants(&all),
            ["2026-01-01T09:59:59Z", "2026-01-01T10:00:00Z"]
        );
    }

    #[test]
    fn catch_up_leaves_a_slot_whose_jitter_has_not_run_out_to_the_timeline() {
        let mut jobs = jobs(&[("spread", "0 * * * * *")]);
        let jitter = Duration::from_secs(30);
        std::sync::Arc::get_mut(&mut jobs[0]).unwrap().jitter = jitter;
        let job = &jobs[0];
        let slot = Slot::at(at("2026-01-01T10:01:00Z"));
        let delayed = jitter::delayed(slot, jitter::delay("p", "spread", slot, jitter));
        assert!(delayed > slot.instant(), "this slot's delay is not zero");
        let before = delayed - chrono::Duration::milliseconds(1);
        // Between the instant and the delay: caught up only to before the slot.
        let cut = opened_by(job, "p", before);
        assert!(cut < slot.instant(), "{cut}");
        let missed = missed_slots(
            &job.schedule,
            cut,
            at("2026-01-01T09:58:30Z"),
            &[],
            &[],
            CatchUpPolicy::Latest,
        );
        assert_eq!(missed, [Slot::at(at("2026-01-01T10:00:00Z"))]);
        // Once the delay ran out, the slot is catch-up's.
        assert_eq!(opened_by(job, "p", delayed), delayed);
    }
}
