//! A slot's jitter: how long after its nominal instant a slot of a job with `jitter` is raced
//! and sent. Only the race and the send move; the slot keeps its nominal identity (its lock
//! key, fence, `Idempotency-Key`, ledger and history entries).
//!
//! The delay is a pure function of the key prefix, the job's name and the slot, so every
//! replica, every restart and every version that keeps this function computes the same one
//! (a random delay per replica would have each replica race at its own time: the lock holds,
//! but the send would move with whichever replica won):
//!
//! ```text
//! h     = SHA-256("slotcron-jitter/1" 0x00 prefix 0x00 job 0x00 slot_epoch_ms as i64 LE)
//! delay = (first 8 bytes of h as a big-endian u64) mod jitter_ms      (0 when jitter_ms = 0)
//! ```
//!
//! in whole milliseconds, in `[0, jitter)`: never negative, so never before the slot. SHA-256
//! is specified (std's hasher is not); the modulo's bias is below 2^-26 for any jitter a job
//! may have. `tests/it/jitter.rs` pins values, so a change of the function fails loudly.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};

use super::schedule::{Schedule, Slot};

/// The function's name and version, hashed first: a new function gets a new tag.
const TAG: &[u8] = b"slotcron-jitter/1";

/// How many of a schedule's next slots [`smallest_gap`] looks at: a year of a daily job, past
/// every DST transition of its zone.
const GAP_SCAN_SLOTS: usize = 1_000;

/// The delay of `slot` of `job` on `prefix` for a job with `jitter`: in `[0, jitter)`, whole
/// milliseconds; zero without jitter (see the module's doc for the function).
pub fn delay(prefix: &str, job: &str, slot: Slot, jitter: Duration) -> Duration {
    let jitter_ms = u64::try_from(jitter.as_millis()).unwrap_or(u64::MAX);
    if jitter_ms == 0 {
        return Duration::ZERO;
    }
    let mut hash = Sha256::new();
    for part in [TAG, prefix.as_bytes(), job.as_bytes()] {
        hash.update(part);
        hash.update([0]);
    }
    hash.update(slot.epoch_ms().to_le_bytes());
    let digest = hash.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    Duration::from_millis(u64::from_be_bytes(first) % jitter_ms)
}

/// The instant `slot` is raced at: its nominal instant plus its `delay`.
pub fn delayed(slot: Slot, delay: Duration) -> DateTime<Utc> {
    slot.instant() + chrono::Duration::from_std(delay).unwrap_or_default()
}

/// The smallest gap between two consecutive slots of `schedule` among its next
/// `GAP_SCAN_SLOTS` from `from`, within a year (a DST fold a policy runs twice included);
/// `None` for a schedule with fewer than two.
pub fn smallest_gap(schedule: &Schedule, from: DateTime<Utc>) -> Option<Duration> {
    let end = from + chrono::Duration::days(366);
    let mut previous = schedule.next_after(from)?;
    let mut smallest: Option<Duration> = None;
    for _ in 0..GAP_SCAN_SLOTS {
        let next = schedule.next_after(previous.instant());
        let Some(next) = next.filter(|s| s.instant() <= end) else {
            break;
        };
        let gap = (next.instant() - previous.instant()).to_std();
        let gap = gap.unwrap_or_default();
        smallest = Some(smallest.map_or(gap, |s| s.min(gap)));
        previous = next;
    }
    smallest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_jitter_is_no_delay() {
        let slot = Slot::at("2026-01-01T09:00:00Z".parse().unwrap());
        assert_eq!(
            delay("slotcron", "report", slot, Duration::ZERO),
            Duration::ZERO
        );
        assert_eq!(
            delay("p", "j", slot, Duration::from_micros(999)),
            Duration::ZERO
        );
    }

    #[test]
    fn the_smallest_gap_of_a_daily_job_is_a_day_and_of_a_list_its_closest_pair() {
        let utc = chrono_tz::UTC;
        let from = "2026-01-01T00:00:00Z".parse().unwrap();
        let daily = Schedule::parse("0 9 * * *", utc).unwrap();
        let day = Duration::from_secs(86_400);
        assert_eq!(smallest_gap(&daily, from), Some(day));
        let pair = Schedule::parse("0 0,5 9 * * *", utc).unwrap();
        let five = Duration::from_secs(300);
        assert_eq!(smallest_gap(&pair, from), Some(five));
    }
}
