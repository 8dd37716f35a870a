//! The slot ledger: every slot a job's schedule had in a period, with its fate, so "did Monday's
//! 09:00 push go out, and if not, why?" has an answer even when no replica ran it.
//!
//! A pure function of three things the fleet keeps: the schedule (which slots there were), the
//! run records (`history`: done, failed, handed off, skipped) and the pause log (`control`). A
//! slot with no record that no pause covers is `missed`: no replica recorded running it (every
//! replica down, or Redis unavailable to all of them).

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::control::{covered, PausedSpan};
use crate::history::RunRecord;
use crate::schedule::Slot;

/// What became of one slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fate {
    /// A run's record (done, failed, handed off, skipped, or running); a handed-off slot has
    /// one entry per run.
    Run(RunRecord),
    /// The job was paused fleet-wide at the slot.
    Paused,
    /// Too recent to judge: its run may still be going or not yet recorded.
    Pending,
    /// No record and no pause: no replica ran it.
    Missed,
}

impl Fate {
    /// The ledger's `outcome` column.
    pub fn outcome(&self) -> &'static str {
        match self {
            Fate::Run(record) => record.outcome.as_str(),
            Fate::Paused => "paused",
            Fate::Pending => "pending",
            Fate::Missed => "missed",
        }
    }
}

/// One line of the ledger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The scheduled slot.
    pub slot: Slot,
    /// What became of it.
    pub fate: Fate,
}

/// The ledger of `slots` (the schedule's slots of the period), newest first. Slots after
/// `settled_before` are `Pending` unless a record says otherwise.
pub fn ledger(
    slots: &[Slot],
    runs: &[RunRecord],
    paused: &[PausedSpan],
    settled_before: DateTime<Utc>,
) -> Vec<Entry> {
    let mut by_slot: HashMap<Slot, Vec<&RunRecord>> = HashMap::new();
    for run in runs {
        by_slot.entry(run.slot).or_default().push(run);
    }
    let mut entries = Vec::new();
    for &slot in slots.iter().rev() {
        if let Some(mut of_slot) = by_slot.remove(&slot) {
            of_slot.sort_by_key(|r| std::cmp::Reverse(r.fence));
            entries.extend(of_slot.into_iter().map(|r| Entry {
                slot,
                fate: Fate::Run(r.clone()),
            }));
            continue;
        }
        let fate = if covered(paused, slot.instant()) {
            Fate::Paused
        } else if slot.instant() >= settled_before {
            Fate::Pending
        } else {
            Fate::Missed
        };
        entries.push(Entry { slot, fate });
    }
    entries
}

/// One ledger line as `history --json` prints it: the run record's fields when there is one,
/// else the slot's own (`job`, `slot`, `outcome`), so no key appears twice.
#[derive(Debug, Serialize)]
pub struct Row<'a> {
    #[serde(flatten)]
    /// The run or the slot's fate.
    pub fate: RowFate<'a>,
    /// The slot in the job's zone.
    pub slot_local: String,
    /// How long the run took, if there was one.
    pub duration_ms: Option<u128>,
}

/// What a ledger line says of its slot: a run's record, or the slot with its fate.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum RowFate<'a> {
    /// A slot that ran: its record.
    Run(&'a RunRecord),
    /// A slot that did not run.
    NoRun {
        /// The job.
        job: &'a str,
        /// The slot in UTC.
        slot: String,
        /// Its fate (`paused`, `pending`, `missed`).
        outcome: &'static str,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::RunState;
    use crate::schedule::Fence;

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(s, 0).unwrap()
    }

    fn run(slot_s: i64, outcome: RunState, handoff: u8) -> RunRecord {
        let slot = Slot::at(t(slot_s));
        RunRecord {
            fence: Fence::new(slot, handoff),
            ..RunRecord::test("j", slot, &format!("r{handoff}"), outcome)
        }
    }

    fn outcomes(entries: &[Entry]) -> Vec<(i64, &'static str)> {
        entries
            .iter()
            .map(|e| (e.slot.instant().timestamp(), e.fate.outcome()))
            .collect()
    }

    #[test]
    fn every_slot_has_a_fate_newest_first() {
        let slots: Vec<Slot> = (1..=6).map(|s| Slot::at(t(s * 10))).collect();
        let runs = [
            run(10, RunState::Done, 0),
            run(20, RunState::HandedOff, 0),
            run(20, RunState::Done, 1),
            run(50, RunState::Failed, 0),
        ];
        let paused = [(t(30), Some(t(40)))];
        let entries = ledger(&slots, &runs, &paused, t(60));
        assert_eq!(
            outcomes(&entries),
            vec![
                (60, "pending"),
                (50, "failed"),
                (40, "missed"),
                (30, "paused"),
                (20, "done"),
                (20, "handed_off"),
                (10, "done"),
            ]
        );
    }

    #[test]
    fn an_open_pause_covers_everything_after_it() {
        let slots: Vec<Slot> = (1..=3).map(|s| Slot::at(t(s * 10))).collect();
        let entries = ledger(&slots, &[], &[(t(15), None)], t(100));
        assert_eq!(
            outcomes(&entries),
            vec![(30, "paused"), (20, "paused"), (10, "missed")]
        );
    }
}
