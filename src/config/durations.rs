//! The documented range of every duration field. A value outside its range is a config error
//! naming the field, the value and the range: `timeout = "300000000000y"` would otherwise start
//! and overflow the first deadline built from it, and a zero window or timeout means nothing.

use std::fmt;
use std::time::Duration;

const MS: Duration = Duration::from_millis(1);
const SECOND: Duration = Duration::from_secs(1);
const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(86_400);

/// The values a duration field accepts, both ends included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DurationRange {
    /// The smallest value accepted.
    pub min: Duration,
    /// The largest value accepted.
    pub max: Duration,
}

/// `[scheduler] max_clock_skew`: 0 trusts the clocks fully; past an hour the slot keys (which
/// outlive a slot by twice the skew) would hold a job's keys for hours.
pub const MAX_CLOCK_SKEW: DurationRange = DurationRange::new(Duration::ZERO, HOUR);
/// `[scheduler] candidate_stagger`: the wait of each further-ranked candidate; past a second
/// it would eat the start window of a slot whose first candidate died.
pub const CANDIDATE_STAGGER: DurationRange = DurationRange::new(Duration::ZERO, SECOND);
/// `[scheduler] destination_conflict_after`: how long a rollout that changes a job's
/// destination may take before the difference is reported as two fleets on one prefix.
pub const DESTINATION_CONFLICT_AFTER: DurationRange = DurationRange::new(SECOND, DAY);
/// `[redis] node_timeout`: a race waits this long for each node.
pub const NODE_TIMEOUT: DurationRange = DurationRange::new(MS, Duration::from_secs(10));
/// `[redis] retry_delay`: 0 retries at once; a long delay would push a race past its window.
pub const RETRY_DELAY: DurationRange = DurationRange::new(Duration::ZERO, SECOND);
/// Job `jitter` and `[scheduler] jitter`: 0 is no delay. Past an hour the fleet's look for
/// missed slots at start (an hour back from the nominal instants) would judge a slot still to
/// come as missed.
pub const JITTER: DurationRange = DurationRange::new(Duration::ZERO, HOUR);
/// Job `timeout`: the whole action, retries included.
pub const TIMEOUT: DurationRange = DurationRange::new(MS, DAY);
/// Job `catch_up`: the window of missed slots run at start.
pub const CATCH_UP: DurationRange = DurationRange::new(SECOND, Duration::from_secs(7 * 86_400));
/// The window of an action's `rate` (`"20/min"`).
pub const RATE_WINDOW: DurationRange = DurationRange::new(MS, DAY);

impl DurationRange {
    /// The range from `min` to `max`, both included.
    pub const fn new(min: Duration, max: Duration) -> Self {
        DurationRange { min, max }
    }

    /// Whether `value` is inside.
    pub fn contains(&self, value: Duration) -> bool {
        (self.min..=self.max).contains(&value)
    }

    /// `Ok(value)` inside the range, else the error naming the value and the range.
    pub fn check(&self, value: Duration) -> Result<Duration, OutOfRange> {
        if self.contains(value) {
            return Ok(value);
        }
        Err(OutOfRange {
            value,
            range: *self,
        })
    }
}

/// A duration outside its [`DurationRange`]; the message names both.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{} is out of range: must be from {range}", humantime::format_duration(*value))]
pub struct OutOfRange {
    /// The duration given.
    pub value: Duration,
    /// The range it had to be in.
    pub range: DurationRange,
}

impl fmt::Display for DurationRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} to {}", short(self.min), short(self.max))
    }
}

/// A range end in the largest unit that divides it (`"7d"`, `"10s"`, `"1ms"`): what a user
/// would write in jobs.toml.
fn short(d: Duration) -> String {
    if d.is_zero() {
        return "0s".to_owned();
    }
    let units = [
        (DAY, "d"),
        (HOUR, "h"),
        (Duration::from_secs(60), "m"),
        (SECOND, "s"),
    ];
    for (unit, name) in units {
        if d.as_nanos().is_multiple_of(unit.as_nanos()) {
            return format!("{}{name}", d.as_nanos() / unit.as_nanos());
        }
    }
    format!("{}ms", d.as_millis())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_read_as_written_in_jobs_toml() {
        assert_eq!(TIMEOUT.to_string(), "1ms to 1d");
        assert_eq!(MAX_CLOCK_SKEW.to_string(), "0s to 1h");
        assert_eq!(CATCH_UP.to_string(), "1s to 7d");
        assert_eq!(NODE_TIMEOUT.to_string(), "1ms to 10s");
    }

    #[test]
    fn both_ends_are_inside() {
        for range in [
            MAX_CLOCK_SKEW,
            NODE_TIMEOUT,
            RETRY_DELAY,
            TIMEOUT,
            CATCH_UP,
            RATE_WINDOW,
        ] {
            assert!(range.contains(range.min) && range.contains(range.max));
            assert!(!range.contains(range.max + MS));
        }
    }

    #[test]
    fn an_absurd_value_is_named_with_the_range() {
        let huge = humantime::parse_duration("300000000000y").unwrap();
        let message = TIMEOUT.check(huge).unwrap_err().to_string();
        assert_eq!(
            message,
            "300000000000years is out of range: must be from 1ms to 1d"
        );
        assert!(TIMEOUT.check(Duration::ZERO).is_err());
    }

    #[test]
    fn every_range_end_parses_back() {
        for range in [
            MAX_CLOCK_SKEW,
            NODE_TIMEOUT,
            RETRY_DELAY,
            TIMEOUT,
            CATCH_UP,
            RATE_WINDOW,
        ] {
            for end in [range.min, range.max] {
                assert_eq!(humantime::parse_duration(&short(end)).unwrap(), end);
            }
        }
    }
}
