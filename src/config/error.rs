//! Config errors that name the file, the job and the field, and the line and column they are
//! at: `{}` prints one line per error (for logs), `{:#}` adds each error's source line with a
//! caret under the place at fault, as cargo does (for a person at a terminal).

use std::fmt;

/// Where in jobs.toml an error is.
#[derive(Debug, Clone, PartialEq, Eq)]
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

#[derive(Debug, Clone, PartialEq, Eq)]
/// A section of jobs.toml, as errors name it.
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

/// One problem in jobs.toml.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// Where the problem is.
    pub location: Location,
    /// What is wrong.
    pub message: String,
    /// The place in the file's text, when it can be told (not for the file as a whole).
    pub source: Option<SourceLine>,
}

/// Where an error is in the file's text, with the line to show under the message.
#[derive(Debug, Clone, PartialEq, Eq)]
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
    pub fn file(message: impl Into<String>) -> Self {
        ConfigError {
            location: Location::File,
            message: message.into(),
            source: None,
        }
    }

    /// An error about `field` of `section`.
    pub fn field(section: Section, field: impl Into<String>, message: impl Into<String>) -> Self {
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

    /// The field this error is about, if any.
    pub fn field_name(&self) -> Option<&str> {
        match &self.location {
            Location::Field { field, .. } => Some(field),
            _ => None,
        }
    }
}

/// Every problem found in one file; slotcron reports them all before exiting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors {
    /// The file, as given.
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

impl ConfigErrors {
    /// The same errors without their places in the text: for a configuration that is not a
    /// file a person wrote (one built in code), whose lines mean nothing to its author.
    pub fn without_source(mut self) -> Self {
        for e in &mut self.errors {
            e.source = None;
        }
        self
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
