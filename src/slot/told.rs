//! A slot's result told to the operator who triggered it: how it ended, in a word the CLI's
//! exit code follows, and in a sentence. The same whether the trigger ran in the CLI process
//! (`--local`) or on a replica of the fleet (which sends it back over the trigger's channel).

use super::SlotResult;
use crate::fleet::triggers::Ending;

impl SlotResult {
    /// How a triggered slot ended: its [`Ending`] and a sentence.
    pub fn told(&self) -> (Ending, String) {
        match self {
            SlotResult::Done { delivery, duration } => (
                Ending::Done,
                format!(
                    "done in {} ms, {} attempt(s)",
                    duration.as_millis(),
                    delivery.attempts
                ),
            ),
            SlotResult::Failed {
                error, delivery, ..
            } => (
                Ending::Failed,
                format!("failed (delivery {}): {error}", delivery.as_str()),
            ),
            SlotResult::HandedOff { reason, .. } => (
                Ending::Failed,
                format!("not sent from there, handed off to the other replicas: {reason}"),
            ),
            SlotResult::Lost { holder } => (
                Ending::Lost,
                format!("already run by {} for this second", holder.replica()),
            ),
            SlotResult::Unavailable(why) => {
                (Ending::Unavailable, format!("lock unavailable: {why}"))
            }
            SlotResult::Unmeasured => (
                Ending::Unavailable,
                "not raced: Redis unavailable (no node answered TIME, so the fleet clock is \
                 not measured)"
                    .to_owned(),
            ),
            SlotResult::Overlapped { .. } => (
                Ending::Skipped,
                "skipped: the previous run is still going".to_owned(),
            ),
            SlotResult::Late { .. } => (Ending::Failed, "skipped: too late".to_owned()),
            SlotResult::Early { .. } => (
                Ending::Failed,
                "skipped: before its instant on the fleet clock".to_owned(),
            ),
            SlotResult::Paused => (Ending::Skipped, "not raced: the job is paused".to_owned()),
            SlotResult::Standby => (
                Ending::Skipped,
                "not raced: not one of the slot's candidates".to_owned(),
            ),
        }
    }
}
