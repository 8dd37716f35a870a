//! How a slot ended on one replica, as its log line's `outcome` field and its metric name it.
//!
//! One type for both, so a log line and the counter it feeds cannot disagree: the strings of
//! [`Outcome::as_str`] are public interface (the book's Operations, "Logs: who won"; dashboards on
//! `slotcron_races_total{outcome}` and `slotcron_runs_total{outcome}`). It sits below both
//! `slot`, which reports outcomes, and `metrics`, which counts them.
//!
//! The family, one name per meaning: a slot's fate on this replica is `slot::SlotResult`; its
//! [`Outcome`] is what its log line and counter say, and [`Series`] which counter family
//! counts it; a run's record keeps `record::history::RunState` (derived from the result in
//! one place, `slot/record.rs`), and the ledger's `ops::ledger::Fate` reads that back, adding
//! what only the ledger sees (held, paused, pending, missed). One public word, two meanings:
//! `skipped` is both a slot outside its window ([`Outcome::OutOfWindow`]) and a won slot not
//! run because the job's previous run still goes ([`Outcome::Overlapped`]); the word stays on
//! the wire (logs, metric labels, history), the types keep them apart, and the log line's
//! `reason` tells them apart.

use std::fmt;

/// How a slot ended on this replica: a race's outcome, a won run's, or a missed slot's report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// This replica holds the slot's lock and runs it.
    Won,
    /// Another replica holds the slot's lock.
    Lost,
    /// No majority of Redis nodes answered: the slot does not run here.
    Unavailable,
    /// Not raced here, outside the slot's window: before the slot on the fleet clock, past the
    /// start window, on a clock never measured, or a handoff offer past the slot's deadline.
    /// Logged and counted as `skipped` (with `reason`: `early`, `late`, `unmeasured`,
    /// `deadline`).
    OutOfWindow,
    /// Not raced: the job is paused fleet-wide.
    Paused,
    /// Not raced: this replica is not one of the slot's candidates.
    Standby,
    /// The winner's run delivered.
    Done,
    /// The winner's run did not deliver, and no other replica will try.
    Failed,
    /// Nothing left this replica: the slot was offered to the fleet.
    HandedOff,
    /// Won, not run: the job's previous run still holds its running lease (`overlap = "skip"`).
    /// Logged as `skipped` like [`Outcome::OutOfWindow`] (with `reason = "overlap"`), but a
    /// run outcome, so that `races{won}` stays the sum of the runs; recorded in the history as
    /// `skipped` too (`RunState::Overlapped` in `record::history`).
    Overlapped,
    /// No replica ran the slot; this replica won the right to report it once for the fleet.
    Missed,
    /// The slot ran twice under one fence (the lock failed: nodes restarted empty, a clock
    /// fault); this replica, which ran one of the runs, won the right to report it once.
    Duplicate,
    /// The slot was not `done` by the job's `deadline`; this replica won the right to alert it
    /// once for the fleet.
    Deadline,
    /// The job ended `done` after an alert that it failed, was missed or passed its deadline;
    /// this replica won the right to say so once for the fleet.
    Recovered,
}

/// Which family of counters an outcome is counted in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Series {
    /// `slotcron_races_total`: how the race for a slot ended (or why it was not raced).
    Race,
    /// `slotcron_runs_total`: how a won slot's run ended.
    Run,
    /// `slotcron_missed_slots_total`: a slot no replica ran, reported once across the fleet.
    Missed,
    /// `slotcron_duplicate_runs_total`: a slot run twice, reported once across the fleet.
    Duplicate,
    /// `slotcron_alerts_total{outcome}`: a deadline or recovery alert, sent once across the
    /// fleet.
    Alert,
}

impl Outcome {
    /// The `outcome` field of the slot's log line and the `outcome` label of its counter.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Won => "won",
            Outcome::Lost => "lost",
            Outcome::Unavailable => "unavailable",
            Outcome::OutOfWindow | Outcome::Overlapped => "skipped",
            Outcome::Paused => "paused",
            Outcome::Standby => "standby",
            Outcome::Done => "done",
            Outcome::Failed => "failed",
            Outcome::HandedOff => "handed_off",
            Outcome::Missed => "missed",
            Outcome::Duplicate => "duplicate",
            Outcome::Deadline => "deadline",
            Outcome::Recovered => "recovered",
        }
    }

    /// The counters this outcome is counted in. No `_` arm: a new outcome must pick one.
    pub fn series(self) -> Series {
        match self {
            Outcome::Won
            | Outcome::Lost
            | Outcome::Unavailable
            | Outcome::OutOfWindow
            | Outcome::Paused
            | Outcome::Standby => Series::Race,
            Outcome::Done | Outcome::Failed | Outcome::HandedOff | Outcome::Overlapped => {
                Series::Run
            }
            Outcome::Missed => Series::Missed,
            Outcome::Duplicate => Series::Duplicate,
            Outcome::Deadline | Outcome::Recovered => Series::Alert,
        }
    }

    /// The level of the slot's log line: the usual race and run at info, what an operator
    /// should look at at warn, a failed run at error, and a replica standing by (one line per
    /// non-candidate replica and slot: the bulk of a large fleet's lines) at debug only.
    pub fn level(self) -> tracing::Level {
        match self {
            Outcome::Won | Outcome::Lost | Outcome::Paused | Outcome::Done | Outcome::Recovered => {
                tracing::Level::INFO
            }
            Outcome::Unavailable
            | Outcome::OutOfWindow
            | Outcome::Overlapped
            | Outcome::HandedOff
            | Outcome::Missed
            | Outcome::Deadline => tracing::Level::WARN,
            Outcome::Failed | Outcome::Duplicate => tracing::Level::ERROR,
            Outcome::Standby => tracing::Level::DEBUG,
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a race for a slot ended on this replica (`slotcron_races_total{outcome}`); `paused`:
/// not raced, the job being paused fleet-wide; `standby`: not raced, this replica not being one
/// of the slot's candidates (`[scheduler] candidates`).
pub const RACE_OUTCOMES: [&str; 6] = ["won", "lost", "unavailable", "skipped", "paused", "standby"];
/// How a won slot's run ended (`slotcron_runs_total{outcome}`); `skipped`: its previous run
/// still held the running lease (`overlap = "skip"`).
pub const RUN_OUTCOMES: [&str; 4] = ["done", "failed", "handed_off", "skipped"];
/// The alerts raced once across the fleet beside a slot's run (`slotcron_alerts_total{outcome}`):
/// `deadline`, a slot not `done` by the job's `deadline`; `recovered`, a job `done` again after
/// an alert that it failed, was missed or passed its deadline.
pub const ALERT_OUTCOMES: [&str; 2] = ["deadline", "recovered"];

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Outcome; 14] = [
        Outcome::Won,
        Outcome::Lost,
        Outcome::Unavailable,
        Outcome::OutOfWindow,
        Outcome::Paused,
        Outcome::Standby,
        Outcome::Done,
        Outcome::Failed,
        Outcome::HandedOff,
        Outcome::Overlapped,
        Outcome::Missed,
        Outcome::Duplicate,
        Outcome::Deadline,
        Outcome::Recovered,
    ];

    #[test]
    fn every_counted_outcome_is_a_declared_series() {
        for outcome in ALL {
            let declared = match outcome.series() {
                Series::Race => RACE_OUTCOMES.as_slice(),
                Series::Run => RUN_OUTCOMES.as_slice(),
                Series::Alert => ALERT_OUTCOMES.as_slice(),
                Series::Missed | Series::Duplicate => continue,
            };
            assert!(declared.contains(&outcome.as_str()), "{outcome:?}");
        }
    }
}
