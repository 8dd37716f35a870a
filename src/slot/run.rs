//! The winner's run of a slot: the action's delivery within the lock's validity, its running
//! lease kept alive meanwhile and released after, and the start of a slow run recorded while
//! it goes on.

use std::time::Duration;

use tokio::time::Instant;

use super::{Books, Outbox, RUNNING_LEASE_TTL, Race, Trigger, Won};
use crate::action::{ActionError, Delivery, DeliveryState, SendContext};
use crate::lock::Lease;
use crate::record::history::RunRecord;

/// A run still going after this long has its start recorded (it shows as running); a shorter
/// run is recorded once, when it ends. Jobs with `catch_up` record the start at once.
pub const START_RECORD_DELAY: Duration = Duration::from_secs(1);

/// Why a run did not deliver, scrubbed, with what the receiver may have seen.
#[derive(Debug, Clone)]
pub(super) struct SendFailure {
    pub error: String,
    pub attempts: u32,
    pub delivery: DeliveryState,
    /// Nothing left this replica for a reason of its own: another replica may deliver it.
    pub local: bool,
}

/// What one run of the action came to, before the handoff decision.
#[derive(Debug)]
pub(super) struct Ran {
    pub sent: Result<Delivery, SendFailure>,
    pub duration: Duration,
    /// From the slot to the action's start, on the fleet clock (as `slotcron_lateness_seconds`).
    pub lateness: Duration,
}

/// Runs a won slot (the winner's part); then the running lease is released, so the next slot,
/// or the replica taking a handoff, is not held up. With the run, its record as it started
/// (the end is recorded on it).
pub(super) async fn run(
    race: &Race,
    outbox: &Outbox,
    books: &Books,
    won: &Won,
) -> (Ran, RunRecord) {
    let record = won.start_record(&books.replica, race.clock.now());
    confirm_replicated(race, books, won).await;
    let ran = execute(race, outbox, books, won, &record).await;
    release_running(race, books, won).await;
    (ran, record)
}

/// Waits for the lock's replicas (`WAIT`, sentinel and cluster modes). Too few in time: the
/// slot still runs (a new primary has no replica yet, and a slot not run is a loss too),
/// logged and counted, since a failover now could run it twice.
async fn confirm_replicated(race: &Race, books: &Books, won: &Won) {
    let Some(replication) = race.lock.replicated(&won.lease).await else {
        return;
    };
    if replication.is_short() {
        books.metrics.unreplicated_run(&won.job.name);
        tracing::warn!(job = %won.job.name, slot = %won.slot, replica = %books.replica,
            acked = replication.acked, wanted = replication.wanted,
            "the slot's lock reached fewer replicas than wait_replicas: running it anyway \
            (a failover now could run it twice)");
    }
}

/// Releases the job's running lease, warning when a majority did not confirm it. A release
/// that failed on a node (a failover moving the primary) is tried again within the lease's TTL.
pub(super) async fn release_running(race: &Race, books: &Books, won: &Won) {
    let Some(running) = &won.running else { return };
    let lock = &race.lock;
    let released = lock.release_retrying(running, RUNNING_LEASE_TTL).await;
    if released < lock.quorum() {
        tracing::warn!(job = %won.job.name, slot = %won.slot, replica = %books.replica, nodes = released,
            "the running lease was released on {released} node(s), fewer than a majority: \
            the job's slots are skipped as overlapping until it expires (at most {} s)",
            RUNNING_LEASE_TTL.as_secs());
    }
}

/// Runs the action inside the lease, keeping the running lease alive, while the start of the
/// run is recorded (at once for `catch_up` jobs, else only once the run is slow; a history
/// write never delays a send).
async fn execute(
    race: &Race,
    outbox: &Outbox,
    books: &Books,
    won: &Won,
    record: &RunRecord,
) -> Ran {
    let started = Instant::now();
    let run = async {
        let lateness = won.lateness(race);
        books.metrics.lateness(&won.job.name, lateness);
        let action = send(race, outbox, books, won);
        let sent = match &won.running {
            Some(running) => with_watchdog(race, books, action, running).await,
            None => action.await,
        };
        let duration = started.elapsed();
        books.metrics.action_duration(&won.job.name, duration);
        (sent, duration, lateness)
    };
    let (sent, duration, lateness) = if won.job.catch_up.is_some() {
        // Recorded at once: a slot whose winner dies mid-run must not look missed to the
        // catch-up of a replica starting later.
        tokio::join!(books.history.record(record), run).1
    } else {
        record_start_if_slow(books, record, run).await
    };
    Ran {
        sent,
        duration,
        lateness,
    }
}

/// Drives `run`; if it is still going after [`START_RECORD_DELAY`], records its start
/// meanwhile, so the history shows it running. A shorter run is recorded once, at its end:
/// half the history writes for the usual run of a few milliseconds.
async fn record_start_if_slow<T>(
    books: &Books,
    record: &RunRecord,
    run: impl std::future::Future<Output = T>,
) -> T {
    tokio::pin!(run);
    tokio::select! {
        biased;
        outcome = &mut run => return outcome,
        () = tokio::time::sleep(START_RECORD_DELAY) => {}
    }
    tokio::join!(books.history.record(record), run).1
}

/// Runs the job's action for `won`: the deadline is the job's timeout, cut short by the lock's
/// validity and, on a handoff, by the slot's deadline. The one call from a slot's life into
/// the action layer.
async fn send(
    race: &Race,
    outbox: &Outbox,
    books: &Books,
    won: &Won,
) -> Result<Delivery, SendFailure> {
    let job = &won.job;
    let mut deadline = (Instant::now() + job.timeout).min(won.lease.valid_until);
    if let Trigger::Handoff(_) = won.trigger {
        let left = (race.handoff_deadline(job, won.slot) - won.now(race)).to_std();
        deadline = deadline.min(Instant::now() + left.unwrap_or_default());
    }
    let send = SendContext {
        job: &job.name,
        slot: won.slot,
        zone: job.zone(),
        replica: &books.replica,
        fence: won.fence,
        trigger: Some(won.trigger.kind()),
        deadline,
        valid_until: won.lease.valid_until,
        about: None,
        schedule_words: &job.schedule_words(),
        client: &outbox.client,
        templates: &outbox.templates,
        budgets: &outbox.budgets,
        metrics: &books.metrics,
    };
    let sent = match send.check_validity(1, false) {
        Ok(()) => job.action.execute(&send).await,
        Err(expired) => Err(expired),
    };
    sent.map_err(|e: ActionError| SendFailure {
        error: outbox.scrubber.scrub(&e.to_string()),
        attempts: e.attempts(),
        delivery: e.delivery(),
        local: e.is_local(),
    })
}

/// Drives `action` while extending the running lease every third of its TTL.
async fn with_watchdog<T>(
    race: &Race,
    books: &Books,
    action: impl std::future::Future<Output = T>,
    running: &Lease,
) -> T {
    tokio::pin!(action);
    loop {
        tokio::select! {
            biased;
            result = &mut action => return result,
            _ = tokio::time::sleep(RUNNING_LEASE_TTL / 3) => {
                if !race.lock.extend(running, RUNNING_LEASE_TTL).await {
                    tracing::warn!(key = %running.key, replica = %books.replica,
                        "could not extend the running lease on a majority; another slot may start");
                }
            }
        }
    }
}
