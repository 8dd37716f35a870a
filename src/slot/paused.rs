//! The first step of a scheduled slot: a job paused fleet-wide (`slotcron pause`) is not
//! raced. Other triggers are not judged here: `trigger` runs a paused job on purpose,
//! `resume --catch-up` runs a slot inside the pause, and catch-up never picks a paused slot.

use std::sync::Arc;

use super::report::SlotLine;
use super::{Books, SlotResult, Trigger};
use crate::config::Job;
use crate::fleet::control::Control;
use crate::outcome::Outcome;
use crate::time::schedule::Slot;

/// `jobs` less the ones paused at `slot` (scheduled slots only), each of which logs `paused`,
/// is counted and ends `Paused` in `ended`.
pub(super) fn unpaused(
    control: &Control,
    books: &Books,
    trigger: &Trigger,
    jobs: Vec<Arc<Job>>,
    slot: Slot,
    ended: &mut Vec<SlotResult>,
) -> Vec<Arc<Job>> {
    if !matches!(trigger, Trigger::Schedule) {
        return jobs;
    }
    jobs.into_iter()
        .filter(|job| {
            let pause = control.paused(&job.name, slot.instant());
            books.metrics.paused(&job.name, pause.is_some());
            let Some(pause) = pause else { return true };
            books.report(SlotLine {
                paused_by: Some(&pause.by),
                paused_at: Some(pause.at.to_rfc3339()),
                until: pause.until.map(|u| u.to_rfc3339()),
                reason: pause.reason.as_deref(),
                ..SlotLine::new(
                    job,
                    slot,
                    Outcome::Paused,
                    "the job is paused: slot not raced",
                )
            });
            ended.push(SlotResult::Paused);
            false
        })
        .collect()
}
