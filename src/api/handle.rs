//! A started fleet's handle: shutdown, and what an operator does from code as from the
//! command line: trigger a job now (through the same race), pause and resume it fleet-wide,
//! and read its runs' history.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{Error, Outcome, RunRecord, joined};
use crate::config::Job;
use crate::fleet::control::{PauseOrder, Until};
use crate::record::audit::{Audit, AuditAction, AuditEntry};
use crate::slot::{SlotEnv, SlotResult, Trigger};
use crate::time::schedule::Slot;

/// A started fleet: [`FleetHandle::shutdown`] stops it. Dropping the handle leaves it running
/// until the runtime ends.
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), slotcron::Error> {
/// // Standalone (no nodes): an in-process lock.
/// let handle = slotcron::Fleet::new("replica-1").start().await?;
/// handle.shutdown().await?;
/// # Ok(()) }
/// ```
pub struct FleetHandle {
    /// Cancelled by `shutdown`: no new slot starts.
    pub(super) stop: CancellationToken,
    /// The replica's run: it returns once every running slot has finished.
    pub(super) run: JoinHandle<anyhow::Result<()>>,
    /// For runs outside the schedule (a trigger, the tokio-cron-scheduler guard's ticks) and
    /// the fleet's pauses and history: the replica's slot context, ended with the fleet.
    pub(super) race: Arc<SlotEnv>,
    /// The fleet's enabled jobs, for a trigger or a pause by name.
    pub(super) jobs: Vec<Arc<Job>>,
    /// The guard's runs in flight: shutdown waits for them too.
    pub(super) guarded: TaskTracker,
    /// Where the handle's pauses, resumes and triggers are recorded, the replica as actor.
    pub(super) audit: Audit,
}

/// How a slot started by [`FleetHandle::trigger`] ended on this replica.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Triggered {
    /// The slot raced: the fleet's current second.
    pub slot: DateTime<Utc>,
    /// Its outcome here: `Done`, `Failed`, `Lost` (another replica holds this second), `Paused`,
    /// `Unavailable`, ...
    pub outcome: Outcome,
    /// Why, when it did not end `Done`: the failure's text, the replica holding the slot.
    pub detail: Option<String>,
}

impl FleetHandle {
    /// Runs `job` now, once across the fleet: its slot is the fleet's current second, raced
    /// like a scheduled one (the run record's trigger is `trigger`). Returns when it ended
    /// here.
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), slotcron::Error> {
    /// use slotcron::{Fleet, JobSpec, Outcome};
    /// let handle = Fleet::new("replica-1")
    ///     .job(JobSpec::new("report", "0 9 * * *"), |_| async { Ok::<(), String>(()) })
    ///     .start()
    ///     .await?;
    /// assert_eq!(handle.trigger("report").await?.outcome, Outcome::Done);
    /// handle.shutdown().await
    /// # }
    /// ```
    pub async fn trigger(&self, job: &str) -> Result<Triggered, Error> {
        let job = self.job(job)?;
        self.audited(AuditAction::Trigger, &job.name, None).await?;
        let slot = Slot::at(self.race.race.clock.fleet_now());
        let result = crate::slot::once(&self.race, Trigger::Manual, job, slot).await;
        let result = result.ok_or(Error::NoResult)?;
        Ok(Triggered {
            slot: slot.instant(),
            outcome: result.outcome(),
            detail: detail(&result),
        })
    }

    /// Pauses `job` on every replica from its next slot, until `until` (`None`: until
    /// [`FleetHandle::resume`]); `reason` is shown in the logs, the status page and the ledger.
    /// Kept on a majority of the nodes, as `slotcron pause` does; standalone, it pauses
    /// nothing. Like every call of the handle that acts (trigger, pause, resume), it is first
    /// recorded in the audit trail with this replica as the actor, and refused when a majority
    /// of the nodes cannot take that entry.
    ///
    /// ```no_run
    /// # async fn doc(handle: slotcron::FleetHandle) -> Result<(), slotcron::Error> {
    /// let until = slotcron::Utc::now() + slotcron::chrono::Duration::hours(2);
    /// handle.pause("report", Some(until), Some("receiver down")).await?;
    /// # Ok(()) }
    /// ```
    pub async fn pause(
        &self,
        job: &str,
        until: Option<DateTime<Utc>>,
        reason: Option<&str>,
    ) -> Result<(), Error> {
        self.job(job)?;
        let order = PauseOrder {
            by: self.race.books.replica.clone(),
            until: until.map(Until::At),
            reason: reason.map(str::to_owned),
        };
        let entry = self.audited(AuditAction::Pause, job, reason).await?;
        let control = &self.race.contenders.control;
        if let Err(e) = control.pause(job, &order).await {
            self.audit.not_taken(&entry, &e.to_string()).await;
            return Err(not_done(job, "not paused", e));
        }
        // Held here from now, not from when the announcement comes back.
        control.refresh(&[job.to_owned()]).await;
        Ok(())
    }

    /// Ends `job`'s pause on every replica; `true` when a pause held.
    pub async fn resume(&self, job: &str) -> Result<bool, Error> {
        self.job(job)?;
        let entry = self.audited(AuditAction::Resume, job, None).await?;
        let by = &self.race.books.replica;
        let control = &self.race.contenders.control;
        let taken = match control.resume(job, by).await {
            Ok(taken) => taken,
            Err(e) => {
                self.audit.not_taken(&entry, &e.to_string()).await;
                return Err(not_done(job, "not resumed", e));
            }
        };
        control.refresh(&[job.to_owned()]).await;
        Ok(taken.change.is_some())
    }

    /// `job`'s latest `limit` runs across the fleet, newest first (the records `slotcron
    /// history` shows).
    pub async fn history(&self, job: &str, limit: usize) -> Result<Vec<RunRecord>, Error> {
        self.job(job)?;
        let read = self.race.books.history.read(job, limit).await;
        read.map_err(|e| Error::History {
            job: job.to_owned(),
            source: e.into(),
        })
    }

    /// Records `action` on `job` in the audit trail, this replica the actor, before it is
    /// done: an entry a majority of the nodes did not take refuses the action.
    async fn audited(
        &self,
        action: AuditAction,
        job: &str,
        reason: Option<&str>,
    ) -> Result<AuditEntry, Error> {
        let at = self.race.race.clock.fleet_now();
        let entry = AuditEntry::new(at, &self.race.books.replica, action)
            .job(job)
            .reason(reason);
        match self.audit.record(&entry).await {
            Ok(()) => Ok(entry),
            Err(e) => Err(not_done(job, &format!("not done ({action})"), e)),
        }
    }

    /// The enabled job named `name`.
    fn job(&self, name: &str) -> Result<Arc<Job>, Error> {
        let job = self.jobs.iter().find(|job| job.name == name);
        job.cloned().ok_or_else(|| Error::UnknownJob {
            name: name.to_owned(),
            known: self.jobs.iter().map(|job| job.name.clone()).collect(),
        })
    }

    /// Stops the fleet gracefully: no new slot starts; running slots finish (each within its
    /// job's timeout) and are recorded; then the nodes' connections close. Handling SIGTERM is
    /// the caller's: call this from the signal's handler.
    ///
    /// ```no_run
    /// # async fn doc() -> Result<(), slotcron::Error> {
    /// let handle = slotcron::Fleet::new("replica-1").start().await?;
    /// let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
    ///     .expect("SIGTERM handler");
    /// term.recv().await;
    /// handle.shutdown().await?;
    /// # Ok(()) }
    /// ```
    pub async fn shutdown(self) -> Result<(), Error> {
        self.stop.cancel();
        self.guarded.close();
        self.guarded.wait().await;
        joined(self.run.await)
    }
}

/// An action of the handle on `job` that did not happen, and why.
fn not_done(job: &str, what: &str, source: impl Into<super::error::Cause>) -> Error {
    Error::NotDone {
        job: job.to_owned(),
        what: what.to_owned(),
        source: source.into(),
    }
}

/// Why a triggered slot did not end `done`, in words.
fn detail(result: &SlotResult) -> Option<String> {
    match result {
        SlotResult::Done { .. } => None,
        SlotResult::Failed { error, .. } => Some(error.to_string()),
        SlotResult::HandedOff { reason, .. } => Some(reason.to_string()),
        SlotResult::Lost { holder } => Some(format!("held by {}", holder.replica())),
        SlotResult::Unavailable(why) => Some(why.to_string()),
        other => Some(other.outcome().as_str().to_owned()),
    }
}
