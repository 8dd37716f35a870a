//! What the status page shows of one job, built from what was read for it. Pure (the time is
//! given), so the ordering, the strip and the times are unit-tested without a server.

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use serde::Serialize;

use super::chart::{self, Chart, Sample, format_ms};
use super::words::{failure_sentence, from_cli, meaning, ran_by};
use crate::config::Job;
use crate::fleet::control::{Pause, PausedSpan};
use crate::ops::ledger::{Entry, Fate, ledger};
use crate::record::alerts::AlertRecord;
use crate::record::history::{HistoryUnavailable, RunRecord, RunState};
use crate::time::jitter;
use crate::time::schedule::Slot;

/// Slots in a job's outcome strip.
pub const STRIP_SLOTS: usize = 40;
/// Runs on a job's chart.
pub const CHART_RUNS: usize = 30;
/// Runs in a job's table of last runs.
const RUNS_SHOWN: usize = 5;
/// Upcoming slots listed per job.
const NEXT_SHOWN: usize = 3;
/// Runs read per job: the strip's slots (a handed-off slot has two runs) and some to spare.
/// When a read returns this many, older runs exist unread: the fleet line counts only from
/// the oldest one read.
pub const RUNS_READ: usize = 2 * STRIP_SLOTS + 10;
/// The fleet line's window.
const TALLY_WINDOW: chrono::Duration = chrono::Duration::hours(24);
/// Most slots of one job the fleet line looks at: a paused every-second job has 86,400 slots a
/// day and no run to bound them; this keeps a rendering's cost bounded by the page's reads.
const TALLY_SLOTS: usize = 4 * RUNS_READ;

/// The moment the page is rendered and the one zone every time on it is shown in.
#[derive(Debug, Clone, Copy)]
pub struct Frame {
    /// The replica's clock when the page was asked for: relative times count from it.
    pub now: DateTime<Utc>,
    /// The page's one zone: a reader compares times without converting.
    pub zone: Tz,
}

/// What was read for one job.
#[derive(Debug)]
pub struct Reads {
    /// Its latest runs, newest first; the error when no node answered.
    pub runs: Result<Vec<RunRecord>, HistoryUnavailable>,
    /// When it was paused, from its pause log.
    pub paused: Vec<PausedSpan>,
    /// When the fleet first scheduled it, if recorded (jobs with `catch_up`).
    pub watermark: Option<DateTime<Utc>>,
    /// The pause in force now, as this replica knows it.
    pub pause: Option<Pause>,
    /// The job's last alert (its alert log's newest), if one was read.
    pub last_alert: Option<AlertRecord>,
}

/// Where a job stands, in the overview's order: failures first, then paused jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Standing {
    /// Its last settled slot failed or was missed.
    Failing,
    Paused,
    Fine,
}

/// A time as the page shows it: absolute in the page's zone, and relative to now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Moment {
    /// RFC 3339 in the page's zone (the `<time datetime>`).
    pub iso: String,
    /// `YYYY-MM-DD HH:MM:SS` in the page's zone, which the header names.
    pub short: String,
    /// Relative to the page's `now`: what a glance at a refreshing page needs.
    pub ago: String,
}

/// One slot of the strip, or the overview's last outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cell {
    /// The fate, which is also the CSS class that colours it.
    pub outcome: &'static str,
    /// The slot, its fate, winner, duration and error, for the tooltip.
    pub title: String,
    /// The slot's time (the last outcome shows how long ago it was).
    pub slot: Moment,
    /// The run's raw error chain, folded under the sentence: a tooltip needs a mouse and a
    /// steady hand on a page that refreshes every 10 s.
    pub error: Option<String>,
    /// The fate in words (the badge's title).
    pub meaning: &'static str,
    /// Who ran it (after whom, started how); `None` for a slot no replica ran.
    pub by: Option<String>,
    /// A failure in one plain sentence: what failed, where, why, which replicas tried.
    pub failure: Option<String>,
    /// Started from the command line (`slotcron trigger`), not by the schedule.
    pub from_cli: bool,
}

/// The action as the page names it.
#[derive(Debug, Clone, Default)]
pub struct ActionText {
    /// Its kind and target, secrets scrubbed.
    pub line: String,
    /// Its kind (`http`, `wecom`, ...): what failed, in a failure's sentence.
    pub kind: &'static str,
    /// The host it sends to (or the command's program): where it failed.
    pub place: Option<String>,
}

/// What became of a job's slots in the fleet line's window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Tally {
    pub failed: usize,
    pub missed: usize,
    /// Slots that ran twice under one fence.
    pub duplicated: usize,
    /// Slots the job was paused at.
    pub paused: usize,
    /// Counted from the oldest run read rather than over the whole window: older runs exist
    /// that the page did not read.
    pub shortened: bool,
}

/// The pause in force, as the overview shows it.
#[derive(Debug, Clone, Serialize)]
pub struct PauseView {
    /// Who paused it, and why: the first questions about a job that does not run.
    pub by: String,
    pub since: Moment,
    /// `None`: until someone resumes it.
    pub until: Option<Moment>,
    pub reason: Option<String>,
}

/// The job's last alert, as its section shows it: `deadline` or `recovered` beside `failed`,
/// `missed` and `duplicate`.
#[derive(Debug, Clone, Serialize)]
pub struct AlertView {
    /// Its kind (the alert's `outcome`), also the badge's CSS class.
    pub kind: &'static str,
    /// The slot it was about.
    pub slot: Moment,
    /// When it was sent.
    pub at: Moment,
    /// The replica that sent it.
    pub replica: String,
    pub reason: String,
}

/// One row of a job's table of last runs.
#[derive(Debug, Clone, Serialize)]
pub struct RunView {
    pub slot: Moment,
    /// With jitter: the instant (to the ms, in the page's zone) the slot was due to be raced
    /// and sent, its nominal instant plus its delay; `None` without.
    pub sent: Option<String>,
    /// The winner that ran it.
    pub replica: String,
    /// Who ran it in words: after whom, and how it started when not by the schedule.
    pub by: String,
    /// Started from the command line (`slotcron trigger`).
    pub from_cli: bool,
    pub outcome: &'static str,
    /// The outcome in words (the badge's title).
    pub meaning: &'static str,
    /// Start to end (empty while running), and start minus slot: as on the chart.
    pub duration: String,
    pub lateness: String,
    /// The run's error (scrubbed when recorded), empty if none.
    pub error: String,
}

/// Everything the page shows of one job.
#[derive(Debug, Clone, Serialize)]
pub struct JobView {
    /// Its name: the section's anchor (`#job-NAME`) and the filter's value.
    pub name: String,
    /// The cron expression, as written in the file.
    pub schedule: String,
    /// The schedule said in words, in the replica's locale (`LANG`), as `check` says it: a
    /// reader sees "09:30 on workdays", not only `0 30 9 * * *` and a calendar's name.
    pub words: String,
    /// The job's own zone (its schedule's), which may differ from the page's.
    pub zone: String,
    /// The action's kind and target, secrets scrubbed.
    pub action: String,
    /// Its place in the overview.
    pub standing: Standing,
    /// The newest slot with a verdict (see `concluded`); `None` before any.
    pub last: Option<Cell>,
    /// When a run of it last ended `done`, among the runs read.
    pub last_success: Option<Moment>,
    pub next: Vec<Moment>,
    /// The pause in force now, if any.
    pub paused: Option<PauseView>,
    /// The last slots, oldest first.
    pub strip: Vec<Cell>,
    /// `None` before its first run ended.
    pub chart: Option<Chart>,
    /// Its last runs, newest first, for the table its "show the last runs" link opens.
    pub runs: Vec<RunView>,
    /// Why its runs could not be read (the strip and chart are then empty, not all missed).
    pub history_error: Option<String>,
    /// Its slots of the last 24 h, for the fleet line.
    pub day: Tally,
    /// `deadline`, as written (`10m`), if the job has one.
    pub deadline: Option<String>,
    /// Its last alert, if any was read.
    pub last_alert: Option<AlertView>,
}

/// The view of `job` from `reads`; `action` names its (scrubbed) action; `settling` is how
/// long a slot may go unrecorded before it counts as missed; `prefix` the fleet's key prefix
/// (a jittered slot's delay).
pub fn job_view(
    job: &Job,
    action: &ActionText,
    reads: &Reads,
    (settling, prefix): (chrono::Duration, &str),
    frame: &Frame,
) -> JobView {
    let runs: &[RunRecord] = reads.runs.as_deref().unwrap_or_default();
    let (strip, day) = match &reads.runs {
        Ok(runs) => (
            strip(job, runs, reads, settling, frame)
                .iter()
                .map(|e| cell(e, action, frame))
                .collect(),
            tally(job, runs, reads, settling, frame),
        ),
        Err(_) => (Vec::new(), Tally::default()),
    };
    let last = strip.iter().rev().find(|c| concluded(c.outcome)).cloned();
    JobView {
        name: job.name.clone(),
        schedule: job.schedule.expression().to_owned(),
        words: job.schedule_words(),
        zone: job.zone().to_string(),
        action: action.line.clone(),
        standing: standing(last.as_ref(), reads.pause.is_some()),
        last,
        last_success: last_success(runs, frame),
        next: next_slots(job, frame),
        paused: reads.pause.as_ref().map(|p| pause_view(p, frame)),
        strip,
        chart: chart::chart(&samples(runs, frame)),
        runs: runs
            .iter()
            .take(RUNS_SHOWN)
            .map(|r| run_view(r, delay_of(job, prefix, r), frame))
            .collect(),
        history_error: reads.runs.as_ref().err().map(ToString::to_string),
        day,
        deadline: job
            .deadline
            .map(|d| humantime::format_duration(d).to_string()),
        last_alert: reads.last_alert.as_ref().map(|a| alert_view(a, frame)),
    }
}

fn alert_view(alert: &AlertRecord, frame: &Frame) -> AlertView {
    AlertView {
        kind: alert.kind.as_str(),
        slot: moment(alert.slot.instant(), frame),
        at: moment(alert.at, frame),
        replica: alert.replica.clone(),
        reason: alert.reason.clone(),
    }
}

/// Whether a slot's fate says how the job is doing: not `pending` or `running` (not over yet)
/// nor `skipped` (not run, the previous run still going: that run's fate is the news).
fn concluded(outcome: &str) -> bool {
    !matches!(outcome, "pending" | "running" | "skipped")
}

fn standing(last: Option<&Cell>, paused: bool) -> Standing {
    match last.map(|c| c.outcome) {
        Some("failed" | "missed") => Standing::Failing,
        _ if paused => Standing::Paused,
        _ => Standing::Fine,
    }
}

/// The fate of the job's last [`STRIP_SLOTS`] slots, oldest first: one entry per slot (a
/// handed-off slot shows its last run).
fn strip(
    job: &Job,
    runs: &[RunRecord],
    reads: &Reads,
    settling: chrono::Duration,
    frame: &Frame,
) -> Vec<Entry> {
    let since = known_since(runs, reads);
    let slots = slots_back(job, runs, since, STRIP_SLOTS, frame);
    let mut entries = fates(&slots, runs, reads, settling, frame);
    entries.reverse();
    entries
}

/// The job's slots at or after `since` (none when `None`), the newest `most`, oldest first:
/// its schedule's, and those of its runs read that are not (a `slotcron trigger` runs the
/// second it is given, which the schedule may not have).
fn slots_back(
    job: &Job,
    runs: &[RunRecord],
    since: Option<DateTime<Utc>>,
    most: usize,
    frame: &Frame,
) -> Vec<Slot> {
    let Some(since) = since else {
        return Vec::new();
    };
    let mut slots: Vec<Slot> = job
        .schedule
        .back_from(frame.now)
        .take(most)
        .take_while(|s| s.instant() >= since)
        .collect();
    // The strip's oldest slot when the schedule filled it, else `since`.
    let oldest = match slots.len() == most {
        true => slots.last().map_or(since, |s| s.instant()),
        false => since,
    };
    let off_schedule = runs.iter().map(|r| r.slot);
    slots.extend(off_schedule.filter(|s| s.instant() >= oldest && s.instant() <= frame.now));
    slots.sort();
    slots.dedup();
    slots.split_off(slots.len().saturating_sub(most))
}

/// The fate of each of `slots`, newest first: one entry per slot, its last run's.
fn fates(
    slots: &[Slot],
    runs: &[RunRecord],
    reads: &Reads,
    settling: chrono::Duration,
    frame: &Frame,
) -> Vec<Entry> {
    // The page reads no slot keys: its young slots stay pending (the CLI's ledger reads them).
    let now = crate::ops::ledger::Now {
        settled_before: frame.now - settling,
        window_closed_before: None,
        held: Default::default(),
    };
    let mut entries = ledger(slots, runs, &reads.paused, &now);
    // Within a slot its last run comes first: the first entry is the slot's fate (the ledger
    // flags every run of a slot that ran twice, so it keeps the flag).
    entries.dedup_by_key(|e| e.slot);
    entries
}

/// What became of the job's slots in the last [`TALLY_WINDOW`], from the runs read: when the
/// read was full, only from the oldest run read (older ones exist unread).
fn tally(
    job: &Job,
    runs: &[RunRecord],
    reads: &Reads,
    settling: chrono::Duration,
    frame: &Frame,
) -> Tally {
    let shortened = runs.len() >= RUNS_READ;
    let since = match shortened {
        true => runs.iter().map(|r| r.slot.instant()).min(),
        false => known_since(runs, reads),
    };
    let since = since.map(|s| s.max(frame.now - TALLY_WINDOW));
    let slots = slots_back(job, runs, since, TALLY_SLOTS, frame);
    let mut tally = Tally {
        shortened,
        ..Tally::default()
    };
    for entry in fates(&slots, runs, reads, settling, frame) {
        tally.duplicated += usize::from(entry.duplicate);
        match entry.fate.outcome() {
            "failed" => tally.failed += 1,
            "missed" => tally.missed += 1,
            "paused" => tally.paused += 1,
            _ => {}
        }
    }
    tally
}

/// The earliest time the page knows the job was scheduled (its watermark, its oldest run read,
/// its first pause): slots before it were owed to nobody, so they are not shown as missed.
/// `None` when nothing is known: no past slot is shown.
fn known_since(runs: &[RunRecord], reads: &Reads) -> Option<DateTime<Utc>> {
    let oldest_run = runs.iter().map(|r| r.slot.instant()).min();
    let first_pause = reads.paused.iter().map(|(from, _)| *from).min();
    [reads.watermark, oldest_run, first_pause]
        .into_iter()
        .flatten()
        .min()
}

fn cell(entry: &Entry, action: &ActionText, frame: &Frame) -> Cell {
    let slot = moment(entry.slot.instant(), frame);
    let mut title = format!("{} · {}", slot.short, entry.fate.outcome());
    if let Fate::Run(run) = &entry.fate {
        title.push_str(&format!(" · won by {}", run.replica));
        if let Some(d) = run.duration() {
            title.push_str(&format!(" · {}", format_ms(d.as_millis() as f64)));
        }
        if let Some(first) = &run.previous_winner {
            title.push_str(&format!(" · handed off by {first}"));
        }
        if from_cli(run) {
            title.push_str(" · started from the CLI");
        }
        if let Some(error) = &run.error {
            title.push_str(&format!(" · {error}"));
        }
    }
    if entry.duplicate {
        title.push_str(" · DUPLICATE: the slot ran twice");
    }
    let run = match &entry.fate {
        Fate::Run(run) => Some(run),
        _ => None,
    };
    let outcome = entry.fate.outcome();
    Cell {
        outcome,
        title,
        slot,
        error: run.and_then(|r| r.error.clone()),
        meaning: meaning(outcome),
        by: run.map(ran_by),
        failure: run.and_then(|r| failure_sentence(r, action.kind, action.place.as_deref())),
        from_cli: run.is_some_and(from_cli),
    }
}

fn last_success(runs: &[RunRecord], frame: &Frame) -> Option<Moment> {
    runs.iter()
        .filter(|r| r.outcome == RunState::Done)
        .filter_map(|r| r.finished)
        .max()
        .map(|t| past_moment(t, frame))
}

/// `t`, an event that is over, as the page shows it: a run's end is stamped on the fleet clock,
/// which the page's `now` can trail by under a second, and an ended run reads "ago", never "in".
fn past_moment(t: DateTime<Utc>, frame: &Frame) -> Moment {
    let latest = frame.now - chrono::Duration::milliseconds(1);
    Moment {
        ago: relative(t.min(latest), frame.now),
        ..moment(t, frame)
    }
}

fn next_slots(job: &Job, frame: &Frame) -> Vec<Moment> {
    job.schedule
        .upcoming(frame.now, NEXT_SHOWN)
        .iter()
        .map(|s| moment(s.instant(), frame))
        .collect()
}

fn pause_view(pause: &Pause, frame: &Frame) -> PauseView {
    PauseView {
        by: pause.by.clone(),
        since: moment(pause.at, frame),
        until: pause.until.map(|t| moment(t, frame)),
        reason: pause.reason.clone(),
    }
}

/// The chart's runs, oldest first: those that ran and ended (a skipped slot did not run).
fn samples(runs: &[RunRecord], frame: &Frame) -> Vec<Sample> {
    let mut samples: Vec<Sample> = runs
        .iter()
        .filter(|r| r.outcome != RunState::Overlapped)
        .filter_map(|r| {
            Some(Sample {
                label: local(r.slot.instant(), frame)
                    .format("%H:%M:%S")
                    .to_string(),
                lateness_ms: lateness(r).as_millis() as f64,
                duration_ms: r.duration()?.as_millis() as f64,
            })
        })
        .take(CHART_RUNS)
        .collect();
    samples.reverse();
    samples
}

/// How long after its slot's instant a run started (0 if before, on the winner's clock).
fn lateness(run: &RunRecord) -> std::time::Duration {
    (run.started - run.slot.instant())
        .to_std()
        .unwrap_or_default()
}

/// The delay of `run`'s slot of `job` (its `jitter`) on `prefix`; zero without jitter.
fn delay_of(job: &Job, prefix: &str, run: &RunRecord) -> std::time::Duration {
    jitter::delay(prefix, &job.name, run.slot, job.jitter)
}

/// A run's row; `delay` is its slot's jitter delay: the lateness counts from the delayed
/// instant, which the row shows beside the nominal one.
fn run_view(run: &RunRecord, delay: std::time::Duration, frame: &Frame) -> RunView {
    let sent = jitter::delayed(run.slot, delay);
    let late = (run.started - sent).to_std().unwrap_or_default();
    RunView {
        slot: moment(run.slot.instant(), frame),
        sent: (!delay.is_zero()).then(|| local(sent, frame).format("%H:%M:%S%.3f").to_string()),
        replica: run.replica.clone(),
        by: ran_by(run),
        from_cli: from_cli(run),
        outcome: run.outcome.as_str(),
        meaning: meaning(run.outcome.as_str()),
        duration: run
            .duration()
            .map_or_else(String::new, |d| format_ms(d.as_millis() as f64)),
        lateness: format_ms(late.as_millis() as f64),
        error: run.error.clone().unwrap_or_default(),
    }
}

fn local(t: DateTime<Utc>, frame: &Frame) -> DateTime<Tz> {
    t.with_timezone(&frame.zone)
}

/// `t` as the page shows it.
pub fn moment(t: DateTime<Utc>, frame: &Frame) -> Moment {
    let local = local(t, frame);
    Moment {
        iso: local.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        short: local.format("%Y-%m-%d %H:%M:%S").to_string(),
        ago: relative(t, frame.now),
    }
}

/// `3 min ago`, `in 12 s`, `<1 s ago`: whole units, truncated, as a glance needs.
pub fn relative(t: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let ms = (t - now).num_milliseconds();
    let span = span(ms.unsigned_abs() / 1000);
    match ms {
        0..1000 => "in <1 s".to_owned(),
        -999..0 => "<1 s ago".to_owned(),
        ms if ms > 0 => format!("in {span}"),
        _ => format!("{span} ago"),
    }
}

fn span(secs: u64) -> String {
    match secs {
        0..60 => format!("{secs} s"),
        60..3600 => format!("{} min", secs / 60),
        3600..172_800 => format!("{} h", secs / 3600),
        _ => format!("{} d", secs / 86_400),
    }
}

#[cfg(test)]
mod tests;
