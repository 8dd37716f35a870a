//! A job's alerting keys: `on_failure` (the alert told of its failures) and `deadline` (when a
//! slot not yet `done` is alerted), checked together because a deadline needs an alert.

use std::time::Duration;

use super::{ConfigError, Loader, Section, durations};
use crate::time::schedule::Schedule;

impl Loader<'_> {
    /// The job's alert and deadline from its `(on_failure, deadline)` keys: `None` for a key
    /// in error (reported).
    pub(super) fn job_alerts(
        &mut self,
        (on_failure, deadline): (Option<&str>, Option<Duration>),
        section: &Section,
        schedule: Option<&Schedule>,
    ) -> (Option<Option<String>>, Option<Duration>) {
        let on_failure = self.job_on_failure(on_failure, section);
        let deadline = self.deadline(deadline, section, schedule, on_failure.as_ref());
        (on_failure, deadline)
    }

    /// The alert of a job: its own `on_failure` (checked to exist), else `[scheduler]`'s.
    fn job_on_failure(&mut self, own: Option<&str>, section: &Section) -> Option<Option<String>> {
        match own {
            Some(name) => self.on_failure(Some(name), section),
            None => Some(self.default_on_failure.clone()),
        }
    }

    /// The job's `deadline`, if set: in [`durations::DEADLINE`], ending before the job's next
    /// slot (a later deadline has the next slot due before this one is late, and a slot's
    /// deadline alert would come after its successor ran), and with an alert to send to.
    fn deadline(
        &mut self,
        deadline: Option<Duration>,
        section: &Section,
        schedule: Option<&Schedule>,
        on_failure: Option<&Option<String>>,
    ) -> Option<Duration> {
        let deadline = deadline?;
        let error = |message: String| ConfigError::field(section.clone(), "deadline", message);
        let deadline = match durations::DEADLINE.check(deadline) {
            Ok(deadline) => deadline,
            Err(e) => {
                self.errors.push(error(e.to_string()));
                return None;
            }
        };
        if schedule.is_some_and(|s| s.most_slots_within(deadline, 1) > 1) {
            self.errors.push(error(format!(
                "{} reaches the job's next slot: a deadline must end before the next slot is due \
                 (shorten it, or space the slots further apart)",
                humantime::format_duration(deadline)
            )));
            return None;
        }
        if matches!(on_failure, Some(None)) {
            self.errors.push(error(
                "needs an alert to send to: set on_failure = \"NAME\" on the job or in [scheduler]"
                    .to_owned(),
            ));
            return None;
        }
        Some(deadline)
    }
}
