//! A cron expression (already accepted by croner) read into the shapes its words follow:
//! each field as `*` or a list of values, ranges, steps and the special days (`L`, `W`, `#`).

/// One comma-separated part of a field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Part {
    /// `9`.
    Value(u32),
    /// `9-17`.
    Range(u32, u32),
    /// `*/5`, `10/15`, `9-17/2`: from (the field's start when absent), to (its end when
    /// absent), every.
    Step(Option<u32>, Option<u32>, u32),
    /// `L` in the day of month: its last day.
    Last,
    /// `LW`: the month's last weekday.
    LastWeekday,
    /// `15W`: the weekday nearest the 15th.
    NearestWeekday(u32),
    /// `5#3`: the third Friday of the month.
    Nth(u32, u32),
    /// `5L`: the month's last Friday.
    LastOf(u32),
}

/// A field: every value (`*`, `?`), or the parts listed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Field {
    Any,
    Parts(Vec<Part>),
}

impl Field {
    /// The one plain value of a field that has exactly one.
    pub(super) fn single(&self) -> Option<u32> {
        match self {
            Field::Parts(parts) => match parts.as_slice() {
                [Part::Value(v)] => Some(*v),
                _ => None,
            },
            Field::Any => None,
        }
    }

    /// The values of a field of plain values, ranges and steps, within `min..=max`, sorted;
    /// `None` for `*` or a special day.
    pub(super) fn values(&self, min: u32, max: u32) -> Option<Vec<u32>> {
        let Field::Parts(parts) = self else {
            return None;
        };
        let mut values = Vec::new();
        for part in parts {
            match *part {
                Part::Value(v) => values.push(v),
                Part::Range(a, b) => values.extend(a..=b),
                Part::Step(a, b, n) => {
                    let (a, b) = (a.unwrap_or(min), b.unwrap_or(max));
                    values.extend((a..=b).step_by(n.max(1) as usize));
                }
                _ => return None,
            }
        }
        values.retain(|v| (min..=max).contains(v));
        values.sort_unstable();
        values.dedup();
        Some(values)
    }
}

/// The six fields of a cron, and whether a day must match both day fields (`+` before the
/// day of week) rather than either (Vixie cron's rule, croner's default).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Cron {
    pub second: Field,
    pub minute: Field,
    pub hour: Field,
    pub day: Field,
    pub month: Field,
    pub weekday: Field,
    pub both_days: bool,
}

const WEEKDAYS: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];
const MONTHS: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];

/// Reads `expression`; `None` for a shape these words do not know (then the cron is quoted).
pub(super) fn read(expression: &str) -> Option<Cron> {
    let upper = expression.trim().to_uppercase();
    let expanded = nickname(&upper).unwrap_or(&upper);
    let mut fields: Vec<String> = expanded.split_whitespace().map(str::to_owned).collect();
    if fields.len() == 5 {
        fields.insert(0, "0".to_owned());
    }
    let [second, minute, hour, day, month, weekday] = <[String; 6]>::try_from(fields).ok()?;
    let both_days = weekday.starts_with('+');
    let weekday = names(weekday.trim_start_matches('+'), &WEEKDAYS, 0);
    let cron = Cron {
        second: field(&second)?,
        minute: field(&minute)?,
        hour: field(&hour)?,
        day: field(&day)?,
        month: field(&names(&month, &MONTHS, 1))?,
        weekday: field(&weekday)?,
        both_days,
    };
    special_days_in_place(&cron).then_some(cron)
}

/// Whether the special days stand where the words read them: `L`, `LW` and `W` in the day of
/// month, `#` and `5L` in the day of week, nowhere else. croner gives some others a meaning
/// (`L` alone in the day of week); those crons are quoted rather than said wrong.
fn special_days_in_place(cron: &Cron) -> bool {
    let only = |field: &Field, allowed: fn(&Part) -> bool| match field {
        Field::Any => true,
        Field::Parts(parts) => parts.iter().all(allowed),
    };
    [&cron.second, &cron.minute, &cron.hour, &cron.month]
        .iter()
        .all(|f| only(f, plain))
        && only(&cron.day, |p| {
            plain(p) || matches!(p, Part::Last | Part::LastWeekday | Part::NearestWeekday(_))
        })
        && only(&cron.weekday, |p| {
            plain(p) || matches!(p, Part::Nth(..) | Part::LastOf(_))
        })
}

fn plain(part: &Part) -> bool {
    matches!(part, Part::Value(_) | Part::Range(..) | Part::Step(..))
}

fn nickname(expression: &str) -> Option<&'static str> {
    Some(match expression {
        "@YEARLY" | "@ANNUALLY" => "0 0 1 1 *",
        "@MONTHLY" => "0 0 1 * *",
        "@WEEKLY" => "0 0 * * 0",
        "@DAILY" => "0 0 * * *",
        "@HOURLY" => "0 * * * *",
        _ => return None,
    })
}

/// `field` with each name (`MON`, `JAN`) replaced by its number, counted from `first`.
fn names(field: &str, names: &[&str], first: usize) -> String {
    names
        .iter()
        .enumerate()
        .fold(field.to_owned(), |field, (i, name)| {
            field.replace(name, &(i + first).to_string())
        })
}

fn field(text: &str) -> Option<Field> {
    if text == "*" || text == "?" {
        return Some(Field::Any);
    }
    text.split(',')
        .map(part)
        .collect::<Option<Vec<_>>>()
        .map(Field::Parts)
}

fn part(text: &str) -> Option<Part> {
    let number = |t: &str| t.parse::<u32>().ok();
    if let Some((range, every)) = text.split_once('/') {
        let every = number(every)?;
        return Some(match range.split_once('-') {
            _ if range == "*" => Part::Step(None, None, every),
            Some((a, b)) => Part::Step(Some(number(a)?), Some(number(b)?), every),
            None => Part::Step(Some(number(range)?), None, every),
        });
    }
    Some(match text {
        "L" => Part::Last,
        "LW" => Part::LastWeekday,
        _ if text.ends_with('W') => Part::NearestWeekday(number(&text[..text.len() - 1])?),
        _ if text.ends_with('L') => Part::LastOf(number(&text[..text.len() - 1])?),
        _ => match (text.split_once('#'), text.split_once('-')) {
            (Some((d, "L")), _) => Part::LastOf(number(d)?),
            (Some((d, n)), _) => Part::Nth(number(d)?, number(n)?),
            (None, Some((a, b))) => Part::Range(number(a)?, number(b)?),
            (None, None) => Part::Value(number(text)?),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_special_day_out_of_its_field_is_not_read() {
        assert!(read("0 9 * * L").is_none(), "L alone in the day of week");
        assert!(read("0 9 5#3 * *").is_none(), "# in the day of month");
        assert!(read("0 9 * * 5#3").is_some());
        assert!(read("0 9 LW * *").is_some());
    }
}
