//! The library: once-per-fleet async jobs in a few lines. A [`Fleet`] is built from Redis
//! node URLs (or none: standalone), jobs are registered with a cron and an async function, and
//! [`Fleet::start`] runs them as the binary runs jobs.toml (the binary is a user of this
//! module: `Fleet::from_config`): every replica schedules every slot on the fleet clock, the
//! replicas race for each slot's Redlock, the winner calls the function; same logs, metrics and
//! history. The function's `Ok` is the slot's `done`, its `Err` the slot's `failed`.

mod build;
mod error;
mod handle;
mod job;
#[cfg(feature = "tcs")]
pub mod tcs;

use std::future::Future;
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use crate::action::function::{SlotContext, Trigger};
pub use crate::config::error::{ConfigError, ConfigErrors, Location, Section, SourceLine};
pub use crate::config::{CatchUpPolicy, Overlap};
pub use crate::outcome::Outcome;
pub use crate::record::history::RunRecord;
pub use crate::time::schedule::{DstGap, DstRepeat};
/// The time types the API takes and returns ([`SlotContext::slot`] is a `DateTime<Utc>`,
/// [`SlotContext::slot_local`] a `DateTime<Tz>`, [`Calendar::holiday`] takes a `NaiveDate`),
/// re-exported so that naming them needs no crate of your own (nor matching its version).
pub use chrono::{DateTime, NaiveDate, Utc};
pub use chrono_tz::Tz;
pub use error::Error;
pub use handle::{FleetHandle, Triggered};
pub use job::{Calendar, JobSpec};

use crate::action::function::{JobError, JobFn};
use crate::config::Config;
use crate::replica::{self, Replica};
use crate::time::schedule::SystemClock;

/// A fleet of jobs, built in code: every replica builds the same one, and each slot of each
/// job runs once across them.
///
/// ```no_run
/// # async fn doc() -> Result<(), slotcron::Error> {
/// use slotcron::{Fleet, JobSpec, SlotContext};
///
/// let handle = Fleet::new("replica-1")
///     .nodes(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"])
///     .job(JobSpec::new("beat", "* * * * * *"), |ctx: SlotContext| async move {
///         println!("ran {} fence={}", ctx.slot().to_rfc3339(), ctx.fence());
///         Ok::<(), std::io::Error>(())
///     })
///     .start()
///     .await?;
/// // ... until the service stops:
/// handle.shutdown().await?;
/// # Ok(()) }
/// ```
pub struct Fleet {
    /// This replica's id: its lock tokens, log lines and run records name it.
    replica: String,
    /// The fleet as built in code; unused when [`Fleet::from_config`] gave a whole configuration.
    parts: build::Parts,
    /// The binary's checked jobs.toml; its jobs are the TOML actions.
    config: Option<Config>,
    /// The binary's reloads (SIGHUP, a change of the file); none in code.
    reloads: Option<mpsc::Receiver<()>>,
}

impl Fleet {
    /// A fleet whose replica here is named `replica` (unique per process: the hostname or the
    /// pod's name). Standalone (an in-process lock) until [`Fleet::nodes`].
    ///
    /// ```
    /// let fleet = slotcron::Fleet::new("replica-1");
    /// # let _ = fleet;
    /// ```
    pub fn new(replica: impl Into<String>) -> Self {
        Fleet {
            replica: replica.into(),
            parts: build::Parts::default(),
            config: None,
            reloads: None,
        }
    }

    /// The binary's fleet: the jobs of a checked jobs.toml, reloaded when `reloads` receives.
    #[cfg(feature = "cli")]
    pub(crate) fn from_config(
        config: Config,
        replica: String,
        reloads: Option<mpsc::Receiver<()>>,
    ) -> Self {
        Fleet {
            config: Some(config),
            reloads,
            ..Fleet::new(replica)
        }
    }

    /// Races on these Redis nodes (`redis://` or `rediss://` URLs; 1, 3 or 5 independent
    /// primaries): a majority decides each slot.
    ///
    /// ```
    /// let fleet = slotcron::Fleet::new("replica-1")
    ///     .nodes(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"]);
    /// # let _ = fleet;
    /// ```
    pub fn nodes<I, S>(mut self, nodes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.parts.nodes = nodes.into_iter().map(Into::into).collect();
        self
    }

    /// The first part of every Redis key (default `slotcron`): fleets sharing nodes race
    /// apart on different prefixes. Two programs left on one prefix are two deployments
    /// ([`Fleet::deployment`]): each logs an error naming the other's replicas.
    ///
    /// ```
    /// let fleet = slotcron::Fleet::new("replica-1").key_prefix("billing");
    /// # let _ = fleet;
    /// ```
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.parts.key_prefix = Some(prefix.into());
        self
    }

    /// Names this fleet's deployment (default: known by its program's name): replicas of
    /// two deployments on one `key_prefix` race for each other's slots, so each logs an error
    /// naming the other's replicas (see the book's "One fleet per prefix").
    ///
    /// ```
    /// let fleet = slotcron::Fleet::new("replica-1").deployment("billing-production");
    /// # let _ = fleet;
    /// ```
    pub fn deployment(mut self, name: impl Into<String>) -> Self {
        self.parts.deployment = Some(name.into());
        self
    }

    /// Serves `/healthz`, `/readyz`, `/metrics` (Prometheus) and the status page (`/`) on
    /// `listen`, as the binary's `[http] listen` does. Needs the `server` feature (a default):
    /// without it, [`Fleet::start`] refuses the address and names the feature.
    ///
    /// ```
    /// let fleet = slotcron::Fleet::new("replica-1").http(([127, 0, 0, 1], 9090).into());
    /// # let _ = fleet;
    /// ```
    pub fn http(mut self, listen: std::net::SocketAddr) -> Self {
        self.parts.http = Some(listen);
        self
    }

    /// Sends a trace per won run to `endpoint` (OTLP over HTTP, protobuf, `{endpoint}/v1/traces`),
    /// as the binary's `[telemetry] otlp_endpoint` does; the job's function runs inside the
    /// run's span (`opentelemetry::Context::current()`). One exporter per process: the first
    /// fleet's endpoint.
    ///
    /// ```
    /// let fleet = slotcron::Fleet::new("replica-1").otlp_endpoint("http://otel-collector:4318");
    /// # let _ = fleet;
    /// ```
    pub fn otlp_endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.parts.otlp_endpoint = Some(endpoint.into());
        self
    }

    /// Registers a job: `run` is called with the slot's [`SlotContext`] on the replica that
    /// wins the slot. `Ok` records the slot `done`; `Err` records it `failed` with the error's
    /// text (its `{:#}` form); a run past the job's timeout is dropped and recorded `failed`.
    ///
    /// ```
    /// use slotcron::{Fleet, JobSpec};
    ///
    /// let fleet = Fleet::new("replica-1").job(JobSpec::new("cleanup", "0 */5 * * * *"), |ctx| async move {
    ///     if ctx.attempt() > 1 {
    ///         return Err(format!("slot {} was handed off", ctx.slot()));
    ///     }
    ///     Ok(())
    /// });
    /// # let _ = fleet;
    /// ```
    pub fn job<F, Fut, E>(mut self, spec: JobSpec, run: F) -> Self
    where
        F: Fn(SlotContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: std::fmt::Display + Send + 'static,
    {
        self.parts.jobs.push((spec, boxed(run)));
        self
    }

    /// Registers the alert `name`, which jobs name in [`JobSpec::on_failure`]: `tell` is
    /// called once across the fleet when a slot of such a job ends `failed`, is found
    /// `missed` or ran twice; [`SlotContext::alert`] says which and why. Its own failure is
    /// logged and goes no further.
    ///
    /// ```
    /// use slotcron::{Fleet, JobSpec};
    ///
    /// let fleet = Fleet::new("replica-1")
    ///     .alert("ops", |ctx| async move {
    ///         let (outcome, why) = ctx.alert().unwrap_or_default();
    ///         eprintln!("{} {} ended {outcome}: {why}", ctx.job(), ctx.slot());
    ///         Ok::<(), std::io::Error>(())
    ///     })
    ///     .job(JobSpec::new("backup", "0 3 * * *").on_failure("ops"), |_| async {
    ///         Err("no space left")
    ///     });
    /// # let _ = fleet;
    /// ```
    pub fn alert<F, Fut, E>(mut self, name: impl Into<String>, tell: F) -> Self
    where
        F: Fn(SlotContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: std::fmt::Display + Send + 'static,
    {
        self.parts.alerts.push((name.into(), boxed(tell)));
        self
    }

    /// Checks the jobs, connects the nodes, measures the fleet clock and starts the schedule;
    /// the handle stops it. Errors come before anything runs: every invalid job and field at
    /// once, or a start-up failure.
    ///
    /// ```no_run
    /// # async fn doc() -> Result<(), slotcron::Error> {
    /// let handle = slotcron::Fleet::new("replica-1").start().await?;
    /// handle.shutdown().await?;
    /// # Ok(()) }
    /// ```
    pub async fn start(self) -> Result<FleetHandle, Error> {
        let config = match self.config {
            Some(config) => config,
            None => self.parts.config()?,
        };
        replica::warn_at_start(&config, &self.replica);
        let replica = Replica::connect(&config, self.replica, Arc::new(SystemClock))
            .await
            .map_err(Error::start)?;
        let stop = CancellationToken::new();
        let race = replica.context_until(&config, &stop);
        let jobs = config.jobs.clone();
        let audit = replica.audit.clone();
        let run = tokio::spawn(replica::run_replica(
            replica,
            config,
            stop.clone(),
            self.reloads,
        ));
        Ok(FleetHandle {
            stop,
            run,
            race,
            jobs,
            guarded: TaskTracker::new(),
            audit,
        })
    }

    /// Starts, runs until `shutdown` resolves (a signal, usually), then stops gracefully: no
    /// new slot starts and running ones finish. Returns early if the fleet stops on an error.
    ///
    /// ```no_run
    /// # async fn doc() -> Result<(), slotcron::Error> {
    /// let fleet = slotcron::Fleet::new("replica-1");
    /// fleet.run_until(async { tokio::signal::ctrl_c().await.ok(); }).await?;
    /// # Ok(()) }
    /// ```
    pub async fn run_until(self, shutdown: impl Future<Output = ()>) -> Result<(), Error> {
        let mut handle = self.start().await?;
        tokio::select! {
            biased;
            () = shutdown => handle.shutdown().await,
            ended = &mut handle.run => {
                handle.guarded.close();
                handle.guarded.wait().await;
                joined(ended)
            }
        }
    }
}

/// A user's async function as the `fn` action holds it.
fn boxed<F, Fut, E>(run: F) -> JobFn
where
    F: Fn(SlotContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + Send + 'static,
    E: std::fmt::Display + Send + 'static,
{
    Arc::new(move |ctx| {
        let run = run(ctx);
        Box::pin(async move { run.await.map_err(JobError::from_display) })
    })
}

/// The run task's ending as the handle reports it.
fn joined(ended: Result<anyhow::Result<()>, tokio::task::JoinError>) -> Result<(), Error> {
    match ended {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(Error::Stopped {
            source: e.into_boxed_dyn_error(),
        }),
        Err(e) => Err(Error::Aborted(e)),
    }
}
