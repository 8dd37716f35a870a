//! Days off from an iCalendar (`.ics`) file: every all-day event is a day off.
//!
//! Parsing is the `icalendar` crate's; recurrence (`RRULE`, with `EXDATE` and `RDATE`) is the
//! `rrule` crate's. An all-day event is one whose `DTSTART` is a `DATE`; it lasts to `DTEND`
//! (exclusive, as RFC 5545 says), for a `DURATION` of days or weeks, or one day. Events with a
//! time of day (meetings) and cancelled events are not days off. Recurring events are expanded
//! up to [`HORIZON_YEAR`], a fixed year so every replica expands them the same way.
//!
//! Every expansion is bounded before it is done: an event's length times its occurrences must
//! fit in what is left of `MAX_DAYS`, counted without allocating a day. A typo such as
//! `DURATION:P5000000W` (35 million days) is refused by name instead of filling memory or
//! overflowing the date type.

use chrono::{Datelike, NaiveDate, TimeZone};
use icalendar::{Calendar as IcsFile, Component, DatePerhapsTime, Event, Property};
use rrule::{RRule, RRuleSet, Tz, Unvalidated};

use super::Reason;

/// Recurring events are expanded up to (not including) this year.
pub const HORIZON_YEAR: i32 = 2100;
/// Most days one file may list: a guard against a rule that repeats every day for a century.
const MAX_DAYS: usize = 100_000;

/// Why an .ics file was refused: the message names the event and the property.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct IcsError(String);

/// The days off of the .ics text `text`, each with the event's summary and `source` (the file).
pub fn days_off(text: &str, source: &str) -> Result<Vec<(NaiveDate, Reason)>, IcsError> {
    if !text
        .trim_start_matches('\u{feff}')
        .trim_start()
        .starts_with("BEGIN:VCALENDAR")
    {
        return Err(IcsError(
            "not an iCalendar file: it does not start with BEGIN:VCALENDAR".into(),
        ));
    }
    let file: IcsFile = text
        .parse()
        .map_err(|e: String| IcsError(parse_error(&e)))?;
    let mut days = Vec::new();
    for (i, event) in file.events().enumerate() {
        let budget = MAX_DAYS - days.len();
        days.extend(
            event_days(event, i, budget)?
                .into_iter()
                .map(|(date, what)| (date, Reason::new(what, source))),
        );
    }
    Ok(days)
}

/// The parser's error in one line: where it stopped, rather than its whole trace.
fn parse_error(error: &str) -> String {
    let mut lines = error.lines();
    let head = lines.next().unwrap_or_default();
    let line = head
        .split_once("at line ")
        .and_then(|(_, rest)| rest.split(',').next());
    let text = lines.next().unwrap_or_default().trim();
    match line {
        Some(n) => format!(
            "not valid iCalendar: reading stops at line {n} ({text:?}); is every BEGIN closed by its END?"
        ),
        None => format!("not valid iCalendar: {}", error.trim().replace('\n', " ")),
    }
}

/// What is wrong with one event; [`event_days`] prefixes the event's name.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct EventProblem(String);

/// The dates an event takes off, with its name; none for a timed or cancelled event. More than
/// `budget` days is refused before any is listed.
fn event_days(
    event: &Event,
    index: usize,
    budget: usize,
) -> Result<Vec<(NaiveDate, String)>, IcsError> {
    let label = event
        .get_summary()
        .map_or_else(|| format!("event #{}", index + 1), str::to_owned);
    let fail = |what: EventProblem| IcsError(format!("event {label:?}: {what}"));
    if event.property_value("STATUS") == Some("CANCELLED") {
        return Ok(Vec::new());
    }
    let Some(start) = start_date(event).map_err(fail)? else {
        return Ok(Vec::new());
    };
    let length = length_in_days(event, start).map_err(fail)?;
    let starts = occurrences(event, start).map_err(fail)?;
    within_budget(starts.len(), length, budget).map_err(fail)?;
    let days = every_day(&starts, length).map_err(fail)?;
    Ok(days.into_iter().map(|date| (date, label.clone())).collect())
}

/// Each of the `length` days from each of `starts` (already checked against the budget).
fn every_day(starts: &[NaiveDate], length: u64) -> Result<Vec<NaiveDate>, EventProblem> {
    let mut days = Vec::with_capacity(starts.len().saturating_mul(length as usize));
    for &first in starts {
        for k in 0..length {
            // Unreachable with a 4-digit DTSTART and MAX_DAYS, but a panic is not how a
            // config error should end if either changes.
            let date = first
                .checked_add_days(chrono::Days::new(k))
                .ok_or_else(|| {
                    EventProblem(format!(
                        "{first} plus {k} days is past the last date there is"
                    ))
                })?;
            days.push(date);
        }
    }
    Ok(days)
}

/// Refuses `occurrences` of `length` days each when they come to more than `budget` days:
/// the product is taken before a single day is listed.
fn within_budget(occurrences: usize, length: u64, budget: usize) -> Result<(), EventProblem> {
    let total = u64::try_from(occurrences)
        .ok()
        .and_then(|n| n.checked_mul(length));
    match total {
        Some(total) if total <= budget as u64 => Ok(()),
        _ => Err(EventProblem(format!(
            "{occurrences} occurrence(s) of {length} days come to more than the {budget} days off \
             a file may still list (at most {MAX_DAYS} in all, before {HORIZON_YEAR})"
        ))),
    }
}

/// `DTSTART` as a date; `None` for a date-time (an event with a time of day).
fn start_date(event: &Event) -> Result<Option<NaiveDate>, EventProblem> {
    let property = event
        .properties()
        .get("DTSTART")
        .ok_or_else(|| EventProblem("no DTSTART".to_owned()))?;
    match DatePerhapsTime::from_property(property) {
        Some(DatePerhapsTime::Date(date)) => Ok(Some(date)),
        Some(DatePerhapsTime::DateTime(_)) => Ok(None),
        None => Err(EventProblem(format!(
            "DTSTART {:?} is not a date",
            property.value()
        ))),
    }
}

/// How many days the event takes: to DTEND (exclusive), for DURATION, or one; refused past
/// [`MAX_DAYS`] with the property that says so, before any day is counted out.
fn length_in_days(event: &Event, start: NaiveDate) -> Result<u64, EventProblem> {
    let (property, value, days) = match event.properties().get("DTEND") {
        Some(end) => ("DTEND", end.value(), days_to_end(end, start)?),
        None => match event.property_value("DURATION") {
            Some(duration) => (
                "DURATION",
                duration,
                days_of(duration).ok_or_else(|| {
                    EventProblem(format!(
                        "DURATION {duration:?} is not a whole number of days or weeks (such as P3D)"
                    ))
                })?,
            ),
            None => return Ok(1),
        },
    };
    if days > MAX_DAYS as u64 {
        return Err(EventProblem(format!(
            "{property} {value:?} makes the event {days} days long; an event may last at most \
             {MAX_DAYS} days (is it a typo?)"
        )));
    }
    Ok(days)
}

/// The days from `start` to DTEND `end` (exclusive), which must be a later date.
fn days_to_end(end: &Property, start: NaiveDate) -> Result<u64, EventProblem> {
    match DatePerhapsTime::from_property(end) {
        Some(DatePerhapsTime::Date(end)) if end > start => {
            Ok((end - start).num_days().unsigned_abs())
        }
        Some(DatePerhapsTime::Date(_)) => Err(EventProblem(format!(
            "DTEND {:?} is not after DTSTART (DTEND is the first day after the event)",
            end.value()
        ))),
        _ => Err(EventProblem(format!(
            "DTEND {:?} is not a date, but DTSTART is",
            end.value()
        ))),
    }
}

/// `P3D` or `P2W` as days; a count too large to multiply saturates (it is over any limit).
fn days_of(duration: &str) -> Option<u64> {
    let body = duration.strip_prefix('P')?;
    let (count, unit) = body.split_at(body.len().checked_sub(1)?);
    let count: u64 = count.parse().ok().filter(|n| *n > 0)?;
    match unit {
        "D" => Some(count),
        "W" => Some(count.saturating_mul(7)),
        _ => None,
    }
}

/// The first days of the event's occurrences: `start`, or its `RRULE` expanded.
fn occurrences(event: &Event, start: NaiveDate) -> Result<Vec<NaiveDate>, EventProblem> {
    let Some(rule) = event.property_value("RRULE") else {
        let mut starts = listed_dates(event, "RDATE")?;
        starts.push(start);
        return Ok(starts);
    };
    let rule: RRule<Unvalidated> = rule
        .parse()
        .map_err(|e| EventProblem(format!("RRULE {rule:?}: {e}")))?;
    let mut set = rule
        .build(midnight(start))
        .map_err(|e| EventProblem(format!("RRULE: {e}")))?;
    for date in listed_dates(event, "EXDATE")? {
        set = set.exdate(midnight(date));
    }
    for date in listed_dates(event, "RDATE")? {
        set = set.rdate(midnight(date));
    }
    Ok(expand(&set))
}

fn expand(set: &RRuleSet) -> Vec<NaiveDate> {
    set.into_iter()
        .map(|t| t.date_naive())
        .take_while(|d| d.year() < HORIZON_YEAR)
        .take(MAX_DAYS + 1)
        .collect()
}

/// The dates of every `name` property (`EXDATE;VALUE=DATE:20261225,20271225`).
fn listed_dates(event: &Event, name: &str) -> Result<Vec<NaiveDate>, EventProblem> {
    let Some(properties) = event.multi_properties().get(name) else {
        return Ok(Vec::new());
    };
    properties
        .iter()
        .flat_map(|p: &Property| p.value().split(','))
        .map(|value| {
            value
                .get(..8)
                .and_then(|d| NaiveDate::parse_from_str(d, "%Y%m%d").ok())
                .ok_or_else(|| EventProblem(format!("{name} {value:?} is not a date")))
        })
        .collect()
}

/// A date as the recurrence engine's instant: midnight UTC, so dates come back unchanged.
fn midnight(date: NaiveDate) -> chrono::DateTime<Tz> {
    Tz::UTC.from_utc_datetime(&date.and_time(chrono::NaiveTime::MIN))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ics(events: &str) -> String {
        format!("BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//test//EN\r\n{events}END:VCALENDAR\r\n")
    }

    fn dates(text: &str) -> Vec<String> {
        let mut days: Vec<String> = days_off(text, "t.ics")
            .unwrap()
            .into_iter()
            .map(|(d, _)| d.to_string())
            .collect();
        days.sort();
        days
    }

    #[test]
    fn durations_in_days_and_weeks() {
        assert_eq!(days_of("P3D"), Some(3));
        assert_eq!(days_of("P1W"), Some(7));
        assert_eq!(days_of("P100000000W"), Some(700_000_000));
        assert_eq!(days_of("P9999999999999999999W"), Some(u64::MAX));
        assert_eq!(days_of("PT1H"), None);
        assert_eq!(days_of("P0D"), None);
        assert_eq!(days_of("P"), None);
    }

    #[test]
    fn a_duration_and_an_exdate() {
        let text = ics(
            "BEGIN:VEVENT\r\nUID:a\r\nSUMMARY:Offsite\r\nDTSTART;VALUE=DATE:20260105\r\nDURATION:P2D\r\nRRULE:FREQ=YEARLY;COUNT=3\r\nEXDATE;VALUE=DATE:20270105\r\nEND:VEVENT\r\n",
        );
        assert_eq!(
            dates(&text),
            ["2026-01-05", "2026-01-06", "2028-01-05", "2028-01-06"]
        );
    }

    #[test]
    fn rdates_without_a_rule_add_days() {
        let text = ics(
            "BEGIN:VEVENT\r\nUID:r\r\nSUMMARY:Audit\r\nDTSTART;VALUE=DATE:20260105\r\nRDATE;VALUE=DATE:20260302,20260601\r\nEND:VEVENT\r\n",
        );
        assert_eq!(dates(&text), ["2026-01-05", "2026-03-02", "2026-06-01"]);
    }

    #[test]
    fn a_timed_or_cancelled_event_is_no_day_off() {
        let text = ics(
            "BEGIN:VEVENT\r\nUID:m\r\nSUMMARY:Meeting\r\nDTSTART:20260105T090000Z\r\nDTEND:20260105T100000Z\r\nEND:VEVENT\r\nBEGIN:VEVENT\r\nUID:c\r\nSTATUS:CANCELLED\r\nDTSTART;VALUE=DATE:20260106\r\nEND:VEVENT\r\n",
        );
        assert!(dates(&text).is_empty());
    }

    fn refusal(text: &str) -> String {
        days_off(text, "t.ics").unwrap_err().to_string()
    }

    #[test]
    fn an_event_longer_than_the_limit_is_refused_by_name_before_it_is_expanded() {
        for duration in ["P100000000W", "P5000000W", "P9999999999999999999W"] {
            let text = ics(&format!(
                "BEGIN:VEVENT\r\nUID:o\r\nSUMMARY:Offsite\r\nDTSTART;VALUE=DATE:20260105\r\nDURATION:{duration}\r\nEND:VEVENT\r\n"
            ));
            let error = refusal(&text);
            assert!(
                error.starts_with(&format!(
                    "event \"Offsite\": DURATION {duration:?} makes the event"
                )),
                "{error}"
            );
        }
        let text = ics(
            "BEGIN:VEVENT\r\nUID:e\r\nSUMMARY:Forever\r\nDTSTART;VALUE=DATE:20260105\r\nDTEND;VALUE=DATE:99991231\r\nEND:VEVENT\r\n",
        );
        assert!(
            refusal(&text).starts_with("event \"Forever\": DTEND \"99991231\" makes the event")
        );
    }

    #[test]
    fn occurrences_times_length_past_what_is_left_is_refused() {
        // 74 yearly occurrences of 2000 days: 148,000 days, each occurrence well under the limit.
        let text = ics(
            "BEGIN:VEVENT\r\nUID:y\r\nSUMMARY:Sabbatical\r\nDTSTART;VALUE=DATE:20260105\r\nDURATION:P2000D\r\nRRULE:FREQ=YEARLY\r\nEND:VEVENT\r\n",
        );
        let error = refusal(&text);
        assert!(
            error.starts_with("event \"Sabbatical\": 74 occurrence(s) of 2000 days"),
            "{error}"
        );
    }
}
