//! A job's schedule said in words, in Chinese or English: one line with the time, the days, the
//! zone and the calendar (`工作日 09:30（Asia/Shanghai），法定节假日跳过，调休上班日照常执行`;
//! `09:30 on workdays (Asia/Shanghai), skipping public holidays, running on make-up workdays`).
//! Pure: a function of the checked schedule (cron, zone, day filter) and the language. A cron
//! shape the words do not know is quoted as written, never guessed at.
//!
//! `cron` reads the expression into fields; `en` and `zh` say it, each in its own word order;
//! what both need to know about a cron (the times it names, the unit it repeats in, whether it
//! may fall on a weekend) is here.

mod cron;
mod en;
mod zh;

use chrono_tz::Tz;

use self::cron::{Cron, Field, Part};
use crate::time::calendar::{DayFilter, Days};
use crate::time::schedule::Schedule;

/// The language of the words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum Lang {
    /// 中文.
    Zh,
    /// English.
    En,
}

impl Lang {
    /// The language a locale names (`zh_CN.UTF-8`, `zh_TW`, `en_US.UTF-8`, `C`); `None` for an
    /// empty one, which names nothing.
    pub fn from_locale(locale: &str) -> Option<Lang> {
        match locale.trim() {
            "" => None,
            l if l.to_ascii_lowercase().starts_with("zh") => Some(Lang::Zh),
            _ => Some(Lang::En),
        }
    }

    /// The language of the process's locale: the first of `LC_ALL`, `LC_MESSAGES` and `LANG`
    /// that is set (POSIX's order); English when none is.
    pub fn from_env() -> Lang {
        ["LC_ALL", "LC_MESSAGES", "LANG"]
            .iter()
            .find_map(|name| Lang::from_locale(&std::env::var(name).unwrap_or_default()))
            .unwrap_or(Lang::En)
    }
}

/// `schedule` in words, in `lang`.
pub fn describe(schedule: &Schedule, lang: Lang) -> String {
    let zone = schedule.zone();
    let calendar = schedule.day_filter().map(CalendarWords::of);
    let Some(cron) = cron::read(schedule.expression()) else {
        return quoted(schedule.expression(), zone, calendar.as_ref(), lang);
    };
    match lang {
        Lang::Zh => zh::sentence(&cron, zone, calendar.as_ref()),
        Lang::En => en::sentence(&cron, zone, calendar.as_ref()),
    }
}

/// A cron the words do not know, quoted.
fn quoted(expression: &str, zone: Tz, calendar: Option<&CalendarWords>, lang: Lang) -> String {
    let days = calendar.map(|c| c.days);
    match lang {
        Lang::Zh => {
            let days = days.map(|d| zh::only(d, calendar)).unwrap_or_default();
            format!("按 cron「{expression}」（{zone}）{days}")
        }
        Lang::En => {
            let days = days.map(|d| en::only(d, calendar)).unwrap_or_default();
            format!("on cron \"{expression}\" ({zone}){days}")
        }
    }
}

/// What the words say of a job's calendar.
#[derive(Debug)]
pub(crate) struct CalendarWords {
    days: Days,
    /// A built-in calendar (`cn`): its days off are public holidays and its worked weekend
    /// days make-up workdays (调休); another calendar's are only what it lists.
    builtin: bool,
    name: String,
}

impl CalendarWords {
    fn of(filter: &DayFilter) -> Self {
        CalendarWords {
            days: filter.days,
            builtin: filter.calendar.coverage().is_some(),
            name: filter.calendar.name().to_owned(),
        }
    }
}

/// The wall times of a cron that names a few (`0 30 9,18 * * *`): hour, minute, second.
fn wall_times(cron: &Cron) -> Option<Vec<(u32, u32, u32)>> {
    let plain =
        |f: &Field| matches!(f, Field::Parts(p) if p.iter().all(|p| matches!(p, Part::Value(_))));
    let (second, minute) = (cron.second.values(0, 59)?, cron.minute.values(0, 59)?);
    let lone_range =
        matches!(&cron.hour, Field::Parts(p) if matches!(p.as_slice(), [Part::Range(..)]));
    let stepped =
        matches!(&cron.hour, Field::Parts(p) if p.iter().any(|p| matches!(p, Part::Step(..))));
    let one_a_hour = second.len() == 1 && minute.len() == 1 && !lone_range && !stepped;
    if !(plain(&cron.second) && plain(&cron.minute) && (plain(&cron.hour) || one_a_hour)) {
        return None;
    }
    let hours = cron.hour.values(0, 23)?;
    let mut times = Vec::new();
    for &h in &hours {
        for &m in &minute {
            times.extend(second.iter().map(|&s| (h, m, s)));
        }
    }
    (times.len() <= MAX_TIMES_LISTED).then_some(times)
}

/// The most times a sentence lists; a cron naming more is said as a repetition.
const MAX_TIMES_LISTED: usize = 24;

/// `09:30`, or `09:30:15` when any of the times has seconds.
fn clock(times: &[(u32, u32, u32)]) -> Vec<String> {
    let seconds = times.iter().any(|t| t.2 != 0);
    times
        .iter()
        .map(|(h, m, s)| match seconds {
            true => format!("{h:02}:{m:02}:{s:02}"),
            false => format!("{h:02}:{m:02}"),
        })
        .collect()
}

/// The field a cron that is not a few wall times repeats in: the finest that is not one value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Unit {
    Second,
    Minute,
    Hour,
}

fn unit(cron: &Cron) -> Unit {
    if cron.second.single().is_none() {
        Unit::Second
    } else if cron.minute.single().is_none() {
        Unit::Minute
    } else {
        Unit::Hour
    }
}

/// How a cron at one minute and second of several hours spreads over the day.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hours {
    /// Every hour (`*`).
    All,
    /// Every n hours from midnight (`*/2`).
    Every(u32),
    /// Every n hours between the first and the last (`9-17/2`, `3/6`).
    EveryWithin(u32),
    /// Every hour between the first and the last (`9-17`).
    Within,
}

/// A cron at one minute and second of several hours: the minute, the second, how the hours
/// spread, and the first and last of them as wall times.
struct Hourly {
    minute: u32,
    second: u32,
    hours: Hours,
    first: String,
    last: String,
}

fn hourly(cron: &Cron) -> Hourly {
    let (minute, second) = (
        cron.minute.single().unwrap_or(0),
        cron.second.single().unwrap_or(0),
    );
    let hours = cron.hour.values(0, 23).unwrap_or_default();
    let time = |h: Option<&u32>, or: u32| clock(&[(*h.unwrap_or(&or), minute, second)]).remove(0);
    let spread = match &cron.hour {
        Field::Any => Hours::All,
        Field::Parts(parts) => match parts.as_slice() {
            [Part::Step(None | Some(0), None, n)] => Hours::Every(*n),
            [Part::Step(_, _, n)] => Hours::EveryWithin(*n),
            _ => Hours::Within,
        },
    };
    Hourly {
        minute,
        second,
        hours: spread,
        first: time(hours.first(), 0),
        last: time(hours.last(), 23),
    }
}

/// The cron names every day (no day, month or weekday narrowed).
fn every_day(cron: &Cron) -> bool {
    cron.day == Field::Any && cron.month == Field::Any && weekday_set(cron).is_none()
}

/// The weekdays the weekday field names (0 Sunday to 6 Saturday; `5#3` and `5L` name Friday);
/// `None` for all seven.
fn weekday_set(cron: &Cron) -> Option<Vec<u32>> {
    let Field::Parts(parts) = &cron.weekday else {
        return None;
    };
    let mut days = Vec::new();
    for part in parts {
        match *part {
            Part::Nth(d, _) | Part::LastOf(d) => days.push(d),
            plain => days.extend(Field::Parts(vec![plain]).values(0, 7).unwrap_or_default()),
        }
    }
    let mut days: Vec<u32> = days.iter().map(|d| d % 7).collect();
    days.sort_unstable();
    days.dedup();
    (days.len() < 7).then_some(days)
}

/// Whether the cron may fire on a Saturday or Sunday: whether a calendar's make-up workdays
/// (worked weekend days) can matter to it.
fn may_fire_on_weekends(cron: &Cron) -> bool {
    let days_decide = cron.both_days || cron.day == Field::Any;
    let weekend = |days: Vec<u32>| days.iter().any(|d| *d == 0 || *d == 6);
    !days_decide || weekday_set(cron).is_none_or(weekend)
}

/// `1st`, `2nd`, `3rd`, `4th`, `11th`, `21st`.
fn ordinal(n: u32) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}
