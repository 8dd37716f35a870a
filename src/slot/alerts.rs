//! What a slot's end tells people: the alert of a failed or missed slot, and the report of a
//! slot found missed or run twice (each reported once by the fleet, under its own key).

use std::time::Duration;

use tokio::time::Instant;

use super::record::Twice;
use super::report::SlotLine;
use super::{Books, Outbox, Race, SlotEnv, SlotResult, Won};
use crate::action::SendContext;
use crate::config::Job;
use crate::lock::{Acquire, SlotKey};
use crate::outcome::Outcome;
use crate::time::schedule::{Fence, Slot};

/// How long a slot's `missed` key is kept: longer than a starting replica looks back.
pub const MISSED_KEY_TTL: Duration = Duration::from_secs(2 * 3600);
/// How long an alert may take, retries included.
pub const ALERT_TIMEOUT: Duration = Duration::from_secs(30);

/// The winner alone sees its failure: a failed slot alerts the job's `on_failure` once across
/// the fleet.
pub(super) async fn on_failure(outbox: &Outbox, books: &Books, won: &Won, result: &SlotResult) {
    if let SlotResult::Failed { error, .. } = result {
        outbox
            .alert(books, &won.job, won.slot, won.fence, Outcome::Failed, error)
            .await;
    }
}

impl SlotEnv {
    /// Reports a slot found missed (no replica ran it): the replicas that find it race for its
    /// `missed` key, and the winner counts it and tells the job's alert, so it is reported once
    /// across the fleet. The key outlives the look-back of a replica starting later.
    pub async fn report_missed(&self, job: &Job, slot: Slot) {
        let (race, books) = (self.race(), self.books());
        let key = SlotKey::missed(race.key_prefix(), &job.name, slot);
        let Acquire::Won(_) = race.lock().acquire(&key, MISSED_KEY_TTL).await else {
            return;
        };
        books.report(SlotLine::new(
            job,
            slot,
            Outcome::Missed,
            "no replica ran this slot",
        ));
        let why = "no replica ran this slot (none was up, or Redis was unavailable to all)";
        let fence = Fence::new(slot, 0);
        let outbox = self.outbox();
        outbox
            .alert(books, job, slot, fence, Outcome::Missed, why)
            .await;
    }
}

/// Reports a slot that ran twice under one fence (`run` here, `other` by the record found
/// beside it): the runs that find it race for its `duplicate` key, and the winner logs
/// `outcome = duplicate`, counts it and tells the job's alert, once across the fleet.
pub(super) async fn duplicate(
    race: &Race,
    outbox: &Outbox,
    books: &Books,
    job: &Job,
    twice: &Twice,
) {
    let Twice { run, other } = twice;
    let key = SlotKey::duplicate(race.key_prefix(), &job.name, run.slot);
    let Acquire::Won(_) = race.lock().acquire(&key, MISSED_KEY_TTL).await else {
        return;
    };
    let why = format!(
        "the slot ran twice under fence {}: by {} (started {}) and by {} (started {})",
        run.fence.get(),
        other.replica,
        other.started.to_rfc3339(),
        run.replica,
        run.started.to_rfc3339()
    );
    books.report(SlotLine {
        winner: Some(&other.replica),
        fence: Some(run.fence.get()),
        ..SlotLine::new(job, run.slot, Outcome::Duplicate, why.clone())
    });
    outbox
        .alert(books, job, run.slot, run.fence, Outcome::Duplicate, &why)
        .await;
}

impl Outbox {
    /// Tells the job's `on_failure` alert that `slot` ended `outcome`. The alert's own failure
    /// is logged and goes no further: an alert never alerts about itself.
    pub async fn alert(
        &self,
        books: &Books,
        job: &Job,
        slot: Slot,
        fence: Fence,
        outcome: Outcome,
        error: &str,
    ) {
        let Some(name) = &job.on_failure else { return };
        let Some(action) = self.alerts().get(name) else {
            return;
        };
        let deadline = Instant::now() + ALERT_TIMEOUT;
        let ctx = SendContext {
            job: &job.name,
            slot,
            zone: job.zone(),
            replica: books.replica(),
            fence,
            trigger: None,
            deadline,
            valid_until: deadline,
            about: Some((outcome.as_str(), error)),
            schedule_words: &job.schedule_words(),
            client: self.client(),
            templates: self.templates(),
            budgets: self.budgets(),
            metrics: books.metrics(),
        };
        match action.execute(&ctx).await {
            Ok(_) => {
                tracing::info!(job = %job.name, %slot, replica = %books.replica(), alert = %name,
                about = %outcome, "alert sent")
            }
            Err(e) => {
                tracing::error!(job = %job.name, %slot, replica = %books.replica(), alert = %name,
                about = %outcome, error = %self.scrubber().scrub(&e.to_string()), "the alert could not be sent")
            }
        }
    }
}
