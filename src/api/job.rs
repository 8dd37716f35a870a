//! A job as the library registers it: its name, cron, zone, calendar and timeout, checked at
//! [`super::Fleet::start`] by the same checks as a jobs.toml `[[job]]` (the errors name the job
//! and the field).

use std::path::PathBuf;
use std::time::Duration;

use chrono::NaiveDate;
use toml::{Table, Value};

/// A job's schedule and limits; its function is given to [`super::Fleet::job`].
///
/// ```
/// use std::time::Duration;
/// use slotcron::{Calendar, JobSpec};
///
/// let report = JobSpec::new("daily-report", "0 9 * * *")
///     .zone("Asia/Shanghai")
///     .workdays(Calendar::builtin("cn"))
///     .timeout(Duration::from_secs(60));
/// assert_eq!(report.name(), "daily-report");
/// ```
#[derive(Debug, Clone)]
pub struct JobSpec {
    name: String,
    cron: String,
    zone: Option<String>,
    calendar: Option<(Calendar, DayKind)>,
    timeout: Option<Duration>,
    catch_up: Option<Duration>,
}

/// Which of a calendar's days a job runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DayKind {
    Workdays,
    Holidays,
}

impl JobSpec {
    /// The job `name` (its lock keys, history and metrics: 1 to 100 of `A-Z a-z 0-9 - _ .`) on
    /// `cron`: 5 fields (at second 0) or 6 (with seconds), in UTC unless [`JobSpec::zone`].
    ///
    /// ```
    /// let every_second = slotcron::JobSpec::new("beat", "* * * * * *");
    /// # let _ = every_second;
    /// ```
    pub fn new(name: impl Into<String>, cron: impl Into<String>) -> Self {
        JobSpec {
            name: name.into(),
            cron: cron.into(),
            zone: None,
            calendar: None,
            timeout: None,
            catch_up: None,
        }
    }

    /// The job's name.
    ///
    /// ```
    /// assert_eq!(slotcron::JobSpec::new("beat", "* * * * * *").name(), "beat");
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The IANA zone the cron is read in (DST handled: a slot is a wall-clock time there).
    ///
    /// ```
    /// let job = slotcron::JobSpec::new("standup", "0 10 * * 1-5").zone("Europe/Berlin");
    /// # let _ = job;
    /// ```
    pub fn zone(mut self, zone: impl Into<String>) -> Self {
        self.zone = Some(zone.into());
        self
    }

    /// Runs only on `calendar`'s working days (weekdays, less its holidays, plus its
    /// working weekends).
    ///
    /// ```
    /// use slotcron::{Calendar, JobSpec};
    /// let job = JobSpec::new("payroll", "0 9 * * *").workdays(Calendar::builtin("cn"));
    /// # let _ = job;
    /// ```
    pub fn workdays(mut self, calendar: Calendar) -> Self {
        self.calendar = Some((calendar, DayKind::Workdays));
        self
    }

    /// Runs only on `calendar`'s days off.
    ///
    /// ```
    /// use slotcron::{Calendar, JobSpec};
    /// let job = JobSpec::new("on-call", "0 9 * * *").holidays(Calendar::builtin("cn"));
    /// # let _ = job;
    /// ```
    pub fn holidays(mut self, calendar: Calendar) -> Self {
        self.calendar = Some((calendar, DayKind::Holidays));
        self
    }

    /// How long one run may take before it is dropped and the slot recorded `failed`
    /// (default 30 s, as in jobs.toml).
    ///
    /// ```
    /// let job = slotcron::JobSpec::new("backup", "0 3 * * *")
    ///     .timeout(std::time::Duration::from_secs(600));
    /// # let _ = job;
    /// ```
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Runs the latest slot missed within `window` while the whole fleet was down, at start.
    ///
    /// ```
    /// let job = slotcron::JobSpec::new("digest", "0 8 * * *")
    ///     .catch_up(std::time::Duration::from_secs(3600));
    /// # let _ = job;
    /// ```
    pub fn catch_up(mut self, window: Duration) -> Self {
        self.catch_up = Some(window);
        self
    }

    /// The job as a jobs.toml `[[job]]` table (its action a placeholder the fleet replaces
    /// with the function) and its calendar's `[calendar.NAME]` table, if any.
    pub(super) fn to_toml(&self) -> (Table, Option<(String, Table)>) {
        let mut job = Table::new();
        job.insert("name".into(), self.name.clone().into());
        job.insert("schedule".into(), self.cron.clone().into());
        if let Some(zone) = &self.zone {
            job.insert("timezone".into(), zone.clone().into());
        }
        if let Some(timeout) = self.timeout {
            job.insert("timeout".into(), duration(timeout));
        }
        if let Some(window) = self.catch_up {
            job.insert("catch_up".into(), duration(window));
        }
        let mut action = Table::new();
        action.insert("type".into(), "log".into());
        action.insert("content".into(), "fn".into());
        job.insert("action".into(), action.into());
        let calendar = self.calendar.as_ref().map(|(calendar, days)| {
            // One calendar per job, named after it: job names are unique.
            let name = format!("{}-calendar", self.name);
            job.insert("calendar".into(), name.clone().into());
            let days = match days {
                DayKind::Workdays => "workdays",
                DayKind::Holidays => "holidays",
            };
            job.insert("days".into(), days.into());
            (name, calendar.to_toml())
        });
        (job, calendar)
    }
}

/// A duration as jobs.toml spells it (`"1500ms"`).
fn duration(d: Duration) -> Value {
    format!("{}ms", d.as_millis()).into()
}

/// Working days and days off: a built-in data set, an .ics file, and dates of your own.
///
/// ```
/// use chrono::NaiveDate;
/// use slotcron::Calendar;
///
/// let company = Calendar::builtin("cn")
///     .holiday(NaiveDate::from_ymd_opt(2026, 12, 31).unwrap())
///     .workday(NaiveDate::from_ymd_opt(2026, 12, 27).unwrap());
/// # let _ = company;
/// ```
#[derive(Debug, Clone, Default)]
pub struct Calendar {
    builtin: Option<String>,
    ics: Option<PathBuf>,
    holidays: Vec<NaiveDate>,
    workdays: Vec<NaiveDate>,
}

impl Calendar {
    /// A built-in data set: `cn` (mainland China's public holidays and adjusted working days).
    ///
    /// ```
    /// let cn = slotcron::Calendar::builtin("cn");
    /// # let _ = cn;
    /// ```
    pub fn builtin(name: impl Into<String>) -> Self {
        Calendar {
            builtin: Some(name.into()),
            ..Calendar::default()
        }
    }

    /// The days off of an .ics file (all-day events, recurring ones expanded).
    ///
    /// ```
    /// let team = slotcron::Calendar::ics("/etc/team/holidays.ics");
    /// # let _ = team;
    /// ```
    pub fn ics(path: impl Into<PathBuf>) -> Self {
        Calendar {
            ics: Some(path.into()),
            ..Calendar::default()
        }
    }

    /// `date` is a day off.
    ///
    /// ```
    /// let c = slotcron::Calendar::default().holiday(chrono::NaiveDate::from_ymd_opt(2026, 1, 2).unwrap());
    /// # let _ = c;
    /// ```
    pub fn holiday(mut self, date: NaiveDate) -> Self {
        self.holidays.push(date);
        self
    }

    /// `date` is a working day (a weekend made one).
    ///
    /// ```
    /// let c = slotcron::Calendar::default().workday(chrono::NaiveDate::from_ymd_opt(2026, 1, 4).unwrap());
    /// # let _ = c;
    /// ```
    pub fn workday(mut self, date: NaiveDate) -> Self {
        self.workdays.push(date);
        self
    }

    /// The calendar as a `[calendar.NAME]` table.
    fn to_toml(&self) -> Table {
        let dates = |days: &[NaiveDate]| -> Value {
            days.iter()
                .map(|d| Value::from(d.to_string()))
                .collect::<Vec<_>>()
                .into()
        };
        let mut table = Table::new();
        if let Some(builtin) = &self.builtin {
            table.insert("builtin".into(), builtin.clone().into());
        }
        if let Some(ics) = &self.ics {
            table.insert("ics".into(), ics.display().to_string().into());
        }
        table.insert("holidays".into(), dates(&self.holidays));
        table.insert("workdays".into(), dates(&self.workdays));
        table
    }
}
