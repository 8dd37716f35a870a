//! The words in Chinese, as a Chinese ops engineer writes them: `工作日 09:30（Asia/Shanghai），
//! 法定节假日跳过，调休上班日照常执行`, `每周一至周五 09:30`, `每 5 分钟`, `每月最后一天`.
//! The days come first, then the time, the zone and the calendar; a space stands between
//! Chinese and Latin letters or digits, as Chinese technical writing spaces them.

use chrono_tz::Tz;

use super::cron::{Cron, Field, Part};
use super::{CalendarWords, Hours, Unit, clock, every_day, may_fire_on_weekends, unit, wall_times};
use crate::time::calendar::Days;

const WEEKDAYS: [&str; 7] = ["日", "一", "二", "三", "四", "五", "六"];
const NTH: [&str; 5] = ["一", "二", "三", "四", "五"];

/// The sentence of a cron read into fields.
pub(super) fn sentence(cron: &Cron, zone: Tz, calendar: Option<&CalendarWords>) -> String {
    let (time, repeats) = match wall_times(cron) {
        Some(times) => (clock(&times).join("、"), false),
        None => (repetition(cron), true),
    };
    if let Some(calendar) = calendar.filter(|_| every_day(cron)) {
        let on = match calendar.days {
            Days::Workdays => "工作日",
            Days::Holidays => "节假日",
        };
        return format!("{}（{zone}）{}", glue(on, &time), whole(calendar, cron));
    }
    let when = match (days(cron), repeats) {
        (Some(days), _) => glue(&days, &time),
        (None, true) => time,
        (None, false) => glue("每天", &time),
    };
    let only = calendar
        .map(|c| only_for(c.days, Some(c), may_fire_on_weekends(cron)))
        .unwrap_or_default();
    format!("{when}（{zone}）{only}")
}

/// What a calendar adds to a cron that names every day.
fn whole(calendar: &CalendarWords, cron: &Cron) -> String {
    let (off, make_up) = names(calendar);
    match (calendar.days, may_fire_on_weekends(cron)) {
        (Days::Workdays, true) => format!("，{off}跳过，{make_up}照常执行"),
        (Days::Workdays, false) => format!("，{off}跳过"),
        (Days::Holidays, _) => format!("，含周末和{off}，{make_up}不执行"),
    }
}

/// What a calendar adds to a cron that narrows the days itself (or is quoted).
pub(super) fn only(days: Days, calendar: Option<&CalendarWords>) -> String {
    only_for(days, calendar, true)
}

fn only_for(days: Days, calendar: Option<&CalendarWords>, weekends: bool) -> String {
    let (off, make_up) = calendar.map(names).unwrap_or_default();
    match (days, weekends) {
        (Days::Workdays, true) => format!("，仅限工作日：{off}跳过，{make_up}照常执行"),
        (Days::Workdays, false) => format!("，仅限工作日：{off}跳过"),
        (Days::Holidays, true) => format!("，仅限节假日（周末和{off}），{make_up}不执行"),
        (Days::Holidays, false) => format!("，仅限{off}"),
    }
}

/// The calendar's days off and make-up workdays, as named in the sentence.
fn names(calendar: &CalendarWords) -> (String, String) {
    match calendar.builtin {
        true => ("法定节假日".into(), "调休上班日".into()),
        false => (
            glue(&glue("日历", &calendar.name), "的假日"),
            glue(&glue("日历", &calendar.name), "的补班日"),
        ),
    }
}

/// A cron that repeats within the day: `09:00–17:59 每 15 分钟`.
fn repetition(cron: &Cron) -> String {
    match unit(cron) {
        Unit::Second => {
            let within = glue(&hours_within(&cron.hour), &minutes_within(&cron.minute));
            glue(&within, &rate(&cron.second, ("秒", "秒", "每分钟"), 59))
        }
        Unit::Minute => {
            let second = cron.second.single().unwrap_or(0);
            let at = (second != 0).then(|| format!("（第 {second} 秒）"));
            let rate = rate(&cron.minute, ("分钟", "分", "每小时"), 59);
            glue(&hours_within(&cron.hour), &rate) + &at.unwrap_or_default()
        }
        Unit::Hour => hourly(cron),
    }
}

/// How often a second or minute field fires; `unit` is its name as a span, as a point, and
/// its parent's repetition (`分钟`, `分`, `每小时`).
fn rate(field: &Field, unit: (&str, &str, &str), max: u32) -> String {
    let (span, point, parent) = unit;
    let parts = match field {
        Field::Any => return format!("每{span}"),
        Field::Parts(parts) => parts.as_slice(),
    };
    match parts {
        [Part::Step(None | Some(0), None, 1)] => format!("每{span}"),
        [Part::Step(None | Some(0), None, n)] => format!("每 {n} {span}"),
        [Part::Step(a, None, n)] => {
            format!("{parent}从第 {} {point}起每 {n} {span}", a.unwrap_or(0))
        }
        [Part::Step(a, Some(b), n)] => {
            format!("{parent}第 {}–{b} {point}每 {n} {span}", a.unwrap_or(0))
        }
        [Part::Range(a, b)] => format!("{parent}第 {a}–{b} {point}每{span}"),
        _ => {
            let values = field.values(0, max).unwrap_or_default();
            let list: Vec<String> = values.iter().map(u32::to_string).collect();
            format!("{parent}第 {} {point}", list.join("、"))
        }
    }
}

/// The minutes a seconds rate is narrowed to.
fn minutes_within(minute: &Field) -> String {
    let Some(values) = minute.values(0, 59) else {
        return String::new();
    };
    let list: Vec<String> = values.iter().map(u32::to_string).collect();
    format!("第 {} 分钟内", list.join("、"))
}

/// The hours a seconds or minutes rate is narrowed to.
fn hours_within(hour: &Field) -> String {
    let Some(values) = hour.values(0, 23) else {
        return String::new();
    };
    let (first, last) = (values[0], values[values.len() - 1]);
    match hour {
        Field::Parts(parts) if matches!(parts.as_slice(), [Part::Value(_)] | [Part::Range(..)]) => {
            format!("{first:02}:00–{last:02}:59")
        }
        _ => {
            let list: Vec<String> = values.iter().map(u32::to_string).collect();
            format!("{} 点时段内", list.join("、"))
        }
    }
}

/// A cron at one minute and second of several hours: `每小时整点`, `09:00–17:00 每小时`.
fn hourly(cron: &Cron) -> String {
    let hourly = super::hourly(cron);
    let at = match (hourly.minute, hourly.second) {
        (0, 0) => "整点".to_owned(),
        (m, 0) => format!("第 {m} 分"),
        (m, s) => format!("第 {m} 分 {s} 秒"),
    };
    let (first, last) = (&hourly.first, &hourly.last);
    match hourly.hours {
        Hours::All => format!("每小时{at}"),
        Hours::Every(n) => glue(&format!("每 {n} 小时"), &at),
        Hours::EveryWithin(n) => format!("{first}–{last} 每 {n} 小时"),
        Hours::Within => format!("{first}–{last} 每小时"),
    }
}

/// The days a cron names, or `None` for every day.
fn days(cron: &Cron) -> Option<String> {
    let days = match (month_days(&cron.day), weekdays(&cron.weekday)) {
        (None, None) => None,
        (Some(d), None) => Some(d),
        (None, Some(w)) => Some(w),
        (Some(d), Some(w)) if cron.both_days => {
            Some(format!("{d}且逢{}", w.trim_start_matches('每')))
        }
        (Some(d), Some(w)) => Some(format!("{d}及{w}")),
    };
    in_months(days, &cron.month)
}

/// The days narrowed to the months the cron names: `每年 3 月 1 日`, `每年 6 月至 8 月的每周一`.
fn in_months(days: Option<String>, month: &Field) -> Option<String> {
    let Field::Parts(parts) = month else {
        return days;
    };
    let items: Vec<String> = parts
        .iter()
        .flat_map(|part| match *part {
            Part::Range(a, b) => vec![format!("{a} 月至 {b} 月")],
            plain => Field::Parts(vec![plain])
                .values(1, 12)
                .unwrap_or_default()
                .into_iter()
                .map(|m| format!("{m} 月"))
                .collect(),
        })
        .collect();
    let months = glue("每年", &items.join("、"));
    Some(match days {
        None => format!("{months}每天"),
        Some(days) => match days.strip_prefix("每月") {
            Some(rest) => glue(&months, rest),
            None => format!("{months}的{days}"),
        },
    })
}

/// The day-of-month field: `每月 1 日、15 日`, `每月最后一天`.
fn month_days(field: &Field) -> Option<String> {
    let Field::Parts(parts) = field else {
        return None;
    };
    let items: Vec<String> = parts.iter().map(|p| month_day(*p)).collect();
    Some(glue("每月", &items.join("、")))
}

fn month_day(part: Part) -> String {
    match part {
        Part::Value(d) => format!("{d} 日"),
        Part::Range(a, b) => format!("{a} 日至 {b} 日"),
        Part::Step(a, None, n) => format!("从 {} 日起每 {n} 天", a.unwrap_or(1)),
        Part::Step(a, Some(b), n) => format!("{} 日至 {b} 日每 {n} 天", a.unwrap_or(1)),
        Part::Last => "最后一天".to_owned(),
        Part::LastWeekday => "最后一个工作日（周一至周五）".to_owned(),
        Part::NearestWeekday(d) => format!("离 {d} 日最近的工作日（周一至周五）"),
        Part::Nth(..) | Part::LastOf(_) => String::new(),
    }
}

/// The day-of-week field: `每周一至周五`, `每周一、三、五`, `每月最后一个周五`.
fn weekdays(field: &Field) -> Option<String> {
    let Field::Parts(parts) = field else {
        return None;
    };
    let all = field.values(0, 7).map(|v| {
        v.iter()
            .map(|d| d % 7)
            .collect::<std::collections::BTreeSet<_>>()
            .len()
    });
    if all == Some(7) {
        return None;
    }
    let mut plain = Vec::new();
    let mut special = Vec::new();
    for part in parts {
        match *part {
            Part::Range(a, b) => plain.push(format!("{}至周{}", weekday(a), weekday(b))),
            Part::Nth(d, n) => {
                let nth = NTH[(n as usize).clamp(1, 5) - 1];
                special.push(format!("每月第{nth}个周{}", weekday(d)));
            }
            Part::LastOf(d) => special.push(format!("每月最后一个周{}", weekday(d))),
            other => plain.extend(
                Field::Parts(vec![other])
                    .values(0, 7)
                    .unwrap_or_default()
                    .into_iter()
                    .map(weekday),
            ),
        }
    }
    let plain = (!plain.is_empty()).then(|| format!("每周{}", plain.join("、")));
    Some(
        plain
            .into_iter()
            .chain(special)
            .collect::<Vec<_>>()
            .join("、"),
    )
}

fn weekday(d: u32) -> String {
    WEEKDAYS[(d % 7) as usize].to_owned()
}

/// `a` then `b`, with a space where Chinese meets a Latin letter or a digit.
fn glue(a: &str, b: &str) -> String {
    let cjk = |c: char| ('\u{4e00}'..='\u{9fff}').contains(&c);
    let latin = |c: char| c.is_ascii_alphanumeric();
    match (a.chars().last(), b.chars().next()) {
        (Some(x), Some(y)) if (latin(x) && cjk(y)) || (cjk(x) && latin(y)) => format!("{a} {b}"),
        _ => format!("{a}{b}"),
    }
}
