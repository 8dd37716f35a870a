//! The replica: one task per job that sleeps until the job's next slot and hands the slot to a
//! race task. Every task is tracked; on shutdown no new slot starts and in-flight slots finish
//! (each within its job's timeout) before `run` returns.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use futures_util::future::join_all;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::action::http_client;
use crate::config::{Config, Job};
use crate::lock::{LocalLock, Redlock, SlotLock};
use crate::race::RaceContext;
use crate::schedule::{SharedClock, Slot};

/// How long start-up waits for the first answer of each Redis node before going on without it.
const STARTUP_PING: Duration = Duration::from_secs(2);

/// Runs the schedule of `config` as replica `replica` until `shutdown` is cancelled.
pub async fn run(config: Config, replica: String, clock: SharedClock, shutdown: CancellationToken) -> anyhow::Result<()> {
    for warning in &config.warnings {
        tracing::warn!(replica = %replica, "{warning}");
    }
    let ctx = Arc::new(race_context(&config, replica, clock).await?);
    tracing::info!(replica = %ctx.replica, jobs = config.jobs.len(), lock = %ctx.lock.describe(),
        config = %config.path.display(), "slotcron started");
    for name in &config.disabled {
        tracing::info!(replica = %ctx.replica, job = %name, "job disabled (enabled = false)");
    }
    let tracker = TaskTracker::new();
    for job in &config.jobs {
        tracker.spawn(job_loop(ctx.clone(), job.clone(), tracker.clone(), shutdown.clone()));
    }
    shutdown.cancelled().await;
    tracing::info!(replica = %ctx.replica, "shutting down: no new slots; waiting for running slots");
    tracker.close();
    tracker.wait().await;
    tracing::info!(replica = %ctx.replica, "stopped");
    Ok(())
}

/// Builds the lock and the shared state of one replica.
pub async fn race_context(config: &Config, replica: String, clock: SharedClock) -> anyhow::Result<RaceContext> {
    let lock = match &config.redis {
        Some(redis) => {
            let lock = Redlock::new(&redis.nodes, &replica, redis.lock.clone(), redis.ca.as_deref())
                .map_err(anyhow::Error::msg)
                .context("preparing Redis connections")?;
            report_nodes(&lock, &replica).await;
            SlotLock::Redlock(lock)
        }
        None => SlotLock::Local(LocalLock::new(&replica)),
    };
    Ok(RaceContext {
        replica,
        lock,
        client: http_client().context("building the HTTP client")?,
        templates: config.templates.clone(),
        scrubber: config.scrubber.clone(),
        clock,
        key_prefix: config.scheduler.key_prefix.clone(),
        max_clock_skew: config.scheduler.max_clock_skew,
    })
}

/// Opens each node's connection and logs which answer; a node that is down is not fatal.
async fn report_nodes(lock: &Redlock, replica: &str) {
    let pings = join_all(lock.nodes().iter().map(|n| n.ping_within(STARTUP_PING))).await;
    for (node, ping) in lock.nodes().iter().zip(pings) {
        match ping {
            Ok(()) => tracing::info!(replica, node = node.address(), "redis node up"),
            Err(e) => tracing::warn!(replica, node = node.address(), error = %e,
                "redis node down at start; reconnecting in the background"),
        }
    }
}

/// Sleeps until each slot of `job` and starts its race, until shutdown.
async fn job_loop(ctx: Arc<RaceContext>, job: Arc<Job>, tracker: TaskTracker, shutdown: CancellationToken) {
    let mut after = ctx.clock.now();
    loop {
        let Some(slot) = job.schedule.next_after(after) else {
            tracing::warn!(job = %job.name, replica = %ctx.replica, "the schedule has no further slot");
            return;
        };
        if !sleep_until_slot(&ctx.clock, slot, &shutdown).await {
            return;
        }
        tracker.spawn(run_slot(ctx.clone(), job.clone(), slot));
        // A replica that wakes late still races the slots inside the start window (the race
        // decides); slots older than that belonged to replicas that were awake and are skipped.
        let window = chrono::Duration::from_std(ctx.start_window()).unwrap_or_default();
        after = slot.instant().max(ctx.clock.now() - window);
    }
}

async fn run_slot(ctx: Arc<RaceContext>, job: Arc<Job>, slot: Slot) {
    ctx.run_slot(&job, slot).await;
}

/// Sleeps until the wall clock reaches `slot`. False when shutdown came first.
///
/// The timer runs on the monotonic clock; if the wall clock was stepped back meanwhile the
/// remaining gap is slept again, so a slot never starts before its instant on this replica.
pub async fn sleep_until_slot(clock: &SharedClock, slot: Slot, shutdown: &CancellationToken) -> bool {
    loop {
        let Ok(wait) = (slot.instant() - clock.now()).to_std() else {
            return !shutdown.is_cancelled();
        };
        if wait.is_zero() {
            return !shutdown.is_cancelled();
        }
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = shutdown.cancelled() => return false,
        }
    }
}
