//! Calendars: the built-in `cn` calendar against the source package's own answers for every
//! day it covers; `slotcron check` under libfaketime before Spring Festival and National Day
//! 2026 (the State Council's workdays, make-up workdays included); an .ics calendar with
//! single, multi-day and yearly all-day events layered with inline days; the filtered schedule
//! against the cron's own slots (a property test, across DST changes); a fleet of three
//! replica processes on faked dates: a holiday runs nothing, a make-up workday runs once; and
//! the warning and metric past the end of the `cn` data; an event lasting millions of weeks
//! refused by `check` (exit 2) and by a hot reload, in bounded memory.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use chrono::{DateTime, Datelike, NaiveDate, Utc};
use common::fleet::FleetToml;
use common::{Receiver, RedisCluster, Replica, write_config};
use proptest::prelude::*;
use slotcron::unstable::config;
use slotcron::unstable::time::calendar::{Calendar, Day, DayFilter, Days, Reason, cn};
use slotcron::unstable::time::schedule::Schedule;

const ANSWERS: &str = include_str!("../data/cn_package_answers.txt");

fn date(s: &str) -> NaiveDate {
    s.parse().unwrap()
}

fn cn_calendar() -> Calendar {
    let mut calendar = Calendar::new("cn");
    calendar.add_builtin(cn::builtin("cn").unwrap());
    calendar
}

/// `is_workday` of the package for each day, by year, from the fixture.
fn package_workdays() -> BTreeMap<i32, Vec<bool>> {
    ANSWERS
        .lines()
        .filter_map(|l| l.strip_prefix("year "))
        .map(|l| {
            let (year, letters) = l.split_once(' ').unwrap();
            let days = letters.chars().map(|c| c == 'W').collect();
            (year.parse().unwrap(), days)
        })
        .collect()
}

/// `get_holiday_detail` of the package for each day it names: (date, day off?, English name).
fn package_named_days() -> Vec<(NaiveDate, bool, String)> {
    ANSWERS
        .lines()
        .filter(|l| l.starts_with(|c: char| c.is_ascii_digit()))
        .map(|l| {
            let mut parts = l.splitn(3, ' ');
            let day = date(parts.next().unwrap());
            let off = parts.next().unwrap() == "H";
            (day, off, parts.next().unwrap().to_owned())
        })
        .collect()
}

#[test]
fn cn_agrees_with_the_packages_is_workday_on_every_day_it_covers() {
    let calendar = cn_calendar();
    let answers = package_workdays();
    let coverage = calendar.coverage().unwrap();
    let years: Vec<i32> = answers.keys().copied().collect();
    let covered: Vec<i32> = (coverage.first.year()..=coverage.last.year()).collect();
    assert_eq!(
        years, covered,
        "the fixture and the data cover different years"
    );
    let mut checked = 0;
    let mut wrong = Vec::new();
    for (year, days) in &answers {
        let mut day = NaiveDate::from_ymd_opt(*year, 1, 1).unwrap();
        for &workday in days {
            if calendar.day(day).is_workday() != workday {
                wrong.push(format!("{day}: package says workday={workday}"));
            }
            assert!(!calendar.is_beyond_coverage(day));
            day = day.succ_opt().unwrap();
            checked += 1;
        }
        assert_eq!(
            day.year(),
            year + 1,
            "the fixture's {year} is not a whole year"
        );
    }
    assert_eq!(checked, 8401, "every day of 2004-2026");
    assert!(
        wrong.is_empty(),
        "{} days differ:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

#[test]
fn cn_names_every_holiday_and_make_up_workday_as_the_package_does() {
    let calendar = cn_calendar();
    let named = package_named_days();
    let (mut holidays, mut make_up) = (0, 0);
    for (day, off, name) in &named {
        match calendar.day(*day) {
            Day::Holiday(reason) if *off => {
                assert!(
                    reason.what.ends_with(name.as_str()),
                    "{day}: {reason} vs {name}"
                );
                holidays += 1;
            }
            Day::MakeUp(reason) if !off => {
                assert!(
                    reason.what.contains(name.as_str()),
                    "{day}: {reason} vs {name}"
                );
                make_up += 1;
            }
            other => panic!("{day}: the package says off={off} ({name}), slotcron says {other:?}"),
        }
    }
    let builtin = cn::builtin("cn").unwrap();
    assert_eq!(holidays, builtin.days_off().len());
    assert_eq!(make_up, builtin.make_up().len());
    assert!(make_up > 100 && holidays > 500, "{make_up} {holidays}");
}

#[test]
fn cn_past_its_last_year_is_monday_to_friday_and_says_so() {
    let calendar = cn_calendar();
    let last = calendar.coverage().unwrap().last;
    let after = last.succ_opt().unwrap();
    assert!(calendar.is_beyond_coverage(after));
    // 2027-01-01 is a Friday: without data it is an ordinary workday.
    assert_eq!(calendar.day(date("2027-01-01")), Day::Weekday);
    assert_eq!(calendar.day(date("2027-01-02")), Day::Weekend);
}

const STANDUP_CN: &str = r#"
[scheduler]
timezone = "Asia/Shanghai"

[calendar.cn]
builtin = "cn"

[[job]]
name = "standup"
schedule = "0 30 9 * * *"
calendar = "cn"
days = "workdays"
[job.action]
type = "log"
content = "standup"
"#;

/// `slotcron check --next N` run under `faketime` at `at` (UTC): its stdout.
fn check_at(config: &Path, at: &str, next: usize) -> String {
    let output = Command::new("faketime")
        .arg(at)
        .arg(env!("CARGO_BIN_EXE_slotcron"))
        .args(["check", "--next", &next.to_string(), "--config"])
        .arg(config)
        .env("TZ", "UTC")
        .output()
        .expect("faketime runs (Debian's faketime package; scripts/test.sh installs it)");
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// The dates of the slot lines (`  2026-02-10T09:30:00+08:00 ...`), and the skipped-day lines.
fn slots_and_skips(stdout: &str) -> (Vec<String>, Vec<String>) {
    let lines: Vec<&str> = stdout.lines().map(str::trim).collect();
    let slots = lines
        .iter()
        .filter(|l| l.contains("T09:30:00+08:00"))
        .map(|l| l[..10].to_owned())
        .collect();
    let skips = lines
        .iter()
        .filter(|l| l.contains(" skipped: "))
        .map(|l| (*l).to_owned())
        .collect();
    (slots, skips)
}

#[test]
fn check_before_spring_festival_2026_lists_the_state_councils_workdays() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), STANDUP_CN);
    // 08:00 in Shanghai on Tuesday 2026-02-10.
    let out = check_at(&config, "2026-02-10 00:00:00", 10);
    let (slots, skips) = slots_and_skips(&out);
    // 国办发明电〔2025〕7号: 春节 2-15..2-23 off; Saturdays 2-14 and 2-28 are make-up workdays.
    assert_eq!(
        slots,
        [
            "2026-02-10",
            "2026-02-11",
            "2026-02-12",
            "2026-02-13",
            "2026-02-14",
            "2026-02-24",
            "2026-02-25",
            "2026-02-26",
            "2026-02-27",
            "2026-02-28"
        ],
        "{out}"
    );
    let expected: Vec<String> = (15..=23)
        .map(|d| format!("2026-02-{d} skipped: 春节 Spring Festival (cn)"))
        .collect();
    assert_eq!(skips, expected, "{out}");
    assert!(
        out.contains("2026-02-14T09:30:00+08:00  make-up workday for 春节 Spring Festival (cn)"),
        "{out}"
    );
}

#[test]
fn check_before_national_day_2026_lists_the_state_councils_workdays() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), STANDUP_CN);
    // 08:00 in Shanghai on Thursday 2026-09-24.
    let out = check_at(&config, "2026-09-24 00:00:00", 10);
    let (slots, skips) = slots_and_skips(&out);
    // 中秋 9-25..9-27 and 国庆节 10-1..10-7 off; Saturday 10-10 is a make-up workday.
    assert_eq!(
        slots,
        [
            "2026-09-24",
            "2026-09-28",
            "2026-09-29",
            "2026-09-30",
            "2026-10-08",
            "2026-10-09",
            "2026-10-10",
            "2026-10-12",
            "2026-10-13",
            "2026-10-14"
        ],
        "{out}"
    );
    for day in 1..=7 {
        let line = format!("2026-10-0{day} skipped: 国庆节 National Day (cn)");
        assert!(skips.contains(&line), "no {line:?} in:\n{out}");
    }
    assert!(skips.contains(&"2026-09-25 skipped: 中秋 Mid-autumn Festival (cn)".to_owned()));
    assert!(
        skips.contains(&"2026-10-11 skipped: weekend".to_owned()),
        "{out}"
    );
    assert_eq!(skips.len(), 3 + 7 + 1, "{out}");
    assert!(
        out.contains("make-up workday for 国庆节 National Day (cn)"),
        "{out}"
    );
}

#[test]
fn check_near_the_end_of_the_data_warns_and_marks_the_guessed_days() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), STANDUP_CN);
    let out = check_at(&config, "2026-12-29 00:00:00", 5);
    assert!(
        out.contains("warning: calendar \"cn\": the built-in cn data (chinesecalendar ")
            && out.contains("ends on 2026-12-31"),
        "{out}"
    );
    let (slots, _) = slots_and_skips(&out);
    assert_eq!(
        slots,
        [
            "2026-12-29",
            "2026-12-30",
            "2026-12-31",
            "2027-01-01",
            "2027-01-04"
        ],
        "{out}"
    );
    let guessed: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("Monday to Friday assumed"))
        .collect();
    assert_eq!(guessed.len(), 2, "only the 2027 slots are guesses:\n{out}");
    assert!(guessed.iter().all(|l| l.contains("2027-01-0")), "{out}");
}

/// A jobs.toml beside `calendars/office.ics` (the fixture), its calendar layered with inline days.
fn office_config(dir: &Path, days: &str) -> PathBuf {
    std::fs::create_dir_all(dir.join("calendars")).unwrap();
    let fixture = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/calendars/office.ics"
    );
    std::fs::copy(fixture, dir.join("calendars/office.ics")).unwrap();
    write_config(
        dir,
        &format!(
            r#"
            [calendar.office]
            ics = "calendars/office.ics"
            holidays = ["2027-01-04"]
            workdays = [2026-12-27]

            [[job]]
            name = "report"
            schedule = "0 0 18 * * *"
            calendar = "office"
            days = "{days}"
            [job.action]
            type = "log"
            content = "report"
            "#
        ),
    )
}

fn slot_dates(config: &config::Config, from: &str, n: usize) -> Vec<String> {
    let from: DateTime<Utc> = from.parse().unwrap();
    let job = &config.jobs[0];
    job.schedule
        .upcoming(from, n)
        .iter()
        .map(|s| job.schedule.local_date(*s).to_string())
        .collect()
}

#[test]
fn an_ics_calendar_with_single_multi_day_and_yearly_all_day_events() {
    let dir = tempfile::tempdir().unwrap();
    let workdays =
        config::load(&office_config(dir.path(), "workdays")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        slot_dates(&workdays, "2026-12-21T00:00:00Z", 8),
        [
            "2026-12-21",
            "2026-12-22",
            "2026-12-23", // a meeting with a time of day is no day off
            // 12-24: Christmas Eve, a single all-day event
            "2026-12-25",
            "2026-12-27", // Sunday, listed in workdays
            // 12-28..12-30: the winter break (DTEND 12-31 is exclusive)
            "2026-12-31",
            // 01-01: New Year's Day, yearly since 2020; 01-04 listed in holidays
            "2027-01-05",
            "2027-01-06",
        ]
    );
    let calendar = &workdays.jobs[0].schedule.day_filter().unwrap().calendar;
    assert_eq!(
        calendar.day(date("2026-12-24")).to_string(),
        "Christmas Eve (calendars/office.ics)"
    );
    assert_eq!(
        calendar.day(date("2026-12-29")).to_string(),
        "Winter break (calendars/office.ics)"
    );
    assert_eq!(
        calendar.day(date("2027-01-04")).to_string(),
        "listed in holidays (office)"
    );
    // The yearly event recurs long after its first year, and only on its date.
    for year in [2020, 2031, 2099] {
        let day = NaiveDate::from_ymd_opt(year, 1, 1).unwrap();
        assert!(
            matches!(calendar.day(day), Day::Holiday(r) if r.what == "New Year's Day"),
            "{year}"
        );
        assert!(
            !matches!(calendar.day(day.succ_opt().unwrap()), Day::Holiday(_)),
            "{year}"
        );
    }

    let holidays =
        config::load(&office_config(dir.path(), "holidays")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        slot_dates(&holidays, "2026-12-21T00:00:00Z", 8),
        [
            "2026-12-24",
            "2026-12-26",
            "2026-12-28",
            "2026-12-29",
            "2026-12-30",
            "2027-01-01",
            "2027-01-02",
            "2027-01-03"
        ]
    );
}

/// A fleet config with three jobs every second on today's date (UTC): one whose calendar makes
/// today a holiday, one whose calendar makes it a make-up workday (an `.ics` day off that an
/// inline workday overrides, whatever weekday today is), and one with the cron alone.
fn fleet_config(nodes: &[String], receiver: &Receiver, today: NaiveDate) -> String {
    let on = |calendar: &str| format!("calendar = \"{calendar}\"\ndays = \"workdays\"");
    let action = |name: &str| {
        format!(
            "type = \"http\"\nurl = \"{}\"",
            receiver.url(&format!("/{name}"))
        )
    };
    let job = |name: &str, calendar: &str| {
        format!(
            "[[job]]\nname = \"{name}\"\nschedule = \"* * * * * *\"\n{calendar}\n\
             [job.action]\n{}\n",
            action(name)
        )
    };
    let rest = format!(
        "[calendar.off]\nholidays = [\"{today}\"]\n\
         [calendar.makeup]\nics = \"off-today.ics\"\nworkdays = [\"{today}\"]\n{}{}",
        job("makeup", &on("makeup")),
        job("plain", ""),
    );
    // The default timeout and skew, and no node timeout.
    let timeout = format!("{}s", slotcron::unstable::config::DEFAULT_TIMEOUT.as_secs());
    FleetToml {
        job: "holiday",
        timeout: &timeout,
        scheduler: "",
        redis: "",
        job_extra: &on("off"),
        action: &action("holiday"),
        rest: &rest,
        ..FleetToml::new(nodes, &receiver.uri(), "calendar-fleet")
    }
    .render()
}

/// An `.ics` file whose one all-day event is `day`.
fn ics_day_off(day: NaiveDate) -> String {
    let d = day.format("%Y%m%d");
    format!(
        "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//slotcron tests//EN\r\nBEGIN:VEVENT\r\n\
         UID:off-today@slotcron\r\nDTSTAMP:20260101T000000Z\r\nDTSTART;VALUE=DATE:{d}\r\n\
         SUMMARY:Office closed\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n"
    )
}

/// Requests by path, and by (path, slot) to find doubles.
fn by_path(receiver: &Receiver) -> BTreeMap<String, BTreeMap<String, usize>> {
    let mut counts: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
    for r in receiver.received() {
        let slot = r.headers["x-slotcron-slot"].to_str().unwrap().to_owned();
        *counts
            .entry(r.url.path().to_owned())
            .or_default()
            .entry(slot)
            .or_default() += 1;
    }
    counts
}

/// The fleet schedules on the Redis nodes' clock, and Debian's redis-server (jemalloc) does not
/// run under libfaketime, so this test cannot fake the date: it makes today a holiday and a
/// make-up workday through calendars instead. The `cn` dates themselves are checked by `check`
/// under libfaketime and against the package's answers above.
#[test]
fn a_fleet_runs_nothing_on_a_holiday_and_once_on_a_make_up_workday() {
    // Not across midnight UTC: the calendars name today.
    let seconds_left = 86_400 - chrono::Timelike::num_seconds_from_midnight(&Utc::now());
    if seconds_left < 40 {
        std::thread::sleep(Duration::from_secs(u64::from(seconds_left) + 1));
    }
    let today = Utc::now().date_naive();
    let cluster = RedisCluster::start(3);
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("off-today.ics"), ics_day_off(today)).unwrap();
    let config = write_config(dir.path(), &fleet_config(&cluster.urls(), &receiver, today));
    let mut fleet: Vec<Replica> = (1..=3)
        .map(|i| Replica::run(&config, &format!("replica-{i}"), &[]))
        .collect();
    for r in &fleet {
        assert!(
            r.wait_for_line(Duration::from_secs(20), |l| l.contains("slotcron started"))
                .is_some(),
            "{} did not start: {:?}",
            r.name(),
            r.lines()
        );
    }
    // The fleet runs until the plain job ran 3 slots (the check below), the make-up job's
    // slots of the same seconds, in flight, arriving too.
    let plain = || by_path(&receiver).get("/plain").map_or(0, BTreeMap::len);
    common::wait_until(Duration::from_secs(60), || (plain() >= 3).then_some(()));
    std::thread::sleep(common::IN_FLIGHT);
    for r in &mut fleet {
        r.terminate();
    }
    for r in &fleet {
        r.wait_timeout(Duration::from_secs(15));
    }
    let counts = by_path(&receiver);
    assert!(
        !counts.contains_key("/holiday"),
        "ran on its holiday: {counts:?}"
    );
    let plain = counts.get("/plain").map_or(0, BTreeMap::len);
    let makeup = counts.get("/makeup").cloned().unwrap_or_default();
    assert!(plain >= 3, "the fleet was not running: {counts:?}");
    assert!(
        makeup.len() + 1 >= plain,
        "the make-up workday did not run: {counts:?}"
    );
    assert!(
        makeup.values().all(|&n| n == 1),
        "a slot ran twice: {makeup:?}"
    );
}

/// `/metrics` of a standalone replica whose wall clock starts at `at` (UTC), and its log.
fn metrics_at(lib: &Path, at: &str) -> (String, Vec<String>) {
    let port = common::free_port();
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        &format!("[http]\nlisten = \"127.0.0.1:{port}\"\n{STANDUP_CN}"),
    );
    let lib = lib.display().to_string();
    let faketime = format!("@{at}");
    let env = [
        ("LD_PRELOAD", lib.as_str()),
        ("FAKETIME", faketime.as_str()),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
        ("TZ", "UTC"),
    ];
    let replica = Replica::run(&config, "metrics", &env);
    assert!(
        replica
            .wait_for_line(Duration::from_secs(10), |l| l.contains("serving /healthz"))
            .is_some(),
        "{:?}",
        replica.lines()
    );
    let reply = common::http_get(port, "/metrics").expect("/metrics answers");
    (reply.body, replica.lines())
}

#[test]
fn a_replica_past_the_cn_data_warns_at_start_and_says_so_in_a_metric() {
    let lib = common::tools::libfaketime()
        .expect("libfaketime is installed (Debian's faketime; scripts/test.sh installs it)");
    let gauge = |metrics: &str| {
        metrics
            .lines()
            .find_map(|l| {
                l.strip_prefix("slotcron_calendar_beyond_coverage{slotcron_job=\"standup\"} ")
            })
            .map(str::to_owned)
    };
    let warned = |log: &[String], ends: &str| {
        log.iter()
            .any(|l| l.contains("the built-in cn data (chinesecalendar") && l.contains(ends))
    };
    let (inside, log) = metrics_at(&lib, "2026-09-24 00:00:00");
    assert_eq!(gauge(&inside).as_deref(), Some("0"), "{inside}");
    assert!(!warned(&log, "2026-12-31"), "{log:?}");
    let (beyond, log) = metrics_at(&lib, "2027-01-04 00:00:00");
    assert_eq!(gauge(&beyond).as_deref(), Some("1"), "{beyond}");
    assert!(warned(&log, "ended on 2026-12-31"), "{log:?}");
}

const PROP_CRONS: [&str; 5] = [
    "0 30 9 * * *",
    "0 0 */6 * * *",
    "0 15 1,13 * * Mon-Fri",
    "0 30 2 * * *",
    "0 0 0 * * *",
];
const PROP_ZONES: [&str; 4] = [
    "Asia/Shanghai",
    "America/New_York",
    "America/Sao_Paulo",
    "Australia/Lord_Howe",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// With a calendar, the slots are exactly the cron's slots whose local date the calendar
    /// keeps, in order, and `current` agrees with `next_after` on each of them.
    #[test]
    fn the_filtered_schedule_is_the_crons_slots_on_kept_days(
        cron in 0..PROP_CRONS.len(),
        zone in 0..PROP_ZONES.len(),
        start_day in 0i64..3650,
        hour in 0i64..24,
        offsets in proptest::collection::btree_set(0i64..40, 0..30),
        workdays in proptest::collection::btree_set(0i64..40, 0..6),
        keep_holidays in any::<bool>(),
    ) {
        let zone: chrono_tz::Tz = PROP_ZONES[zone].parse().unwrap();
        let at = DateTime::parse_from_rfc3339("2010-01-01T00:00:00Z").unwrap().with_timezone(&Utc)
            + chrono::Duration::days(start_day) + chrono::Duration::hours(hour);
        let first = at.date_naive();
        let mut calendar = Calendar::new("prop");
        for k in &offsets {
            calendar.add_day_off(first + chrono::Days::new(*k as u64), Reason::new("off", "prop"));
        }
        for k in &workdays {
            calendar.add_workday(first + chrono::Days::new(*k as u64), Reason::new("on", "prop"));
        }
        let days = if keep_holidays { Days::Holidays } else { Days::Workdays };
        let filter = DayFilter { calendar: std::sync::Arc::new(calendar), days };
        let plain = Schedule::parse(PROP_CRONS[cron], zone).unwrap();
        let filtered = plain.clone().on_days(filter.clone());

        let got = filtered.upcoming(at, 12);
        let expected: Vec<_> = plain
            .upcoming(at, 400)
            .into_iter()
            .filter(|s| filter.keeps(plain.local_date(*s)))
            .take(12)
            .collect();
        prop_assert_eq!(&got, &expected, "{} in {} from {}", PROP_CRONS[cron], zone, at);
        let mut before = filtered.current(at);
        for slot in got {
            prop_assert_eq!(filtered.current(slot.instant()), Some(slot));
            prop_assert_eq!(filtered.current(slot.instant() - chrono::Duration::seconds(1)), before);
            before = Some(slot);
        }
    }
}

// ---------------------------------------------------------------------------
// An .ics event that lasts millions of weeks (issue 29, case 6)
// ---------------------------------------------------------------------------

/// Peak memory a child may reach: the book's promise for a replica and for `check`.
const MEMORY_PROMISE_BYTES: u64 = 100 * 1024 * 1024;
/// The address space a child gets: a regression aborts at this limit (as it did under the
/// issue's 2 GiB container limit) rather than taking the shared test machine's memory.
const ADDRESS_SPACE_LIMIT: u64 = 2 * 1024 * 1024 * 1024;

/// The issue's two values: one overflows the date type, one expands to 35 million days.
const OVERLONG_DURATIONS: [&str; 2] = ["P100000000W", "P5000000W"];

/// An `.ics` file whose one all-day event, "Offsite", lasts `duration`.
fn ics_lasting(duration: &str) -> String {
    format!(
        "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//slotcron tests//EN\r\nBEGIN:VEVENT\r\n\
         UID:offsite@slotcron\r\nDTSTAMP:20260101T000000Z\r\nDTSTART;VALUE=DATE:20260105\r\n\
         DURATION:{duration}\r\nSUMMARY:Offsite\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n"
    )
}

/// A job every second; with `calendar`, also a `[calendar.office]` reading `typo.ics` and a
/// daily job on its workdays.
fn tick_config(calendar: bool) -> String {
    let tick = "[[job]]\nname = \"tick\"\nschedule = \"* * * * * *\"\n\
                [job.action]\ntype = \"log\"\ncontent = \"tick\"\n";
    if !calendar {
        return tick.to_owned();
    }
    format!(
        "[calendar.office]\nics = \"typo.ics\"\n{tick}\
         [[job]]\nname = \"standup\"\nschedule = \"0 30 9 * * *\"\ncalendar = \"office\"\n\
         days = \"workdays\"\n[job.action]\ntype = \"log\"\ncontent = \"standup\"\n"
    )
}

/// Caps `cmd`'s address space at [`ADDRESS_SPACE_LIMIT`].
fn under_memory_limit(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    let limit = libc::rlimit {
        rlim_cur: ADDRESS_SPACE_LIMIT,
        rlim_max: ADDRESS_SPACE_LIMIT,
    };
    // SAFETY: setrlimit is async-signal-safe and only reads `limit`, copied into the closure.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setrlimit(libc::RLIMIT_AS, &limit) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
}

/// Runs `cmd` to its end: its exit status, its stderr, and its peak resident memory in bytes
/// as the kernel counted it for this child alone (`wait4`'s `ru_maxrss`).
// The child is reaped by wait4, which std's `Child::wait` cannot do and also report usage.
#[allow(clippy::zombie_processes)]
fn run_measured(mut cmd: Command) -> (std::process::ExitStatus, String, u64) {
    use std::os::unix::process::ExitStatusExt;
    let stderr = tempfile::tempfile().unwrap();
    cmd.stdout(std::process::Stdio::null())
        .stderr(stderr.try_clone().unwrap());
    let child = cmd.spawn().unwrap();
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to fill.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: the child is ours and not yet waited for; both pointers are to our locals.
    let pid = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as libc::pid_t, "wait4 failed");
    let mut text = String::new();
    let mut stderr = stderr;
    std::io::Seek::rewind(&mut stderr).unwrap();
    std::io::Read::read_to_string(&mut stderr, &mut text).unwrap();
    let peak = u64::try_from(usage.ru_maxrss).unwrap() * 1024;
    (std::process::ExitStatus::from_raw(status), text, peak)
}

/// The replica's peak resident memory so far, in bytes (`VmHWM` in /proc/PID/status).
fn peak_memory(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kib * 1024
}

/// The error must lead an operator to the line: the file, the calendar and the event.
fn assert_names_file_calendar_and_event(error: &str, duration: &str) {
    for piece in [
        "typo.ics",
        "calendar \"office\"",
        "event \"Offsite\"",
        &format!("DURATION {duration:?}"),
    ] {
        assert!(error.contains(piece), "{piece:?} not in: {error}");
    }
}

/// Issue 29, case 6: `check` on an event lasting 100,000,000 weeks panicked (exit 101, an
/// overflow), and on one lasting 5,000,000 weeks allocated past 5 GB. Both must be a config
/// error (exit 2) naming file, calendar and event, in bounded memory.
#[test]
fn check_refuses_an_event_lasting_millions_of_weeks_with_exit_2_in_bounded_memory() {
    for duration in OVERLONG_DURATIONS {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("typo.ics"), ics_lasting(duration)).unwrap();
        let config = write_config(dir.path(), &tick_config(true));
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_slotcron"));
        cmd.args(["check", "--config"]).arg(&config);
        under_memory_limit(&mut cmd);
        let (status, stderr, peak) = run_measured(cmd);
        assert_eq!(status.code(), Some(2), "{duration}: {status}: {stderr}");
        assert_names_file_calendar_and_event(&stderr, duration);
        println!(
            "check, {duration}: {status}, peak {} KiB: {stderr}",
            peak >> 10
        );
        assert!(
            peak < MEMORY_PROMISE_BYTES,
            "{duration}: check peaked at {} MiB",
            peak >> 20
        );
    }
}

/// Issue 29, case 6, by hot reload: the file arriving as a ConfigMap update made every
/// watching replica exit. The reload must be rejected, with the same error, and the running
/// schedule kept, in bounded memory.
#[test]
fn a_hot_reload_with_an_event_lasting_millions_of_weeks_is_rejected_and_the_schedule_kept() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(dir.path(), &tick_config(false));
    let mut cmd = Replica::run_command(&path, "watcher");
    under_memory_limit(&mut cmd);
    let r = Replica::spawn_cmd("slotcron", cmd);
    let ticks = |r: &Replica| {
        r.json_lines()
            .iter()
            .filter(|l| l["message"] == "ran the slot" && l["job"] == "tick")
            .count()
    };
    // Generous: a loaded 2-core machine starts a debug binary slowly.
    let wait = Duration::from_secs(30);
    assert!(
        common::wait_until(wait, || (ticks(&r) >= 1).then_some(())).is_some(),
        "tick never ran: {:?}",
        r.lines()
    );
    for (i, duration) in OVERLONG_DURATIONS.iter().enumerate() {
        std::fs::write(dir.path().join("typo.ics"), ics_lasting(duration)).unwrap();
        // The watch follows jobs.toml: a distinct comment per round makes each a change.
        std::fs::write(&path, format!("# round {i}\n{}", tick_config(true))).unwrap();
        let rejected = common::wait_until(wait, || {
            let exited = r.try_wait();
            assert!(
                exited.is_none(),
                "{duration}: the replica exited: {exited:?}"
            );
            r.json_lines()
                .into_iter()
                .filter(|l| l["message"] == "reload rejected")
                .nth(i)
        });
        let rejected = rejected.unwrap_or_else(|| panic!("{duration}: no rejected reload"));
        assert_names_file_calendar_and_event(rejected["error"].as_str().unwrap(), duration);
        let before = ticks(&r);
        // Two more runs: the schedule kept running after the rejection.
        let kept = common::wait_until(wait, || (ticks(&r) >= before + 2).then_some(()));
        assert!(
            kept.is_some(),
            "{duration}: the schedule stopped: {:?}",
            r.try_wait()
        );
        assert!(r.is_running(), "{duration}: the replica exited");
    }
    let peak = peak_memory(r.pid());
    println!(
        "replica after both rejected reloads: peak {} KiB",
        peak >> 10
    );
    assert!(
        peak < MEMORY_PROMISE_BYTES,
        "the replica peaked at {} MiB",
        peak >> 20
    );
    let reloaded = r
        .json_lines()
        .iter()
        .filter(|l| l["message"] == "reloaded")
        .count();
    assert_eq!(reloaded, 0, "a bad file was applied");
}
