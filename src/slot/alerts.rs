//! What a slot's end tells people: the alert of a failed or missed slot, the report of a slot
//! found missed or run twice (each reported once by the fleet, under its own key), and the
//! alerts raced once across the fleet whatever replicas die: `deadline` (see `deadline.rs`)
//! and `recovered`.
//!
//! A raced alert's key is held while the alert is sent, as a lease: short, extended while the
//! send goes on, and kept for hours once it went out. A replica that loses the race watches the
//! key: one left to lapse means its sender died before it was sent, and the watcher takes it
//! and sends; one kept past the longest send means it went out. So an alert goes out once,
//! and twice only when its sender dies after the receiver took it and before it could say so.
//! Every alert is kept in the job's alert log (`record::alerts`), whose newest entry decides
//! whether a `done` run is a recovery.

use std::time::Duration;

use tokio::time::Instant;

use super::record::Twice;
use super::report::SlotLine;
use super::{Books, Outbox, SlotEnv, SlotResult, Won};
use crate::action::SendContext;
use crate::config::Job;
use crate::lock::{Acquire, Lease, SlotKey, SlotLock, Token};
use crate::outcome::Outcome;
use crate::record::alerts::{self as alert_log, AlertKind, AlertRecord};
use crate::time::schedule::{Fence, Slot};

/// How long a slot's `missed` key is kept: longer than a starting replica looks back.
pub const MISSED_KEY_TTL: Duration = Duration::from_secs(2 * 3600);
/// How long an alert may take, retries included.
pub const ALERT_TIMEOUT: Duration = Duration::from_secs(30);
/// A raced alert's lease: its sender extends it every third of this while sending, so a
/// sender that dies leaves the alert to another replica within this time.
pub const ALERT_LEASE: Duration = Duration::from_secs(6);

/// The winner alone sees its failure: a failed slot alerts the job's `on_failure` once across
/// the fleet.
pub(super) async fn on_failure(ctx: &SlotEnv, won: &Won, result: &SlotResult) {
    if let SlotResult::Failed { error, .. } = result {
        let alert = Alert::new(&won.job, won.slot, Outcome::Failed, error.clone());
        log_and_send(ctx, &alert, won.fence).await;
    }
}

/// One alert about a slot of a job: what the message, the log line and the alert log say.
pub(super) struct Alert<'a> {
    pub job: &'a Job,
    pub slot: Slot,
    pub outcome: Outcome,
    pub reason: String,
}

impl<'a> Alert<'a> {
    pub fn new(job: &'a Job, slot: Slot, outcome: Outcome, reason: String) -> Self {
        Alert {
            job,
            slot,
            outcome,
            reason,
        }
    }
}

/// Keeps `alert` in the job's alert log and sends it. A failure's alert is kept before the
/// send, so a `done` run just after is judged against it; a recovery after, so one whose
/// sender dies before it went out is still owed, and sent by the next `done` run.
async fn log_and_send(ctx: &SlotEnv, alert: &Alert<'_>, fence: Fence) {
    if alert.job.on_failure.is_none() {
        return;
    }
    let books = &ctx.books;
    let send = ctx.outbox.alert(
        books,
        alert.job,
        alert.slot,
        fence,
        alert.outcome,
        &alert.reason,
    );
    if alert.outcome == Outcome::Recovered {
        send.await;
        keep_in_log(ctx, alert).await;
    } else {
        keep_in_log(ctx, alert).await;
        send.await;
    }
}

/// Adds `alert` to its job's alert log, stamped on the fleet clock.
async fn keep_in_log(ctx: &SlotEnv, alert: &Alert<'_>) {
    let Some(kind) = AlertKind::of(alert.outcome) else {
        return;
    };
    let record = AlertRecord {
        job: alert.job.name.clone(),
        kind,
        slot: alert.slot,
        replica: ctx.books.replica.clone(),
        at: ctx.race.clock.now(),
        reason: alert.reason.clone(),
    };
    alert_log::record(&ctx.books.history, &record).await;
}

/// A `done` run ends a run of alerts: when the job's last alert was `failed`, `missed` or
/// `deadline`, the fleet sends one `recovered`, raced under the key of the alert it answers.
/// `on_loss`: the run's winner leaves a recovery another replica holds (should that one die,
/// the recovery is still owed: the next `done` run sends it); a deadline's look watches it.
pub(super) async fn recovered(ctx: &SlotEnv, job: &Job, slot: Slot, on_loss: OnLoss) {
    if job.on_failure.is_none() {
        return;
    }
    let Some(last) = last_unrecovered(ctx, job).await else {
        return;
    };
    let reason = format!(
        "done again after the {} alert about the slot of {} ({})",
        last.kind.as_str(),
        last.slot.rfc3339_in(job.zone()),
        last.reason
    );
    let key = SlotKey::recovered(&ctx.race.key_prefix, &job.name, last.slot);
    let alert = Alert::new(job, slot, Outcome::Recovered, reason);
    send_once(ctx, &alert, &key, on_loss).await;
}

/// What a replica that loses a raced alert does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum OnLoss {
    /// Watches the key until the alert went out, taking it if its sender dies.
    Watch,
    /// Leaves it to the holder.
    Leave,
}

/// The job's last alert when a `done` run answers it (`failed`, `missed`, `deadline`).
async fn last_unrecovered(ctx: &SlotEnv, job: &Job) -> Option<AlertRecord> {
    match alert_log::last(&ctx.books.history, &job.name).await {
        Ok(last) => last.filter(|a| a.kind.wants_recovery()),
        Err(e) => {
            tracing::warn!(job = %job.name, replica = %ctx.books.replica, error = %e,
                "the job's last alert could not be read: no recovery judged");
            None
        }
    }
}

/// Sends `alert` once across the fleet, raced under `key` (see the module's opening): won, it
/// is sent under a lease kept alive meanwhile and kept for hours after; lost, the key is
/// watched until it lapses (its sender died: this replica takes it) or is kept past the
/// longest send (it went out).
pub(super) async fn send_once(ctx: &SlotEnv, alert: &Alert<'_>, key: &SlotKey, on_loss: OnLoss) {
    let (lock, shutdown) = (&ctx.race.lock, &ctx.shutdown);
    let mut watched: Option<(Token, Instant)> = None;
    loop {
        match lock.acquire(key, ALERT_LEASE).await {
            Acquire::Won(lease) => {
                // A recovery taken over from a sender that died after it went out is not owed.
                let retaken = watched.is_some() && alert.outcome == Outcome::Recovered;
                if !(retaken && recovered_meanwhile(ctx, alert.job).await) {
                    send_holding(ctx, alert, lock, &lease).await;
                }
                lock.extend(&lease, MISSED_KEY_TTL).await;
                return;
            }
            Acquire::Lost { .. } if on_loss == OnLoss::Leave => return,
            Acquire::Lost { holder } => {
                let since = match watched {
                    Some((seen, since)) if seen == holder => since,
                    _ => Instant::now(),
                };
                if since.elapsed() > ALERT_TIMEOUT + ALERT_LEASE {
                    return;
                }
                watched = Some((holder, since));
                tokio::select! {
                    biased;
                    _ = tokio::time::sleep(ALERT_LEASE) => {}
                    _ = shutdown.cancelled() => return,
                }
            }
            Acquire::Unavailable(e) => {
                tracing::warn!(job = %alert.job.name, slot = %alert.slot, replica = %ctx.books.replica,
                    outcome = %alert.outcome, reason = %alert.reason, error = %e,
                    "the alert could not be raced: no majority of Redis nodes");
                return;
            }
        }
    }
}

/// Whether the job's last alert is already a `recovered` one: a replica that took over a
/// recovery whose sender died after logging it has nothing left to send.
async fn recovered_meanwhile(ctx: &SlotEnv, job: &Job) -> bool {
    last_unrecovered(ctx, job).await.is_none()
}

/// Logs, counts, keeps and sends a won raced alert, its lease kept alive until it is sent.
async fn send_holding(ctx: &SlotEnv, alert: &Alert<'_>, lock: &SlotLock, lease: &Lease) {
    ctx.books.report(SlotLine {
        reason: Some(&alert.reason),
        ..SlotLine::new(alert.job, alert.slot, alert.outcome, message(alert.outcome))
    });
    let sending = log_and_send(ctx, alert, Fence::new(alert.slot, 0));
    tokio::pin!(sending);
    tokio::select! {
        biased;
        () = &mut sending => {}
        () = keep(lock, lease) => sending.await,
    }
}

/// The log line's sentence of a raced alert.
fn message(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Deadline => "the slot was not done by its deadline: alerting",
        Outcome::Recovered => "the job is done again after an alert: alerting recovered",
        _ => "alerting",
    }
}

/// Extends `lease` every third of [`ALERT_LEASE`]; returns when it is no longer ours (a
/// majority of nodes lost), leaving the send to finish.
async fn keep(lock: &SlotLock, lease: &Lease) {
    loop {
        tokio::time::sleep(ALERT_LEASE / 3).await;
        if !lock.extend(lease, ALERT_LEASE).await {
            return;
        }
    }
}

impl SlotEnv {
    /// Reports a slot found missed (no replica ran it): the replicas that find it race for its
    /// `missed` key, and the winner counts it and tells the job's alert, so it is reported once
    /// across the fleet. The key outlives the look-back of a replica starting later.
    pub async fn report_missed(&self, job: &Job, slot: Slot) {
        let (race, books) = (&self.race, &self.books);
        let key = SlotKey::missed(&race.key_prefix, &job.name, slot);
        let Acquire::Won(_) = race.lock.acquire(&key, MISSED_KEY_TTL).await else {
            return;
        };
        books.report(SlotLine::new(
            job,
            slot,
            Outcome::Missed,
            "no replica ran this slot",
        ));
        let why = "no replica ran this slot (none was up, or Redis was unavailable to all)";
        let alert = Alert::new(job, slot, Outcome::Missed, why.to_owned());
        log_and_send(self, &alert, Fence::new(slot, 0)).await;
    }
}

/// Reports a slot that ran twice under one fence (`run` here, `other` by the record found
/// beside it): the runs that find it race for its `duplicate` key, and the winner logs
/// `outcome = duplicate`, counts it and tells the job's alert, once across the fleet.
pub(super) async fn duplicate(ctx: &SlotEnv, job: &Job, twice: &Twice) {
    let (race, books) = (&ctx.race, &ctx.books);
    let Twice { run, other } = twice;
    let key = SlotKey::duplicate(&race.key_prefix, &job.name, run.slot);
    let Acquire::Won(_) = race.lock.acquire(&key, MISSED_KEY_TTL).await else {
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
    let alert = Alert::new(job, run.slot, Outcome::Duplicate, why);
    log_and_send(ctx, &alert, run.fence).await;
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
        let Some(action) = self.alerts.get(name) else {
            return;
        };
        let deadline = Instant::now() + ALERT_TIMEOUT;
        let ctx = SendContext {
            job: &job.name,
            slot,
            zone: job.zone(),
            replica: &books.replica,
            fence,
            trigger: None,
            deadline,
            valid_until: deadline,
            about: Some((outcome.as_str(), error)),
            schedule_words: &job.schedule_words(),
            client: &self.client,
            templates: &self.templates,
            budgets: &self.budgets,
            metrics: &books.metrics,
        };
        match action.execute(&ctx).await {
            Ok(_) => {
                tracing::info!(job = %job.name, %slot, replica = %books.replica, alert = %name,
                about = %outcome, reason = %error, "alert sent")
            }
            Err(e) => {
                tracing::error!(job = %job.name, %slot, replica = %books.replica, alert = %name,
                about = %outcome, reason = %error, error = %self.scrubber.scrub(&e.to_string()), "the alert could not be sent")
            }
        }
    }
}
