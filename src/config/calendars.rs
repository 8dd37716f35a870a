//! Checking `[calendar.NAME]` sections into [`Calendar`]s, and a job's `calendar` and `days`
//! into its [`DayFilter`].

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use chrono::NaiveDate;
use toml::Value;

use super::raw::{RawCalendar, RawDays};
use super::{ConfigError, Loader, Section};
#[cfg(feature = "ics")]
use crate::time::calendar::ics;
use crate::time::calendar::{Calendar, DayFilter, Days, Reason, cn};
use crate::time::schedule::Schedule;

/// A calendar's sources as typed values: a file's `[calendar.NAME]` once its dates are read,
/// or a [`crate::api::Calendar`] built in code. Each date keeps its place in its list, which
/// an error names (`workdays[2]`).
#[derive(Debug, Clone, Default)]
pub(crate) struct CalendarDays {
    /// A built-in data set's name (`cn`).
    pub builtin: Option<String>,
    /// An .ics file, relative to jobs.toml's directory.
    pub ics: Option<PathBuf>,
    /// Days off, each with its index in the list.
    pub holidays: Vec<(usize, NaiveDate)>,
    /// Working days (weekends made ones), each with its index in the list.
    pub workdays: Vec<(usize, NaiveDate)>,
}

/// How close to the end of a built-in calendar's data a warning starts (at start and in `check`).
const COVERAGE_WARNING_DAYS: u64 = 60;

/// The calendars of one file, checked before the jobs that name them.
#[derive(Debug, Default)]
pub(super) struct Calendars {
    checked: BTreeMap<String, Arc<Calendar>>,
    /// Calendars with errors (already reported): a job naming one adds no error of its own.
    broken: BTreeSet<String>,
    /// Calendars an enabled job uses: only those are warned about.
    used: BTreeSet<String>,
}

impl Loader<'_> {
    /// Checks the `[calendar.NAME]` sections.
    pub(super) fn calendars(&mut self, value: Option<Value>) {
        let Some(value) = value else { return };
        let Value::Table(tables) = value else {
            self.errors.push(ConfigError::field(
                Section::Top,
                "calendar",
                "must be tables: write [calendar.NAME]",
            ));
            return;
        };
        for (name, table) in tables {
            let calendar = self.calendar(&name, table);
            self.keep_calendar(name, calendar);
        }
    }

    /// A calendar checked (`None`: refused, reported), for the jobs that name it.
    pub(super) fn keep_calendar(&mut self, name: String, calendar: Option<Calendar>) {
        match calendar {
            Some(calendar) => {
                self.calendars.checked.insert(name, Arc::new(calendar));
            }
            None => {
                self.calendars.broken.insert(name);
            }
        }
    }

    fn calendar(&mut self, name: &str, value: Value) -> Option<Calendar> {
        let section = Section::Calendar(name.to_owned());
        let raw: RawCalendar = self.typed(value, &section)?;
        let before = self.errors.len();
        let days = CalendarDays {
            holidays: self.dates(&raw.holidays, "holidays", &section),
            workdays: self.dates(&raw.workdays, "workdays", &section),
            builtin: raw.builtin,
            ics: raw.ics,
        };
        let calendar = self.check_calendar(name, days);
        (self.errors.len() == before).then_some(calendar).flatten()
    }

    /// A calendar of `days` (a file's `[calendar.NAME]` once its dates are read, or one built
    /// in code): its built-in data, its .ics file and its own dates, checked.
    pub(super) fn check_calendar(&mut self, name: &str, days: CalendarDays) -> Option<Calendar> {
        let section = Section::Calendar(name.to_owned());
        let before = self.errors.len();
        let mut calendar = Calendar::new(name);
        if let Some(builtin) = &days.builtin {
            match cn::builtin(builtin) {
                Some(data) => calendar.add_builtin(data),
                None => self.errors.push(ConfigError::field(
                    section.clone(),
                    "builtin",
                    format!(
                        "unknown built-in calendar {builtin:?} (built in: {})",
                        cn::BUILTINS.join(", ")
                    ),
                )),
            }
        }
        if let Some(file) = &days.ics {
            for (date, reason) in self.ics_days(file, &section).unwrap_or_default() {
                calendar.add_day_off(date, reason);
            }
        }
        self.inline_days(&mut calendar, days, &section);
        (self.errors.len() == before).then_some(calendar)
    }

    /// The days off of an .ics file named relative to jobs.toml.
    #[cfg(feature = "ics")]
    fn ics_days(&mut self, file: &Path, section: &Section) -> Option<Vec<(NaiveDate, Reason)>> {
        let bytes = self.read_beside(file, section.clone(), "ics")?;
        let full = self.config_dir.join(file);
        let fail = |message: String| ConfigError::field(section.clone(), "ics", message);
        let Ok(text) = String::from_utf8(bytes) else {
            self.errors
                .push(fail(format!("{}: not UTF-8 text", full.display())));
            return None;
        };
        ics::days_off(&text, &file.display().to_string())
            .map_err(|e| self.errors.push(fail(format!("{}: {e}", full.display()))))
            .ok()
    }

    /// Without the `ics` feature an .ics file cannot be read: said as the field's error, so that
    /// a jobs.toml is never run with fewer days off than it names.
    #[cfg(not(feature = "ics"))]
    fn ics_days(&mut self, file: &Path, section: &Section) -> Option<Vec<(NaiveDate, Reason)>> {
        self.errors.push(ConfigError::field(
            section.clone(),
            "ics",
            format!(
                "{}: .ics calendars are compiled out of this build of slotcron: enable its `ics` feature",
                file.display()
            ),
        ));
        None
    }

    /// `holidays` and `workdays`: the last layer, over the built-in data and the .ics file.
    fn inline_days(&mut self, calendar: &mut Calendar, days: CalendarDays, section: &Section) {
        let CalendarDays {
            holidays, workdays, ..
        } = days;
        for (i, date) in &workdays {
            if holidays.iter().any(|(_, d)| d == date) {
                self.errors.push(ConfigError::field(
                    section.clone(),
                    format!("workdays[{i}]"),
                    format!("{date} is in holidays too: list it once"),
                ));
            }
        }
        for (_, date) in holidays {
            calendar.add_day_off(date, Reason::new("listed in holidays", calendar.name()));
        }
        for (_, date) in workdays {
            calendar.add_workday(date, Reason::new("listed in workdays", calendar.name()));
        }
    }

    /// Each value of a date list, as a date (`"2026-12-24"` or a TOML date `2026-12-24`).
    fn dates(
        &mut self,
        values: &[Value],
        field: &str,
        section: &Section,
    ) -> Vec<(usize, NaiveDate)> {
        let mut dates = Vec::new();
        for (i, value) in values.iter().enumerate() {
            match date_of(value) {
                Some(date) => dates.push((i, date)),
                None => self.errors.push(ConfigError::field(
                    section.clone(),
                    format!("{field}[{i}]"),
                    format!("{value} is not a date (write a day as \"2026-12-24\")"),
                )),
            }
        }
        dates
    }

    /// A job's `calendar` and `days`. `Some(None)`: no calendar. `None`: errors were recorded.
    pub(super) fn day_filter(
        &mut self,
        calendar: Option<&str>,
        days: Option<RawDays>,
        section: &Section,
    ) -> Option<Option<DayFilter>> {
        let days = match days {
            Some(RawDays::Workdays) => Days::Workdays,
            Some(RawDays::Holidays) => Days::Holidays,
            None if calendar.is_none() => return Some(None),
            None => {
                self.errors.push(ConfigError::field(
                    section.clone(),
                    "calendar",
                    "needs days = \"workdays\" or days = \"holidays\"",
                ));
                return None;
            }
        };
        let Some(name) = calendar else {
            self.errors.push(ConfigError::field(
                section.clone(),
                "days",
                "needs calendar = \"NAME\", naming a [calendar.NAME] section",
            ));
            return None;
        };
        let calendar = self.named_calendar(name, section)?;
        Some(Some(DayFilter { calendar, days }))
    }

    fn named_calendar(&mut self, name: &str, section: &Section) -> Option<Arc<Calendar>> {
        if let Some(calendar) = self.calendars.checked.get(name) {
            return Some(calendar.clone());
        }
        if !self.calendars.broken.contains(name) {
            let defined: Vec<&str> = self.calendars.checked.keys().map(String::as_str).collect();
            let hint = if cn::builtin(name).is_some() {
                format!(" (for the built-in one add [calendar.{name}] with builtin = \"{name}\")")
            } else if let Some(near) = super::suggest::closest(name, defined.iter().copied()) {
                format!("; did you mean {near:?}?")
            } else if defined.is_empty() {
                " (no [calendar.NAME] section is defined)".to_owned()
            } else {
                format!(" (defined: {})", defined.join(", "))
            };
            self.errors.push(ConfigError::field(
                section.clone(),
                "calendar",
                format!("unknown calendar {name:?}{hint}"),
            ));
        }
        None
    }

    /// A job's schedule on its calendar's days, refused if that never holds within the search
    /// bound (the job would never run).
    pub(super) fn on_days(
        &mut self,
        schedule: Schedule,
        filter: DayFilter,
        section: &Section,
    ) -> Option<Schedule> {
        let name = filter.calendar.name().to_owned();
        let days = filter.days;
        let schedule = schedule.on_days(filter);
        if schedule.next_after(chrono::Utc::now()).is_none() {
            self.errors.push(ConfigError::field(
                section.clone(),
                "days",
                format!(
                    "{:?} never falls on {days} of calendar {name:?} in the next two years",
                    schedule.expression()
                ),
            ));
            return None;
        }
        Some(schedule)
    }

    /// Notes the calendar of an enabled job's schedule: only those are warned about.
    pub(super) fn calendar_in_use(&mut self, schedule: &Schedule) {
        if let Some(filter) = schedule.day_filter() {
            let name = filter.calendar.name().to_owned();
            self.calendars.used.insert(name);
        }
    }

    /// A warning for each used calendar whose built-in data ends soon or has ended.
    pub(super) fn coverage_warnings(&mut self) {
        let today = chrono::Utc::now().date_naive();
        let soon = today + chrono::Days::new(COVERAGE_WARNING_DAYS);
        for name in &self.calendars.used {
            let Some(coverage) = self.calendars.checked[name].coverage() else {
                continue;
            };
            if coverage.last >= soon {
                continue;
            }
            let ends = if coverage.last < today {
                "ended"
            } else {
                "ends"
            };
            self.warnings.push(format!(
                "calendar {name:?}: the built-in {} data ({}) {ends} on {}; after it, its jobs run \
                 Monday to Friday (plus the calendar's own holidays and workdays) until slotcron \
                 ships newer data",
                coverage.builtin, coverage.source, coverage.last
            ));
        }
    }
}

fn date_of(value: &Value) -> Option<NaiveDate> {
    match value {
        Value::String(s) => NaiveDate::parse_from_str(s, "%Y-%m-%d").ok(),
        Value::Datetime(dt) if dt.time.is_none() && dt.offset.is_none() => {
            let date = dt.date?;
            NaiveDate::from_ymd_opt(
                i32::from(date.year),
                u32::from(date.month),
                u32::from(date.day),
            )
        }
        _ => None,
    }
}
