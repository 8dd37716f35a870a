//! A job's `catch_up` (how far back a starting replica runs the slots missed while the whole
//! fleet was down) and `catch_up_policy` (which of them), checked together: the policy needs a
//! window, and `all` a window that holds a bounded number of the job's slots.

use std::time::Duration;

use super::raw::RawCatchUpPolicy;
use super::{CatchUp, CatchUpPolicy, ConfigError, Loader, MAX_CATCH_UP_ALL, Section, durations};
use crate::time::schedule::Schedule;

impl Loader<'_> {
    /// The job's catch-up from its `catch_up` window and `catch_up_policy`: `None` when off
    /// or in error (reported).
    pub(super) fn catch_up(
        &mut self,
        window: Option<Duration>,
        policy: Option<RawCatchUpPolicy>,
        section: &Section,
        schedule: Option<&Schedule>,
    ) -> Option<CatchUp> {
        let policy = match policy {
            Some(RawCatchUpPolicy::All) => CatchUpPolicy::All,
            Some(RawCatchUpPolicy::Latest) | None => CatchUpPolicy::Latest,
        };
        let Some(window) = window else {
            // A refused `catch_up` is reported; the policy without it is not a second mistake.
            if policy == CatchUpPolicy::All && !self.was_rejected("catch_up") {
                self.errors.push(ConfigError::field(
                    section.clone(),
                    "catch_up_policy",
                    "needs catch_up = \"<window>\" (for example \"10m\")",
                ));
            }
            return None;
        };
        let window = match durations::CATCH_UP.check(window) {
            Ok(window) => window,
            Err(e) => {
                let hint = " (leave catch_up out to turn catch-up off)";
                let e = e.to_string();
                let message = if window.is_zero() { e + hint } else { e };
                self.errors
                    .push(ConfigError::field(section.clone(), "catch_up", message));
                return None;
            }
        };
        if policy == CatchUpPolicy::All {
            self.check_catch_up_all(window, schedule?, section)?;
        }
        Some(CatchUp { window, policy })
    }

    /// `catch_up_policy = "all"` runs every missed slot: refused when the window can hold more
    /// than [`MAX_CATCH_UP_ALL`] of the job's slots (a burst nobody wants, and more than the
    /// history reaches back to tell apart).
    fn check_catch_up_all(
        &mut self,
        window: Duration,
        schedule: &Schedule,
        section: &Section,
    ) -> Option<()> {
        let most = schedule.most_slots_within(window, MAX_CATCH_UP_ALL);
        if most <= MAX_CATCH_UP_ALL {
            return Some(());
        }
        self.errors.push(ConfigError::field(
            section.clone(),
            "catch_up",
            format!(
                "a window of {} holds more than {MAX_CATCH_UP_ALL} slots of this schedule \
                 (at least {most}), the most catch_up_policy = \"all\" runs: shorten the window \
                 or use catch_up_policy = \"latest\"",
                humantime::format_duration(window)
            ),
        ));
        None
    }
}
