//! The words in English: `09:30 on workdays (Asia/Shanghai), skipping public holidays, running
//! on make-up workdays`. The time comes first, then the days, the zone and the calendar.

use chrono_tz::Tz;

use super::cron::{Cron, Field, Part};
use super::{
    CalendarWords, Hours, Unit, clock, every_day, may_fire_on_weekends, ordinal, unit, wall_times,
};
use crate::time::calendar::Days;

const WEEKDAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];
const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const NTH: [&str; 5] = ["first", "second", "third", "fourth", "fifth"];

/// The sentence of a cron read into fields.
pub(super) fn sentence(cron: &Cron, zone: Tz, calendar: Option<&CalendarWords>) -> String {
    let (time, repeats) = match wall_times(cron) {
        Some(times) => (and(&clock(&times)), false),
        None => (repetition(cron), true),
    };
    let days = days(cron);
    if let Some(calendar) = calendar.filter(|_| every_day(cron)) {
        let on = match calendar.days {
            Days::Workdays => "workdays",
            Days::Holidays => "days off",
        };
        return format!("{time} on {on} ({zone}){}", whole(calendar, cron));
    }
    let days = match (days, repeats) {
        (Some(days), true) => format!(", {days}"),
        (Some(days), false) => format!(" {days}"),
        (None, true) => String::new(),
        (None, false) => " every day".to_owned(),
    };
    let only = calendar
        .map(|c| only_for(c.days, Some(c), may_fire_on_weekends(cron)))
        .unwrap_or_default();
    format!("{time}{days} ({zone}){only}")
}

/// What a calendar adds to a cron that names every day.
fn whole(calendar: &CalendarWords, cron: &Cron) -> String {
    let (off, make_up) = names(calendar);
    let weekends = may_fire_on_weekends(cron);
    match (calendar.days, weekends) {
        (Days::Workdays, true) => format!(", skipping {off}, running on {make_up}"),
        (Days::Workdays, false) => format!(", skipping {off}"),
        (Days::Holidays, _) => format!(", weekends and {off}, not on {make_up}"),
    }
}

/// What a calendar adds to a cron that narrows the days itself (or is quoted).
pub(super) fn only(days: Days, calendar: Option<&CalendarWords>) -> String {
    only_for(days, calendar, true)
}

fn only_for(days: Days, calendar: Option<&CalendarWords>, weekends: bool) -> String {
    let (off, make_up) = calendar.map(names).unwrap_or_default();
    match (days, weekends) {
        (Days::Workdays, true) => {
            format!(", workdays only, skipping {off}, running on {make_up}")
        }
        (Days::Workdays, false) => format!(", workdays only, skipping {off}"),
        (Days::Holidays, true) => {
            format!(", days off only (weekends and {off}), not on {make_up}")
        }
        (Days::Holidays, false) => format!(", days off only ({off})"),
    }
}

/// The calendar's days off and make-up workdays, as named in the sentence.
fn names(calendar: &CalendarWords) -> (String, String) {
    match calendar.builtin {
        true => ("public holidays".into(), "make-up workdays".into()),
        false => (
            format!("the days off of calendar {:?}", calendar.name),
            format!("the workdays listed in calendar {:?}", calendar.name),
        ),
    }
}

/// A cron that repeats within the day: `every 5 minutes between 09:00 and 17:59`.
fn repetition(cron: &Cron) -> String {
    match unit(cron) {
        Unit::Second => format!(
            "{}{}{}",
            rate(&cron.second, "second", "minute", 59),
            minutes_within(&cron.minute),
            hours_within(&cron.hour)
        ),
        Unit::Minute => {
            let second = cron.second.single().unwrap_or(0);
            let at = (second != 0).then(|| format!(" at second {second}"));
            format!(
                "{}{}{}",
                rate(&cron.minute, "minute", "hour", 59),
                at.unwrap_or_default(),
                hours_within(&cron.hour)
            )
        }
        Unit::Hour => hourly(cron),
    }
}

/// How often a second or minute field fires.
fn rate(field: &Field, unit: &str, parent: &str, max: u32) -> String {
    let parts = match field {
        Field::Any => return format!("every {unit}"),
        Field::Parts(parts) => parts.as_slice(),
    };
    match parts {
        [Part::Step(None | Some(0), None, 1)] => format!("every {unit}"),
        [Part::Step(None | Some(0), None, n)] => format!("every {n} {unit}s"),
        [Part::Step(a, b, n)] => format!(
            "every {n} {unit}s from {unit} {} to {}",
            a.unwrap_or(0),
            b.unwrap_or(max)
        ),
        [Part::Range(a, b)] => format!("every {unit} from {unit} {a} to {b}"),
        _ => {
            let values = field.values(0, max).unwrap_or_default();
            let list: Vec<String> = values.iter().map(u32::to_string).collect();
            let plural = if values.len() == 1 { "" } else { "s" };
            format!("every {parent} at {unit}{plural} {}", and(&list))
        }
    }
}

/// The minutes a seconds rate is narrowed to.
fn minutes_within(minute: &Field) -> String {
    let Some(values) = minute.values(0, 59) else {
        return String::new();
    };
    let list: Vec<String> = values.iter().map(u32::to_string).collect();
    let plural = if values.len() == 1 { "" } else { "s" };
    format!(" in minute{plural} {}", and(&list))
}

/// The hours a seconds or minutes rate is narrowed to.
fn hours_within(hour: &Field) -> String {
    match hour {
        Field::Any => String::new(),
        Field::Parts(parts) => match parts.as_slice() {
            [Part::Value(a)] | [Part::Range(a, _)] if hour.values(0, 23).is_some() => {
                let last = hour
                    .values(0, 23)
                    .and_then(|v| v.last().copied())
                    .unwrap_or(*a);
                format!(" between {a:02}:00 and {last:02}:59")
            }
            _ => {
                let values = hour.values(0, 23).unwrap_or_default();
                let list: Vec<String> = values.iter().map(|h| format!("{h:02}:00")).collect();
                format!(" in the hours from {}", and(&list))
            }
        },
    }
}

/// A cron at one minute and second of several hours: `every hour on the hour`.
fn hourly(cron: &Cron) -> String {
    let hourly = super::hourly(cron);
    let at = match (hourly.minute, hourly.second) {
        (0, 0) => "on the hour".to_owned(),
        (m, 0) => format!("at minute {m}"),
        (m, s) => format!("at minute {m}, second {s}"),
    };
    let (first, last) = (&hourly.first, &hourly.last);
    match hourly.hours {
        Hours::All => format!("every hour {at}"),
        Hours::Every(n) => format!("every {n} hours {at}"),
        Hours::EveryWithin(n) => format!("every {n} hours from {first} to {last}"),
        Hours::Within => format!("every hour from {first} to {last}"),
    }
}

/// The days a cron names, or `None` for every day.
fn days(cron: &Cron) -> Option<String> {
    let month_day = month_days(&cron.day);
    let weekday = weekdays(&cron.weekday);
    let days = match (month_day, weekday) {
        (None, None) => None,
        (Some(d), None) => Some(d),
        (None, Some(w)) => Some(w),
        (Some(d), Some(_)) if cron.both_days => Some(format!(
            "{d} if it falls on {}",
            or(&weekday_items(&cron.weekday))
        )),
        (Some(d), Some(w)) => Some(format!("{d} and {w}")),
    };
    in_months(days, cron)
}

/// The days narrowed to the months the cron names.
fn in_months(days: Option<String>, cron: &Cron) -> Option<String> {
    let Field::Parts(parts) = &cron.month else {
        return days;
    };
    let days = days.unwrap_or_else(|| "every day".to_owned());
    let items: Vec<String> = parts
        .iter()
        .flat_map(|part| match *part {
            Part::Range(a, b) => vec![format!("{} to {}", month(a), month(b))],
            plain => Field::Parts(vec![plain])
                .values(1, 12)
                .unwrap_or_default()
                .into_iter()
                .map(month)
                .collect(),
        })
        .collect();
    Some(match days.strip_suffix(" of the month") {
        Some(days) => format!("{days} of {}", and(&items)),
        None => format!("{days} in {}", and(&items)),
    })
}

fn month(m: u32) -> String {
    MONTHS[(m as usize).saturating_sub(1) % 12].to_owned()
}

/// The day-of-month field: `on the 1st and 15th of the month`.
fn month_days(field: &Field) -> Option<String> {
    let Field::Parts(parts) = field else {
        return None;
    };
    if let [Part::Step(a, b, n)] = parts.as_slice() {
        let to = b
            .map(|b| format!(" to the {}", ordinal(b)))
            .unwrap_or_default();
        return Some(format!(
            "every {n} days from the {}{to} of the month",
            ordinal(a.unwrap_or(1))
        ));
    }
    let items: Vec<String> = parts.iter().map(|p| month_day(*p)).collect();
    Some(format!("on {} of the month", and(&items)))
}

fn month_day(part: Part) -> String {
    match part {
        Part::Value(d) => format!("the {}", ordinal(d)),
        Part::Range(a, b) => format!("the {} to the {}", ordinal(a), ordinal(b)),
        Part::Step(a, b, n) => format!(
            "every {n} days from the {} to the {}",
            ordinal(a.unwrap_or(1)),
            ordinal(b.unwrap_or(31))
        ),
        Part::Last => "the last day".to_owned(),
        Part::LastWeekday => "the last weekday".to_owned(),
        Part::NearestWeekday(d) => format!("the weekday nearest the {}", ordinal(d)),
        Part::Nth(..) | Part::LastOf(_) => String::new(),
    }
}

/// The day-of-week field: `Monday to Friday`, `every Monday`, `on the last Friday of the month`.
fn weekdays(field: &Field) -> Option<String> {
    let Field::Parts(parts) = field else {
        return None;
    };
    if field.values(0, 7).is_some_and(|v| {
        v.iter()
            .map(|d| d % 7)
            .collect::<std::collections::BTreeSet<_>>()
            .len()
            == 7
    }) {
        return None;
    }
    let items = weekday_items(field);
    Some(match parts.as_slice() {
        [Part::Value(d)] => format!("every {}", weekday(*d)),
        [Part::Range(..)] => items.concat(),
        _ => format!("on {}", and(&items)),
    })
}

fn weekday_items(field: &Field) -> Vec<String> {
    let Field::Parts(parts) = field else {
        return Vec::new();
    };
    parts
        .iter()
        .flat_map(|part| match *part {
            Part::Range(a, b) => vec![format!("{} to {}", weekday(a), weekday(b))],
            Part::Nth(d, n) => {
                let nth = NTH[(n as usize).clamp(1, 5) - 1];
                vec![format!("the {nth} {} of the month", weekday(d))]
            }
            Part::LastOf(d) => vec![format!("the last {} of the month", weekday(d))],
            plain => Field::Parts(vec![plain])
                .values(0, 7)
                .unwrap_or_default()
                .into_iter()
                .map(weekday)
                .collect(),
        })
        .collect()
}

fn weekday(d: u32) -> String {
    WEEKDAYS[(d % 7) as usize].to_owned()
}

/// `a`, `a and b`, `a, b and c`.
fn and(items: &[String]) -> String {
    joined(items, "and")
}

fn or(items: &[String]) -> String {
    joined(items, "or")
}

fn joined(items: &[String], word: &str) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} {word} {last}", init.join(", ")),
    }
}
