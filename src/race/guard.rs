//! The window guard before every race: a slot is raced only inside its window on the fleet
//! clock (never before its instant, never past its start window or its key's life), and only
//! once the fleet clock has been measured; a slot outside is logged and counted as `skipped`
//! with its reason (`early`, `late`, `unmeasured`).

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::report::SlotLine;
use super::{RaceContext, RaceKind, SlotResult, KEY_MARGIN};
use crate::config::Job;
use crate::outcome::Outcome;
use crate::time::schedule::Slot;

/// A slot at most this far ahead of the fleet clock is waited for at the race (a re-measured
/// offset, a timer's jitter); further ahead it is skipped as early.
pub const EARLY_WAIT: Duration = Duration::from_secs(1);

/// Why the guard refused a slot.
#[derive(Debug, Clone, Copy)]
pub(super) enum Outside {
    /// This long before the slot on the fleet clock.
    Early(Duration),
    /// This long after the slot, past the start window.
    Late(Duration),
    /// The fleet clock was never measured: no slot is judged on a guess.
    Unmeasured,
}

impl RaceContext {
    /// How late (on the fleet clock) a scheduled slot may still be raced: its start window, and
    /// never past its key's `ttl` less [`KEY_MARGIN`], after which the winner's key may have
    /// expired and a second win would run the slot twice. (The start window is below that
    /// bound by construction; this keeps it so whatever the window becomes.)
    pub fn latest_start(&self, ttl: Duration) -> Duration {
        self.start_window().min(ttl.saturating_sub(KEY_MARGIN))
    }

    /// Waits until the fleet clock has been measured once (at once without `[redis]`); false
    /// when the replica shuts down first.
    pub async fn until_measured(&self) -> bool {
        match &self.fleet {
            Some(fleet) => fleet.until_measured(&self.shutdown).await,
            None => true,
        }
    }

    /// The guard before every race, on the fleet clock (not the timeline's): a replica never
    /// races a slot before its instant, whatever its timeline says (a fast or stepped wall
    /// clock under `clock = "local"`, a re-measured fleet offset). The fleet clock is measured
    /// again first ([`FleetClock::verify`]), and a clock never measured races nothing. A slot
    /// up to [`EARLY_WAIT`] ahead is waited for; one further ahead is skipped as early. A
    /// scheduled slot past [`RaceContext::latest_start`] (for keys of `ttl`) is skipped as late.
    pub(super) async fn outside_window(
        &self,
        slot: Slot,
        kind: RaceKind,
        ttl: Duration,
    ) -> Option<Outside> {
        if let (Some(fleet), Some(nodes)) = (&self.fleet, self.lock.nodes()) {
            fleet.verify(nodes, &self.metrics, &self.replica).await;
        }
        if !self.clock.measured() {
            return Some(Outside::Unmeasured);
        }
        let ahead = |now: DateTime<Utc>| {
            (slot.instant() - now)
                .to_std()
                .ok()
                .filter(|d| !d.is_zero())
        };
        if let Some(early) = ahead(self.clock.fleet_now()) {
            if early > EARLY_WAIT {
                return Some(Outside::Early(early));
            }
            tokio::time::sleep(early).await;
            if let Some(early) = ahead(self.clock.fleet_now()) {
                return Some(Outside::Early(early));
            }
        }
        let late = (self.clock.fleet_now() - slot.instant())
            .to_std()
            .unwrap_or_default();
        (kind == RaceKind::Scheduled && late > self.latest_start(ttl))
            .then_some(Outside::Late(late))
    }

    /// Logs and counts a slot the guard refused.
    pub(super) fn skip(&self, job: &Job, slot: Slot, outside: Outside) -> SlotResult {
        match outside {
            Outside::Late(late) => self.skip_late(job, slot, late),
            Outside::Early(early) => self.skip_early(job, slot, early),
            Outside::Unmeasured => self.skip_unmeasured(job, slot),
        }
    }

    /// The fleet clock was never measured: the slot belongs to the replicas that measured it.
    fn skip_unmeasured(&self, job: &Job, slot: Slot) -> SlotResult {
        self.report(SlotLine {
            reason: Some("unmeasured"),
            ..SlotLine::new(
                &job.name,
                slot,
                Outcome::Skipped,
                "the fleet clock is not measured yet (no Redis node answered TIME): not racing",
            )
        });
        SlotResult::Unmeasured
    }

    /// Before the slot on the fleet clock: the slot belongs to the replicas on time.
    fn skip_early(&self, job: &Job, slot: Slot, early: Duration) -> SlotResult {
        let message = format!(
            "{} ms before the slot on the fleet clock (this replica's clock runs ahead): not racing",
            early.as_millis()
        );
        self.report(SlotLine {
            reason: Some("early"),
            early_ms: Some(early.as_millis() as u64),
            ..SlotLine::new(&job.name, slot, Outcome::Skipped, message)
        });
        SlotResult::Early { early }
    }

    /// Past the start window: the replicas that were awake had the slot.
    fn skip_late(&self, job: &Job, slot: Slot, late: Duration) -> SlotResult {
        let message = format!(
            "woke {} ms after the slot, past the start window: not racing",
            late.as_millis()
        );
        self.report(SlotLine {
            reason: Some("late"),
            late_ms: Some(late.as_millis() as u64),
            ..SlotLine::new(&job.name, slot, Outcome::Skipped, message)
        });
        SlotResult::Late { late }
    }
}
