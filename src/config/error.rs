//! Config errors that name the file, the job and the field (and the line, for TOML syntax).

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
}

impl ConfigError {
    /// An error about the file as a whole.
    pub fn file(message: impl Into<String>) -> Self {
        ConfigError {
            location: Location::File,
            message: message.into(),
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
        }
        Ok(())
    }
}

fn write_one(f: &mut fmt::Formatter<'_>, path: &str, e: &ConfigError) -> fmt::Result {
    match &e.location {
        Location::File => write!(f, "{path}: {}", e.message),
        Location::Line {
            line,
            column,
            job: Some(job),
        } => {
            write!(f, "{path}:{line}:{column}: job {job:?}: {}", e.message)
        }
        Location::Line {
            line,
            column,
            job: None,
        } => write!(f, "{path}:{line}:{column}: {}", e.message),
        Location::Field { section, field } => {
            let section = match section {
                Section::Top => String::new(),
                Section::Scheduler => "[scheduler] ".to_owned(),
                Section::Redis => "[redis] ".to_owned(),
                Section::Http => "[http] ".to_owned(),
                Section::Job(name) => format!("job {name:?}, "),
                Section::Calendar(name) => format!("calendar {name:?}, "),
                Section::Alert(name) => format!("alert {name:?}, "),
            };
            write!(f, "{path}: {section}field {field:?}: {}", e.message)
        }
    }
}
