//! The slot ledger: every slot a job's schedule had in a period, with its fate, so "did Monday's
//! 09:00 push go out, and if not, why?" has an answer even when no replica ran it.
//!
//! A pure function of what the fleet keeps: the schedule (which slots there were), the run
//! records (`history`: done, failed, handed off, skipped), the pause log (`control`) and, for
//! the slots too young to be settled, whether a node still holds their key. A slot with no
//! record that no pause covers is `missed`: no replica recorded running it (every replica down,
//! or Redis unavailable to all of them); for a young slot that is known at once when its start
//! window has closed and no node holds its key. A slot run twice under one fence (the lock
//! failed: nodes restarted empty, a clock fault) has two entries, each flagged `duplicate`.
//! The alerts the fleet sent about a slot (its alert log: `failed`, `missed`, `duplicate`,
//! `deadline`, `recovered`) are marked on its entries ([`mark_alerts`]).

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::fleet::control::{PausedSpan, covered};
use crate::record::alerts::{AlertKind, AlertRecord};
use crate::record::history::{RunRecord, duplicates};
use crate::time::schedule::Slot;

/// What became of one slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fate {
    /// A run's record (done, failed, handed off, skipped, or running); a handed-off slot has
    /// one entry per run.
    Run(RunRecord),
    /// No record yet, but a node holds the slot's key: a replica won it and runs it (or died
    /// in its run's first second).
    Held,
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
            Fate::Held => "running",
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
    /// Another run of the slot had the same fence: the slot ran twice.
    pub duplicate: bool,
    /// The alerts sent about the slot, oldest first ([`mark_alerts`]).
    pub alerts: Vec<AlertKind>,
}

/// Marks on each entry the alerts `alerts` (the job's alert log) sent about its slot, oldest
/// first: the slot's deadline alert and the recovery its `done` run sent, for instance.
pub fn mark_alerts(entries: &mut [Entry], alerts: &[AlertRecord]) {
    let mut by_slot: HashMap<Slot, Vec<&AlertRecord>> = HashMap::new();
    for alert in alerts {
        by_slot.entry(alert.slot).or_default().push(alert);
    }
    for entry in entries {
        if let Some(of_slot) = by_slot.get_mut(&entry.slot) {
            of_slot.sort_by_key(|a| a.at);
            entry.alerts = of_slot.iter().map(|a| a.kind).collect();
            entry.alerts.dedup();
        }
    }
}

/// When the ledger is read, and what the nodes said of the slots too young to be settled.
#[derive(Debug, Clone)]
pub struct Now {
    /// Slots before this have had every record they will get: no record means `missed`.
    pub settled_before: DateTime<Utc>,
    /// Slots before this are past their start window (no replica starts them any more), and
    /// `held` names those whose key a node holds; `None` when a majority of nodes did not
    /// answer the read of the keys (young slots then stay `pending`).
    pub window_closed_before: Option<DateTime<Utc>>,
    /// Young slots whose key some node holds.
    pub held: HashSet<Slot>,
}

/// The ledger of `slots` (the schedule's slots of the period), newest first.
pub fn ledger(slots: &[Slot], runs: &[RunRecord], paused: &[PausedSpan], now: &Now) -> Vec<Entry> {
    let mut by_slot: HashMap<Slot, Vec<&RunRecord>> = HashMap::new();
    for run in runs {
        by_slot.entry(run.slot).or_default().push(run);
    }
    let mut entries = Vec::new();
    for &slot in slots.iter().rev() {
        match by_slot.remove(&slot) {
            Some(of_slot) => entries.extend(run_entries(slot, of_slot)),
            None => entries.push(Entry {
                slot,
                fate: unrun_fate(slot, paused, now),
                duplicate: false,
                alerts: Vec::new(),
            }),
        }
    }
    entries
}

/// One entry per run of `slot`, the latest fence first; runs sharing a fence are flagged.
fn run_entries(slot: Slot, mut runs: Vec<&RunRecord>) -> Vec<Entry> {
    runs.sort_by_key(|r| std::cmp::Reverse((r.fence, r.started)));
    let owned: Vec<RunRecord> = runs.into_iter().cloned().collect();
    let twice: Vec<RunRecord> = duplicates(&owned).into_iter().cloned().collect();
    owned
        .into_iter()
        .map(|r| Entry {
            slot,
            duplicate: twice.contains(&r),
            fate: Fate::Run(r),
            alerts: Vec::new(),
        })
        .collect()
}

/// The fate of a slot no record names.
fn unrun_fate(slot: Slot, paused: &[PausedSpan], now: &Now) -> Fate {
    let t = slot.instant();
    if covered(paused, t) {
        Fate::Paused
    } else if now.held.contains(&slot) {
        Fate::Held
    } else if t < now.settled_before || now.window_closed_before.is_some_and(|c| t < c) {
        Fate::Missed
    } else {
        Fate::Pending
    }
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
    /// Present (true) on each run of a slot that ran twice under one fence.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub duplicate: bool,
    /// The alerts sent about the slot, oldest first (`deadline`, `recovered`, …); absent when
    /// none was.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub alerts: Vec<&'static str>,
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
        /// Its fate (`running`, `paused`, `pending`, `missed`).
        outcome: &'static str,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::history::RunState;
    use crate::time::schedule::Fence;

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

    fn settled(before: i64) -> Now {
        Now {
            settled_before: t(before),
            window_closed_before: None,
            held: HashSet::new(),
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
        let entries = ledger(&slots, &runs, &paused, &settled(60));
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
        let entries = ledger(&slots, &[], &[(t(15), None)], &settled(100));
        assert_eq!(
            outcomes(&entries),
            vec![(30, "paused"), (20, "paused"), (10, "missed")]
        );
    }

    #[test]
    fn a_young_slot_is_missed_once_its_window_closed_unheld_and_running_while_held() {
        let slots: Vec<Slot> = (1..=4).map(|s| Slot::at(t(s * 10))).collect();
        let now = Now {
            settled_before: t(15),
            window_closed_before: Some(t(35)),
            held: HashSet::from([Slot::at(t(20))]),
        };
        let entries = ledger(&slots, &[], &[], &now);
        assert_eq!(
            outcomes(&entries),
            vec![
                (40, "pending"),
                (30, "missed"),
                (20, "running"),
                (10, "missed")
            ]
        );
        let unread = Now {
            window_closed_before: None,
            ..now
        };
        assert_eq!(ledger(&slots, &[], &[], &unread)[1].fate, Fate::Pending);
    }

    #[test]
    fn a_slot_s_alerts_are_marked_on_its_entries_oldest_first() {
        let slots = [Slot::at(t(10)), Slot::at(t(20))];
        let runs = [run(10, RunState::Done, 0), run(20, RunState::Done, 0)];
        let mut entries = ledger(&slots, &runs, &[], &settled(30));
        let alert = |slot: i64, kind: AlertKind, at: i64| AlertRecord {
            job: "j".into(),
            kind,
            slot: Slot::at(t(slot)),
            replica: "r".into(),
            at: t(at),
            reason: String::new(),
        };
        let log = [
            alert(10, AlertKind::Recovered, 17),
            alert(10, AlertKind::Deadline, 12),
        ];
        mark_alerts(&mut entries, &log);
        let marks: Vec<(i64, Vec<&str>)> = entries
            .iter()
            .map(|e| {
                let kinds = e.alerts.iter().map(|k| k.as_str()).collect();
                (e.slot.instant().timestamp(), kinds)
            })
            .collect();
        assert_eq!(
            marks,
            vec![(20, vec![]), (10, vec!["deadline", "recovered"])]
        );
    }

    #[test]
    fn a_slot_run_twice_under_one_fence_is_listed_twice_and_flagged() {
        let slots = [Slot::at(t(10)), Slot::at(t(20))];
        let mut late = run(10, RunState::Done, 0);
        late.replica = "late".into();
        late.started = t(11);
        let runs = [run(10, RunState::Done, 0), late, run(20, RunState::Done, 0)];
        let entries = ledger(&slots, &runs, &[], &settled(30));
        let flags: Vec<(i64, &str, bool)> = entries
            .iter()
            .map(|e| (e.slot.instant().timestamp(), e.fate.outcome(), e.duplicate))
            .collect();
        assert_eq!(
            flags,
            vec![(20, "done", false), (10, "done", true), (10, "done", true)]
        );
    }
}
