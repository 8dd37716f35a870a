//! The check after a win and before the first byte, on the Redis nodes' own clocks: the fleet
//! clock is measured again (one `TIME` per node), and by the nodes' time the lock must not have
//! run out and the slot must still be inside its window (a scheduled slot's start window, a
//! handoff's deadline).
//!
//! The guard before the race judged the slot on the fleet clock, which this replica keeps on
//! its monotonic clock; and the lock's validity is counted on that clock too. A freeze that
//! falls inside a round trip (the nodes answered `TIME` or the `SET`, then the process or its
//! VM stood still, and its clocks were set back on resume) fools both: the answer reads as
//! fresh. The nodes' clocks did not stop, so one more round trip asks them. The lock's end is
//! taken on the nodes' time too: the fleet's time as the race began plus the key's TTL (the
//! nodes set the key later, so it lives at least that long), which a freeze anywhere before
//! this check can only make earlier, never later.

use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::Instant;

use super::claim::Raced;
use super::guard::{self, AfterWin, Outside};
use super::{Books, Race, Trigger, Won, run};

/// A scheduled slot is stale past its start window by more than this, by the nodes' time: the
/// guard admitted it on the fleet clock a race and a round trip earlier (milliseconds; a loaded
/// machine, a few hundred), so a slot raced at the window's edge still runs. A freeze is
/// seconds long, and a second win of a slot's key comes at least its TTL after the slot, which
/// is [`super::KEY_MARGIN`] (5 s) past the window: far beyond this.
const STALE_TOLERANCE: Duration = Duration::from_secs(1);

/// Measures the fleet clock again, once for the batch's wins (one `TIME` per node per
/// instant, as before the race), and judges each win on it: inside its lock and its window,
/// its lease's validity is cut to the lock's end by the nodes' time; else the win becomes a
/// slot left, logged and counted as `skipped` (`lapsed`, `stale` or `deadline`), its running
/// lease given back. Standalone there is nothing to ask: the in-process lock stops with the
/// process.
pub(super) async fn confirm(race: &Race, books: &Books, claims: &mut [Raced]) {
    let won = |claim: &Raced| matches!(claim, Raced::Won(_));
    let (Some(fleet), Some(nodes)) = (race.fleet.as_ref(), race.lock.nodes()) else {
        return;
    };
    if !claims.iter().any(won) {
        return;
    }
    fleet.verify(nodes, &books.metrics, &books.replica).await;
    let (at, now) = (Instant::now(), race.clock.fleet_now());
    for claim in claims.iter_mut() {
        let Raced::Won(won) = claim else { continue };
        match outside(race, won, now) {
            None => {
                let left = (won.lock_ends - now).to_std().unwrap_or_default();
                won.lease.valid_until = won.lease.valid_until.min(at + left);
            }
            Some(outside) => {
                run::release_running(race, books, won).await;
                let left = guard::skip(books, &won.trigger, &won.job, won.slot, outside);
                *claim = Raced::Settled(left);
            }
        }
    }
}

/// Whether the nodes' time `now` puts the win outside: its lock run out, a scheduled slot past
/// its start window (for its key's TTL), a handoff past the slot's deadline. Catch-up and
/// `trigger` have no window; their lock still holds them.
fn outside(race: &Race, won: &Won, now: DateTime<Utc>) -> Option<Outside> {
    let after = |instant: DateTime<Utc>| (now - instant).to_std().ok();
    let late = after(race.opens(&won.trigger, &won.job, won.slot)).unwrap_or_default();
    if let Some(over) = after(won.lock_ends) {
        return Some(Outside::AfterWin(AfterWin::Lapsed { late, over }));
    }
    match &won.trigger {
        Trigger::Schedule => {
            let latest = guard::latest_start(race, race.key_ttl(&won.job)) + STALE_TOLERANCE;
            (late > latest).then_some(Outside::AfterWin(AfterWin::Stale(late)))
        }
        Trigger::Handoff(_) => {
            after(race.handoff_deadline(&won.job, won.slot)).map(Outside::PastDeadline)
        }
        Trigger::CatchUp | Trigger::Manual => None,
    }
}
