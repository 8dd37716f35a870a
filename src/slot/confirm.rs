//! The check after a win and before the first byte, on the Redis nodes' own clocks: the lock is
//! still this replica's on a majority (for how long, by their TTLs), and the slot is still
//! inside its window by their time (a scheduled slot's start window, a handoff's deadline).
//!
//! The guard before the race judged the slot on the fleet clock, which this replica keeps on
//! its monotonic clock; and the lock's validity is counted on that clock too. A freeze that
//! falls inside a round trip (the nodes answered `TIME` or the `SET`, then the process or its
//! VM stood still, and its clocks were set back on resume) fools both: the answer reads as
//! fresh. The nodes' clocks did not stop, so one more round trip asks them.

use std::time::Duration;

use super::guard::{self, AfterWin, Outside};
use super::{Books, Race, SlotResult, Trigger, Won};
use crate::lock::{Confirm, Confirmed};

/// A scheduled slot is stale past its start window by more than this, by the nodes' time: the
/// guard admitted it on the fleet clock a race and a round trip earlier (milliseconds; a loaded
/// machine, a few hundred), so a slot raced at the window's edge still runs. A freeze is
/// seconds long, and a second win of a slot's key comes at least its TTL after the slot, which
/// is [`super::KEY_MARGIN`] (5 s) past the window: far beyond this.
const STALE_TOLERANCE: Duration = Duration::from_secs(1);

/// Gives `won` the nodes' account of it, when the lock is still this replica's on a majority
/// and the slot still inside its window by the nodes' time; else the slot is left, logged and
/// counted as `skipped` (`stale` or `lapsed`). Standalone there is nothing to ask: the
/// in-process lock stops with the process.
pub(super) async fn confirm(race: &Race, books: &Books, won: &mut Won) -> Result<(), SlotResult> {
    let Some(confirm) = race.lock().confirm(&won.lease).await else {
        return Ok(());
    };
    let outside = match confirm {
        Confirm::Held(confirmed) => match stale(race, won, &confirmed) {
            Some(outside) => outside,
            None => {
                let valid_until = confirmed.at + confirmed.validity;
                won.lease.valid_until = won.lease.valid_until.min(valid_until);
                won.confirmed = Some(confirmed);
                return Ok(());
            }
        },
        Confirm::Lapsed {
            held_on,
            needed,
            nodes_now,
        } => Outside::AfterWin(AfterWin::Lapsed {
            held_on,
            needed,
            late: nodes_now
                .and_then(|now| (now - won.slot.instant()).to_std().ok())
                .unwrap_or_default(),
        }),
    };
    Err(guard::skip(
        books,
        &won.trigger,
        &won.job,
        won.slot,
        outside,
    ))
}

/// Whether the nodes' time puts the slot outside its window: a scheduled slot past its start
/// window (for its key's TTL), a handoff past the slot's deadline. Catch-up and `trigger` have
/// no window; their lock's validity still holds them.
fn stale(race: &Race, won: &Won, confirmed: &Confirmed) -> Option<Outside> {
    let now = confirmed.nodes_now();
    let after = |instant: chrono::DateTime<chrono::Utc>| (now - instant).to_std().ok();
    match &won.trigger {
        Trigger::Schedule => {
            let late = after(won.slot.instant())?;
            let latest = guard::latest_start(race, race.key_ttl(&won.job)) + STALE_TOLERANCE;
            (late > latest).then_some(Outside::AfterWin(AfterWin::Stale(late)))
        }
        Trigger::Handoff(_) => {
            let past = after(race.handoff_deadline(&won.job, won.slot))?;
            Some(Outside::PastDeadline(past))
        }
        Trigger::CatchUp | Trigger::Manual => None,
    }
}
