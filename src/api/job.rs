//! A job as the library registers it: its name, cron, zone, calendar, timeout, overlap,
//! catch-up, alert and whether it is enabled, checked at [`super::Fleet::start`] by the same
//! checks as a jobs.toml `[[job]]` (the errors name the job and the field): the spec is the
//! loader's typed job, never text.

use std::path::PathBuf;
use std::time::Duration;

use chrono::NaiveDate;

use crate::config::raw::{RawDays, RawJob};
use crate::config::{CalendarDays, CatchUpPolicy, Overlap};
use crate::time::schedule::{DstGap, DstRepeat};

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
    jitter: Option<Duration>,
    dst: (Option<DstRepeat>, Option<DstGap>),
    catch_up: Option<Duration>,
    catch_up_policy: Option<CatchUpPolicy>,
    overlap: Option<Overlap>,
    on_failure: Option<String>,
    deadline: Option<Duration>,
    enabled: bool,
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
            jitter: None,
            dst: (None, None),
            catch_up: None,
            catch_up_policy: None,
            overlap: None,
            on_failure: None,
            deadline: None,
            enabled: true,
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

    /// The alert [`JobSpec::on_failure`] names, if any.
    pub(super) fn on_failure_name(&self) -> Option<&str> {
        self.on_failure.as_deref()
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

    /// Spreads the job's slots: each is raced and run a delay in `[0, jitter)` after its
    /// instant, the same on every replica (jobs.toml's `jitter`; default none). The slot keeps
    /// its instant: its lock, fence, history and [`crate::SlotContext`] name the nominal one.
    /// Refused at start when larger than the job's interval.
    ///
    /// ```
    /// let job = slotcron::JobSpec::new("report", "0 9 * * *")
    ///     .jitter(std::time::Duration::from_secs(90));
    /// # let _ = job;
    /// ```
    pub fn jitter(mut self, jitter: Duration) -> Self {
        self.jitter = Some(jitter);
        self
    }

    /// Which instants a wall time repeated by a fall-back overlap runs at (jobs.toml's
    /// `dst_repeat`; default: the first for a fixed time, both for an interval).
    ///
    /// ```
    /// use slotcron::DstRepeat;
    /// let job = slotcron::JobSpec::new("backup", "30 1 * * *")
    ///     .zone("America/New_York")
    ///     .dst_repeat(DstRepeat::Both);
    /// # let _ = job;
    /// ```
    pub fn dst_repeat(mut self, repeat: DstRepeat) -> Self {
        self.dst.0 = Some(repeat);
        self
    }

    /// What a wall time a spring-forward gap skips runs at (jobs.toml's `dst_gap`; default:
    /// the first instant after the gap for a fixed time, nothing for an interval).
    ///
    /// ```
    /// use slotcron::DstGap;
    /// let job = slotcron::JobSpec::new("backup", "30 2 * * *")
    ///     .zone("America/New_York")
    ///     .dst_gap(DstGap::Skip);
    /// # let _ = job;
    /// ```
    pub fn dst_gap(mut self, gap: DstGap) -> Self {
        self.dst.1 = Some(gap);
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

    /// Which of the slots missed within the [`JobSpec::catch_up`] window run at start: the
    /// latest only (the default) or all of them, oldest first.
    ///
    /// ```
    /// use std::time::Duration;
    /// use slotcron::{CatchUpPolicy, JobSpec};
    /// let job = JobSpec::new("invoices", "0 * * * *")
    ///     .catch_up(Duration::from_secs(6 * 3600))
    ///     .catch_up_policy(CatchUpPolicy::All);
    /// # let _ = job;
    /// ```
    pub fn catch_up_policy(mut self, policy: CatchUpPolicy) -> Self {
        self.catch_up_policy = Some(policy);
        self
    }

    /// What a slot does while the job's previous run is still going somewhere in the fleet:
    /// skipped with a log line (the default) or run anyway.
    ///
    /// ```
    /// use slotcron::{JobSpec, Overlap};
    /// let job = JobSpec::new("sync", "*/10 * * * * *").overlap(Overlap::Allow);
    /// # let _ = job;
    /// ```
    pub fn overlap(mut self, overlap: Overlap) -> Self {
        self.overlap = Some(overlap);
        self
    }

    /// The alert (registered with [`super::Fleet::alert`]) told once across the fleet when a
    /// slot of this job ends `failed`, is found `missed`, or ran twice.
    ///
    /// ```
    /// let job = slotcron::JobSpec::new("backup", "0 3 * * *").on_failure("ops");
    /// # let _ = job;
    /// ```
    pub fn on_failure(mut self, alert: impl Into<String>) -> Self {
        self.on_failure = Some(alert.into());
        self
    }

    /// After each slot's instant, the time by which it must be `done`: past it, the job's
    /// [`JobSpec::on_failure`] alert is told once across the fleet (`outcome` `deadline`), and
    /// told `recovered` once the job is done again. From a second to a week, ending before
    /// the job's next slot; needs an alert.
    ///
    /// ```
    /// use std::time::Duration;
    /// let job = slotcron::JobSpec::new("report", "0 9 * * *")
    ///     .deadline(Duration::from_secs(600))
    ///     .on_failure("ops");
    /// # let _ = job;
    /// ```
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// `false`: the job is checked at start but not scheduled (default `true`).
    ///
    /// ```
    /// let job = slotcron::JobSpec::new("standup", "30 9 * * 1-5").enabled(false);
    /// # let _ = job;
    /// ```
    pub fn enabled(mut self, enabled: bool) -> Self {
        self.enabled = enabled;
        self
    }

    /// The job as the loader's typed `[[job]]` (checked by the same code as a file's), and
    /// its calendar's days under the calendar's name (`NAME-calendar`), if any. The job's own
    /// `action` table is not read: the fleet gives the function as its action.
    pub(super) fn to_raw(&self) -> (RawJob, Option<(String, CalendarDays)>) {
        let calendar = self.calendar.as_ref().map(|(calendar, days)| {
            // One calendar per job, named after it: job names are unique.
            let name = format!("{}-calendar", self.name);
            let days = match days {
                DayKind::Workdays => RawDays::Workdays,
                DayKind::Holidays => RawDays::Holidays,
            };
            (name, days, calendar.to_days())
        });
        let raw = RawJob {
            timezone: self.zone.clone(),
            timeout: self.timeout,
            jitter: self.jitter,
            enabled: Some(self.enabled),
            overlap: self.overlap.map(Into::into),
            catch_up: self.catch_up,
            catch_up_policy: self.catch_up_policy.map(Into::into),
            calendar: calendar.as_ref().map(|(name, _, _)| name.clone()),
            days: calendar.as_ref().map(|(_, days, _)| *days),
            on_failure: self.on_failure.clone(),
            deadline: self.deadline,
            dst_repeat: self.dst.0.map(Into::into),
            dst_gap: self.dst.1.map(Into::into),
            ..RawJob::new(self.name.clone(), self.cron.clone())
        };
        (raw, calendar.map(|(name, _, days)| (name, days)))
    }
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

    /// The calendar's days as the loader checks a `[calendar.NAME]`'s.
    fn to_days(&self) -> CalendarDays {
        let indexed = |days: &[NaiveDate]| days.iter().copied().enumerate().collect();
        CalendarDays {
            builtin: self.builtin.clone(),
            ics: self.ics.clone(),
            holidays: indexed(&self.holidays),
            workdays: indexed(&self.workdays),
        }
    }
}
