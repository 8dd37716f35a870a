//! One slot's life on one replica: check it is not too late, race for the lock, and (for the
//! winner only) hold the job's running lease, record the run, run the action inside the lock's
//! validity, and record the end. Each step logs one line with the stable fields `job`, `slot`,
//! `replica`, `outcome`.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use tokio::time::Instant;

use crate::action::template::Templates;
use crate::action::{ActionError, Delivery, SendContext};
use crate::config::{Job, Overlap};
use crate::history::{History, RunRecord, RunState};
use crate::lock::{Acquire, Lease, SlotKey, SlotLock, Token, Unavailable};
use crate::metrics::Metrics;
use crate::schedule::{SharedClock, Slot};
use crate::secret::Scrubber;

/// Slot keys outlive the latest legitimate racer by this much.
pub const KEY_MARGIN: Duration = Duration::from_secs(5);
/// A replica still races a slot this long after it, even with `max_clock_skew = 0`.
pub const MIN_START_WINDOW: Duration = Duration::from_secs(2);
/// TTL of a job's running lease; the winner extends it every third of this while it runs, so
/// a winner that dies frees the job within this time.
pub const RUNNING_LEASE_TTL: Duration = Duration::from_secs(6);

/// Why a slot is being raced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RaceKind {
    /// The job's schedule reached the slot.
    Scheduled,
    /// A missed slot run at start (`catch_up`): no start window applies.
    CatchUp,
    /// `slotcron trigger`: now, through the same race.
    Manual,
}

impl RaceKind {
    fn as_str(self) -> &'static str {
        match self {
            RaceKind::Scheduled => "schedule",
            RaceKind::CatchUp => "catch_up",
            RaceKind::Manual => "trigger",
        }
    }
}

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
    pub history: History,
    pub metrics: Arc<Metrics>,
    pub budgets: crate::action::rate::Budgets,
}

/// How one slot ended on this replica.
#[derive(Debug)]
pub enum SlotResult {
    /// Woke too late to race (paused, overloaded): another replica had the slot.
    Late {
        late: Duration,
    },
    Lost {
        holder: Token,
    },
    Unavailable(Unavailable),
    /// Won, but the job's previous run is still going (`overlap = "skip"`).
    Overlapping {
        holder: Option<Token>,
    },
    Done {
        delivery: Delivery,
        duration: Duration,
    },
    Failed {
        error: String,
        attempts: u32,
        duration: Duration,
    },
}

impl SlotResult {
    /// The `outcome` field of the slot's final log line.
    pub fn outcome(&self) -> &'static str {
        match self {
            SlotResult::Late { .. } | SlotResult::Overlapping { .. } => "skipped",
            SlotResult::Lost { .. } => "lost",
            SlotResult::Unavailable(_) => "unavailable",
            SlotResult::Done { .. } => "done",
            SlotResult::Failed { .. } => "failed",
        }
    }
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

    /// Races for a scheduled `slot` of `job` and, if won, runs it.
    pub async fn run_slot(&self, job: &Job, slot: Slot) -> SlotResult {
        self.race(job, slot, RaceKind::Scheduled).await
    }

    /// Races for `slot` of `job` and, if won, runs it.
    pub async fn race(&self, job: &Job, slot: Slot, kind: RaceKind) -> SlotResult {
        let late = (self.clock.now() - slot.instant())
            .to_std()
            .unwrap_or_default();
        if kind == RaceKind::Scheduled && late > self.start_window() {
            tracing::warn!(job = %job.name, %slot, replica = %self.replica, outcome = %"skipped",
                late_ms = late.as_millis() as u64,
                "woke {} ms after the slot, past the start window: not racing", late.as_millis());
            self.metrics.slot(&job.name, "skipped");
            return SlotResult::Late { late };
        }
        let key = SlotKey::new(&self.key_prefix, &job.name, slot);
        let raced_at = Instant::now();
        let acquired = self.lock.acquire(&key, self.key_ttl(job)).await;
        self.metrics.lock_latency(raced_at.elapsed());
        match acquired {
            Acquire::Won(lease) => {
                tracing::info!(job = %job.name, %slot, replica = %self.replica, outcome = %"won",
                    trigger = %kind.as_str(), validity_ms = lease.validity.as_millis() as u64,
                    lock_us = raced_at.elapsed().as_micros() as u64, "won the slot");
                self.metrics.slot(&job.name, "won");
                let result = self.run_won(job, slot, &lease).await;
                self.metrics.slot(&job.name, result.outcome());
                result
            }
            Acquire::Lost { holder } => {
                tracing::info!(job = %job.name, %slot, replica = %self.replica, outcome = %"lost",
                    winner = holder.replica(), "lost the slot to {}", holder.replica());
                self.metrics.slot(&job.name, "lost");
                SlotResult::Lost { holder }
            }
            Acquire::Unavailable(why) => {
                tracing::warn!(job = %job.name, %slot, replica = %self.replica, outcome = %"unavailable",
                    error = %why, "lock unavailable: the slot does not run here");
                self.metrics.slot(&job.name, "unavailable");
                SlotResult::Unavailable(why)
            }
        }
    }

    /// The winner's part: the running lease (unless overlap is allowed), the run, then (after
    /// the lease is released, so the next slot is not held up) the run's record.
    async fn run_won(&self, job: &Job, slot: Slot, lease: &Lease) -> SlotResult {
        let running = match job.overlap {
            Overlap::Allow => None,
            Overlap::Skip => match self.take_running_lease(job, slot).await {
                Ok(running) => Some(running),
                Err(skipped) => return skipped,
            },
        };
        let (result, record) = self.execute(job, slot, lease, running.as_ref()).await;
        if let Some(running) = &running {
            self.lock.release(running).await;
        }
        self.history.record(&record).await;
        result
    }

    /// The job's running lease, or the `skipped` result when the previous run still holds it.
    async fn take_running_lease(&self, job: &Job, slot: Slot) -> Result<Lease, SlotResult> {
        let running_key = SlotKey::running(&self.key_prefix, &job.name);
        match self.lock.acquire(&running_key, RUNNING_LEASE_TTL).await {
            Acquire::Won(running) => Ok(running),
            Acquire::Lost { holder } => {
                tracing::warn!(job = %job.name, %slot, replica = %self.replica, outcome = %"skipped",
                    reason = %"overlap", running_on = holder.replica(),
                    "the previous run is still going on {}: slot skipped (overlap = \"skip\")", holder.replica());
                Err(SlotResult::Overlapping {
                    holder: Some(holder),
                })
            }
            Acquire::Unavailable(why) => {
                tracing::warn!(job = %job.name, %slot, replica = %self.replica, outcome = %"skipped",
                    reason = %"overlap", error = %why, "cannot tell whether the previous run is still going: slot skipped");
                Err(SlotResult::Overlapping { holder: None })
            }
        }
    }

    /// Runs the action inside the lease, keeping the running lease alive, while the start of
    /// the run is recorded (a history write never delays a send). Logs the end; returns the
    /// result and the run's final record.
    async fn execute(
        &self,
        job: &Job,
        slot: Slot,
        lease: &Lease,
        running: Option<&Lease>,
    ) -> (SlotResult, RunRecord) {
        let started = Instant::now();
        let mut record = RunRecord {
            job: job.name.clone(),
            slot,
            replica: self.replica.clone(),
            started: Utc::now(),
            finished: None,
            outcome: RunState::Running,
            error: None,
            attempts: 0,
        };
        let run = async {
            let result = if Instant::now() >= lease.valid_until {
                Err((
                    "lock validity expired before the send (was the process paused?): not sent"
                        .to_owned(),
                    0,
                ))
            } else {
                self.metrics.lateness(
                    &job.name,
                    (self.clock.now() - slot.instant())
                        .to_std()
                        .unwrap_or_default(),
                );
                let action = self.send(job, slot, lease);
                match running {
                    Some(running) => self.with_watchdog(action, running).await,
                    None => action.await,
                }
            };
            let duration = started.elapsed();
            self.metrics.action_duration(&job.name, duration);
            self.log_end(job, slot, result, duration)
        };
        let ((), outcome) = tokio::join!(self.history.record(&record), run);
        record.finished = Some(Utc::now());
        match &outcome {
            SlotResult::Failed {
                error, attempts, ..
            } => {
                record.outcome = RunState::Failed;
                record.error = Some(error.clone());
                record.attempts = *attempts;
            }
            SlotResult::Done { delivery, .. } => {
                record.outcome = RunState::Done;
                record.attempts = delivery.attempts;
            }
            _ => {}
        }
        (outcome, record)
    }

    async fn send(&self, job: &Job, slot: Slot, lease: &Lease) -> Result<Delivery, (String, u32)> {
        let ctx = SendContext {
            job: &job.name,
            slot,
            zone: job.zone(),
            replica: &self.replica,
            deadline: (Instant::now() + job.timeout).min(lease.valid_until),
            client: &self.client,
            templates: &self.templates,
            budgets: &self.budgets,
            metrics: &self.metrics,
        };
        job.action
            .execute(&ctx)
            .await
            .map_err(|e: ActionError| (self.scrubber.scrub(&e.to_string()), e.attempts()))
    }

    /// Drives `action` while extending the running lease every third of its TTL.
    async fn with_watchdog<T>(
        &self,
        action: impl std::future::Future<Output = T>,
        running: &Lease,
    ) -> T {
        tokio::pin!(action);
        loop {
            tokio::select! {
                result = &mut action => return result,
                _ = tokio::time::sleep(RUNNING_LEASE_TTL / 3) => {
                    if !self.lock.extend(running, RUNNING_LEASE_TTL).await {
                        tracing::warn!(key = %running.key, replica = %self.replica,
                            "could not extend the running lease on a majority; another slot may start");
                    }
                }
            }
        }
    }

    fn log_end(
        &self,
        job: &Job,
        slot: Slot,
        result: Result<Delivery, (String, u32)>,
        duration: Duration,
    ) -> SlotResult {
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
                SlotResult::Failed {
                    error,
                    attempts,
                    duration,
                }
            }
        }
    }
}
