//! One slot's life on one replica: check it is not too late, race for the lock, and (for the
//! winner only) run the action inside the lock's validity. Each step logs one line with the
//! stable fields `job`, `slot`, `replica`, `outcome`.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::action::{ActionError, Delivery, SendContext};
use crate::action::template::Templates;
use crate::config::Job;
use crate::lock::{Acquire, Lease, SlotKey, SlotLock, Token, Unavailable};
use crate::schedule::{SharedClock, Slot};
use crate::secret::Scrubber;

/// Slot keys outlive the latest legitimate racer by this much.
pub const KEY_MARGIN: Duration = Duration::from_secs(5);
/// A replica still races a slot this long after it, even with `max_clock_skew = 0`.
pub const MIN_START_WINDOW: Duration = Duration::from_secs(2);

/// What one replica needs to race and run slots.
pub struct RaceContext {
    pub replica: String,
    pub lock: SlotLock,
    pub client: reqwest::Client,
    pub templates: Arc<Templates>,
    pub scrubber: Arc<Scrubber>,
    pub clock: SharedClock,
    pub key_prefix: String,
    pub max_clock_skew: Duration,
}

/// How one slot ended on this replica.
#[derive(Debug)]
pub enum SlotResult {
    /// Woke too late to race (paused, overloaded): another replica had the slot.
    Late { late: Duration },
    Lost { holder: Token },
    Unavailable(Unavailable),
    Done { delivery: Delivery, duration: Duration },
    Failed { error: String, attempts: u32, duration: Duration },
}

impl RaceContext {
    /// How long after its slot a replica (by its own clock) still races for it.
    pub fn start_window(&self) -> Duration {
        self.max_clock_skew.max(MIN_START_WINDOW)
    }

    /// The slot key's TTL: the run, plus the spread of replicas' clocks, plus the start window.
    /// A replica whose clock lags or that wakes late then still finds the slot taken.
    pub fn key_ttl(&self, job: &Job) -> Duration {
        job.timeout + self.max_clock_skew + self.start_window() + KEY_MARGIN
    }

    /// Races for `slot` of `job` and, if won, runs it.
    pub async fn run_slot(&self, job: &Job, slot: Slot) -> SlotResult {
        let late = (self.clock.now() - slot.instant()).to_std().unwrap_or_default();
        if late > self.start_window() {
            tracing::warn!(job = %job.name, %slot, replica = %self.replica, outcome = %"skipped",
                late_ms = late.as_millis() as u64,
                "woke {} ms after the slot, past the start window: not racing", late.as_millis());
            return SlotResult::Late { late };
        }
        let key = SlotKey::new(&self.key_prefix, &job.name, slot);
        let raced_at = Instant::now();
        match self.lock.acquire(&key, self.key_ttl(job)).await {
            Acquire::Won(lease) => {
                let lock_us = raced_at.elapsed().as_micros() as u64;
                tracing::info!(job = %job.name, %slot, replica = %self.replica, outcome = %"won",
                    validity_ms = lease.validity.as_millis() as u64, lock_us, "won the slot");
                self.execute(job, slot, &lease).await
            }
            Acquire::Lost { holder } => {
                tracing::info!(job = %job.name, %slot, replica = %self.replica, outcome = %"lost",
                    winner = holder.replica(), "lost the slot to {}", holder.replica());
                SlotResult::Lost { holder }
            }
            Acquire::Unavailable(why) => {
                tracing::warn!(job = %job.name, %slot, replica = %self.replica, outcome = %"unavailable",
                    error = %why, "lock unavailable: the slot does not run here");
                SlotResult::Unavailable(why)
            }
        }
    }

    /// Runs the action inside the lease; logs `done` or `failed`.
    async fn execute(&self, job: &Job, slot: Slot, lease: &Lease) -> SlotResult {
        let started = Instant::now();
        let result = if started >= lease.valid_until {
            Err(("lock validity expired before the send (was the process paused?): not sent".to_owned(), 0))
        } else {
            let ctx = SendContext {
                job: &job.name,
                slot,
                zone: job.zone(),
                replica: &self.replica,
                deadline: (started + job.timeout).min(lease.valid_until),
                client: &self.client,
                templates: &self.templates,
            };
            job.action
                .execute(&ctx)
                .await
                .map_err(|e: ActionError| (self.scrubber.scrub(&e.to_string()), e.attempts()))
        };
        let duration = started.elapsed();
        let duration_ms = duration.as_millis() as u64;
        match result {
            Ok(delivery) => {
                let lateness_ms = (self.clock.now() - slot.instant()).num_milliseconds();
                tracing::info!(job = %job.name, %slot, replica = %self.replica, outcome = %"done",
                    duration_ms, attempts = delivery.attempts, lateness_ms, "ran the slot");
                SlotResult::Done { delivery, duration }
            }
            Err((error, attempts)) => {
                tracing::error!(job = %job.name, %slot, replica = %self.replica, outcome = %"failed",
                    duration_ms, attempts, error = %error, "the slot's action failed");
                SlotResult::Failed { error, attempts, duration }
            }
        }
    }
}
