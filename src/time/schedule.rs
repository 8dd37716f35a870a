//! Slots: the scheduled instants of a job, computed from its cron in its zone.
//!
//! A slot is a pure function of the cron, the zone and the instant it follows, so every replica
//! computes the same slot whatever its wake-up jitter. The slot (not the wake-up time) is the
//! lock key. DST is handled by croner over a real `chrono_tz::Tz` (never a fixed offset): a slot
//! in a spring-forward gap moves to the first instant after the gap, a fixed-time slot in a
//! fall-back overlap runs once (in the earlier fold). "Fixed-time" means no `*` in the second,
//! minute and hour fields (lists and ranges included, as in Vixie cron); croner alone counts only
//! single values, so `Schedule` applies the rule to lists and ranges itself. A job with `*` there
//! follows elapsed time: it runs in both folds of an overlap and has no slot in a gap.
//! Those are the defaults of a [`DstPolicy`]; a job that names another (`dst_repeat`,
//! `dst_gap`) has its wall times walked and each resolved to the instants the policy names.
//!
//! A job with a calendar (`days = "workdays"`) keeps the cron's slots whose date in the job's
//! zone the calendar keeps: the filter is a function of the date alone, so the slots stay pure.
//!
//! Why so long: about 180 of its lines are unit tests of the slot math (calendars, walking
//! back, windows, refusals); the code itself (about 950 lines, the named DST policy's walk
//! included) is one concept, a job's slots, that every replica must compute alike.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, LocalResult, NaiveDate, NaiveDateTime, SecondsFormat, TimeZone, Utc};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};

use crate::time::calendar::DayFilter;

/// How many days past the instant asked about a calendar search looks before it gives up: two
/// years and a day, so a combination that never holds (`days = "holidays"` on a cron of
/// weekdays and a calendar without weekday holidays) ends the schedule instead of looping.
pub const MAX_CALENDAR_SEARCH_DAYS: u64 = 2 * 366 + 1;
/// How many slots ahead [`Schedule::most_slots_within`] looks.
pub const SCAN_SLOTS: usize = 20_000;

/// One scheduled instant of a job, whole seconds, in UTC.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Slot(DateTime<Utc>);

impl Slot {
    /// The slot at `at`, truncated to the whole second (cron has no finer field).
    pub fn at(at: DateTime<Utc>) -> Self {
        Slot(truncate_to_second(at))
    }

    /// The slot's instant.
    pub fn instant(self) -> DateTime<Utc> {
        self.0
    }

    /// Milliseconds since the Unix epoch: the slot's part of the lock key.
    pub fn epoch_ms(self) -> i64 {
        self.0.timestamp_millis()
    }

    /// RFC 3339 in UTC (`2026-11-23T01:30:00Z`): logs and HTTP headers.
    pub fn rfc3339_utc(self) -> String {
        self.0.to_rfc3339_opts(SecondsFormat::Secs, true)
    }

    /// RFC 3339 in `zone` (`2026-11-23T09:30:00+08:00`): templates and `check`.
    pub fn rfc3339_in(self, zone: Tz) -> String {
        self.0
            .with_timezone(&zone)
            .to_rfc3339_opts(SecondsFormat::Secs, true)
    }
}

impl fmt::Display for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.rfc3339_utc())
    }
}

/// A run's fencing token: increases with every run of a job, so a receiver that remembers the
/// highest fence it accepted can refuse a stale run (a winner that resumes after its lock
/// expired). It is the slot in epoch milliseconds plus the run's handoff number (0 for the
/// slot's first winner, 1 for the replica that took it over, 2 for the next): slots are whole
/// seconds, so the handoff number never reaches the next slot's fence.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Fence(i64);

impl Fence {
    /// Handoffs a slot may have: the first winner's run is 0, each taker's one more.
    pub const MAX_HANDOFF: u8 = 3;

    /// The fence of `slot` at handoff generation `handoff`.
    pub fn new(slot: Slot, handoff: u8) -> Self {
        Fence(slot.epoch_ms() + i64::from(handoff.min(Self::MAX_HANDOFF)))
    }

    /// The fencing token as sent.
    pub fn get(self) -> i64 {
        self.0
    }

    /// The handoff number of the run (0 for the slot's first winner).
    pub fn handoff(self) -> u8 {
        self.0.rem_euclid(1000) as u8
    }
}

impl fmt::Display for Fence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

fn truncate_to_second(at: DateTime<Utc>) -> DateTime<Utc> {
    Utc.timestamp_opt(at.timestamp(), 0).single().unwrap_or(at)
}

/// A job's cron expression bound to its zone.
#[derive(Clone, Debug)]
pub struct Schedule {
    cron: Cron,
    zone: Tz,
    expression: String,
    /// No `*` in the second, minute and hour fields: the cron names wall-clock times.
    wall_times: bool,
    /// The calendar days the job keeps; `None`: every day the cron names.
    days: Option<DayFilter>,
    /// `dst_repeat` as configured; `None`: the rule of the cron's kind ([`DstPolicy::of`]).
    repeat: Option<DstRepeat>,
    /// `dst_gap` as configured; `None`: the rule of the cron's kind.
    gap: Option<DstGap>,
}

/// `dst_repeat`: which instants a wall time that a fall-back overlap repeats runs at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DstRepeat {
    /// Only the first pass (the earlier instant).
    First,
    /// Only the second pass (the later instant).
    Last,
    /// Both instants: they are distinct moments, an hour apart.
    Both,
}

/// `dst_gap`: what a wall time that a spring-forward gap skips runs at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DstGap {
    /// The first instant after the gap (several such times in one gap share that run).
    Shift,
    /// Nothing: the wall time does not exist, so it has no slot.
    Skip,
}

impl DstRepeat {
    /// The value as written in jobs.toml.
    pub fn name(self) -> &'static str {
        match self {
            DstRepeat::First => "first",
            DstRepeat::Last => "last",
            DstRepeat::Both => "both",
        }
    }
}

impl DstGap {
    /// The value as written in jobs.toml.
    pub fn name(self) -> &'static str {
        match self {
            DstGap::Shift => "shift",
            DstGap::Skip => "skip",
        }
    }
}

/// A job's DST policy: how its wall times map to instants across a transition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DstPolicy {
    /// A repeated wall time.
    pub repeat: DstRepeat,
    /// A skipped wall time.
    pub gap: DstGap,
}

impl DstPolicy {
    /// The default of a cron: wall-clock times (no `*` in second, minute, hour) run once, in
    /// the first pass, and right after a gap; a cron with `*` follows elapsed time (both
    /// passes, nothing in a gap). The rules slotcron had before the policy had a name.
    pub fn of(wall_times: bool) -> Self {
        if wall_times {
            DstPolicy {
                repeat: DstRepeat::First,
                gap: DstGap::Shift,
            }
        } else {
            DstPolicy {
                repeat: DstRepeat::Both,
                gap: DstGap::Skip,
            }
        }
    }
}

/// Which way a DST transition moves the wall clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransitionKind {
    /// Spring forward: a range of wall times does not exist.
    Gap,
    /// Fall back: a range of wall times happens twice.
    Repeat,
}

/// A DST transition that a job's cron names a wall time in, and the slots that the policy
/// gives those wall times (for `check`).
#[derive(Clone, Debug)]
pub struct DstEffect {
    /// The instant the offset changes.
    pub at: DateTime<Utc>,
    /// Gap or repeat.
    pub kind: TransitionKind,
    /// The wall times skipped or repeated: `[start, end)`.
    pub walls: std::ops::Range<NaiveDateTime>,
    /// The job's slots at the wall times in `walls` (for a gap, the slot at the gap's end that
    /// `shift` gives them; none for `skip`).
    pub slots: Vec<Slot>,
}

/// Why a cron expression was refused.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    #[error("invalid cron expression {expression:?}: {reason}")]
    /// The expression does not parse.
    Invalid {
        /// The expression.
        expression: String,
        /// The parser's reason.
        reason: String,
    },
    /// One field at fault, found by parsing each field alone: the error names it and the part.
    #[error(
        "invalid cron expression {expression:?}: the {field} field ({allowed}) has {part:?}: {reason}"
    )]
    InvalidField {
        /// The expression.
        expression: String,
        /// The field at fault.
        field: &'static str,
        /// What it allows.
        allowed: &'static str,
        /// The part refused.
        part: String,
        /// The parser's reason.
        reason: String,
    },
    #[error(
        "cron expression {expression:?} has {fields} fields; use 5 (minute hour day month weekday) \
         or 6 (second minute hour day month weekday)"
    )]
    /// Neither 5 nor 6 fields.
    FieldCount {
        /// The expression.
        expression: String,
        /// Its field count.
        fields: usize,
    },
    #[error("cron expression {expression:?} never fires in the next year")]
    /// The expression parses but matches no instant within a year.
    NeverFires {
        /// The expression.
        expression: String,
    },
}

/// The fields of a 6-field cron, with the values each allows.
const FIELDS: [(&str, &str); 6] = [
    ("second", "0-59"),
    ("minute", "0-59"),
    ("hour", "0-23"),
    ("day-of-month", "1-31"),
    ("month", "1-12 or JAN-DEC"),
    ("day-of-week", "0-7 or SUN-SAT"),
];

fn parses(expression: &str) -> Result<Cron, croner::errors::CronError> {
    CronParser::builder()
        .seconds(Seconds::Optional)
        .year(Year::Disallowed)
        .build()
        .parse(expression)
}

/// The error for an expression croner refused: the field and the comma-separated part at fault
/// when one field alone is (each is parsed with every other field `*`), else croner's reason.
fn invalid(expression: &str, reason: String) -> ScheduleError {
    let fields: Vec<&str> = expression.split_whitespace().collect();
    if !(5..=6).contains(&fields.len()) {
        return ScheduleError::Invalid {
            expression: expression.to_owned(),
            reason,
        };
    }
    // A 5-field cron has no second field.
    let names = &FIELDS[FIELDS.len() - fields.len()..];
    let alone = |i: usize, value: &str| {
        let mut probe = vec!["*"; fields.len()];
        probe[i] = value;
        parses(&probe.join(" ")).err()
    };
    for (i, field) in fields.iter().enumerate() {
        let Some(error) = alone(i, field) else {
            continue;
        };
        let part = field
            .split(',')
            .find(|part| alone(i, part).is_some())
            .unwrap_or(field);
        let (field, allowed) = names[i];
        return ScheduleError::InvalidField {
            expression: expression.to_owned(),
            field,
            allowed,
            part: part.to_owned(),
            reason: plain_reason(&error, allowed),
        };
    }
    ScheduleError::Invalid {
        expression: expression.to_owned(),
        reason,
    }
}

/// croner's reason for refusing one field, in plain words: its variant's name ("Component
/// error") dropped, and a number out of bounds said with the values the field takes.
fn plain_reason(error: &croner::errors::CronError, allowed: &str) -> String {
    use croner::errors::CronError;
    let text = match error {
        CronError::ComponentError(m) | CronError::InvalidPattern(m) => m.clone(),
        other => other.to_string(),
    };
    if text.contains("out of bounds") || text.contains("exceeded max") {
        return format!("out of range; write a value within {allowed}");
    }
    let text = text.trim_end_matches('.');
    let mut chars = text.chars();
    chars
        .next()
        .map_or_else(String::new, |c| c.to_lowercase().chain(chars).collect())
}

impl Schedule {
    /// Parses a 5-field (second 0) or 6-field (with seconds) cron expression in `zone`.
    pub fn parse(expression: &str, zone: Tz) -> Result<Self, ScheduleError> {
        let fields = expression.split_whitespace().count();
        let nickname = expression.trim_start().starts_with('@');
        if !nickname && !(5..=6).contains(&fields) {
            return Err(ScheduleError::FieldCount {
                expression: expression.to_owned(),
                fields,
            });
        }
        let cron = parses(expression).map_err(|e| invalid(expression, e.to_string()))?;
        let p = &cron.pattern;
        let wall_times =
            !(p.seconds.from_wildcard || p.minutes.from_wildcard || p.hours.from_wildcard);
        let schedule = Schedule {
            cron,
            zone,
            expression: expression.to_owned(),
            wall_times,
            days: None,
            repeat: None,
            gap: None,
        };
        schedule
            .next_after(Utc::now())
            .ok_or_else(|| ScheduleError::NeverFires {
                expression: expression.to_owned(),
            })?;
        Ok(schedule)
    }

    /// The schedule as text that changes exactly when its slots may: the cron expression, the
    /// zone, and the day filter's days and dates. Replicas hash it to tell whether they have
    /// the same slots of a job ([`crate::fleet::membership`]).
    pub fn definition(&self) -> String {
        let days = self.days.as_ref().map(DayFilter::definition);
        // Only a policy that was written changes the text: replicas of a version before the
        // policy had a name keep the same definition for the same slots.
        let repeat = self.repeat.map(|r| format!(" dst_repeat={}", r.name()));
        let gap = self.gap.map(|g| format!(" dst_gap={}", g.name()));
        format!(
            "cron={} zone={} {}{}{}",
            self.expression,
            self.zone,
            days.as_deref().unwrap_or("days=all"),
            repeat.unwrap_or_default(),
            gap.unwrap_or_default()
        )
    }

    /// The same cron with a DST policy: each of `repeat` and `gap` left `None` keeps the rule
    /// of the cron's kind.
    pub fn with_dst(mut self, repeat: Option<DstRepeat>, gap: Option<DstGap>) -> Self {
        self.repeat = repeat;
        self.gap = gap;
        self
    }

    /// The policy in force: as configured, else the rule of the cron's kind.
    pub fn dst_policy(&self) -> DstPolicy {
        let default = DstPolicy::of(self.wall_times);
        DstPolicy {
            repeat: self.repeat.unwrap_or(default.repeat),
            gap: self.gap.unwrap_or(default.gap),
        }
    }

    /// Whether the policy was configured (on the job or in `[scheduler]`), not defaulted.
    pub fn dst_policy_configured(&self) -> bool {
        self.repeat.is_some() || self.gap.is_some()
    }

    /// Whether the slots need the policy walk: the policy differs from the cron's default,
    /// which croner (with the two corrections below) already computes.
    fn policy_walk(&self) -> bool {
        self.dst_policy() != DstPolicy::of(self.wall_times)
    }

    /// The schedule's zone.
    pub fn zone(&self) -> Tz {
        self.zone
    }

    /// The cron expression, as written.
    pub fn expression(&self) -> &str {
        &self.expression
    }

    /// The same cron, keeping only the days `filter` keeps.
    pub fn on_days(mut self, filter: DayFilter) -> Self {
        self.days = Some(filter);
        self
    }

    /// The calendar filter, if the job has one.
    pub fn day_filter(&self) -> Option<&DayFilter> {
        self.days.as_ref()
    }

    /// The date of `slot` in the zone: what a calendar is asked about.
    pub fn local_date(&self, slot: Slot) -> NaiveDate {
        slot.instant().with_timezone(&self.zone).date_naive()
    }

    /// The first slot strictly after `at`.
    pub fn next_after(&self, at: DateTime<Utc>) -> Option<Slot> {
        let Some(filter) = &self.days else {
            return self.cron_next_after(at);
        };
        let limit = self.wall(at).date() + chrono::Days::new(MAX_CALENDAR_SEARCH_DAYS);
        let mut after = at;
        loop {
            let slot = self.cron_next_after(after)?;
            let date = self.local_date(slot);
            if filter.keeps(date) {
                return Some(slot);
            }
            if date > limit {
                return None;
            }
            // The whole day is skipped: look again from its last second.
            after = self.day_start(date.succ_opt()?) - chrono::Duration::seconds(1);
        }
    }

    /// The latest slot at or before `at`: the slot a replica waking at `at` belongs to.
    pub fn current(&self, at: DateTime<Utc>) -> Option<Slot> {
        let Some(filter) = &self.days else {
            return self.cron_current(at);
        };
        let limit = self.wall(at).date() - chrono::Days::new(MAX_CALENDAR_SEARCH_DAYS);
        let mut at = at;
        loop {
            let slot = self.cron_current(at)?;
            let date = self.local_date(slot);
            if filter.keeps(date) {
                return Some(slot);
            }
            if date < limit {
                return None;
            }
            at = self.day_start(date) - chrono::Duration::seconds(1);
        }
    }

    /// Whether the cron alone has a slot on `date` (in the zone) after `after`: a day the
    /// calendar skips is only worth mentioning if the job would have run on it.
    pub fn cron_fires_on(&self, date: NaiveDate, after: DateTime<Utc>) -> bool {
        let from = after.max(self.day_start(date) - chrono::Duration::seconds(1));
        self.cron_next_after(from)
            .is_some_and(|slot| self.local_date(slot) == date)
    }

    /// The first instant of `date` in the zone (the end of the gap if midnight is skipped).
    fn day_start(&self, date: NaiveDate) -> DateTime<Utc> {
        let midnight = date.and_time(chrono::NaiveTime::MIN);
        match self.zone.from_local_datetime(&midnight) {
            LocalResult::Single(t) | LocalResult::Ambiguous(t, _) => t.with_timezone(&Utc),
            LocalResult::None => gap_end(self.zone, midnight).unwrap_or(midnight.and_utc()),
        }
    }

    /// The cron's first slot strictly after `at`, whatever the calendar says.
    fn cron_next_after(&self, at: DateTime<Utc>) -> Option<Slot> {
        if self.policy_walk() {
            return self.policy_next_after(at).map(Slot);
        }
        let mut found = self.croner_next(at);
        if !self.wall_times {
            return found.map(Slot);
        }
        // croner runs a listed wall time in both folds of an overlap: keep the earlier fold only.
        while let Some(t) = found.filter(|&t| in_later_fold(self.zone, t)) {
            found = self.croner_next(t);
        }
        // croner skips a listed wall time in a gap: run it right after the gap.
        let gap = self
            .cron
            .find_next_occurrence(&self.wall(at), false)
            .ok()
            .and_then(|wall| gap_end(self.zone, wall))
            .filter(|&end| end > at);
        match (found, gap) {
            (Some(a), Some(b)) => Some(Slot(a.min(b))),
            (a, b) => a.or(b).map(Slot),
        }
    }

    /// The cron's latest slot at or before `at`, whatever the calendar says.
    fn cron_current(&self, at: DateTime<Utc>) -> Option<Slot> {
        if self.policy_walk() {
            return self.policy_current(at).map(Slot);
        }
        let mut found = self.croner_previous(at, true);
        if !self.wall_times {
            return found.map(Slot);
        }
        // The same two corrections as in `next_after`, searching backwards.
        while let Some(t) = found.filter(|&t| in_later_fold(self.zone, t)) {
            found = self.croner_previous(t, false);
        }
        let gap = self
            .cron
            .find_previous_occurrence(&self.wall(at), true)
            .ok()
            .and_then(|wall| gap_end(self.zone, wall))
            .filter(|&end| end <= at);
        found.max(gap).map(Slot)
    }

    fn croner_next(&self, at: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let start = truncate_to_second(at).with_timezone(&self.zone);
        self.cron
            .find_next_occurrence(&start, false)
            .ok()
            .map(|t| t.with_timezone(&Utc))
    }

    fn croner_previous(&self, at: DateTime<Utc>, inclusive: bool) -> Option<DateTime<Utc>> {
        let start = truncate_to_second(at).with_timezone(&self.zone);
        self.cron
            .find_previous_occurrence(&start, inclusive)
            .ok()
            .map(|t| t.with_timezone(&Utc))
    }

    /// The wall-clock time of `at` in the zone, whole seconds.
    fn wall(&self, at: DateTime<Utc>) -> NaiveDateTime {
        truncate_to_second(at)
            .with_timezone(&self.zone)
            .naive_local()
    }

    /// The slots at or before `at`, newest first: catch-up walks back from now with it, so the
    /// newest missed slot is found whatever the window's size.
    pub fn back_from(&self, at: DateTime<Utc>) -> impl Iterator<Item = Slot> + '_ {
        std::iter::successors(self.current(at), move |slot| {
            self.current(slot.instant() - chrono::Duration::seconds(1))
        })
    }

    /// The most slots any window of length `window` holds, over the schedule's next
    /// [`SCAN_SLOTS`] slots (or next year): enough to see a daily or weekly pattern. Stops
    /// counting once it exceeds `limit`.
    pub fn most_slots_within(&self, window: Duration, limit: usize) -> usize {
        let start = SystemClock.now();
        let Ok(window) = chrono::Duration::from_std(window) else {
            return usize::MAX;
        };
        let end = start + chrono::Duration::days(366);
        let mut in_window = std::collections::VecDeque::new();
        let mut most = 0;
        let mut after = start;
        for _ in 0..SCAN_SLOTS {
            let Some(slot) = self.next_after(after).filter(|s| s.instant() <= end) else {
                break;
            };
            after = slot.instant();
            in_window.push_back(after);
            while in_window.front().is_some_and(|&t| t < after - window) {
                in_window.pop_front();
            }
            most = most.max(in_window.len());
            if most > limit {
                break;
            }
        }
        most
    }

    /// The next `n` slots after `at`.
    pub fn upcoming(&self, at: DateTime<Utc>, n: usize) -> Vec<Slot> {
        let mut slots = Vec::with_capacity(n);
        let mut after = at;
        while slots.len() < n {
            let Some(slot) = self.next_after(after) else {
                break;
            };
            slots.push(slot);
            after = slot.instant();
        }
        slots
    }
}

/// The DST policy walk: a job whose policy is not its cron's default. Apart from the rest of
/// the slot math because croner cannot compute it (croner's rules are the defaults).
impl Schedule {
    /// The first slot after `at` under the policy, by walking the cron's wall times forward
    /// from `at`'s and resolving each to its instants. The instants of successive wall times
    /// never go back, except that the later pass of an overlap lies after wall times the walk
    /// has passed: when `at` is in the earlier pass, those are looked at first.
    fn policy_next_after(&self, at: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let policy = self.dst_policy();
        let passed = (policy.repeat != DstRepeat::First)
            .then(|| self.repeat_passed(at))
            .flatten();
        let mut wall = self.wall(at);
        loop {
            wall = self.cron.find_next_occurrence(&wall, false).ok()?;
            let found = match self.zone.from_local_datetime(&wall) {
                LocalResult::Single(t) => Some(t.with_timezone(&Utc)),
                LocalResult::Ambiguous(earlier, later) => {
                    let (e, l) = (earlier.with_timezone(&Utc), later.with_timezone(&Utc));
                    match policy.repeat {
                        DstRepeat::First => Some(e),
                        DstRepeat::Last => Some(l),
                        DstRepeat::Both => Some(if e > at { e } else { l }),
                    }
                    .filter(|&t| t > at)
                }
                LocalResult::None => match policy.gap {
                    DstGap::Shift => gap_end(self.zone, wall),
                    DstGap::Skip => {
                        // Past the whole gap at once: its other wall times are skipped too.
                        let end = gap_end(self.zone, wall)?;
                        wall = self.wall(end) - chrono::Duration::seconds(1);
                        None
                    }
                },
            };
            if let Some(found) = found {
                return Some(passed.map_or(found, |p| p.min(found)));
            }
        }
    }

    /// When `at` is in the earlier pass of an overlap: the later instant of the first wall time
    /// of the cron in the overlap at or before `at`'s (those the forward walk has passed).
    fn repeat_passed(&self, at: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let wall = self.wall(at);
        let LocalResult::Ambiguous(_, later) = self.zone.from_local_datetime(&wall) else {
            return None;
        };
        let later = later.with_timezone(&Utc);
        if later == truncate_to_second(at) {
            return None;
        }
        let start = self.wall(offset_change(self.zone, truncate_to_second(at), later));
        let first = self.cron.find_next_occurrence(&start, true).ok()?;
        (first <= wall)
            .then(|| self.zone.from_local_datetime(&first).latest())
            .flatten()
            .map(|t| t.with_timezone(&Utc))
    }

    /// The latest slot at or before `at` under the policy: the forward walk's mirror. When `at`
    /// is in the later pass of an overlap, the earlier pass of wall times after `at`'s is
    /// already past: those are looked at first.
    fn policy_current(&self, at: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let at = truncate_to_second(at);
        let policy = self.dst_policy();
        let passed = (policy.repeat != DstRepeat::Last)
            .then(|| self.repeat_ahead(at))
            .flatten();
        let mut wall = self.wall(at);
        let mut inclusive = true;
        loop {
            wall = self.cron.find_previous_occurrence(&wall, inclusive).ok()?;
            inclusive = false;
            let found = match self.zone.from_local_datetime(&wall) {
                LocalResult::Single(t) => Some(t.with_timezone(&Utc)),
                LocalResult::Ambiguous(earlier, later) => {
                    let (e, l) = (earlier.with_timezone(&Utc), later.with_timezone(&Utc));
                    match policy.repeat {
                        DstRepeat::First => Some(e),
                        DstRepeat::Last => Some(l),
                        DstRepeat::Both => Some(if l <= at { l } else { e }),
                    }
                    .filter(|&t| t <= at)
                }
                LocalResult::None => match policy.gap {
                    DstGap::Shift => gap_end(self.zone, wall),
                    DstGap::Skip => {
                        // Before the whole gap at once: the wall time the gap starts at.
                        let end = gap_end(self.zone, wall)?;
                        wall = self.wall(end - chrono::Duration::seconds(1))
                            + chrono::Duration::seconds(1);
                        None
                    }
                },
            };
            if let Some(found) = found {
                return Some(passed.map_or(found, |p| p.max(found)));
            }
        }
    }

    /// When `at` is in the later pass of an overlap: the earlier instant of the last wall time
    /// of the cron in the overlap after `at`'s (already past, though the backward walk starts
    /// before it).
    fn repeat_ahead(&self, at: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let wall = self.wall(at);
        let LocalResult::Ambiguous(earlier, _) = self.zone.from_local_datetime(&wall) else {
            return None;
        };
        let earlier = earlier.with_timezone(&Utc);
        if earlier == at {
            return None;
        }
        // The overlap's wall times end where the earlier pass's clock stood at the change.
        let change = offset_change(self.zone, earlier, at);
        let end = (change - chrono::Duration::seconds(1))
            .with_timezone(&self.zone)
            .naive_local();
        let last = self.cron.find_previous_occurrence(&end, true).ok()?;
        (last > wall)
            .then(|| self.zone.from_local_datetime(&last).earliest())
            .flatten()
            .map(|t| t.with_timezone(&Utc))
    }

    /// The DST transitions in `(from, until]` that the cron names a wall time in, with the
    /// slots the policy gives them: what `check` shows.
    pub fn dst_effects(&self, from: DateTime<Utc>, until: DateTime<Utc>) -> Vec<DstEffect> {
        transitions(self.zone, from, until)
            .into_iter()
            .filter_map(|(at, kind, walls)| {
                let named = self.cron.find_next_occurrence(&walls.start, true).ok()?;
                (named < walls.end).then(|| self.effect(at, kind, walls))
            })
            .collect()
    }

    /// The job's slots at the wall times of one transition.
    fn effect(
        &self,
        at: DateTime<Utc>,
        kind: TransitionKind,
        walls: std::ops::Range<NaiveDateTime>,
    ) -> DstEffect {
        let length = walls.end - walls.start;
        let (first, last) = match kind {
            // Skipped: the slot at the gap's end, if any, is the next wall time's, not theirs.
            TransitionKind::Gap if self.dst_policy().gap == DstGap::Skip => (at, at - length),
            TransitionKind::Gap => (at, at),
            TransitionKind::Repeat => (at - length, at + length - chrono::Duration::seconds(1)),
        };
        let mut slots = Vec::new();
        let mut after = first - chrono::Duration::seconds(1);
        while let Some(slot) = self.next_after(after).filter(|s| s.instant() <= last) {
            slots.push(slot);
            after = slot.instant();
        }
        DstEffect {
            at,
            kind,
            walls,
            slots,
        }
    }
}

/// Whether `t` is the second of two instants with the same wall time (a fall-back overlap).
fn in_later_fold(zone: Tz, t: DateTime<Utc>) -> bool {
    match zone.from_local_datetime(&t.with_timezone(&zone).naive_local()) {
        LocalResult::Ambiguous(_, later) => later.with_timezone(&Utc) == t,
        _ => false,
    }
}

/// For a wall time that a spring-forward gap skips, the first instant after the gap; `None` for
/// a wall time that exists.
fn gap_end(zone: Tz, wall: NaiveDateTime) -> Option<DateTime<Utc>> {
    if !matches!(zone.from_local_datetime(&wall), LocalResult::None) {
        return None;
    }
    // UTC offsets lie within ±15 h: bisect (whole seconds) for the first instant past `wall`.
    let center = wall.and_utc().timestamp();
    let (mut before, mut after) = (center - 15 * 3600, center + 15 * 3600);
    while after - before > 1 {
        let middle = before + (after - before) / 2;
        match Utc.timestamp_opt(middle, 0).single() {
            Some(t) if t.with_timezone(&zone).naive_local() > wall => after = middle,
            Some(_) => before = middle,
            None => return None,
        }
    }
    Utc.timestamp_opt(after, 0).single()
}

/// The first instant in `(before, after]` whose UTC offset differs from `before`'s: bisected
/// in whole seconds (the caller knows the offset changes in between).
fn offset_change(zone: Tz, before: DateTime<Utc>, after: DateTime<Utc>) -> DateTime<Utc> {
    use chrono::Offset;
    let offset = |t: DateTime<Utc>| t.with_timezone(&zone).offset().fix();
    let start = offset(before);
    let (mut low, mut high) = (before.timestamp(), after.timestamp());
    while high - low > 1 {
        let middle = low + (high - low) / 2;
        match Utc.timestamp_opt(middle, 0).single() {
            Some(t) if offset(t) != start => high = middle,
            _ => low = middle,
        }
    }
    Utc.timestamp_opt(high, 0).single().unwrap_or(after)
}

/// Every UTC offset change of `zone` in `(from, until]` that moves the wall clock: the instant,
/// its kind, and the wall times it skips or repeats. Found hour by hour (no zone changes its
/// offset twice within an hour), each change then bisected to the second.
pub fn transitions(
    zone: Tz,
    from: DateTime<Utc>,
    until: DateTime<Utc>,
) -> Vec<(
    DateTime<Utc>,
    TransitionKind,
    std::ops::Range<NaiveDateTime>,
)> {
    use chrono::Offset;
    let offset = |t: DateTime<Utc>| t.with_timezone(&zone).offset().fix().local_minus_utc();
    let mut found = Vec::new();
    let mut t = from;
    while t < until {
        let next = (t + chrono::Duration::hours(1)).min(until);
        let (before, after) = (offset(t), offset(next));
        if before != after {
            let at = offset_change(zone, t, next);
            let shift = chrono::Duration::seconds(i64::from(after - before));
            let wall_after = at.naive_utc() + chrono::Duration::seconds(i64::from(after));
            let (kind, walls) = if after > before {
                (TransitionKind::Gap, wall_after - shift..wall_after)
            } else {
                (TransitionKind::Repeat, wall_after..wall_after - shift)
            };
            found.push((at, kind, walls));
        }
        t = next;
    }
    found
}

/// The wall clock, as a seam: tests skew one replica in-process, production reads the system.
pub trait Clock: Send + Sync + fmt::Debug {
    /// The time the timeline schedules on.
    fn now(&self) -> DateTime<Utc>;

    /// The fleet's time, on which the race judges a slot: a replica never races a slot before
    /// its instant on it, whatever the timeline says. A clock not corrected to a fleet
    /// (standalone mode, simulations) is its own fleet time.
    fn fleet_now(&self) -> DateTime<Utc> {
        self.now()
    }

    /// Whether this clock may be raced on: a fleet clock is not until the nodes' time has been
    /// measured once (its own wall clock is only a guess). Other clocks always may.
    fn measured(&self) -> bool {
        true
    }
}

/// The system's wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// The system clock shifted by a fixed offset: a replica whose clock leads (positive) or lags.
/// A test clock (tests/it/time.rs): public because integration tests build replicas with it;
/// hidden from the docs because no replica runs on it.
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct SkewedClock {
    /// How far ahead of the system clock it runs (negative: behind).
    pub offset: chrono::Duration,
}

impl Clock for SkewedClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now() + self.offset
    }
}

/// Wall time driven by tokio's clock: under `tokio::time::pause()` a simulated day passes in
/// moments, since tokio advances its clock whenever every task sleeps. For simulations and tests
/// (public for tests/it/time.rs; hidden from the docs because no replica runs on it).
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    anchor_wall: DateTime<Utc>,
    anchor: tokio::time::Instant,
}

impl TokioClock {
    /// A clock that reads `wall` now and advances with tokio's time.
    pub fn starting_at(wall: DateTime<Utc>) -> Self {
        TokioClock {
            anchor_wall: wall,
            anchor: tokio::time::Instant::now(),
        }
    }
}

impl Clock for TokioClock {
    fn now(&self) -> DateTime<Utc> {
        let elapsed = tokio::time::Instant::now().duration_since(self.anchor);
        self.anchor_wall + chrono::Duration::from_std(elapsed).unwrap_or_default()
    }
}

/// A clock shared by every task of a replica.
pub type SharedClock = Arc<dyn Clock>;

#[cfg(test)]
mod tests {
    //! Slot math the integration tests do not reach (calendars, walking back, windows, refusals);
    //! the cron forms, weekday names and DST rules are tested once, in `tests/it/slots.rs`.
    use super::*;
    use crate::time::calendar::{Calendar, Days, Reason};

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn next_after_a_slot_is_the_following_slot() {
        let s = Schedule::parse("* * * * * *", chrono_tz::UTC).unwrap();
        let t = utc("2026-01-01T00:00:05Z");
        assert_eq!(
            s.next_after(t).unwrap().instant(),
            utc("2026-01-01T00:00:06Z")
        );
        assert_eq!(s.current(t).unwrap().instant(), t);
    }

    fn on_calendar(expression: &str, zone: Tz, calendar: Calendar, days: Days) -> Schedule {
        let filter = DayFilter {
            calendar: Arc::new(calendar),
            days,
        };
        Schedule::parse(expression, zone).unwrap().on_days(filter)
    }

    #[test]
    fn a_calendar_that_never_matches_ends_the_schedule_instead_of_looping() {
        let s = on_calendar(
            "0 0 9 * * Sat,Sun",
            chrono_tz::UTC,
            Calendar::new("c"),
            Days::Workdays,
        );
        let at = utc("2026-11-23T00:00:00Z");
        assert_eq!(s.next_after(at), None);
        assert_eq!(s.current(at), None);
        assert!(s.cron_fires_on(at.date_naive() + chrono::Days::new(5), at));
    }

    #[test]
    fn current_is_the_latest_kept_slot() {
        let mut calendar = Calendar::new("c");
        calendar.add_day_off("2026-11-20".parse().unwrap(), Reason::new("off", "t"));
        let s = on_calendar("0 30 9 * * *", chrono_tz::UTC, calendar, Days::Workdays);
        // Monday 08:00: the weekend and Friday (a day off) are skipped back to Thursday.
        let current = s.current(utc("2026-11-23T08:00:00Z")).unwrap();
        assert_eq!(current.rfc3339_utc(), "2026-11-19T09:30:00Z");
        assert_eq!(
            s.next_after(current.instant()).unwrap().rfc3339_utc(),
            "2026-11-23T09:30:00Z"
        );
    }

    #[test]
    fn a_skipped_day_before_a_midnight_gap_resumes_after_the_gap() {
        // Sao Paulo skipped 00:00-01:00 on Sunday 2018-11-04.
        let sp = chrono_tz::America::Sao_Paulo;
        let mut calendar = Calendar::new("c");
        calendar.add_day_off("2018-11-03".parse().unwrap(), Reason::new("off", "t"));
        calendar.add_workday("2018-11-04".parse().unwrap(), Reason::new("make-up", "t"));
        let s = on_calendar("0 0 * * * *", sp, calendar, Days::Workdays);
        let slots: Vec<String> = s
            .upcoming(utc("2018-11-03T02:30:00Z"), 2)
            .iter()
            .map(|slot| slot.rfc3339_in(sp))
            .collect();
        assert_eq!(
            slots,
            ["2018-11-04T01:00:00-02:00", "2018-11-04T02:00:00-02:00"]
        );
    }

    /// `back_from` lists, newest first, exactly the slots `upcoming` lists oldest first.
    fn assert_back_matches_forward(expression: &str, zone: Tz, from: &str, n: usize) {
        let s = Schedule::parse(expression, zone).unwrap();
        let forward = s.upcoming(utc(from), n);
        let last = forward.last().unwrap().instant();
        let mut back: Vec<Slot> = s.back_from(last).take(n).collect();
        back.reverse();
        assert_eq!(back, forward, "{expression} in {zone} from {from}");
    }

    #[test]
    fn walking_back_meets_the_same_slots_as_walking_forward() {
        let ny = chrono_tz::America::New_York;
        assert_back_matches_forward("* * * * * *", chrono_tz::UTC, "2026-01-01T00:00:00Z", 500);
        assert_back_matches_forward(
            "0 30 9 * * Mon-Fri",
            chrono_tz::Asia::Shanghai,
            "2026-11-20T00:00:00Z",
            12,
        );
        // Across both DST changes of New York: a wall time in the gap and one in the overlap.
        assert_back_matches_forward("0 30 2 * * *", ny, "2026-03-05T12:00:00Z", 6);
        assert_back_matches_forward("0 30 1 * * *", ny, "2026-10-29T12:00:00Z", 6);
        assert_back_matches_forward("0 */20 * * * *", ny, "2026-11-01T04:00:00Z", 12);
    }

    #[test]
    fn back_from_starts_at_the_slot_at_or_before_the_instant() {
        let s = Schedule::parse("*/10 * * * * *", chrono_tz::UTC).unwrap();
        let slots: Vec<String> = s
            .back_from(utc("2026-01-01T00:01:05.500Z"))
            .take(3)
            .map(|slot| slot.rfc3339_utc())
            .collect();
        assert_eq!(
            slots,
            [
                "2026-01-01T00:01:00Z",
                "2026-01-01T00:00:50Z",
                "2026-01-01T00:00:40Z"
            ]
        );
        let exact = s.back_from(utc("2026-01-01T00:01:00Z")).next().unwrap();
        assert_eq!(exact.rfc3339_utc(), "2026-01-01T00:01:00Z");
    }

    #[test]
    fn most_slots_within_a_window() {
        let every_second = Schedule::parse("* * * * * *", chrono_tz::UTC).unwrap();
        // The window's both ends count: 11 slots in any 10 s.
        assert_eq!(
            every_second.most_slots_within(Duration::from_secs(10), 1000),
            11
        );
        // Stops counting past the limit.
        assert_eq!(
            every_second.most_slots_within(Duration::from_secs(3600), 1000),
            1001
        );
        // A weekday job: at most 5 in a week... plus the same weekday of the next week at 7 d.
        let weekdays = Schedule::parse("0 30 9 * * Mon-Fri", chrono_tz::UTC).unwrap();
        assert_eq!(
            weekdays.most_slots_within(Duration::from_secs(6 * 86_400), 1000),
            5
        );
        // A burst: every second of 09:00-09:04 once a day.
        let burst = Schedule::parse("* 0-4 9 * * *", chrono_tz::UTC).unwrap();
        assert_eq!(
            burst.most_slots_within(Duration::from_secs(3600), 1000),
            300
        );
    }

    #[test]
    fn bad_expressions_are_refused() {
        for bad in ["", "* * *", "61 * * * *", "* * * * * * 2026", "0 0 30 2 *"] {
            assert!(Schedule::parse(bad, chrono_tz::UTC).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_refused_cron_names_the_field_and_the_part_at_fault() {
        for (cron, field, part) in [
            ("0 61 9 * * Mon-Fri", "minute", "61"),
            ("61 9 * * *", "minute", "61"),
            ("0 0 25 * * *", "hour", "25"),
            ("0 0 9 1,32 * *", "day-of-month", "32"),
            ("0 0 9 * 1,13 *", "month", "13"),
            ("0 0 9 * * Mon-Fry", "day-of-week", "Mon-Fry"),
            ("70 0 9 * * *", "second", "70"),
        ] {
            let error = Schedule::parse(cron, chrono_tz::UTC)
                .unwrap_err()
                .to_string();
            let named = format!("the {field} field (");
            assert!(error.contains(&named), "{cron}: {error}");
            assert!(error.contains(&format!("has {part:?}")), "{cron}: {error}");
        }
    }
}
