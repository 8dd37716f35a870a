//! The one place a slot's log line is written and its outcome counted ([`Books::report`]):
//! the stable field names (the book's Operations, "Logs: who won") are spelled once, and a line and its
//! counter cannot disagree.

use std::borrow::Cow;
use std::fmt::Display;
use std::time::Duration;

use tracing::Level;

use super::{Books, Trigger};
use crate::config::Job;
use crate::lock::Token;
use crate::outcome::Outcome;
use crate::time::jitter;
use crate::time::schedule::Slot;

/// One slot's log line: the fields every line has, and the ones only some outcomes carry. A
/// field left `None` is not in the line (tracing records nothing for it), so one event with
/// every field writes each outcome's line.
pub(super) struct SlotLine<'a> {
    pub job: &'a str,
    pub slot: Slot,
    /// The job's `jitter`: the line's `jitter_ms` (the slot's delay) when not zero.
    pub jitter: Duration,
    pub outcome: Outcome,
    /// The human sentence; tests and operators grep it, so keep it stable too.
    pub message: Cow<'static, str>,
    /// Why the slot was raced (`schedule`, `catch_up`, `trigger`, `handoff`).
    pub trigger: Option<&'a Trigger>,
    /// This replica's rank among the slot's candidates.
    pub rank: Option<usize>,
    /// On `standby`: how many live replicas the candidates were ranked among.
    pub fleet: Option<usize>,
    /// On `lost`: the holder of the slot.
    pub winner: Option<&'a str>,
    pub validity_ms: Option<u64>,
    pub lock_us: Option<u64>,
    /// On a handoff: the replica that had the slot before and could not deliver it.
    pub previous_winner: Option<&'a str>,
    pub error: Option<&'a dyn Display>,
    pub reason: Option<&'a str>,
    pub late_ms: Option<u64>,
    pub early_ms: Option<u64>,
    pub paused_by: Option<&'a str>,
    pub paused_at: Option<String>,
    pub until: Option<String>,
    pub duration_ms: Option<u64>,
    pub attempts: Option<u32>,
    /// The run's fencing token.
    pub fence: Option<i64>,
    pub delivery: Option<&'static str>,
    pub lateness_ms: Option<u64>,
    /// On an overlap: the replica whose run still holds the job's running lease.
    pub running_on: Option<&'a str>,
}

impl<'a> SlotLine<'a> {
    /// A line with only the fields every line has; add the others with `..SlotLine::new(..)`.
    pub fn new(
        job: &'a Job,
        slot: Slot,
        outcome: Outcome,
        message: impl Into<Cow<'static, str>>,
    ) -> Self {
        SlotLine {
            job: &job.name,
            slot,
            jitter: job.jitter,
            outcome,
            message: message.into(),
            trigger: None,
            rank: None,
            fleet: None,
            winner: None,
            validity_ms: None,
            lock_us: None,
            previous_winner: None,
            error: None,
            reason: None,
            late_ms: None,
            early_ms: None,
            paused_by: None,
            paused_at: None,
            until: None,
            duration_ms: None,
            attempts: None,
            fence: None,
            delivery: None,
            lateness_ms: None,
            running_on: None,
        }
    }
}

/// One `tracing` event carrying every field of [`SlotLine`]. A macro because an event's level
/// must be a constant at its call site: [`SlotLine::emit`] expands it once per level.
macro_rules! slot_event {
    ($level:expr, $line:expr, $replica:expr, $jitter_ms:expr) => {
        tracing::event!(
            $level,
            job = %$line.job,
            slot = %$line.slot,
            replica = %$replica,
            jitter_ms = $jitter_ms,
            outcome = %$line.outcome.as_str(),
            trigger = $line.trigger.map(|kind| tracing::field::display(kind.as_str())),
            rank = $line.rank,
            fleet = $line.fleet,
            winner = $line.winner,
            validity_ms = $line.validity_ms,
            lock_us = $line.lock_us,
            previous_winner = $line.previous_winner,
            error = $line.error.map(tracing::field::display),
            reason = $line.reason.map(tracing::field::display),
            late_ms = $line.late_ms,
            early_ms = $line.early_ms,
            paused_by = $line.paused_by.map(tracing::field::display),
            paused_at = $line.paused_at.as_deref().map(tracing::field::display),
            until = $line.until.as_deref(),
            duration_ms = $line.duration_ms,
            attempts = $line.attempts,
            fence = $line.fence,
            delivery = $line.delivery.map(tracing::field::display),
            lateness_ms = $line.lateness_ms,
            running_on = $line.running_on,
            "{}",
            $line.message
        )
    };
}

impl SlotLine<'_> {
    /// Writes the line as `replica`, at its outcome's level; a job with `jitter` has its
    /// slot's delay on `prefix` as `jitter_ms`.
    fn emit(&self, replica: &str, prefix: &str) {
        let jitter_ms = (!self.jitter.is_zero())
            .then(|| jitter::delay(prefix, self.job, self.slot, self.jitter).as_millis() as u64);
        match self.outcome.level() {
            Level::ERROR => slot_event!(Level::ERROR, self, replica, jitter_ms),
            Level::WARN => slot_event!(Level::WARN, self, replica, jitter_ms),
            Level::INFO => slot_event!(Level::INFO, self, replica, jitter_ms),
            Level::DEBUG => slot_event!(Level::DEBUG, self, replica, jitter_ms),
            _ => slot_event!(Level::TRACE, self, replica, jitter_ms),
        }
    }
}

impl Books {
    /// Logs `line` as this replica and counts its outcome: every outcome of a slot on this
    /// replica goes through here, once.
    pub(super) fn report(&self, line: SlotLine<'_>) {
        line.emit(&self.replica, &self.key_prefix);
        self.metrics.slot(line.job, line.outcome);
    }

    /// Logs `job`'s slot as lost to `holder`: after a race, or after a look that found the
    /// slot held, so both read the same.
    pub(super) fn report_lost(
        &self,
        job: &Job,
        slot: Slot,
        trigger: &Trigger,
        rank: Option<usize>,
        holder: &Token,
    ) {
        let message = format!("lost the slot to {}", holder.replica());
        self.report(SlotLine {
            trigger: Some(trigger),
            rank,
            winner: Some(holder.replica()),
            ..SlotLine::new(job, slot, Outcome::Lost, message)
        });
    }
}
