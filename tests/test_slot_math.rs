//! Slot math, pure computation (no waiting): property tests over random crons, zones and
//! instants, and every DST transition from 2020 to 2030 in ten zones.

use chrono::{DateTime, Duration, NaiveDateTime, Offset, TimeZone, Timelike, Utc};
use chrono_tz::Tz;
use proptest::prelude::*;
use slotcron::schedule::Schedule;

const ZONES: [&str; 13] = [
    "America/New_York",
    "Europe/Berlin",
    "Australia/Sydney",
    "America/Santiago",
    "Asia/Tehran",
    "Pacific/Auckland",
    "Europe/London",
    "America/Sao_Paulo",
    "Asia/Shanghai",
    "Australia/Lord_Howe",
    "Asia/Kolkata",
    "Pacific/Chatham",
    "UTC",
];

fn field(max: u32, first: u32) -> impl Strategy<Value = String> {
    prop_oneof![
        Just("*".to_owned()),
        (first..=max).prop_map(|v| v.to_string()),
        (first..=max, first..=max).prop_map(|(a, b)| format!("{}-{}", a.min(b), a.max(b))),
        (2..=max.max(2)).prop_map(|n| format!("*/{n}")),
        (first..=max, first..=max).prop_map(|(a, b)| format!("{a},{b}")),
    ]
}

fn cron() -> impl Strategy<Value = String> {
    let seconds = prop_oneof![Just(None), field(59, 0).prop_map(Some)];
    let dow = prop_oneof![
        Just("*".to_owned()),
        Just("Mon-Fri".to_owned()),
        (0u32..=6).prop_map(|d| d.to_string())
    ];
    (
        seconds,
        field(59, 0),
        field(23, 0),
        prop_oneof![
            Just("*".to_owned()),
            (1u32..=28).prop_map(|d| d.to_string())
        ],
        dow,
    )
        .prop_map(|(s, m, h, dom, dow)| match s {
            Some(s) => format!("{s} {m} {h} {dom} * {dow}"),
            None => format!("{m} {h} {dom} * {dow}"),
        })
}

fn instant() -> impl Strategy<Value = DateTime<Utc>> {
    // 2020-01-01 to 2030-12-31, millisecond precision.
    (1_577_836_800_000i64..1_924_991_999_000)
        .prop_map(|ms| DateTime::from_timestamp_millis(ms).unwrap())
}

fn zone() -> impl Strategy<Value = Tz> {
    prop::sample::select(ZONES.to_vec()).prop_map(|z| z.parse().unwrap())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn current_slot_le_now_lt_next_slot(expr in cron(), tz in zone(), now in instant()) {
        let schedule = Schedule::parse(&expr, tz).unwrap();
        let next = schedule.next_after(now).unwrap();
        prop_assert!(next.instant() > now, "{expr} in {tz}: next {next} not after {now}");
        prop_assert_eq!(next.instant().timestamp_subsec_millis(), 0);
        if let Some(current) = schedule.current(now) {
            prop_assert!(current.instant() <= now);
            prop_assert!(schedule.next_after(current.instant()).unwrap() >= next);
        }
    }

    #[test]
    fn jittered_wakes_give_the_same_slot(expr in cron(), tz in zone(), t0 in instant(), jitter in 0.0f64..1.0) {
        // Replicas wake anywhere between one slot and the next: the slot they compute next is
        // the same, so they race for the same key.
        let schedule = Schedule::parse(&expr, tz).unwrap();
        let slot = schedule.next_after(t0).unwrap();
        let following = schedule.next_after(slot.instant()).unwrap();
        let gap_ms = (following.instant() - slot.instant()).num_milliseconds();
        let wake = slot.instant() + Duration::milliseconds((gap_ms as f64 * jitter) as i64);
        prop_assume!(wake < following.instant());
        prop_assert_eq!(schedule.next_after(wake).unwrap(), following);
    }
}

/// The UTC offset of `tz` at `t`, in seconds.
fn offset(tz: Tz, t: DateTime<Utc>) -> i64 {
    i64::from(
        tz.offset_from_utc_datetime(&t.naive_utc())
            .fix()
            .local_minus_utc(),
    )
}

/// Every offset change of `tz` in 2020-2030: (instant, offset before, offset after).
fn transitions(tz: Tz) -> Vec<(DateTime<Utc>, i64, i64)> {
    let mut found = Vec::new();
    let mut t = Utc.with_ymd_and_hms(2020, 1, 1, 0, 0, 0).unwrap();
    let end = Utc.with_ymd_and_hms(2031, 1, 1, 0, 0, 0).unwrap();
    while t < end {
        let next = t + Duration::hours(1);
        if offset(tz, t) != offset(tz, next) {
            // Narrow down to the second.
            let (mut lo, mut hi) = (t, next);
            while hi - lo > Duration::seconds(1) {
                let mid = lo + (hi - lo) / 2;
                if offset(tz, mid) == offset(tz, lo) {
                    lo = mid
                } else {
                    hi = mid
                }
            }
            found.push((hi, offset(tz, lo), offset(tz, hi)));
        }
        t = next;
    }
    found
}

/// A daily cron at the wall-clock time halfway through the gap or overlap of a transition.
fn daily_inside(at: DateTime<Utc>, before: i64, after: i64) -> (String, NaiveDateTime) {
    let shift = (after - before).abs();
    // Spring forward: the skipped wall times start at the old offset. Fall back: the repeated
    // ones start at the new offset.
    let start = at.naive_utc() + Duration::seconds(if after > before { before } else { after });
    let middle = start + Duration::seconds(shift / 2);
    (
        format!("0 {} {} * * *", middle.minute(), middle.hour()),
        middle,
    )
}

#[test]
fn every_dst_transition_2020_2030_in_ten_zones_runs_a_daily_job_once_that_day() {
    let mut checked = 0;
    for name in &ZONES[..10] {
        let tz: Tz = name.parse().unwrap();
        for (at, before, after) in transitions(tz) {
            let (expr, wall) = daily_inside(at, before, after);
            let schedule = Schedule::parse(&expr, tz).unwrap();
            let day = wall.date();
            let slots = schedule.upcoming(at - Duration::days(2), 6);
            let that_day: Vec<String> = slots
                .iter()
                .filter(|s| s.instant().with_timezone(&tz).date_naive() == day)
                .map(|s| s.rfc3339_in(tz))
                .collect();
            assert_eq!(
                that_day.len(),
                1,
                "{name} {at} ({before}->{after}) `{expr}`: {that_day:?}"
            );
            if after > before {
                // In a gap the slot runs right after it: at the transition instant.
                let slot = slots
                    .iter()
                    .find(|s| s.instant().with_timezone(&tz).date_naive() == day)
                    .unwrap();
                assert_eq!(
                    slot.instant(),
                    at,
                    "{name} {at}: gap slot not right after the gap"
                );
            }
            checked += 1;
        }
    }
    // Eight of the ten zones change offset in these years (Shanghai never, Tehran until 2022).
    assert!(checked >= 100, "only {checked} transitions");
}

#[test]
fn sub_hourly_jobs_run_in_both_passes_of_a_repeated_hour_and_skip_a_missing_one() {
    let ny: Tz = "America/New_York".parse().unwrap();
    let schedule = Schedule::parse("*/15 * * * *", ny).unwrap();
    // Fall back 2026-11-01 02:00 EDT -> 01:00 EST: 01:00-01:59 happens twice.
    let slots = schedule.upcoming(Utc.with_ymd_and_hms(2026, 11, 1, 4, 0, 0).unwrap(), 12);
    let local: Vec<String> = slots.iter().map(|s| s.rfc3339_in(ny)).collect();
    assert_eq!(
        &local[..9],
        [
            "2026-11-01T00:15:00-04:00",
            "2026-11-01T00:30:00-04:00",
            "2026-11-01T00:45:00-04:00",
            "2026-11-01T01:00:00-04:00",
            "2026-11-01T01:15:00-04:00",
            "2026-11-01T01:30:00-04:00",
            "2026-11-01T01:45:00-04:00",
            "2026-11-01T01:00:00-05:00",
            "2026-11-01T01:15:00-05:00",
        ]
    );
    // Every slot is 15 real minutes after the previous one: none lost, none doubled.
    for pair in slots.windows(2) {
        assert_eq!(pair[1].instant() - pair[0].instant(), Duration::minutes(15));
    }
    // Spring forward 2026-03-08 02:00 EST -> 03:00 EDT: no slots at 02:xx, none lost around it.
    let slots = schedule.upcoming(Utc.with_ymd_and_hms(2026, 3, 8, 6, 0, 0).unwrap(), 8);
    for pair in slots.windows(2) {
        assert_eq!(pair[1].instant() - pair[0].instant(), Duration::minutes(15));
    }
    assert!(slots.iter().all(|s| !s.rfc3339_in(ny).contains("T02:")));
}

#[test]
fn five_and_six_field_forms_and_weekday_names() {
    let utc = chrono_tz::UTC;
    let at = Utc.with_ymd_and_hms(2026, 11, 20, 12, 0, 0).unwrap(); // a Friday
    let five = Schedule::parse("30 9 * * Mon", utc)
        .unwrap()
        .next_after(at)
        .unwrap();
    assert_eq!(five.rfc3339_utc(), "2026-11-23T09:30:00Z");
    let six = Schedule::parse("15 30 9 * * MON", utc)
        .unwrap()
        .next_after(at)
        .unwrap();
    assert_eq!(six.rfc3339_utc(), "2026-11-23T09:30:15Z");
}
