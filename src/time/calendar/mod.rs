//! Calendars: which dates are workdays and which are days off.
//!
//! A calendar starts from a Monday-to-Friday week and layers named days on it: the built-in
//! data of a country ([`cn`]), the all-day events of an iCalendar file (`ics`, the `ics` feature), then the days
//! written in jobs.toml. Each layer overrides the ones before it, so a company can take a day
//! off that the State Council made a make-up workday, or work on a public holiday. A job that
//! names a calendar keeps the slots whose *date in the job's zone* is one of its workdays (or
//! holidays): a pure function of the date, so every replica computes the same slots.

pub mod cn;
#[cfg(feature = "ics")]
pub mod ics;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use chrono::{Datelike, NaiveDate, Weekday};

/// Why a date is listed: what it is, and where that came from (`国庆节 National Day (cn)`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reason {
    /// What the day is (`国庆节 National Day`, an .ics event's summary).
    pub what: String,
    /// Where that comes from (the built-in data, a file, the inline list).
    pub source: String,
}

impl Reason {
    /// A reason `what` from `source`.
    pub fn new(what: impl Into<String>, source: impl Into<String>) -> Self {
        Reason {
            what: what.into(),
            source: source.into(),
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.what, self.source)
    }
}

/// A date as a calendar sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Day<'c> {
    /// Monday to Friday, listed nowhere: a workday.
    Weekday,
    /// Saturday or Sunday, listed nowhere: a day off.
    Weekend,
    /// A listed day off.
    Holiday(&'c Reason),
    /// A listed make-up workday (a Saturday or Sunday worked, 调休), or a listed workday.
    MakeUp(&'c Reason),
}

impl Day<'_> {
    /// Whether the day is a working day (a make-up workday is).
    pub fn is_workday(self) -> bool {
        matches!(self, Day::Weekday | Day::MakeUp(_))
    }
}

impl fmt::Display for Day<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Day::Weekday => f.write_str("workday"),
            Day::Weekend => f.write_str("weekend"),
            Day::Holiday(reason) | Day::MakeUp(reason) => write!(f, "{reason}"),
        }
    }
}

/// The dates a built-in data set covers. Outside them the data says nothing, and the calendar
/// falls back to Monday to Friday (plus the file's own days): callers warn about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Coverage {
    /// The built-in calendar's name (`cn`).
    pub builtin: String,
    /// The first day the data covers.
    pub first: NaiveDate,
    /// The last day the data covers.
    pub last: NaiveDate,
    /// The published package the data was generated from, with its version.
    pub source: String,
}

impl Coverage {
    /// Whether `date` is inside the data.
    pub fn covers(&self, date: NaiveDate) -> bool {
        (self.first..=self.last).contains(&date)
    }
}

/// A named set of days off and make-up workdays over a Monday-to-Friday week.
#[derive(Clone, PartialEq, Eq)]
pub struct Calendar {
    name: String,
    days_off: BTreeMap<NaiveDate, Reason>,
    make_up: BTreeMap<NaiveDate, Reason>,
    /// The built-in data's years, if the calendar has built-in data.
    coverage: Option<Coverage>,
}

impl Calendar {
    /// A calendar with nothing listed: Monday to Friday.
    pub fn new(name: impl Into<String>) -> Self {
        Calendar {
            name: name.into(),
            days_off: BTreeMap::new(),
            make_up: BTreeMap::new(),
            coverage: None,
        }
    }

    /// The calendar's name in jobs.toml (`cn`, `[calendar.NAME]`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The span of its built-in data; `None` when it has none.
    pub fn coverage(&self) -> Option<&Coverage> {
        self.coverage.as_ref()
    }

    /// Layers a built-in data set under whatever is added after it.
    pub fn add_builtin(&mut self, builtin: &cn::Builtin) {
        for (date, reason) in builtin.days_off() {
            self.add_day_off(*date, reason.clone());
        }
        for (date, reason) in builtin.make_up() {
            self.add_workday(*date, reason.clone());
        }
        self.coverage = Some(builtin.coverage().clone());
    }

    /// Makes `date` a day off, over any earlier layer.
    pub fn add_day_off(&mut self, date: NaiveDate, reason: Reason) {
        self.make_up.remove(&date);
        self.days_off.insert(date, reason);
    }

    /// Makes `date` a workday, over any earlier layer.
    pub fn add_workday(&mut self, date: NaiveDate, reason: Reason) {
        self.days_off.remove(&date);
        self.make_up.insert(date, reason);
    }

    /// What `date` is.
    pub fn day(&self, date: NaiveDate) -> Day<'_> {
        if let Some(reason) = self.make_up.get(&date) {
            return Day::MakeUp(reason);
        }
        if let Some(reason) = self.days_off.get(&date) {
            return Day::Holiday(reason);
        }
        match date.weekday() {
            Weekday::Sat | Weekday::Sun => Day::Weekend,
            _ => Day::Weekday,
        }
    }

    /// True when the calendar has built-in data and `date` lies outside it: the answer for that
    /// date is the Monday-to-Friday fallback, not the published schedule.
    pub fn is_beyond_coverage(&self, date: NaiveDate) -> bool {
        self.coverage.as_ref().is_some_and(|c| !c.covers(date))
    }
}

/// Counts rather than every date: a job's Debug output would otherwise list a thousand days.
impl fmt::Debug for Calendar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Calendar")
            .field("name", &self.name)
            .field("days_off", &self.days_off.len())
            .field("make_up", &self.make_up.len())
            .field("coverage", &self.coverage)
            .finish()
    }
}

/// `days` of a job: which of its calendar's days it runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Days {
    /// Run on working days.
    Workdays,
    /// Run on days off.
    Holidays,
}

impl fmt::Display for Days {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Days::Workdays => "workdays",
            Days::Holidays => "holidays",
        })
    }
}

/// A job's day filter: its calendar and which of its days the job keeps.
#[derive(Clone, Debug)]
pub struct DayFilter {
    /// The calendar that tells the days.
    pub calendar: Arc<Calendar>,
    /// Which of its days the job runs on.
    pub days: Days,
}

impl DayFilter {
    /// The filter as text that changes exactly when the days it keeps change: `days` and the
    /// calendar's listed dates (not their reasons, which change no slot). Replicas hash it to
    /// tell whether they schedule a job alike.
    pub fn definition(&self) -> String {
        let dates = |listed: &BTreeMap<NaiveDate, Reason>| {
            listed
                .keys()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(",")
        };
        format!(
            "days={} off={} make_up={}",
            self.days,
            dates(&self.calendar.days_off),
            dates(&self.calendar.make_up)
        )
    }

    /// Whether the job runs on `date` (a date in the job's zone).
    pub fn keeps(&self, date: NaiveDate) -> bool {
        let workday = self.calendar.day(date).is_workday();
        match self.days {
            Days::Workdays => workday,
            Days::Holidays => !workday,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn date(s: &str) -> NaiveDate {
        s.parse().unwrap()
    }

    #[test]
    fn an_empty_calendar_is_monday_to_friday() {
        let c = Calendar::new("plain");
        assert_eq!(c.day(date("2026-11-20")), Day::Weekday); // Friday
        assert_eq!(c.day(date("2026-11-21")), Day::Weekend);
        assert!(!c.is_beyond_coverage(date("2100-01-01")));
    }

    #[test]
    fn later_layers_win() {
        let mut c = Calendar::new("office");
        let sunday = date("2026-09-20");
        c.add_workday(sunday, Reason::new("make-up", "cn"));
        assert!(c.day(sunday).is_workday());
        c.add_day_off(sunday, Reason::new("retreat", "office.ics"));
        assert_eq!(
            c.day(sunday),
            Day::Holiday(&Reason::new("retreat", "office.ics"))
        );
        c.add_workday(sunday, Reason::new("listed in workdays", "jobs.toml"));
        assert!(c.day(sunday).is_workday());
    }

    #[test]
    fn holidays_keep_the_complement_of_workdays() {
        let mut c = Calendar::new("c");
        c.add_day_off(date("2026-10-01"), Reason::new("National Day", "cn"));
        let c = Arc::new(c);
        let work = DayFilter {
            calendar: c.clone(),
            days: Days::Workdays,
        };
        let off = DayFilter {
            calendar: c,
            days: Days::Holidays,
        };
        for d in ["2026-09-30", "2026-10-01", "2026-10-03"] {
            assert_ne!(work.keeps(date(d)), off.keeps(date(d)), "{d}");
        }
        assert!(work.keeps(date("2026-09-30")));
        assert!(off.keeps(date("2026-10-01")));
    }
}
