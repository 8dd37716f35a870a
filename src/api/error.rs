//! The library's one error type: what went wrong, each cause kept as the error's `source`.

use crate::config::{ConfigError, ConfigErrors, Location, Section};

use super::build;

/// A cause of the crate's own (a Redis node's error, a connection's, the audit trail's),
/// kept whole: its `source` chain goes on from it. Spelled out in the fields, so that the docs
/// show what it is.
pub(super) type Cause = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why a fleet did not start, or stopped on its own.
///
/// ```
/// # async fn doc() {
/// let invalid = slotcron::Fleet::new("replica-1")
///     .job(slotcron::JobSpec::new("beat", "every second"), |_| async { Ok::<(), String>(()) });
/// match invalid.start().await {
///     Err(slotcron::Error::Config(errors)) => eprintln!("{errors}"),
///     Err(other) => eprintln!("{other}"),
///     Ok(handle) => handle.shutdown().await.unwrap(),
/// }
/// # }
/// ```
///
/// Its `Debug` is its `Display` (what `main` returning `Err` prints): every problem, one a
/// line, each naming the job and the field as the builder spells them (`cron`, `zone`,
/// `Fleet::nodes`).
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A job, a node URL or an option is invalid; every problem is listed, each naming the job
    /// and the field ([`ConfigError::job`](super::ConfigError::job),
    /// [`ConfigError::field_name`](super::ConfigError::field_name)) as the builder spells them
    /// (a jobs.toml's: as the file does).
    ///
    /// ```
    /// # async fn doc() {
    /// use slotcron::{Error, Fleet, JobSpec};
    ///
    /// let fleet = Fleet::new("replica-1")
    ///     .job(JobSpec::new("report", "0 9 * * *").zone("Mars/Olympus_Mons"), |_| async {
    ///         Ok::<(), String>(())
    ///     });
    /// let Err(Error::Config(errors)) = fleet.start().await else { return };
    /// for error in &errors.errors {
    ///     eprintln!("{:?} {:?}: {}", error.job(), error.field_name(), error.message);
    /// }
    /// # }
    /// ```
    #[error("{}", Problems(.0))]
    Config(#[from] ConfigErrors),
    /// Start-up failed (the status address could not be bound, the nodes are not independent
    /// primaries, ...). Shown with its causes, as before it was typed.
    #[error("{}", Chain(.source.as_ref()))]
    Start {
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// The running fleet stopped on an error of its own. Shown with its causes.
    #[error("{}", Chain(.source.as_ref()))]
    Stopped {
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// The fleet's task panicked or was cancelled.
    #[error("the fleet's task ended abnormally: {0}")]
    Aborted(#[source] tokio::task::JoinError),
    /// A [`FleetHandle`](super::FleetHandle) call named a job the fleet does not run enabled.
    #[error("no enabled job {name:?} (jobs: {})", .known.join(", "))]
    UnknownJob {
        /// The name asked for.
        name: String,
        /// The enabled jobs' names.
        known: Vec<String>,
    },
    /// A handle's action on a job was not done: the audit trail or the nodes did not take it
    /// (`what` says which: `not paused`, `not resumed`, `not done (trigger)`, ...).
    #[error("{job}: {what}: {source}")]
    NotDone {
        /// The job.
        job: String,
        /// What did not happen.
        what: String,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// The run history could not be read on a majority of the nodes.
    #[error("{job}: history unavailable: {source}")]
    History {
        /// The job.
        job: String,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// A triggered slot's race ended without a result (the fleet was shutting down).
    #[error("the trigger ended without a result")]
    NoResult,
}

impl std::fmt::Debug for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

/// A fleet's configuration errors as a list: a fleet built in code names each job and the
/// builder's field; a jobs.toml's errors are shown as the file's.
struct Problems<'a>(&'a ConfigErrors);

impl std::fmt::Display for Problems<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let errors = self.0;
        if errors.path != build::BUILT_IN_CODE {
            return write!(f, "{errors}");
        }
        let count = errors.errors.len();
        let plural = if count == 1 { "" } else { "s" };
        write!(f, "the fleet is invalid ({count} problem{plural}):")?;
        for error in &errors.errors {
            write!(f, "\n  - ")?;
            problem(f, error)?;
        }
        Ok(())
    }
}

/// One error of a fleet built in code: `job "report", cron: ...`.
fn problem(f: &mut std::fmt::Formatter<'_>, error: &ConfigError) -> std::fmt::Result {
    let Location::Field { section, field } = &error.location else {
        return f.write_str(&error.message);
    };
    match section {
        Section::Job(name) => write!(f, "job {name:?}, ")?,
        Section::Alert(name) => write!(f, "alert {name:?}, ")?,
        _ => {}
    }
    write!(f, "{field}: {}", error.message)
}

impl Error {
    pub(super) fn start(error: anyhow::Error) -> Self {
        Error::Start {
            source: error.into_boxed_dyn_error(),
        }
    }
}

/// An error and its causes on one line, as anyhow's `{:#}` shows them: `a: b: c`.
struct Chain<'a>(&'a (dyn std::error::Error + 'static));

impl std::fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)?;
        let mut cause = self.0.source();
        while let Some(error) = cause {
            write!(f, ": {error}")?;
            cause = error.source();
        }
        Ok(())
    }
}
