//! Config errors that name the file, the job and the field, and the line and column they are
//! at: `{}` prints one line per error (for logs), `{:#}` adds each error's source line with a
//! caret under the place at fault, as cargo does (for a person at a terminal).
//!
//! The library's [`Error::Config`](crate::api::Error::Config) carries them too: a fleet built
//! in code is checked by the same checks, its errors naming the job and the field as the
//! builder spells them (`cron`, `zone`, `Fleet::nodes`), under the path `fleet builder`.

use std::fmt;

/// Where in jobs.toml (or in a fleet built in code) an error is.
///
/// ```
/// use slotcron::{ConfigError, Location, Section};
///
/// fn job_and_field(error: &ConfigError) -> Option<(&str, &str)> {
///     match &error.location {
///         Location::Field { section: Section::Job(job), field } => Some((job, field)),
///         _ => None,
///     }
/// }
/// # let _ = job_and_field;
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Location {
    /// The file as a whole (missing, unreadable, not UTF-8, no jobs).
    File,
    /// A TOML syntax error, with the job it falls in when that can be told.
    Line {
        /// The line, from 1.
        line: usize,
        /// The column, from 1.
        column: usize,
        /// The job the line is in, when it can be told.
        job: Option<String>,
    },
    /// A field of a section: `[scheduler]`, `[redis]`, a calendar, a job, or the top level.
    Field {
        /// The section the field is in.
        section: Section,
        /// The field, dotted (`action.webhook`).
        field: String,
    },
}

/// A section of jobs.toml, as errors name it (a fleet built in code: `Top` for the fleet's own
/// settings, `Job` and `Alert` by name).
///
/// ```
/// use slotcron::Section;
/// assert_ne!(Section::Job("report".into()), Section::Alert("report".into()));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Section {
    /// Outside every table.
    Top,
    /// `[scheduler]`.
    Scheduler,
    /// `[redis]`.
    Redis,
    /// `[http]`.
    Http,
    /// `[telemetry]`.
    Telemetry,
    /// A `[[job]]`, by name.
    Job(String),
    /// `[calendar.NAME]`.
    Calendar(String),
    /// `[alert.NAME]`.
    Alert(String),
}

/// One problem in jobs.toml, or in a fleet built in code.
///
/// ```
/// # async fn doc() {
/// use slotcron::{Error, Fleet, JobSpec};
///
/// let fleet = Fleet::new("replica-1")
///     .job(JobSpec::new("report", "0 61 * * *"), |_| async { Ok::<(), String>(()) });
/// if let Err(Error::Config(errors)) = fleet.start().await {
///     let error = &errors.errors[0];
///     assert_eq!((error.job(), error.field_name()), (Some("report"), Some("cron")));
/// }
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConfigError {
    /// Where the problem is.
    pub location: Location,
    /// What is wrong.
    pub message: String,
    /// The place in the file's text, when it can be told (not for the file as a whole).
    pub source: Option<SourceLine>,
}

/// Where an error is in the file's text, with the line to show under the message (never set
/// for a fleet built in code, which has no text).
///
/// ```
/// fn line_of(error: &slotcron::ConfigError) -> Option<usize> {
///     error.source.as_ref().map(|at| at.line)
/// }
/// # let _ = line_of;
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SourceLine {
    /// The line, from 1.
    pub line: usize,
    /// The column, from 1, in characters.
    pub column: usize,
    /// The line as written, with any secret on it masked and a long rest of it cut.
    pub text: String,
    /// Where the caret starts in `text`, from 1: the column, unless a secret before it was
    /// masked.
    pub caret: usize,
    /// How many characters the caret underlines (at least 1).
    pub width: usize,
}

impl ConfigError {
    /// An error about the file as a whole.
    pub(crate) fn file(message: impl Into<String>) -> Self {
        ConfigError {
            location: Location::File,
            message: message.into(),
            source: None,
        }
    }

    /// An error about `field` of `section`.
    pub(crate) fn field(
        section: Section,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        ConfigError {
            location: Location::Field {
                section,
                field: field.into(),
            },
            message: message.into(),
            source: None,
        }
    }

    /// The job this error is about, if any.
    ///
    /// ```
    /// fn about(error: &slotcron::ConfigError) -> &str {
    ///     error.job().unwrap_or("the fleet")
    /// }
    /// # let _ = about;
    /// ```
    pub fn job(&self) -> Option<&str> {
        match &self.location {
            Location::Field {
                section: Section::Job(name),
                ..
            } => Some(name),
            Location::Line { job, .. } => job.as_deref(),
            _ => None,
        }
    }

    /// The field this error is about, if any (as the file or the builder names it).
    ///
    /// ```
    /// fn field(error: &slotcron::ConfigError) -> &str {
    ///     error.field_name().unwrap_or("-")
    /// }
    /// # let _ = field;
    /// ```
    pub fn field_name(&self) -> Option<&str> {
        match &self.location {
            Location::Field { field, .. } => Some(field),
            _ => None,
        }
    }
}

/// Every problem found in one file (or one fleet built in code); slotcron reports them all
/// before exiting. [`Error::Config`](crate::api::Error::Config) holds it.
///
/// ```
/// fn problems(errors: &slotcron::ConfigErrors) -> usize {
///     errors.errors.len()
/// }
/// # let _ = problems;
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConfigErrors {
    /// The file, as given (`fleet builder` for a fleet built in code).
    pub path: String,
    /// Every problem found, in file order.
    pub errors: Vec<ConfigError>,
}

impl std::error::Error for ConfigErrors {}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.errors.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write_one(f, &self.path, e)?;
            if let Some(source) = e.source.as_ref().filter(|_| f.alternate()) {
                write_source(f, source)?;
            }
        }
        Ok(())
    }
}

/// The source line under an error, cargo's way: a gutter with the line number, a caret below.
fn write_source(f: &mut fmt::Formatter<'_>, source: &SourceLine) -> fmt::Result {
    let number = source.line.to_string();
    let gutter = " ".repeat(number.len());
    let pad = " ".repeat(source.caret.saturating_sub(1));
    let caret = "^".repeat(source.width.max(1));
    write!(
        f,
        "\n{gutter} |\n{number} | {}\n{gutter} | {pad}{caret}",
        source.text
    )
}

fn write_one(f: &mut fmt::Formatter<'_>, path: &str, e: &ConfigError) -> fmt::Result {
    let message = &e.message;
    match (&e.location, &e.source) {
        (Location::File, _) => write!(f, "{path}: {message}"),
        (Location::Line { line, column, job }, _) => {
            write!(f, "{path}:{line}:{column}: ")?;
            if let Some(job) = job {
                write!(f, "job {job:?}: ")?;
            }
            write!(f, "{message}")
        }
        (Location::Field { section, field }, at) => {
            match at {
                Some(at) => write!(f, "{path}:{}:{}: ", at.line, at.column)?,
                None => write!(f, "{path}: ")?,
            }
            write!(f, "{}field {field:?}: {message}", section_prefix(section))
        }
    }
}

/// How a message names its section, before the field.
fn section_prefix(section: &Section) -> String {
    match section {
        Section::Top => String::new(),
        Section::Scheduler => "[scheduler] ".to_owned(),
        Section::Redis => "[redis] ".to_owned(),
        Section::Http => "[http] ".to_owned(),
        Section::Telemetry => "[telemetry] ".to_owned(),
        Section::Job(name) => format!("job {name:?}, "),
        Section::Calendar(name) => format!("calendar {name:?}, "),
        Section::Alert(name) => format!("alert {name:?}, "),
    }
}
