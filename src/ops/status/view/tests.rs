//! The page view's unit tests: ordering, strips, tallies and times, without a server.

use std::collections::HashMap;
use std::path::Path;

use super::*;

fn t(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

fn job(schedule: &str) -> std::sync::Arc<Job> {
    let text = format!(
        "[[job]]\nname = \"j\"\nschedule = \"{schedule}\"\n[job.action]\ntype = \"log\"\ncontent = \"x\"\n"
    );
    let config = crate::config::parse(Path::new("t.toml"), &text, &HashMap::new()).unwrap();
    config.jobs[0].clone()
}

fn run(slot: &str, outcome: RunState, replica: &str) -> RunRecord {
    let slot = Slot::at(t(slot));
    RunRecord {
        started: slot.instant() + chrono::Duration::milliseconds(40),
        finished: Some(slot.instant() + chrono::Duration::milliseconds(140)),
        error: (outcome == RunState::Failed).then(|| "connection refused".into()),
        ..RunRecord::test("j", slot, replica, outcome)
    }
}

fn reads(runs: Vec<RunRecord>, pause: Option<Pause>) -> Reads {
    Reads {
        runs: Ok(runs),
        paused: Vec::new(),
        watermark: None,
        pause,
        last_alert: None,
    }
}

fn frame(now: &str) -> Frame {
    Frame {
        now: t(now),
        zone: chrono_tz::Asia::Shanghai,
    }
}

fn view(reads: &Reads, now: &str) -> JobView {
    let settling = chrono::Duration::seconds(2);
    job_view(
        &job("0 * * * * *"),
        &ActionText::default(),
        reads,
        (settling, "slotcron"),
        &frame(now),
    )
}

#[test]
fn relative_times_in_whole_units() {
    let now = t("2026-01-01T00:00:00Z");
    let at = |s: i64| relative(now + chrono::Duration::seconds(s), now);
    assert_eq!(at(0), "in <1 s");
    let ms = |ms: i64| relative(now + chrono::Duration::milliseconds(ms), now);
    assert_eq!(ms(-400), "<1 s ago");
    assert_eq!(ms(999), "in <1 s");
    assert_eq!(ms(-1000), "1 s ago");
    assert_eq!(at(12), "in 12 s");
    assert_eq!(at(-59), "59 s ago");
    assert_eq!(at(-200), "3 min ago");
    assert_eq!(at(7300), "in 2 h");
    assert_eq!(at(-3 * 86_400), "3 d ago");
}

#[test]
fn times_show_in_the_page_zone() {
    let m = moment(t("2026-01-01T00:00:00Z"), &frame("2026-01-01T00:03:00Z"));
    assert_eq!(m.iso, "2026-01-01T08:00:00+08:00");
    assert_eq!(m.short, "2026-01-01 08:00:00");
    assert_eq!(m.ago, "3 min ago");
}

#[test]
fn the_strip_shows_missed_slots_between_runs_oldest_first() {
    let runs = vec![
        run("2026-01-01T00:03:00Z", RunState::Failed, "a"),
        run("2026-01-01T00:01:00Z", RunState::Done, "b"),
    ];
    let v = view(&reads(runs, None), "2026-01-01T00:03:30Z");
    let outcomes: Vec<&str> = v.strip.iter().map(|c| c.outcome).collect();
    assert_eq!(outcomes, ["done", "missed", "failed"]);
    assert!(
        v.strip[2].title.contains("won by a"),
        "{}",
        v.strip[2].title
    );
    assert!(v.strip[2].title.contains("connection refused"));
    assert_eq!(v.standing, Standing::Failing);
    assert_eq!(v.last_success.unwrap().short, "2026-01-01 08:01:00");
    let chart = v.chart.unwrap();
    assert_eq!(chart.runs, 2);
}

#[test]
fn the_day_counts_failed_missed_duplicated_and_paused_slots() {
    let twice = run("2026-01-01T00:02:00Z", RunState::Done, "b");
    let runs = vec![
        run("2026-01-01T00:04:00Z", RunState::Failed, "a"),
        twice.clone(),
        RunRecord {
            started: twice.started + chrono::Duration::milliseconds(5),
            ..run("2026-01-01T00:02:00Z", RunState::Done, "c")
        },
        run("2026-01-01T00:00:00Z", RunState::Done, "a"),
    ];
    let mut r = reads(runs, None);
    r.paused = vec![(t("2026-01-01T00:04:30Z"), None)];
    let v = view(&r, "2026-01-01T00:06:30Z");
    let day = Tally {
        failed: 1,
        missed: 2,
        duplicated: 1,
        paused: 2,
        shortened: false,
    };
    assert_eq!(v.day, day, "missed 00:01 and 00:03, paused 00:05 and 00:06");
}

#[test]
fn a_run_off_the_schedule_is_a_slot_of_its_own_and_says_it_came_from_the_cli() {
    let triggered = RunRecord {
        trigger: "trigger".into(),
        ..run("2026-01-01T00:01:17Z", RunState::Done, "laptop")
    };
    let v = view(&reads(vec![triggered], None), "2026-01-01T00:01:30Z");
    let last = v.last.unwrap();
    assert_eq!(last.slot.short, "2026-01-01 08:01:17");
    assert!(last.from_cli && last.title.contains("started from the CLI"));
    assert_eq!(
        last.by.as_deref(),
        Some("laptop (started from the CLI: slotcron trigger)")
    );
}

#[test]
fn a_slot_too_recent_to_judge_is_pending_and_not_the_last_outcome() {
    let runs = vec![run("2026-01-01T00:01:00Z", RunState::Done, "a")];
    let v = view(&reads(runs, None), "2026-01-01T00:02:01Z");
    let outcomes: Vec<&str> = v.strip.iter().map(|c| c.outcome).collect();
    assert_eq!(outcomes, ["done", "pending"]);
    assert_eq!(v.last.unwrap().outcome, "done");
    assert_eq!(v.standing, Standing::Fine);
}

#[test]
fn a_skipped_slot_leaves_the_failure_before_it_as_the_last_outcome() {
    let runs = vec![
        run("2026-01-01T00:02:00Z", RunState::Overlapped, "a"),
        run("2026-01-01T00:01:00Z", RunState::Failed, "a"),
    ];
    let v = view(&reads(runs, None), "2026-01-01T00:02:30Z");
    assert_eq!(v.last.unwrap().outcome, "failed");
    assert_eq!(v.standing, Standing::Failing);
    assert_eq!(v.chart.unwrap().runs, 1, "a skipped slot did not run");
}

#[test]
fn a_paused_job_stands_between_failing_and_fine() {
    let pause = Pause {
        by: "ops".into(),
        at: t("2026-01-01T00:00:30Z"),
        until: None,
        reason: Some("holidays".into()),
    };
    let runs = vec![run("2026-01-01T00:00:00Z", RunState::Done, "a")];
    let mut r = reads(runs, Some(pause));
    r.paused = vec![(t("2026-01-01T00:00:30Z"), None)];
    let v = view(&r, "2026-01-01T00:02:30Z");
    let outcomes: Vec<&str> = v.strip.iter().map(|c| c.outcome).collect();
    assert_eq!(outcomes, ["done", "paused", "paused"]);
    assert_eq!(v.standing, Standing::Paused);
    assert_eq!(v.paused.unwrap().reason.as_deref(), Some("holidays"));
    assert!(Standing::Failing < Standing::Paused && Standing::Paused < Standing::Fine);
}

#[test]
fn nothing_known_no_past_slots_and_an_unreadable_history_no_strip() {
    let v = view(&reads(Vec::new(), None), "2026-01-01T00:02:30Z");
    assert!(v.strip.is_empty() && v.last.is_none() && v.chart.is_none());
    let mut r = reads(Vec::new(), None);
    r.runs = Err(HistoryUnavailable {
        answered: 0,
        needed: 2,
        errors: "connection refused".into(),
    });
    r.watermark = Some(t("2026-01-01T00:00:00Z"));
    let v = view(&r, "2026-01-01T00:02:30Z");
    assert!(v.strip.is_empty());
    assert!(v.history_error.unwrap().contains("connection refused"));
}

#[test]
fn a_jittered_run_shows_its_delayed_instant_and_its_lateness_from_it() {
    let mut job = job("0 * * * * *");
    let jitter = std::time::Duration::from_secs(30);
    std::sync::Arc::get_mut(&mut job).unwrap().jitter = jitter;
    let slot = Slot::at(t("2026-01-01T00:05:00Z"));
    let delay = jitter::delay("slotcron", "j", slot, jitter);
    let sent = jitter::delayed(slot, delay);
    let ran = RunRecord {
        started: sent + chrono::Duration::milliseconds(40),
        finished: Some(sent + chrono::Duration::milliseconds(140)),
        ..RunRecord::test("j", slot, "r", RunState::Done)
    };
    let settling = (chrono::Duration::seconds(2), "slotcron");
    let reads = reads(vec![ran], None);
    let now = frame("2026-01-01T00:06:00Z");
    let view = job_view(&job, &ActionText::default(), &reads, settling, &now);
    let shown = sent.with_timezone(&chrono_tz::Asia::Shanghai);
    assert_eq!(view.runs[0].slot.short, "2026-01-01 08:05:00");
    assert_eq!(
        view.runs[0].sent,
        Some(shown.format("%H:%M:%S%.3f").to_string())
    );
    assert_eq!(view.runs[0].lateness, format_ms(40.0));
}

#[test]
fn a_job_shows_its_schedule_in_words_as_check_says_it() {
    let reads = reads(Vec::new(), None);
    let shown = view(&reads, "2026-01-01T00:00:00Z");
    let said = crate::time::words::describe(
        &job("0 * * * * *").schedule,
        crate::time::words::Lang::from_env(),
    );
    assert_eq!(shown.words, said);
    assert!(
        !shown.words.is_empty() && shown.words != shown.schedule,
        "{shown:?}"
    );
}

#[test]
fn a_last_success_stamped_just_after_the_pages_now_reads_ago() {
    let page_now = t("2026-01-01T00:00:00Z");
    let ended = page_now + chrono::Duration::milliseconds(400);
    assert_eq!(
        past_moment(ended, &frame("2026-01-01T00:00:00Z")).ago,
        "<1 s ago"
    );
    assert_eq!(moment(ended, &frame("2026-01-01T00:00:00Z")).ago, "in <1 s");
}
