//! The tokio-cron-scheduler guard (feature `tcs`): a `tokio_cron_scheduler::Job` whose async
//! body runs once per tick across the fleet. Each replica's scheduler fires the tick on its own
//! wall clock, hundreds of milliseconds apart (tokio-cron-scheduler wakes up to ~0.5 s late, and
//! hosts' clocks differ); so the slot is never the time the tick fired but the schedule's
//! instant it fired for: the latest instant of the same cron (read as tokio-cron-scheduler
//! reads it: seconds required, day-of-month AND day-of-week) at or before the fire time. Every
//! replica then races for the same slot's Redlock through the fleet's own race, with its window
//! guard on the fleet clock, its logs, metrics and history; only the winner runs the body.
//!
//! ```no_run
//! # async fn doc() -> Result<(), Box<dyn std::error::Error>> {
//! use slotcron::Fleet;
//! use tokio_cron_scheduler::JobScheduler;
//!
//! let fleet = Fleet::new("replica-1").nodes(["redis://127.0.0.1:6379"]).start().await?;
//! let guard = fleet.tcs_guard();
//! let scheduler = JobScheduler::new().await?;
//! // Was: Job::new_async("0 */5 * * * *", |_id, _lock| Box::pin(async { ... }))
//! scheduler
//!     .add(guard.job_async("cleanup", "0 */5 * * * *", |_id, _lock| {
//!         Box::pin(async { println!("once across the fleet") })
//!     })?)
//!     .await?;
//! scheduler.start().await?;
//! # Ok(()) }
//! ```

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use croner::Cron;
use croner::parser::{CronParser, Seconds};
use tokio_cron_scheduler::{Job, JobScheduler};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use uuid::Uuid;

use super::build::{BUILT_IN_CODE, Parts};
use super::{Error, FleetHandle, JobSpec, SlotContext};
use crate::action::Action;
use crate::action::function::{FnAction, JobFn};
use crate::config::{self, ConfigError, ConfigErrors, Overlap, Section};
use crate::slot::{self, SlotEnv, Trigger};
use crate::time::schedule::{Schedule, Slot};

/// A tick that fired more than this after the schedule's latest instant is not that instant's
/// (a tick is at most ~0.5 s late, plus a loaded machine's delay): it is dropped with a warning
/// rather than raced for a slot it may not be.
///
/// ```
/// assert_eq!(slotcron::api::tcs::TICK_TOLERANCE.as_secs(), 2);
/// ```
pub const TICK_TOLERANCE: Duration = Duration::from_secs(2);

/// The body tokio-cron-scheduler's `Job::new_async` takes.
type Body = dyn FnMut(Uuid, JobScheduler) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send;

tokio::task_local! {
    /// The slot of the guarded body running on this task.
    static SLOT: SlotContext;
}

/// The slot the guarded body calling it runs for (job, slot, fence, ...): in the body's
/// closure and in the future it returns; `None` outside a guarded body.
///
/// ```
/// async fn body() {
///     if let Some(slot) = slotcron::api::tcs::current_slot() {
///         println!("slot {} fence={}", slot.slot(), slot.fence());
///     }
/// }
/// ```
pub fn current_slot() -> Option<SlotContext> {
    SLOT.try_with(Clone::clone).ok()
}

impl FleetHandle {
    /// The guard of this fleet: its jobs race on the fleet's nodes, clock and prefix, and its
    /// shutdown waits for their running bodies.
    pub fn tcs_guard(&self) -> Guard {
        Guard {
            race: self.race.clone(),
            guarded: self.guarded.clone(),
            stop: self.stop.clone(),
        }
    }
}

/// Makes tokio-cron-scheduler jobs once-per-fleet: [`Guard::job_async`] stands in for
/// `Job::new_async` (see the [module](self)'s example).
///
/// ```no_run
/// # async fn doc() -> Result<(), slotcron::Error> {
/// let fleet = slotcron::Fleet::new("replica-1").nodes(["redis://127.0.0.1:6379"]).start().await?;
/// let guard: slotcron::api::tcs::Guard = fleet.tcs_guard();
/// # let _ = guard; Ok(()) }
/// ```
#[derive(Clone)]
pub struct Guard {
    /// The fleet's race (nodes, fleet clock, history, metrics).
    race: Arc<SlotEnv>,
    /// The guarded runs in flight: the fleet's shutdown waits for them.
    guarded: TaskTracker,
    /// The fleet's shutdown: a tick after it starts no race.
    stop: CancellationToken,
}

impl Guard {
    /// `Job::new_async(schedule, body)`, guarded: each tick races for its slot of job `name`
    /// (its lock keys, history and metrics), and only the winner runs `body`. `schedule` is
    /// the 6-field cron tokio-cron-scheduler takes (seconds first), in UTC.
    ///
    /// ```no_run
    /// # fn doc(guard: slotcron::api::tcs::Guard) -> Result<(), slotcron::Error> {
    /// let job = guard.job_async("beat", "* * * * * *", |_id, _lock| {
    ///     Box::pin(async { println!("beat") })
    /// })?;
    /// # let _ = job; Ok(()) }
    /// ```
    pub fn job_async<B>(&self, name: &str, schedule: &str, body: B) -> Result<Job, Error>
    where
        B: FnMut(Uuid, JobScheduler) -> Pin<Box<dyn Future<Output = ()> + Send>>
            + Send
            + Sync
            + 'static,
    {
        let guarded = Arc::new(Guarded {
            checked: checked(name, schedule)?,
            cron: tcs_cron(schedule).map_err(|e| schedule_error(name, e.to_string()))?,
            body: Mutex::new(Box::new(body)),
            guard: self.clone(),
        });
        Job::new_async(schedule, move |id, scheduler| {
            let guarded = guarded.clone();
            Box::pin(async move { guarded.tick(id, scheduler).await })
        })
        .map_err(|e| schedule_error(name, e.to_string()))
    }
}

/// The job's name, schedule and timeout checked as a jobs.toml `[[job]]` is.
fn checked(name: &str, schedule: &str) -> Result<Checked, Error> {
    let placeholder: JobFn = Arc::new(|_| Box::pin(async { Ok(()) }));
    let parts = Parts {
        jobs: vec![(JobSpec::new(name, schedule), placeholder)],
        ..Parts::default()
    };
    let config = parts.config()?;
    let job = config
        .jobs
        .first()
        .ok_or_else(|| schedule_error(name, "no job".into()))?;
    Ok(Checked {
        name: job.name.clone(),
        schedule: job.schedule.clone(),
        timeout: job.timeout,
    })
}

/// The cron as tokio-cron-scheduler parses it, so the slots are the instants it fires for.
fn tcs_cron(schedule: &str) -> Result<Cron, croner::errors::CronError> {
    CronParser::builder()
        .seconds(Seconds::Required)
        .dom_and_dow(true)
        .build()
        .parse(schedule)
}

/// A schedule refused, named by job and field like any configuration error.
fn schedule_error(name: &str, reason: String) -> Error {
    Error::Config(ConfigErrors {
        path: BUILT_IN_CODE.to_owned(),
        errors: vec![ConfigError::field(
            Section::Job(name.to_owned()),
            "schedule",
            format!("tokio-cron-scheduler cannot use it: {reason}"),
        )],
    })
}

/// What a guarded job's every tick needs of its definition.
struct Checked {
    name: String,
    schedule: Schedule,
    timeout: Duration,
}

/// One guarded job.
struct Guarded {
    checked: Checked,
    /// The schedule as tokio-cron-scheduler reads it: the slots come from it.
    cron: Cron,
    /// The user's body; tokio-cron-scheduler hands it out as `FnMut`, one call at a time.
    body: Mutex<Box<Body>>,
    guard: Guard,
}

impl Guarded {
    /// One tick: its slot from the schedule, then the fleet's race for it (tracked, so the
    /// fleet's shutdown waits for a running body).
    async fn tick(self: Arc<Self>, id: Uuid, scheduler: JobScheduler) {
        let fired = Utc::now();
        let name = &self.checked.name;
        let Some(slot) = self.slot_of(fired) else {
            tracing::warn!(job = %name, fired = %fired, "a tick came more than {} s after \
                its schedule's latest instant: not raced", TICK_TOLERANCE.as_secs());
            return;
        };
        if self.guard.stop.is_cancelled() {
            tracing::info!(job = %name, %slot, "shutting down: tick not raced");
            return;
        }
        let job = Arc::new(self.job(id, scheduler));
        let race = self.guard.race.clone();
        let run = async move { slot::due(&race, Trigger::Schedule, vec![job], slot).await };
        // The race's own task: a panicking body is the race's failure, never the scheduler's.
        let _ = self.guard.guarded.spawn(run).await;
    }

    /// The slot a tick fired at `fired` (this host's wall clock, as the scheduler's) is for.
    fn slot_of(&self, fired: DateTime<Utc>) -> Option<Slot> {
        slot_of(&self.cron, fired)
    }

    /// The job this tick races: its action calls the body with the tick's arguments, inside
    /// the slot's [`current_slot`] scope.
    fn job(self: &Arc<Self>, id: Uuid, scheduler: JobScheduler) -> config::Job {
        let guarded = self.clone();
        let run: JobFn = Arc::new(move |ctx: SlotContext| {
            // The slot is known both to the body's call and to the future it returns.
            let body = SLOT.sync_scope(ctx.clone(), || {
                let mut body = guarded.body.lock().unwrap_or_else(|p| p.into_inner());
                body(id, scheduler.clone())
            });
            Box::pin(SLOT.scope(ctx, async move {
                body.await;
                Ok(())
            }))
        });
        config::Job {
            name: self.checked.name.clone(),
            schedule: self.checked.schedule.clone(),
            timeout: self.checked.timeout,
            jitter: std::time::Duration::ZERO,
            overlap: Overlap::Skip,
            catch_up: None,
            action: Action::Fn(FnAction::new(run)),
            on_failure: None,
            deadline: None,
        }
    }
}

/// The slot of `cron` a tick fired at `fired` is for: its latest instant at or before `fired`,
/// if within [`TICK_TOLERANCE`].
fn slot_of(cron: &Cron, fired: DateTime<Utc>) -> Option<Slot> {
    let instant = cron.find_previous_occurrence(&fired, true).ok()?;
    let late = (fired - instant).to_std().ok()?;
    (late <= TICK_TOLERANCE).then(|| Slot::at(instant))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text).unwrap().to_utc()
    }

    fn slot(cron: &str, fired: &str) -> Option<String> {
        slot_of(&tcs_cron(cron).unwrap(), at(fired)).map(Slot::rfc3339_utc)
    }

    #[test]
    fn a_tick_is_for_the_latest_instant_at_or_before_it_never_the_second_it_fired_in() {
        // Fired 450 ms late (tokio-cron-scheduler's poll): the slot is the instant, not the fire.
        let every_5_min = "0 */5 * * * *";
        let on_time = Some("2026-11-24T10:05:00Z".to_owned());
        assert_eq!(slot(every_5_min, "2026-11-24T10:05:00.450Z"), on_time);
        assert_eq!(slot(every_5_min, "2026-11-24T10:05:00Z"), on_time);
        assert_eq!(slot(every_5_min, "2026-11-24T10:05:01.999Z"), on_time);
        // Past the tolerance the tick is not raced for a slot it may not be.
        assert_eq!(slot(every_5_min, "2026-11-24T10:05:02.001Z"), None);
        assert_eq!(slot(every_5_min, "2026-11-24T10:07:00Z"), None);
    }

    #[test]
    fn the_cron_is_read_as_tokio_cron_scheduler_reads_it() {
        // Day of month AND day of week: the 1st only when it is a Monday (2026-06-01 is).
        assert_eq!(
            slot("0 0 9 1 * Mon", "2026-06-01T09:00:00.2Z"),
            Some("2026-06-01T09:00:00Z".to_owned())
        );
        assert_eq!(slot("0 0 9 1 * Mon", "2026-07-01T09:00:00.2Z"), None);
        // Seconds are required, as tokio-cron-scheduler requires them.
        assert!(tcs_cron("*/5 * * * *").is_err());
    }
}
