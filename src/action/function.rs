//! The `fn` action: a job whose work is the library user's async function (see
//! [`crate::api`]). The winner runs it the way it runs a webhook: inside the lock's validity, cut
//! at the job's timeout. Its `Ok` is the slot's `done`; its `Err` the slot's `failed`, the
//! error's text in the log line and the run record; a panic is a failure too, never a dead
//! slot task that leaves the run `running` in the history.

use std::any::Any;
use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use futures_util::FutureExt as _;

use super::{ActionError, Delivery, SendContext};

/// Why a job's function failed: the text of the error it returned (alternate form, so an
/// `anyhow::Error` shows its whole chain), recorded as the run's `error`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct JobError(pub(crate) String);

impl JobError {
    /// The error `error` as the run record shows it.
    pub(crate) fn from_display(error: impl fmt::Display) -> Self {
        JobError(format!("{error:#}"))
    }
}

impl fmt::Display for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One run of a job's function, boxed: the action holds functions of any future type.
pub(crate) type JobFuture = Pin<Box<dyn Future<Output = Result<(), JobError>> + Send>>;

/// A job's function as the action holds it: shared by every slot's run.
pub(crate) type JobFn = Arc<dyn Fn(SlotContext) -> JobFuture + Send + Sync>;

/// A checked `fn` action: the user's function.
#[derive(Clone)]
pub struct FnAction {
    /// The function, called once per won slot.
    run: JobFn,
}

impl fmt::Debug for FnAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FnAction")
    }
}

impl FnAction {
    /// The action that calls `run` for each won slot.
    pub(crate) fn new(run: JobFn) -> Self {
        FnAction { run }
    }

    /// The action that calls `run` for each won slot, its `Err` the run's error: for a fleet
    /// assembled outside the builder (the simulation, tests/sim/, swaps a loaded file's actions
    /// for its receivers). Hidden from the docs: the library's way is [`crate::Fleet::job`].
    #[doc(hidden)]
    pub fn of<F, Fut, E>(run: F) -> Self
    where
        F: Fn(SlotContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: fmt::Display + Send + 'static,
    {
        FnAction::new(Arc::new(move |ctx| {
            let run = run(ctx);
            Box::pin(async move { run.await.map_err(JobError::from_display) })
        }))
    }

    /// The action of a job loaded without its secrets (`config::load_without_secrets`, for a
    /// command that never sends): it fails, saying so, if it is ever run.
    pub(crate) fn unresolved() -> Self {
        FnAction::new(Arc::new(|_| {
            Box::pin(async {
                Err(JobError(
                    "this job was loaded without its secrets and cannot send from here".to_owned(),
                ))
            })
        }))
    }

    /// Runs the function for the slot in `ctx`, cut at the deadline; its ending as a delivery.
    pub async fn execute(&self, ctx: &SendContext<'_>) -> Result<Delivery, ActionError> {
        let run = AssertUnwindSafe((self.run)(SlotContext::of(ctx))).catch_unwind();
        match tokio::time::timeout_at(ctx.deadline, run).await {
            Ok(Ok(Ok(()))) => Ok(Delivery { attempts: 1 }),
            Ok(Ok(Err(JobError(reason)))) => Err(ActionError::Returned { reason }),
            Ok(Err(panic)) => Err(ActionError::Returned {
                reason: format!("the job's function panicked: {}", panic_text(&*panic)),
            }),
            // It may have done part of its work before it was dropped.
            Err(_) => Err(ActionError::GaveUp {
                attempts: 1,
                reason: "the job's function was still running at the job's timeout (dropped)"
                    .to_owned(),
                uncertain: true,
            }),
        }
    }
}

/// A panic's message, when it has one.
fn panic_text(panic: &(dyn Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

/// Why a slot is being run, as its run record's `trigger` names it.
///
/// ```
/// use slotcron::Trigger;
/// assert_eq!(Trigger::CatchUp.as_str(), "catch_up");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Trigger {
    /// The job's schedule reached the slot.
    Schedule,
    /// A slot missed while no replica ran, run at start (the job's catch-up).
    CatchUp,
    /// `slotcron trigger`: now, through the same race.
    Manual,
    /// Another replica won the slot and nothing left it: this run takes the slot over.
    Handoff,
}

impl Trigger {
    /// The run record's `trigger`: `schedule`, `catch_up`, `trigger` or `handoff`.
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Schedule => "schedule",
            Trigger::CatchUp => "catch_up",
            Trigger::Manual => "trigger",
            Trigger::Handoff => "handoff",
        }
    }
}

/// What a job's function knows about the slot it runs: one per won slot.
///
/// ```
/// use slotcron::{SlotContext, Trigger};
///
/// async fn beat(ctx: SlotContext) -> Result<(), String> {
///     println!("ran {} {} ({} local) fence={} on {}", ctx.job(), ctx.slot().to_rfc3339(),
///         ctx.slot_local().to_rfc3339(), ctx.fence(), ctx.replica());
///     if ctx.trigger() == Trigger::Handoff {
///         println!("run {} of the slot, the first winner could not", ctx.attempt());
///     }
///     // Work that must end before the run is dropped.
///     tokio::time::timeout_at(ctx.deadline(), async { /* ... */ })
///         .await
///         .map_err(|_| "out of time".to_owned())
/// }
/// ```
#[derive(Debug, Clone)]
pub struct SlotContext {
    job: Arc<str>,
    slot: DateTime<Utc>,
    zone: Tz,
    fence: i64,
    trigger: Trigger,
    attempt: u32,
    replica: Arc<str>,
    deadline: tokio::time::Instant,
    /// For an alert's function: the outcome it tells about, and why.
    alert: Option<(Arc<str>, Arc<str>)>,
}

impl SlotContext {
    /// The context of the run in `ctx`.
    fn of(ctx: &SendContext<'_>) -> Self {
        SlotContext {
            job: Arc::from(ctx.job),
            slot: ctx.slot.instant(),
            zone: ctx.zone,
            fence: ctx.fence.get(),
            trigger: ctx.trigger.unwrap_or(Trigger::Schedule),
            attempt: u32::from(ctx.fence.handoff()) + 1,
            replica: Arc::from(ctx.replica),
            deadline: ctx.deadline,
            alert: ctx
                .about
                .map(|(outcome, why)| (Arc::from(outcome), Arc::from(why))),
        }
    }

    /// For an alert's function ([`crate::Fleet::alert`]): the slot's outcome it tells about
    /// (`failed`, `missed` or `duplicate`) and why; `None` in a job's own run.
    pub fn alert(&self) -> Option<(&str, &str)> {
        self.alert
            .as_ref()
            .map(|(outcome, why)| (&**outcome, &**why))
    }

    /// The job's name.
    pub fn job(&self) -> &str {
        &self.job
    }

    /// The slot: the scheduled instant this run is for (not when it started), in UTC.
    pub fn slot(&self) -> DateTime<Utc> {
        self.slot
    }

    /// The slot in the job's zone.
    pub fn slot_local(&self) -> DateTime<Tz> {
        self.slot.with_timezone(&self.zone)
    }

    /// This run's fencing token: the slot's epoch milliseconds, plus one per handoff. A
    /// receiver that keeps the highest fence it saw refuses a stale run.
    pub fn fence(&self) -> i64 {
        self.fence
    }

    /// Why the slot is run.
    pub fn trigger(&self) -> Trigger {
        self.trigger
    }

    /// Which run of the slot across the fleet this is: 1, and one more per handoff.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The replica running it.
    pub fn replica(&self) -> &str {
        &self.replica
    }

    /// When the run is dropped if it has not returned: the job's timeout, cut short by the
    /// lock's validity.
    pub fn deadline(&self) -> tokio::time::Instant {
        self.deadline
    }
}
