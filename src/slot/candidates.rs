//! Who races a slot when `[scheduler] candidates = k` (see [`crate::fleet::membership`] for the view
//! and the ranking): the first-ranked replica races at once; the other candidates each wait
//! one more `candidate_stagger` and look before they race; the place after them, the lookout,
//! waits a little longer still and looks too; everyone else stands by.
//!
//! A look is one `MGET` on one node for the whole batch of jobs due at the instant. A slot
//! found held is left (logged with its holder), a slot found free is raced through the lock as
//! usual. So a healthy fleet pays for each slot one race (the first-ranked's) and a look per
//! covering place, while a slot whose first `k` candidates all died inside the membership's
//! detection bound is still raced, by the lookout: a miss needs `k + 1` failures inside it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::report::SlotLine;
use super::{Books, Contenders, Race, SlotResult, Trigger};
use crate::config::Candidates;
use crate::config::{Job, SchedulerConfig};
use crate::fleet::membership;
use crate::lock::{SlotKey, Token};
use crate::outcome::Outcome;
use crate::time::schedule::Slot;
use tokio_util::sync::CancellationToken;

/// How much longer than the last candidate the lookout waits before it looks. The candidates'
/// races (each answer bounded by the node timeout) have normally ended by then; when the nodes
/// are slow, the lookout's look finds the slot free, its race loses, and that costs one race.
pub const LOOKOUT_AFTER: Duration = Duration::from_millis(250);

/// `jobs` grouped by this replica's place among each one's candidates for `slot`, first place
/// first: the `k` candidates, then the lookout (place `k + 1`). A job for which this replica
/// is neither is left to the others (logged at debug, counted as `standby`, and `Standby` in
/// `ended`). A late member (no heartbeat for [`membership::LATE_AFTER`]) ranked above this
/// replica may have died: this replica moves up one place for it. With `candidates = "all"`,
/// and for every trigger but the schedule: one group, unranked.
pub(super) fn places(
    contenders: &Contenders,
    books: &Books,
    trigger: &Trigger,
    jobs: Vec<Arc<Job>>,
    slot: Slot,
    ended: &mut Vec<SlotResult>,
) -> Vec<(Option<usize>, Vec<Arc<Job>>)> {
    let (Candidates::Top(k), Trigger::Schedule) = (contenders.candidates, trigger) else {
        return vec![(None, jobs)];
    };
    let live = contenders.membership.live(&books.replica);
    let late = contenders.membership.late(&books.replica);
    books.metrics.fleet_replicas(live.len());
    let mut groups: BTreeMap<usize, Vec<Arc<Job>>> = BTreeMap::new();
    for job in jobs {
        let rank = membership::rank(&live, &books.replica, &job.name, slot);
        let covering = late
            .iter()
            .filter(|l| membership::rank(&live, l, &job.name, slot) < rank)
            .count();
        let place = rank - covering;
        if place <= k.get() + 1 {
            groups.entry(place).or_default().push(job);
            continue;
        }
        let message = format!("not one of the slot's {k} candidates: not racing");
        books.report(SlotLine {
            rank: Some(rank),
            fleet: Some(live.len()),
            ..SlotLine::new(&job, slot, Outcome::Standby, message)
        });
        ended.push(SlotResult::Standby);
    }
    groups
        .into_iter()
        .map(|(r, jobs)| (Some(r), jobs))
        .collect()
}

/// Waits as long as the replica at place `rank` waits after the slot before it races
/// ([`stagger`]); false when the replica shuts down meanwhile (the slot is left to the
/// higher places).
pub(super) async fn wait_for_place(
    contenders: &Contenders,
    shutdown: &CancellationToken,
    rank: Option<usize>,
) -> bool {
    let stagger = stagger(contenders.candidates, contenders.stagger, rank);
    if stagger.is_zero() {
        return true;
    }
    tokio::select! {
        biased;
        _ = shutdown.cancelled() => false,
        _ = tokio::time::sleep(stagger) => true,
    }
}

/// Of `jobs`, the ones the replica at place `rank` should race at `slot`. The first place
/// races them all; any later place first looks ([`crate::lock::SlotLock::look`]) and leaves
/// the slots it finds held: a candidate logs each as `lost` to the holder, the lookout as
/// `standby` (each in `ended`). When the look cannot be made, every slot is raced.
pub(super) async fn unheld(
    race: &Race,
    contenders: &Contenders,
    books: &Books,
    jobs: Vec<Arc<Job>>,
    slot: Slot,
    rank: Option<usize>,
    ended: &mut Vec<SlotResult>,
) -> Vec<Arc<Job>> {
    if rank.is_none_or(|r| r <= 1) {
        return jobs;
    }
    let keys: Vec<SlotKey> = jobs
        .iter()
        .map(|job| SlotKey::new(&race.key_prefix, &job.name, slot))
        .collect();
    let Some(holders) = race.lock.look(&keys).await else {
        return jobs;
    };
    let mut free = Vec::with_capacity(jobs.len());
    for (job, holder) in jobs.into_iter().zip(holders) {
        match holder {
            Some(holder) => ended.push(report_held(contenders, books, &job, slot, rank, holder)),
            None => free.push(job),
        }
    }
    free
}

/// Logs a slot a look found held by `holder`: `lost` for a candidate (as the race it would
/// have lost), `standby` for the lookout (which only stands in for dead candidates).
fn report_held(
    contenders: &Contenders,
    books: &Books,
    job: &Job,
    slot: Slot,
    rank: Option<usize>,
    holder: Token,
) -> SlotResult {
    if !is_lookout(contenders.candidates, rank) {
        books.report_lost(job, slot, &Trigger::Schedule, rank, &holder);
        return SlotResult::Lost { holder };
    }
    let winner = holder.replica();
    let message = format!("lookout: {winner} has the slot: not racing");
    books.report(SlotLine {
        trigger: Some(&Trigger::Schedule),
        rank,
        winner: Some(winner),
        ..SlotLine::new(job, slot, Outcome::Standby, message)
    });
    SlotResult::Standby
}

/// The warning for a `[scheduler]` whose lookout would wait past the start window: it would
/// skip every slot it should stand in for as late, so a miss would again need only
/// `candidates` failures. `slotcron check` prints it and a starting replica logs it.
pub fn stagger_warning(scheduler: &SchedulerConfig) -> Option<String> {
    let Candidates::Top(k) = scheduler.candidates else {
        return None;
    };
    let window = scheduler.start_window();
    let lookout = stagger(
        scheduler.candidates,
        scheduler.candidate_stagger,
        Some(k.get() + 1),
    );
    (lookout >= window).then(|| {
        format!(
            "[scheduler] candidates = {k} with candidate_stagger = {}: the lookout (place {}) \
             would race {} after each slot, past the start window of {} (the larger of \
             max_clock_skew and 2s), so it could not stand in for dead candidates; lower \
             candidate_stagger or candidates, or raise max_clock_skew",
            humantime::format_duration(scheduler.candidate_stagger),
            k.get() + 1,
            humantime::format_duration(lookout),
            humantime::format_duration(window),
        )
    })
}

/// How long the replica at place `rank` waits after the slot before it races: one `per_rank`
/// for each place ahead of it, so the first-ranked normally wins and the others only cover for
/// it; the lookout waits [`LOOKOUT_AFTER`] more.
fn stagger(candidates: Candidates, per_rank: Duration, rank: Option<usize>) -> Duration {
    let behind = rank.map_or(0, |r| r.saturating_sub(1));
    let wait = per_rank.saturating_mul(u32::try_from(behind).unwrap_or(u32::MAX));
    if is_lookout(candidates, rank) {
        wait + LOOKOUT_AFTER
    } else {
        wait
    }
}

/// Whether place `rank` is the lookout's: the one after the `k` candidates.
fn is_lookout(candidates: Candidates, rank: Option<usize>) -> bool {
    matches!((candidates, rank), (Candidates::Top(k), Some(r)) if r > k.get())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lookout_waits_past_the_last_candidate() {
        let per_rank = Duration::from_millis(50);
        let two = Candidates::Top(2.try_into().unwrap());
        assert_eq!(stagger(two, per_rank, Some(1)), Duration::ZERO);
        assert_eq!(stagger(two, per_rank, Some(2)), per_rank);
        assert_eq!(
            stagger(two, per_rank, Some(3)),
            2 * per_rank + LOOKOUT_AFTER
        );
        assert!(!is_lookout(two, Some(2)));
        assert!(is_lookout(two, Some(3)));
        assert!(
            !is_lookout(Candidates::All, None),
            "with candidates = all nobody looks out"
        );
        assert_eq!(stagger(Candidates::All, per_rank, None), Duration::ZERO);
    }

    #[test]
    fn a_lookout_past_the_start_window_is_warned_about() {
        // Through the real parser, as `slotcron check` and a starting replica see it.
        let scheduler = |candidates: &str, per_rank_ms: u64, skew_s: u64| {
            let text = format!(
                "[scheduler]\ncandidates = {candidates}\ncandidate_stagger = \"{per_rank_ms}ms\"\n\
                 max_clock_skew = \"{skew_s}s\"\n[[job]]\nname = \"j\"\nschedule = \"* * * * * *\"\n\
                 [job.action]\ntype = \"log\"\ncontent = \"x\"\n"
            );
            let env = std::collections::HashMap::new();
            crate::config::parse(std::path::Path::new("t.toml"), &text, &env)
                .unwrap()
                .scheduler
        };
        assert_eq!(
            stagger_warning(&scheduler("2", 50, 2)),
            None,
            "the defaults"
        );
        let warning = stagger_warning(&scheduler("2", 1000, 2)).expect("2.25s is past 2s");
        assert!(
            warning.contains("candidate_stagger = 1s")
                && warning.contains("would race 2s 250ms")
                && warning.contains("start window of 2s"),
            "{warning}"
        );
        assert_eq!(
            stagger_warning(&scheduler("2", 1000, 5)),
            None,
            "a 5 s window"
        );
        let all = scheduler("\"all\"", 1000, 2);
        assert_eq!(stagger_warning(&all), None, "nobody looks out");
    }
}
