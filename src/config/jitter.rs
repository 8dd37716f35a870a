//! `jitter`: a job's own (or `[scheduler]`'s) spread of its slots, checked against the job's
//! interval and the reach of its start window (the delay itself: [`crate::time::jitter`]).

use std::time::Duration;

use super::raw::RawJob;
use super::{ConfigError, DEFAULT_MAX_CLOCK_SKEW, Loader, SchedulerConfig, Section, durations};
use crate::time::jitter::smallest_gap;
use crate::time::schedule::{Clock, Schedule, SystemClock};

impl Loader<'_> {
    /// `[scheduler] jitter` (default 0: no delay), inside its range.
    pub(super) fn scheduler_jitter(&mut self, raw: Option<Duration>) -> Option<Duration> {
        let jitter = raw.unwrap_or_default();
        self.bounded(&Section::Scheduler, "jitter", jitter, durations::JITTER)
    }

    /// The job's `jitter` (else `[scheduler]`'s, else none), in its range, refused when it is
    /// larger than the job's interval (the smallest gap between two of its slots: a slot would
    /// be raced after the next one's instant) or when, with the start window (`max_clock_skew`),
    /// it reaches past the hour the fleet's missed-slot look-back counts from a nominal instant.
    pub(super) fn job_jitter(
        &mut self,
        raw: &RawJob,
        scheduler: Option<&SchedulerConfig>,
        schedule: Option<&Schedule>,
        section: &Section,
    ) -> Option<Duration> {
        let Some(own) = raw.jitter else {
            return Some(scheduler.map_or(Duration::ZERO, |s| s.jitter))
                .filter(|&j| self.jitter_fits(j, scheduler, schedule, section, "[scheduler] "));
        };
        let jitter = self.bounded(section, "jitter", own, durations::JITTER)?;
        self.jitter_fits(jitter, scheduler, schedule, section, "")
            .then_some(jitter)
    }

    /// The smallest gap between two slots of `schedule` over the next year, walked once per
    /// schedule.
    fn smallest_gap(&mut self, schedule: &Schedule) -> Option<Duration> {
        let walk = || smallest_gap(schedule, SystemClock.now());
        *self.gaps.entry(schedule.definition()).or_insert_with(walk)
    }

    /// Whether `jitter` fits the job's interval and the start window's reach (else the error,
    /// naming both numbers; `from` says where the value came from).
    fn jitter_fits(
        &mut self,
        jitter: Duration,
        scheduler: Option<&SchedulerConfig>,
        schedule: Option<&Schedule>,
        section: &Section,
        from: &str,
    ) -> bool {
        if jitter.is_zero() {
            return true;
        }
        let show = |d: Duration| humantime::format_duration(d).to_string();
        let message = match schedule.and_then(|s| self.smallest_gap(s)) {
            Some(gap) if jitter > gap => format!(
                "{from}jitter {} is larger than the job's interval {} (the smallest gap between \
                 two of its slots): a slot would be sent after the next one is due",
                show(jitter),
                show(gap)
            ),
            _ => {
                let window = scheduler.map_or(DEFAULT_MAX_CLOCK_SKEW, |s| s.max_clock_skew);
                if jitter + window <= durations::JITTER.max {
                    return true;
                }
                format!(
                    "{from}jitter {} plus the start window {} (max_clock_skew) reaches past {}, \
                     the look-back for missed slots and the life of their keys: shorten one",
                    show(jitter),
                    show(window),
                    show(durations::JITTER.max)
                )
            }
        };
        self.errors
            .push(ConfigError::field(section.clone(), "jitter", message));
        false
    }
}
