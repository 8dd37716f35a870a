//! Slot math, pure computation (no Redis, no waiting): `Schedule::{current, next_after, upcoming}`
//! over random crons, zones and instants, and the DST rules on every transition from 2020 to 2030.
//!
//! The DST rule, as observed from croner and enforced by `Schedule`:
//! - A job whose second, minute and hour fields are all wildcard-free (single values, lists,
//!   ranges: `30 2 * * *`, `30 2,14 * * *`, `0 0-30 1 * * *`) names wall-clock times. Such a
//!   time that falls in a spring-forward gap runs once, at the first instant after the gap (the
//!   transition itself); several such times in one gap share that single slot. Such a time that
//!   happens twice in a fall-back overlap runs once, in the earlier fold (the first pass).
//! - A job with `*` or `*/n` in its second, minute or hour field (`*/15 * * * *`, `0 * * * *`)
//!   follows elapsed time: in an overlap it runs in both folds (the repeated hour has twice the
//!   slots: `*/15` gives 8 slots in New York's repeated 01:00-01:59, one every 15 real minutes),
//!   and in a gap the missing wall times simply have no slot (nothing is moved or made up).
//!   Either way, outside the gap or the overlap no slot is lost or doubled.

use std::collections::{BTreeSet, HashMap};
use std::sync::OnceLock;

use chrono::{
    DateTime, Datelike, Duration, LocalResult, NaiveDate, NaiveDateTime, Offset, TimeZone,
    Timelike, Utc,
};
use chrono_tz::Tz;
use proptest::prelude::*;
use slotcron::unstable::time::schedule::{DstGap, DstPolicy, DstRepeat, Schedule, Slot};

/// The ten zones whose transitions are checked one by one, then three more for the proptests
/// (Kolkata and UTC never change; Chatham shifts by 45 minutes at 02:45/03:45).
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
    "UTC",
    "Pacific/Chatham",
];

fn tz(name: &str) -> Tz {
    name.parse().unwrap()
}

fn utc(rfc3339: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(rfc3339)
        .unwrap()
        .with_timezone(&Utc)
}

fn wall(date: (i32, u32, u32), h: u32, m: u32) -> NaiveDateTime {
    NaiveDate::from_ymd_opt(date.0, date.1, date.2)
        .unwrap()
        .and_hms_opt(h, m, 0)
        .unwrap()
}

fn whole_second(slot: Slot) -> bool {
    slot.instant().timestamp_subsec_nanos() == 0
}

/// The UTC offset of `zone` at `t`, in seconds.
fn offset(zone: Tz, t: DateTime<Utc>) -> i32 {
    zone.offset_from_utc_datetime(&t.naive_utc())
        .fix()
        .local_minus_utc()
}

/// One offset change: `at` is its first instant, `before`/`after` the offsets in seconds.
#[derive(Clone, Copy, Debug)]
struct Transition {
    at: DateTime<Utc>,
    before: i32,
    after: i32,
}

impl Transition {
    /// The first wall time that is skipped (gap) or repeated (overlap).
    fn wall_start(self) -> NaiveDateTime {
        self.at.naive_utc() + Duration::seconds(i64::from(self.before.min(self.after)))
    }

    fn shift(self) -> Duration {
        Duration::seconds(i64::from((self.after - self.before).abs()))
    }

    fn is_gap(self) -> bool {
        self.after > self.before
    }
}

/// Every offset change of `zone` from 2020 to 2030, found by scanning the offset hour by hour
/// and then bisecting to the second.
fn scan_transitions(zone: Tz) -> Vec<Transition> {
    let mut found = Vec::new();
    let mut t = Utc.with_ymd_and_hms(2020, 1, 1, 0, 0, 0).unwrap();
    let end = Utc.with_ymd_and_hms(2031, 1, 1, 0, 0, 0).unwrap();
    let mut current = offset(zone, t);
    while t < end {
        let next = t + Duration::hours(1);
        let next_offset = offset(zone, next);
        if next_offset != current {
            let (mut lo, mut hi) = (t, next);
            while hi - lo > Duration::seconds(1) {
                let mid = lo + (hi - lo) / 2;
                if offset(zone, mid) == current {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            found.push(Transition {
                at: hi,
                before: current,
                after: next_offset,
            });
            current = next_offset;
        }
        t = next;
    }
    found
}

/// The transitions of every zone in `ZONES`, computed once for the whole file.
fn transitions(name: &str) -> &'static [Transition] {
    static ALL: OnceLock<HashMap<&'static str, Vec<Transition>>> = OnceLock::new();
    ALL.get_or_init(|| {
        ZONES
            .iter()
            .map(|&name| (name, scan_transitions(tz(name))))
            .collect()
    })
    .get(name)
    .map(Vec::as_slice)
    .unwrap()
}

/// The slots of `schedule` whose local date (in its zone) is `day`.
fn slots_on(schedule: &Schedule, day: NaiveDate) -> Vec<Slot> {
    let zone = schedule.zone();
    let from = zone
        .from_local_datetime(&day.and_hms_opt(0, 0, 0).unwrap())
        .earliest()
        .unwrap_or_else(|| {
            // Midnight itself is skipped (Santiago, Tehran, São Paulo): the day starts at 01:00.
            zone.from_local_datetime(&day.and_hms_opt(1, 0, 0).unwrap())
                .earliest()
                .unwrap()
        })
        .with_timezone(&Utc);
    let mut slots = Vec::new();
    let mut after = from - Duration::hours(1);
    while let Some(slot) = schedule.next_after(after) {
        let date = slot.instant().with_timezone(&zone).date_naive();
        if date > day {
            break;
        }
        if date == day {
            slots.push(slot);
        }
        after = slot.instant();
    }
    slots
}

fn local(slots: &[Slot], zone: Tz) -> Vec<String> {
    slots.iter().map(|s| s.rfc3339_in(zone)).collect()
}

// ---------------------------------------------------------------------------------------------
// Property tests
// ---------------------------------------------------------------------------------------------

/// One cron field over `lo..=hi`: `*`, a value, a range, a step or a list.
fn field(lo: u32, hi: u32) -> BoxedStrategy<String> {
    prop_oneof![
        Just("*".to_owned()),
        (lo..=hi).prop_map(|v| v.to_string()),
        (lo..=hi, lo..=hi).prop_map(|(a, b)| format!("{}-{}", a.min(b), a.max(b))),
        (2..=(hi - lo).max(2)).prop_map(|n| format!("*/{n}")),
        (lo..=hi, lo..=hi).prop_map(|(a, b)| format!("{a},{b}")),
    ]
    .boxed()
}

const DAY_NAMES: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];

/// The day-of-week field: numbers 0-6 as in `field`, or names (`Mon`, `mon-fri`, `SAT,Sun`).
fn weekday_field() -> BoxedStrategy<String> {
    let name = |d: u32, upper: bool| {
        let n = DAY_NAMES[d as usize];
        if upper {
            n.to_uppercase()
        } else {
            n.to_owned()
        }
    };
    prop_oneof![
        field(0, 6),
        (0u32..=6, any::<bool>()).prop_map(move |(d, u)| name(d, u)),
        (0u32..=6, 0u32..=6, any::<bool>()).prop_map(move |(a, b, u)| format!(
            "{}-{}",
            name(a.min(b), u),
            name(a.max(b), u)
        )),
        (0u32..=6, 0u32..=6, any::<bool>()).prop_map(move |(a, b, u)| format!(
            "{},{}",
            name(a, u),
            name(b, u)
        )),
    ]
    .boxed()
}

/// A 5- or 6-field cron. The day of month stays within 1-28 so every combination fires at
/// least once a year (a `prop_assume!` on parsing guards the rest).
fn cron() -> impl Strategy<Value = String> {
    (
        prop::option::of(field(0, 59)),
        field(0, 59),
        field(0, 23),
        field(1, 28),
        field(1, 12),
        weekday_field(),
    )
        .prop_map(|(s, m, h, dom, mon, dow)| match s {
            Some(s) => format!("{s} {m} {h} {dom} {mon} {dow}"),
            None => format!("{m} {h} {dom} {mon} {dow}"),
        })
}

const FROM_MS: i64 = 1_577_836_800_000; // 2020-01-01T00:00:00Z
const TO_MS: i64 = 1_924_991_999_999; // 2030-12-31T23:59:59.999Z

/// A zone, and an instant in 2020-2030 (ms precision): half of them anywhere, half within three
/// hours of one of the zone's DST transitions, where the slot math is hardest.
fn zone_and_instant() -> impl Strategy<Value = (Tz, DateTime<Utc>)> {
    prop::sample::select(ZONES.to_vec()).prop_flat_map(|name| {
        let zone = tz(name);
        let anywhere = (FROM_MS..=TO_MS).boxed();
        let near = transitions(name).to_vec();
        let instant = if near.is_empty() {
            anywhere
        } else {
            prop_oneof![
                anywhere,
                (
                    prop::sample::select(near),
                    -3 * 3_600_000i64..=3 * 3_600_000
                )
                    .prop_map(|(t, d)| t.at.timestamp_millis() + d),
            ]
            .boxed()
        };
        (
            Just(zone),
            instant.prop_map(|ms| DateTime::from_timestamp_millis(ms).unwrap()),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// The slot a replica wakes into is at or before now, the next one strictly after now, and
    /// nothing lies between them.
    #[test]
    fn slot_le_now_lt_next(expr in cron(), (zone, now) in zone_and_instant()) {
        let schedule = Schedule::parse(&expr, zone);
        prop_assume!(schedule.is_ok());
        let schedule = schedule.unwrap();
        let cur = schedule.current(now).unwrap();
        let next = schedule.next_after(now).unwrap();
        prop_assert!(cur.instant() <= now, "`{}` in {}: current {} after {}", expr, zone, cur, now);
        prop_assert!(now < next.instant(), "`{}` in {}: next {} not after {}", expr, zone, next, now);
        prop_assert!(whole_second(cur) && whole_second(next));
        // No slot strictly between: the slot after `cur` is `next`, and `next` has `cur` as the
        // slot just before it.
        prop_assert_eq!(
            schedule.next_after(cur.instant()), Some(next),
            "`{}` in {} at {}: current {}", expr, zone, now, cur
        );
        let before_next = next.instant() - Duration::milliseconds(1);
        prop_assert_eq!(schedule.current(before_next), Some(cur), "`{}` in {} at {}", expr, zone, now);
        prop_assert_eq!(schedule.current(next.instant()), Some(next), "`{}` in {}", expr, zone);
    }

    /// The same under every named DST policy: the walk that resolves wall times by the policy
    /// keeps `current` and `next_after` consistent for any cron, zone and instant.
    #[test]
    fn slot_le_now_lt_next_under_every_dst_policy(
        expr in cron(),
        (zone, now) in zone_and_instant(),
        (repeat, gap) in prop::sample::select(policies()),
    ) {
        let schedule = Schedule::parse(&expr, zone);
        prop_assume!(schedule.is_ok());
        let schedule = schedule.unwrap().with_dst(repeat, gap);
        let cur = schedule.current(now).unwrap();
        let next = schedule.next_after(now).unwrap();
        let policy = schedule.dst_policy();
        prop_assert!(cur.instant() <= now && now < next.instant(), "`{}` in {} {:?}: {} {} {}", expr, zone, policy, cur, now, next);
        prop_assert_eq!(schedule.next_after(cur.instant()), Some(next), "`{}` in {} {:?} at {}", expr, zone, policy, now);
        let before_next = next.instant() - Duration::milliseconds(1);
        prop_assert_eq!(schedule.current(before_next), Some(cur), "`{}` in {} {:?} at {}", expr, zone, policy, now);
        prop_assert_eq!(schedule.current(next.instant()), Some(next), "`{}` in {} {:?}", expr, zone, policy);
    }

    /// Replicas wake anywhere between a slot and the next (their jitter): all of them compute
    /// the same slot, so they race for the same lock key.
    #[test]
    fn jittered_wakes_give_the_same_slot(
        expr in cron(),
        (zone, t) in zone_and_instant(),
        jitter in 0.0f64..1.0,
    ) {
        let schedule = Schedule::parse(&expr, zone);
        prop_assume!(schedule.is_ok());
        let schedule = schedule.unwrap();
        let s = schedule.next_after(t).unwrap();
        let following = schedule.next_after(s.instant()).unwrap();
        let interval_ms = (following.instant() - s.instant()).num_milliseconds();
        prop_assert!(interval_ms >= 1000, "`{}` in {}: {} then {}", expr, zone, s, following);
        let wakes = [
            0,
            (interval_ms as f64 * jitter) as i64,
            interval_ms - 1,
        ];
        for jitter_ms in wakes {
            let w = s.instant() + Duration::milliseconds(jitter_ms);
            prop_assert_eq!(
                schedule.current(w), Some(s),
                "`{}` in {}: wake {} (+{}ms)", expr, zone, w, jitter_ms
            );
            prop_assert_eq!(schedule.next_after(w), Some(following));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// DST: explicit cases
// ---------------------------------------------------------------------------------------------

/// A daily job at `at` wall time on a transition day: its only slot that day is `expected`
/// (RFC 3339 in the zone, worked out by hand), which chrono-tz confirms.
fn assert_daily_once(zone_name: &str, date: (i32, u32, u32), at: (u32, u32), expected: &str) {
    let zone = tz(zone_name);
    let schedule = Schedule::parse(&format!("{} {} * * *", at.1, at.0), zone).unwrap();
    let day = NaiveDate::from_ymd_opt(date.0, date.1, date.2).unwrap();
    let slots = slots_on(&schedule, day);
    assert_eq!(
        local(&slots, zone),
        [expected],
        "{zone_name}: daily {:02}:{:02} on {day}",
        at.0,
        at.1
    );
    // Double-check the hand-computed value against chrono-tz's view of that wall time.
    let wall_time = wall(date, at.0, at.1);
    let slot = slots[0].instant();
    match zone.from_local_datetime(&wall_time) {
        LocalResult::None => {
            // In the gap: the slot is the first instant after it, whose wall time is later.
            let before = slot - Duration::seconds(1);
            assert!(before.with_timezone(&zone).naive_local() < wall_time);
            assert!(slot.with_timezone(&zone).naive_local() > wall_time);
        }
        LocalResult::Ambiguous(earlier, later) => {
            assert_eq!(slot, earlier.with_timezone(&Utc));
            assert_ne!(slot, later.with_timezone(&Utc));
        }
        LocalResult::Single(_) => panic!("{zone_name} {wall_time} is not in a transition"),
    }
}

#[test]
fn dst_spring_forward_gap_runs_once_right_after_the_gap() {
    // 02:00 EST -> 03:00 EDT (07:00Z).
    assert_daily_once(
        "America/New_York",
        (2026, 3, 8),
        (2, 30),
        "2026-03-08T03:00:00-04:00",
    );
    // 02:00 CET -> 03:00 CEST (01:00Z).
    assert_daily_once(
        "Europe/Berlin",
        (2026, 3, 29),
        (2, 30),
        "2026-03-29T03:00:00+02:00",
    );
    // Half-hour shift: 02:00 +10:30 -> 02:30 +11:00 (15:30Z the day before).
    assert_daily_once(
        "Australia/Lord_Howe",
        (2026, 10, 4),
        (2, 15),
        "2026-10-04T02:30:00+11:00",
    );
    // And the following days are back to normal.
    let ny = tz("America/New_York");
    let s = Schedule::parse("30 2 * * *", ny).unwrap();
    assert_eq!(
        local(&s.upcoming(utc("2026-03-07T12:00:00Z"), 3), ny),
        [
            "2026-03-08T03:00:00-04:00",
            "2026-03-09T02:30:00-04:00",
            "2026-03-10T02:30:00-04:00"
        ]
    );
}

#[test]
fn dst_fall_back_overlap_runs_once_in_the_earlier_fold() {
    // 02:00 EDT -> 01:00 EST: 01:30 EDT is 05:30Z (01:30 EST, 06:30Z, does not run).
    assert_daily_once(
        "America/New_York",
        (2026, 11, 1),
        (1, 30),
        "2026-11-01T01:30:00-04:00",
    );
    // 02:00 BST -> 01:00 GMT: 01:30 BST is 00:30Z.
    assert_daily_once(
        "Europe/London",
        (2026, 10, 25),
        (1, 30),
        "2026-10-25T01:30:00+01:00",
    );
    // 03:00 AEDT -> 02:00 AEST: 02:30 AEDT is 15:30Z the day before.
    assert_daily_once(
        "Australia/Sydney",
        (2026, 4, 5),
        (2, 30),
        "2026-04-05T02:30:00+11:00",
    );
    // A replica waking in the second pass of 01:30 still belongs to the 01:30 EDT slot, and
    // the next slot is the next day.
    let ny = tz("America/New_York");
    let s = Schedule::parse("30 1 * * *", ny).unwrap();
    for wake in ["2026-11-01T06:30:00Z", "2026-11-01T06:45:00.250Z"] {
        assert_eq!(
            s.current(utc(wake)).unwrap().rfc3339_in(ny),
            "2026-11-01T01:30:00-04:00"
        );
        assert_eq!(
            s.next_after(utc(wake)).unwrap().rfc3339_in(ny),
            "2026-11-02T01:30:00-05:00"
        );
    }
}

/// Lists and ranges in the hour or minute name wall-clock times just like single values: the
/// same rule applies (croner alone classifies them as "interval" jobs, skipping the gap time
/// and running the repeated time twice; `Schedule` corrects that).
#[test]
fn dst_lists_and_ranges_of_wall_times_follow_the_fixed_time_rule() {
    let ny = tz("America/New_York");
    // (cron, local date, its slots that day)
    type Case = (&'static str, (i32, u32, u32), &'static [&'static str]);
    let cases: [Case; 5] = [
        (
            "30 2,14 * * *",
            (2026, 3, 8),
            &["2026-03-08T03:00:00-04:00", "2026-03-08T14:30:00-04:00"],
        ),
        (
            "30 1,13 * * *",
            (2026, 11, 1),
            &["2026-11-01T01:30:00-04:00", "2026-11-01T13:30:00-05:00"],
        ),
        // Two wall times in the same gap share one slot.
        ("0,30 2 * * *", (2026, 3, 8), &["2026-03-08T03:00:00-04:00"]),
        (
            "0 0 1-3 * * *",
            (2026, 3, 8),
            &["2026-03-08T01:00:00-05:00", "2026-03-08T03:00:00-04:00"],
        ),
        (
            "0 0 1-3 * * *",
            (2026, 11, 1),
            &[
                "2026-11-01T01:00:00-04:00",
                "2026-11-01T02:00:00-05:00",
                "2026-11-01T03:00:00-05:00",
            ],
        ),
    ];
    for (expr, date, expected) in cases {
        let s = Schedule::parse(expr, ny).unwrap();
        let day = NaiveDate::from_ymd_opt(date.0, date.1, date.2).unwrap();
        assert_eq!(local(&slots_on(&s, day), ny), expected, "`{expr}` on {day}");
    }
}

/// Every slot of `*/15` from `from` to `to` (local wall times in `zone`) is 15 real minutes
/// after the previous one: none lost, none doubled.
fn every_quarter_hour(zone: Tz, from: &str, n: usize) -> Vec<Slot> {
    let s = Schedule::parse("*/15 * * * *", zone).unwrap();
    let slots = s.upcoming(utc(from), n);
    for pair in slots.windows(2) {
        assert_eq!(
            pair[1].instant() - pair[0].instant(),
            Duration::minutes(15),
            "{zone}: {} then {}",
            pair[0].rfc3339_in(zone),
            pair[1].rfc3339_in(zone)
        );
    }
    slots
}

#[test]
fn dst_sub_hourly_job_runs_in_both_folds_and_not_in_the_gap() {
    let ny = tz("America/New_York");
    // Fall back, 2026-11-01: 00:00 EDT (04:00Z) to 03:00 EST (08:00Z) is 4 real hours, 16 slots.
    let slots = every_quarter_hour(ny, "2026-11-01T03:59:59Z", 16);
    let repeated: Vec<String> = local(&slots, ny)
        .into_iter()
        .filter(|s| s.starts_with("2026-11-01T01:"))
        .collect();
    assert_eq!(
        repeated,
        [
            "2026-11-01T01:00:00-04:00",
            "2026-11-01T01:15:00-04:00",
            "2026-11-01T01:30:00-04:00",
            "2026-11-01T01:45:00-04:00",
            "2026-11-01T01:00:00-05:00",
            "2026-11-01T01:15:00-05:00",
            "2026-11-01T01:30:00-05:00",
            "2026-11-01T01:45:00-05:00",
        ],
        "the repeated hour runs in both folds"
    );
    assert_eq!(
        slots.last().unwrap().rfc3339_in(ny),
        "2026-11-01T02:45:00-05:00"
    );

    // Lord Howe's half-hour overlap (02:00 +11:00 -> 01:30 +10:30): 01:30 and 01:45 twice.
    let lh = tz("Australia/Lord_Howe");
    let slots = every_quarter_hour(lh, "2026-04-04T14:00:00Z", 8);
    assert_eq!(
        local(&slots, lh),
        [
            "2026-04-05T01:15:00+11:00",
            "2026-04-05T01:30:00+11:00",
            "2026-04-05T01:45:00+11:00",
            "2026-04-05T01:30:00+10:30",
            "2026-04-05T01:45:00+10:30",
            "2026-04-05T02:00:00+10:30",
            "2026-04-05T02:15:00+10:30",
            "2026-04-05T02:30:00+10:30",
        ]
    );

    // Spring forward, 2026-03-08: no slot at 02:xx (it does not exist), and every wall time
    // from 00:00 to 05:00 that exists has its slot.
    let slots = every_quarter_hour(ny, "2026-03-08T04:59:59Z", 16);
    let walls: BTreeSet<NaiveDateTime> = slots
        .iter()
        .map(|s| s.instant().with_timezone(&ny).naive_local())
        .collect();
    let expected: BTreeSet<NaiveDateTime> = (0..5)
        .filter(|&h| h != 2)
        .flat_map(|h| (0..60).step_by(15).map(move |m| wall((2026, 3, 8), h, m)))
        .collect();
    assert_eq!(walls, expected);

    // Lord Howe's half-hour gap (02:00 +10:30 -> 02:30 +11:00): 02:00 and 02:15 do not exist.
    let slots = every_quarter_hour(lh, "2026-10-03T15:00:00Z", 4);
    assert_eq!(
        local(&slots, lh),
        [
            "2026-10-04T01:45:00+10:30",
            "2026-10-04T02:30:00+11:00",
            "2026-10-04T02:45:00+11:00",
            "2026-10-04T03:00:00+11:00",
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// DST: every transition 2020-2030 in ten zones
// ---------------------------------------------------------------------------------------------

#[test]
fn dst_every_transition_2020_2030_runs_a_daily_job_once_that_day() {
    let mut checked = 0;
    let mut gaps = 0;
    for name in &ZONES[..10] {
        let zone = tz(name);
        let found = transitions(name);
        match *name {
            // Shanghai has no DST; Tehran dropped it in 2022, São Paulo in 2019.
            "Asia/Shanghai" | "America/Sao_Paulo" => assert!(found.is_empty(), "{name}"),
            "Asia/Tehran" => assert!(
                found.len() == 6 && found.iter().all(|t| t.at.year() <= 2022),
                "{name}: {found:?}"
            ),
            _ => assert!(found.len() >= 20, "{name}: {} transitions", found.len()),
        }
        for &t in found {
            let start = t.wall_start();
            let minute = Duration::minutes(1);
            // The first, the middle and the last minute inside the gap or the overlap.
            for inside in [start, start + t.shift() / 2, start + t.shift() - minute] {
                let day = inside.date();
                let expected = if t.is_gap() {
                    assert!(zone.from_local_datetime(&inside).single().is_none());
                    t.at
                } else {
                    match zone.from_local_datetime(&inside) {
                        LocalResult::Ambiguous(earlier, _) => earlier.with_timezone(&Utc),
                        other => panic!("{name} {inside}: {other:?}"),
                    }
                };
                let daily = format!("0 {} {} * * *", inside.minute(), inside.hour());
                let s = Schedule::parse(&daily, zone).unwrap();
                let slots = slots_on(&s, day);
                assert_eq!(
                    slots.iter().map(|s| s.instant()).collect::<Vec<_>>(),
                    [expected],
                    "{name} {t:?}: `{daily}` on {day}: {:?}",
                    local(&slots, zone)
                );

                // The same wall time in a list with another one twelve hours away.
                let other_hour = (inside.hour() + 12) % 24;
                let twice = format!(
                    "0 {} {},{} * * *",
                    inside.minute(),
                    inside.hour(),
                    other_hour
                );
                let s = Schedule::parse(&twice, zone).unwrap();
                let other = zone
                    .from_local_datetime(&day.and_hms_opt(other_hour, inside.minute(), 0).unwrap())
                    .single()
                    .unwrap()
                    .with_timezone(&Utc);
                let mut both = vec![expected, other];
                both.sort();
                assert_eq!(
                    slots_on(&s, day)
                        .iter()
                        .map(|s| s.instant())
                        .collect::<Vec<_>>(),
                    both,
                    "{name} {t:?}: `{twice}` on {day}"
                );
                checked += 1;
            }
            gaps += usize::from(t.is_gap());
        }
    }
    assert!(checked >= 450, "only {checked} checks");
    assert!(gaps >= 75, "only {gaps} gaps");
}

// ---------------------------------------------------------------------------------------------
// Forms
// ---------------------------------------------------------------------------------------------

#[test]
fn five_and_six_field_forms() {
    let z = chrono_tz::UTC;
    let at = utc("2026-11-20T12:00:00.400Z");
    let next = |expr: &str| {
        Schedule::parse(expr, z)
            .unwrap()
            .next_after(at)
            .unwrap()
            .rfc3339_utc()
    };
    // Five fields: minute hour day month weekday, second 0.
    assert_eq!(next("30 9 * * *"), "2026-11-21T09:30:00Z");
    assert_eq!(next("*/5 * * * *"), "2026-11-20T12:05:00Z");
    // Six fields: the first is the second.
    assert_eq!(next("15 30 9 * * *"), "2026-11-21T09:30:15Z");
    assert_eq!(next("*/10 * * * * *"), "2026-11-20T12:00:10Z");
    assert_eq!(next("0 0 12 * * *"), "2026-11-21T12:00:00Z");
    // The same schedule written both ways gives the same slots.
    let five = Schedule::parse("0,30 8-18 * * 1-5", z).unwrap();
    let six = Schedule::parse("0 0,30 8-18 * * 1-5", z).unwrap();
    assert_eq!(five.upcoming(at, 50), six.upcoming(at, 50));
    // Other field counts are refused.
    for bad in ["* * * *", "0 0 0 * * * 2026", "0 0 0 1 * * * *"] {
        assert!(Schedule::parse(bad, z).is_err(), "{bad:?}");
    }
}

#[test]
fn weekday_names() {
    let shanghai = tz("Asia/Shanghai");
    let at = utc("2026-11-20T12:00:00Z"); // Friday 20:00 in Shanghai.
    let weekdays = |expr: &str| -> Vec<String> {
        Schedule::parse(expr, shanghai)
            .unwrap()
            .upcoming(at, 3)
            .iter()
            .map(|s| {
                s.instant()
                    .with_timezone(&shanghai)
                    .format("%a %d")
                    .to_string()
            })
            .collect()
    };
    assert_eq!(weekdays("0 9 * * Mon-Fri"), ["Mon 23", "Tue 24", "Wed 25"]);
    assert_eq!(weekdays("0 9 * * MON-FRI"), ["Mon 23", "Tue 24", "Wed 25"]);
    assert_eq!(weekdays("0 9 * * sat,sun"), ["Sat 21", "Sun 22", "Sat 28"]);
    assert_eq!(weekdays("0 0 9 * * Sun"), ["Sun 22", "Sun 29", "Sun 06"]);
    // Names and numbers agree (0 is Sunday).
    for (name, number) in [("Mon-Fri", "1-5"), ("Sun", "0"), ("Tue,Thu", "2,4")] {
        assert_eq!(
            weekdays(&format!("0 9 * * {name}")),
            weekdays(&format!("0 9 * * {number}")),
            "{name} vs {number}"
        );
    }
    // A weekday job in its zone: Saturday 2026-11-21 -> Monday 09:30 +08:00.
    let s = Schedule::parse("0 30 9 * * Mon-Fri", shanghai).unwrap();
    let next = s.next_after(utc("2026-11-21T00:00:00Z")).unwrap();
    assert_eq!(next.rfc3339_utc(), "2026-11-23T01:30:00Z");
    assert_eq!(next.rfc3339_in(shanghai), "2026-11-23T09:30:00+08:00");
    assert!(Schedule::parse("0 9 * * Funday", shanghai).is_err());
}

// ---------------------------------------------------------------------------------------------
// DST policy: every value of `dst_repeat` and `dst_gap` on every transition 2020-2030
// ---------------------------------------------------------------------------------------------

/// Every policy a job may name, and `None` for the rule of the cron's kind.
fn policies() -> Vec<(Option<DstRepeat>, Option<DstGap>)> {
    let mut all = vec![(None, None)];
    for repeat in [DstRepeat::First, DstRepeat::Last, DstRepeat::Both] {
        for gap in [DstGap::Shift, DstGap::Skip] {
            all.push((Some(repeat), Some(gap)));
        }
    }
    all
}

/// The slots `policy` names, by its definition: each wall time of the job (the first `first`,
/// then every `step`) resolved to its instants — a repeated one to the first, last or both, a
/// skipped one to the first instant after its gap or to none — kept within `window`.
fn named_slots(
    zone: Tz,
    policy: DstPolicy,
    (first, step): (NaiveDateTime, Duration),
    window: (DateTime<Utc>, DateTime<Utc>),
) -> Vec<DateTime<Utc>> {
    let mut named = BTreeSet::new();
    let mut wall = first;
    // Ten hours of wall times from five hours before the change hold every instant of the
    // window: no zone here shifts by more than an hour (Lord Howe's shift is half an hour).
    while wall < first + Duration::hours(10) {
        let instants = match zone.from_local_datetime(&wall) {
            LocalResult::Single(t) => vec![t],
            LocalResult::Ambiguous(e, l) => match policy.repeat {
                DstRepeat::First => vec![e],
                DstRepeat::Last => vec![l],
                DstRepeat::Both => vec![e, l],
            },
            LocalResult::None => match policy.gap {
                // The gap ends where the clock, read an hour later, stands later than `wall`.
                DstGap::Shift => vec![gap_end(zone, wall)],
                DstGap::Skip => vec![],
            },
        };
        named.extend(
            instants
                .into_iter()
                .map(|t| t.with_timezone(&Utc))
                .filter(|t| (window.0..=window.1).contains(t)),
        );
        wall += step;
    }
    named.into_iter().collect()
}

/// The first instant whose wall time is past the skipped `wall`: found minute by minute, then
/// second by second (the gaps here start and end on whole minutes, but check anyway).
fn gap_end(zone: Tz, wall: NaiveDateTime) -> DateTime<Tz> {
    let mut t = zone
        .from_local_datetime(&(wall - Duration::hours(2)))
        .earliest()
        .unwrap();
    while t.naive_local() <= wall {
        t += Duration::minutes(1);
    }
    t -= Duration::minutes(1);
    while t.naive_local() <= wall {
        t += Duration::seconds(1);
    }
    t
}

/// The schedule's slots in `window`, walked forward and (checking `current`) backward.
fn slots_in(s: &Schedule, window: (DateTime<Utc>, DateTime<Utc>)) -> Vec<DateTime<Utc>> {
    let first = s.next_after(window.0 - Duration::seconds(1));
    let forward: Vec<DateTime<Utc>> =
        std::iter::successors(first, |slot| s.next_after(slot.instant()))
            .map(|slot| slot.instant())
            .take_while(|&t| t <= window.1)
            .collect();
    let mut back: Vec<DateTime<Utc>> = s
        .back_from(window.1)
        .map(|slot| slot.instant())
        .take_while(|&t| t >= window.0)
        .collect();
    back.reverse();
    assert_eq!(back, forward, "walking back meets other slots than forward");
    forward
}

#[test]
fn dst_every_policy_value_gives_the_slots_it_names_on_every_transition_2020_2030() {
    let (mut checked, mut gaps) = (0, 0);
    for name in &ZONES[..10] {
        let (c, g) = every_policy_on(name, transitions(name));
        (checked, gaps) = (checked + c, gaps + g);
    }
    // 8 zones with DST over 11 years, Tehran until 2022: about 180 transitions × 3 jobs × 7.
    assert!(checked >= 3000, "only {checked} checks");
    assert!(gaps >= 75, "only {gaps} gaps");
}

/// Ten zones that change their clocks every year from 2020 to 2030 (ZONES' first ten include
/// Shanghai and São Paulo, which do not): the seven of them that do, and Chatham (45-minute
/// offsets, 02:45 to 03:45), Havana (at midnight: 00:00 to 01:00 does not exist, and 00:00
/// to 01:00 happens twice) and Jerusalem (a Friday in spring). Each policy value gives exactly
/// the slots it names on each of their transitions.
#[test]
fn dst_ten_zones_that_change_every_year_give_each_policys_slots_2020_2030() {
    const CHANGING: [&str; 10] = [
        "America/New_York",
        "Europe/Berlin",
        "Australia/Sydney",
        "America/Santiago",
        "Pacific/Auckland",
        "Europe/London",
        "Australia/Lord_Howe",
        "Pacific/Chatham",
        "America/Havana",
        "Asia/Jerusalem",
    ];
    let (mut checked, mut gaps) = (0, 0);
    for name in CHANGING {
        let found = scan_transitions(tz(name));
        assert!(
            found.len() >= 22,
            "{name}: only {} transitions",
            found.len()
        );
        let (c, g) = every_policy_on(name, &found);
        (checked, gaps) = (checked + c, gaps + g);
    }
    // 10 zones × 22 transitions × 3 jobs × 7 policies.
    assert!(checked >= 10 * 22 * 3 * 7, "only {checked} checks");
    assert!(gaps >= 10 * 11, "only {gaps} gaps");
}

/// On each of `found` (the transitions of zone `name`): a daily job at a wall time inside the
/// gap or the overlap, an hourly and a minutely job across it, under every policy value, give
/// exactly the slots the policy names; the daily job said outright. Returns (checks, gaps).
fn every_policy_on(name: &str, found: &[Transition]) -> (usize, usize) {
    let (mut checked, mut gaps) = (0, 0);
    let zone = tz(name);
    for &t in found {
        // The overlap's instants lie within an hour of the change (no zone here shifts more).
        let window = (t.at - Duration::minutes(75), t.at + Duration::minutes(75));
        let from_wall =
            (t.at - Duration::hours(5)).naive_utc() + Duration::seconds(i64::from(t.before));
        let inside = t.wall_start() + t.shift() / 2;
        let jobs = [
            // A daily job at a wall time inside the gap or the overlap.
            (
                format!("0 {} {} * * *", inside.minute(), inside.hour()),
                (inside, Duration::days(1)),
            ),
            // An hourly and a minutely job across it.
            (
                "0 0 * * * *".to_owned(),
                (from_wall.with_minute(0).unwrap(), Duration::hours(1)),
            ),
            (
                "0 * * * * *".to_owned(),
                (from_wall.with_second(0).unwrap(), Duration::minutes(1)),
            ),
        ];
        for (cron, walls) in &jobs {
            for (repeat, gap) in policies() {
                let s = Schedule::parse(cron, zone).unwrap().with_dst(repeat, gap);
                let policy = s.dst_policy();
                let named = named_slots(zone, policy, *walls, window);
                let got = slots_in(&s, window);
                assert_eq!(got, named, "{name} {t:?} `{cron}` {policy:?}");
                checked += 1;
            }
        }
        // The daily job, said outright: the one wall time gives these instants.
        let daily = &jobs[0].0;
        for (repeat, gap) in policies().into_iter().skip(1) {
            let s = Schedule::parse(daily, zone).unwrap().with_dst(repeat, gap);
            let got = slots_in(&s, window);
            let expected: Vec<DateTime<Utc>> = match zone.from_local_datetime(&inside) {
                LocalResult::None => match gap {
                    Some(DstGap::Shift) => vec![t.at],
                    _ => vec![],
                },
                LocalResult::Ambiguous(e, l) => {
                    let (e, l) = (e.with_timezone(&Utc), l.with_timezone(&Utc));
                    match repeat {
                        Some(DstRepeat::First) => vec![e],
                        Some(DstRepeat::Last) => vec![l],
                        _ => vec![e, l],
                    }
                }
                LocalResult::Single(_) => panic!("{name} {inside} exists"),
            };
            assert_eq!(got, expected, "{name} {t:?} `{daily}` {repeat:?} {gap:?}");
        }
        gaps += usize::from(t.is_gap());
    }
    (checked, gaps)
}

#[test]
fn dst_defaults_are_the_rules_of_the_crons_kind() {
    let ny = tz("America/New_York");
    let fixed = Schedule::parse("0 30 2 * * *", ny).unwrap();
    let elapsed = Schedule::parse("0 */15 * * * *", ny).unwrap();
    assert_eq!(fixed.dst_policy(), DstPolicy::of(true));
    assert_eq!(
        (fixed.dst_policy().repeat, fixed.dst_policy().gap),
        (DstRepeat::First, DstGap::Shift)
    );
    assert_eq!(
        (elapsed.dst_policy().repeat, elapsed.dst_policy().gap),
        (DstRepeat::Both, DstGap::Skip)
    );
    // A policy written changes the definition replicas compare; the default does not.
    let named = fixed.clone().with_dst(Some(DstRepeat::Both), None);
    assert_eq!(
        fixed.definition(),
        "cron=0 30 2 * * * zone=America/New_York days=all"
    );
    assert!(named.definition().ends_with(" dst_repeat=both"));
}
