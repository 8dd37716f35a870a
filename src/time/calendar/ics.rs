//! Days off from an iCalendar (`.ics`) file: every all-day event is a day off.
//!
//! Parsing is the `icalendar` crate's; recurrence (`RRULE`, with `EXDATE` and `RDATE`) is the
//! `rrule` crate's. An all-day event is one whose `DTSTART` is a `DATE`; it lasts to `DTEND`
//! (exclusive, as RFC 5545 says), for a `DURATION` of days or weeks, or one day. Events with a
//! time of day (meetings) and cancelled events are not days off. Recurring events are expanded
//! up to [`HORIZON_YEAR`], a fixed year so every replica expands them the same way.

use chrono::{Datelike, Duration, NaiveDate, TimeZone};
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
        days.extend(
            event_days(event, i)?
                .into_iter()
                .map(|(date, what)| (date, Reason::new(what, source))),
        );
        if days.len() > MAX_DAYS {
            return Err(IcsError(format!(
                "more than {MAX_DAYS} days off before {HORIZON_YEAR}"
            )));
        }
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

/// The dates an event takes off, with its name; none for a timed or cancelled event.
fn event_days(event: &Event, index: usize) -> Result<Vec<(NaiveDate, String)>, IcsError> {
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
    Ok(starts
        .into_iter()
        .flat_map(|first| (0..length).map(move |k| first + Duration::days(k)))
        .map(|date| (date, label.clone()))
        .collect())
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

/// How many days the event takes: to DTEND (exclusive), for DURATION, or one.
fn length_in_days(event: &Event, start: NaiveDate) -> Result<i64, EventProblem> {
    if let Some(end) = event.properties().get("DTEND") {
        return match DatePerhapsTime::from_property(end) {
            Some(DatePerhapsTime::Date(end)) if end > start => Ok((end - start).num_days()),
            Some(DatePerhapsTime::Date(_)) => Err(EventProblem(format!(
                "DTEND {:?} is not after DTSTART (DTEND is the first day after the event)",
                end.value()
            ))),
            _ => Err(EventProblem(format!(
                "DTEND {:?} is not a date, but DTSTART is",
                end.value()
            ))),
        };
    }
    match event.property_value("DURATION") {
        Some(duration) => days_of(duration).ok_or_else(|| {
            EventProblem(format!(
                "DURATION {duration:?} is not a whole number of days or weeks (such as P3D)"
            ))
        }),
        None => Ok(1),
    }
}

/// `P3D` or `P2W` as days.
fn days_of(duration: &str) -> Option<i64> {
    let body = duration.strip_prefix('P')?;
    let (count, unit) = body.split_at(body.len().checked_sub(1)?);
    let count: i64 = count.parse().ok().filter(|n| *n > 0)?;
    match unit {
        "D" => Some(count),
        "W" => Some(count * 7),
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
        assert_eq!(days_of("PT1H"), None);
        assert_eq!(days_of("P0D"), None);
        assert_eq!(days_of("P"), None);
    }

    #[test]
    fn a_duration_and_an_exdate() {
        let text = ics("BEGIN:VEVENT\r\nUID:a\r\nSUMMARY:Offsite\r\nDTSTART;VALUE=DATE:20260105\r\nDURATION:P2D\r\nRRULE:FREQ=YEARLY;COUNT=3\r\nEXDATE;VALUE=DATE:20270105\r\nEND:VEVENT\r\n");
        assert_eq!(
            dates(&text),
            ["2026-01-05", "2026-01-06", "2028-01-05", "2028-01-06"]
        );
    }

    #[test]
    fn rdates_without_a_rule_add_days() {
        let text = ics("BEGIN:VEVENT\r\nUID:r\r\nSUMMARY:Audit\r\nDTSTART;VALUE=DATE:20260105\r\nRDATE;VALUE=DATE:20260302,20260601\r\nEND:VEVENT\r\n");
        assert_eq!(dates(&text), ["2026-01-05", "2026-03-02", "2026-06-01"]);
    }

    #[test]
    fn a_timed_or_cancelled_event_is_no_day_off() {
        let text = ics("BEGIN:VEVENT\r\nUID:m\r\nSUMMARY:Meeting\r\nDTSTART:20260105T090000Z\r\nDTEND:20260105T100000Z\r\nEND:VEVENT\r\nBEGIN:VEVENT\r\nUID:c\r\nSTATUS:CANCELLED\r\nDTSTART;VALUE=DATE:20260106\r\nEND:VEVENT\r\n");
        assert!(dates(&text).is_empty());
    }
}
