//! At settle: the fleet's own account of its slots (slotcron's history, merged across nodes,
//! and the ledger built on it, read as `slotcron history` reads them, through a pool of its
//! own over the simulated network) against what the receivers saw. Each slot that reached a
//! receiver is listed once per run; a slot run twice is listed twice and flagged; no slot is
//! `done` that reached no receiver, none `missed` that did.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use chrono::DateTime;
use slotcron::unstable::ops::ledger::{self, Entry, Fate, Now};
use slotcron::unstable::record::history::{HISTORY_CAP, History, RunRecord, RunState};
use slotcron::unstable::time::schedule::Slot;

use crate::fleet::Shape;
use crate::world::Shared;

/// The reader's name on the simulated network.
const READER: &str = "ledger";

/// Each job's merged history, as the nodes hold it at settle (`None`: no majority answered).
pub async fn read(world: &Shared, shape: &Shape) -> BTreeMap<String, Option<Vec<RunRecord>>> {
    let nodes = crate::operator::nodes(world, shape, READER);
    let history = History::Redis {
        nodes: Arc::new(nodes),
        prefix: "sim".to_owned(),
    };
    let mut runs = BTreeMap::new();
    let names: std::collections::BTreeSet<&String> = (shape.jobs.iter())
        .chain(&shape.rolled_out)
        .map(|j| &j.name)
        .collect();
    for job in names {
        let job = job.clone();
        let read = history.read(&job, HISTORY_CAP).await.ok();
        runs.insert(job, read);
    }
    runs
}

/// The ledger of `runs` over the slots `from_us..to_us` (every second), all settled.
pub fn entries(runs: &[RunRecord], (from_us, to_us): (i64, i64)) -> BTreeMap<i64, Vec<Entry>> {
    let at = |us: i64| DateTime::from_timestamp_micros(us).expect("a simulated instant");
    let first = (from_us + 999_999) / 1_000_000 * 1_000_000;
    let slots: Vec<Slot> = (first..to_us)
        .step_by(1_000_000)
        .map(|us| Slot::at(at(us)))
        .collect();
    let now = Now {
        settled_before: at(to_us),
        window_closed_before: Some(at(to_us)),
        held: HashSet::new(),
    };
    let mut by_slot: BTreeMap<i64, Vec<Entry>> = BTreeMap::new();
    for entry in ledger::ledger(&slots, runs, &[], &now) {
        let us = entry.slot.instant().timestamp_micros();
        by_slot.entry(us).or_default().push(entry);
    }
    by_slot
}

/// What the ledger says is wrong of one slot, given the runs (fence, replica) that reached a
/// receiver: the invariant's name and why.
/// `kept`: the slot's records were kept by a majority of nodes (no majority of them restarted
/// empty since); beyond that the history may have lost them.
pub fn disagreement(
    entries: &[Entry],
    arrived: &[(i64, String)],
    kept: bool,
) -> Option<(&'static str, String)> {
    let listed = |fence: i64, replica: &str| {
        entries.iter().any(|e| match &e.fate {
            Fate::Run(r) => r.fence.get() == fence && r.replica == replica,
            _ => false,
        })
    };
    let unlisted = arrived.iter().find(|(f, r)| kept && !listed(*f, r));
    if let Some((fence, replica)) = unlisted {
        let detail = format!(
            "the run of fence {fence} by {replica} reached a receiver and is not in the ledger"
        );
        return Some(("ledger_lists_each_run", detail));
    }
    let flagged = entries.iter().filter(|e| e.duplicate).count();
    let same_fence = arrived.len() > 1 && arrived.iter().all(|(f, _)| *f == arrived[0].0);
    if same_fence && flagged < arrived.len() {
        let detail = format!(
            "ran {} times under one fence, {flagged} flagged as a duplicate",
            arrived.len()
        );
        return Some(("duplicate_listed_twice", detail));
    }
    let done = entries
        .iter()
        .any(|e| matches!(&e.fate, Fate::Run(r) if r.outcome == RunState::Done));
    if arrived.is_empty() && done {
        return Some((
            "ledger_fate_agrees",
            "done, yet no receiver saw it".to_owned(),
        ));
    }
    None
}
