//! The run's history record: the record the win started ([`Won::start_record`]) finished with
//! how the slot ended, and written; a win some node refused reads back the records beside its
//! own, so a second run of the slot is found and reported. A win the job's previous run kept
//! from running (`overlap = "skip"`) is recorded here too: the claim step writes no record.

use chrono::{DateTime, Utc};

use super::claim::Raced;
use super::{Books, SlotResult, Won};
use crate::action::DeliveryState;
use crate::record::history::{RunRecord, RunState, other_run};
use crate::time::schedule::SharedClock;

/// History entries a winner looks through beside its own record (on the node, which returns
/// only those under its fence), for another run of its slot: a late run of a slot is within
/// its start window of the first, a few entries back even for a job every second.
const DUPLICATE_LOOK: usize = 64;

/// Records how the run of `won` ended (`record` is its start). A win some node refused (it
/// held another replica's token) may be a second run of the slot: then the record's write also
/// reads back the records under its fence, and another run found there is returned, to be
/// reported ([`super::alerts::duplicate`]). An uncontested win costs one write.
pub(super) async fn finish(
    books: &Books,
    won: &Won,
    mut record: RunRecord,
    (result, now): (&SlotResult, DateTime<Utc>),
) -> Option<Twice> {
    ended(&mut record, result, now);
    if !won.lease.contested {
        books.history.record(&record).await;
        return None;
    }
    let recent = books.history.record_and_read(&record, DUPLICATE_LOOK).await;
    let other = other_run(&record, &recent).cloned();
    other.map(|other| Twice { run: record, other })
}

/// A slot that ran twice under one fence: this replica's run, and the other found beside it.
pub(super) struct Twice {
    /// This replica's run, as recorded.
    pub(super) run: RunRecord,
    /// The other run's record, found under the same fence.
    pub(super) other: RunRecord,
}

/// Records each win of `claims` that did not run (`overlap = "skip"`), each at its write's time
/// on `clock`: the ledger shows why the slot did not run.
pub(super) async fn skipped(books: &Books, claims: &[Raced], clock: &SharedClock) {
    for claim in claims {
        if let Raced::Skipped(won, result) = claim {
            not_run(books, won, result, clock.now()).await;
        }
    }
}

/// Records a win that did not run, at `now`.
async fn not_run(books: &Books, won: &Won, result: &SlotResult, now: DateTime<Utc>) {
    let mut record = won.start_record(&books.replica, now);
    ended(&mut record, result, now);
    books.history.record(&record).await;
}

/// The run's final record: its ending (`now`, on the replica's clock), attempts, error and
/// delivery.
fn ended(record: &mut RunRecord, result: &SlotResult, now: DateTime<Utc>) {
    record.finished = Some(now);
    match result {
        SlotResult::Done { delivery, .. } => {
            record.outcome = RunState::Done;
            record.attempts = delivery.attempts;
        }
        SlotResult::Failed {
            error,
            attempts,
            delivery,
            ..
        } => {
            record.outcome = RunState::Failed;
            record.error = Some(error.clone());
            record.attempts = *attempts;
            record.delivery = Some(*delivery);
        }
        SlotResult::HandedOff {
            reason, attempts, ..
        } => {
            record.outcome = RunState::HandedOff;
            record.error = Some(reason.clone());
            record.attempts = *attempts;
            record.delivery = Some(DeliveryState::NotDelivered);
        }
        SlotResult::Overlapped { holder } => {
            record.outcome = RunState::Overlapped;
            record.error = Some(match holder {
                Some(holder) => format!(
                    "overlap: the previous run is still going on {}",
                    holder.replica()
                ),
                None => "overlap: cannot tell whether the previous run is still going".to_owned(),
            });
        }
        SlotResult::Paused
        | SlotResult::Standby
        | SlotResult::Late { .. }
        | SlotResult::Early { .. }
        | SlotResult::Unmeasured
        | SlotResult::Lost { .. }
        | SlotResult::Unavailable(_) => {}
    }
}
