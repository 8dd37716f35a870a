//! `slotcron history`: who ran what, newest first, merged across the Redis nodes; with
//! `--since` or `--missed`, the slot ledger of the period.

use super::out::{errln, outln};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use chrono_tz::Tz;
use clap::Args;
use serde::Serialize;

use super::shared::{
    BadTime, ConfigArg, EXIT_CONFIG, UnknownJob, connect, exit_code_of, load_unsent_or_exit,
    local_time, runtime, time_or_offset_back, unknown_job,
};
use crate::config::{Config, Job};
use crate::fleet::control::{Control, paused_intervals};
use crate::lock::SlotKey;
use crate::ops::ledger::{Entry, Fate, Now, Row as LedgerRow, RowFate, ledger, mark_alerts};
use crate::record::alerts::{ALERT_LOG_CAP, AlertKind};
use crate::record::history::{HISTORY_CAP, History, RunRecord, duplicates};
use crate::redis::Replies;
use crate::time::jitter;
use crate::time::schedule::Slot;

#[derive(Debug, Args)]
/// `slotcron history`.
pub struct HistoryArgs {
    #[command(flatten)]
    /// Which jobs.toml to read.
    pub config: ConfigArg,
    /// Only this job.
    #[arg(long)]
    pub job: Option<String>,
    /// How many runs to print.
    #[arg(long, default_value_t = 20)]
    pub limit: usize,
    /// One JSON object per run instead of a table.
    #[arg(long)]
    pub json: bool,
    /// The slot ledger of this period (`24h`, `30m` or an RFC 3339 time).
    ///
    /// Every scheduled slot of the period, run or not, and its fate (`done`, `failed`,
    /// `handed_off`, `skipped`, `running`, `paused`, `pending`, `missed`); a slot run twice is
    /// listed twice, flagged `duplicate`. The period starts a duration back from now (`24h`,
    /// `30m`) or at an RFC 3339 time.
    #[arg(long)]
    pub since: Option<String>,
    /// Only the gaps: slots no replica ran and no pause covered.
    ///
    /// Implies --since 24h when --since is not given.
    #[arg(long)]
    pub missed: bool,
}

/// One row of `history --json`.
#[derive(Serialize)]
struct Row<'a> {
    #[serde(flatten)]
    run: &'a RunRecord,
    slot_local: String,
    /// With jitter: the slot's delay, and the instant it was due to be raced and sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    jitter_ms: Option<u128>,
    #[serde(skip_serializing_if = "Option::is_none")]
    delayed: Option<String>,
    duration_ms: Option<u128>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    duplicate: bool,
}

/// Each job's `jitter` on the fleet's key prefix: a run's delayed instant, shown beside its
/// nominal slot (the delay is the pure function every replica computes).
struct Jitters<'a> {
    prefix: &'a str,
    jobs: std::collections::HashMap<&'a str, Duration>,
}

impl<'a> Jitters<'a> {
    fn of(config: &'a Config) -> Self {
        let jobs = config.jobs.iter().filter(|j| !j.jitter.is_zero());
        Jitters {
            prefix: &config.scheduler.key_prefix,
            jobs: jobs.map(|j| (j.name.as_str(), j.jitter)).collect(),
        }
    }

    /// The run's slot's delay and delayed instant; `None` for a job without jitter.
    fn delayed(&self, run: &RunRecord) -> Option<(Duration, DateTime<Utc>)> {
        let jitter = *self.jobs.get(run.job.as_str())?;
        let delay = jitter::delay(self.prefix, &run.job, run.slot, jitter);
        Some((delay, jitter::delayed(run.slot, delay)))
    }
}

/// `slotcron history`: the latest runs, newest first, merged across nodes.
pub(super) fn history(args: &HistoryArgs) -> ExitCode {
    let config = match load_unsent_or_exit(&args.config.config) {
        Ok(config) => config,
        Err(code) => return code,
    };
    let Some(redis) = &config.redis else {
        errln!(
            "{}: no [redis] section: the run history is kept in Redis (a standalone replica shows its runs on its status page)",
            config.path.display()
        );
        return ExitCode::from(EXIT_CONFIG);
    };
    let Selected { jobs, gone } = selected_jobs(&config, args.job.as_deref());
    if let (Some(gone), true) = (&gone, args.since.is_some() || args.missed) {
        errln!(
            "{gone}: the ledger (--since, --missed) needs the job's schedule; without them, \
             `history --job` lists the runs it left"
        );
        return ExitCode::from(EXIT_CONFIG);
    }
    let runtime = match runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    let nodes = match connect(redis, "history", &runtime) {
        Ok(nodes) => nodes,
        Err(code) => return code,
    };
    let prefix = &config.scheduler.key_prefix;
    let history = History::Redis {
        nodes: nodes.clone(),
        prefix: prefix.clone(),
    };
    if args.since.is_some() || args.missed {
        let control = Control::redis(nodes, prefix);
        return print_ledger(args, &config, &jobs, &history, &control, &runtime);
    }
    let jitters = Jitters::of(&config);
    print_latest_runs(args, (&jobs, &jitters), gone, &history, &runtime)
}

/// `history` without `--since`: the latest `--limit` runs of the selected jobs. A job `gone`
/// from the file is an error only when it left no runs either (a typo, most likely).
fn print_latest_runs(
    args: &HistoryArgs,
    (jobs, jitters): (&[(String, Tz)], &Jitters<'_>),
    gone: Option<UnknownJob>,
    history: &History,
    runtime: &tokio::runtime::Runtime,
) -> ExitCode {
    let result = runtime.block_on(async {
        let mut runs = Vec::new();
        for (name, _) in jobs {
            runs.extend(history.read(name, args.limit).await?);
        }
        anyhow::Ok(runs)
    });
    match result {
        Ok(runs) if runs.is_empty() && gone.is_some() => {
            errln!("{}", gone.map(|g| g.0).unwrap_or_default());
            ExitCode::from(EXIT_CONFIG)
        }
        Ok(mut runs) => {
            if let Some(gone) = gone {
                errln!("{gone}: listing the runs it left, times in the default zone");
            }
            runs.sort_by(|a, b| b.slot.cmp(&a.slot).then_with(|| a.job.cmp(&b.job)));
            runs.truncate(args.limit);
            print_runs(&runs, (jobs, jitters), args.json);
            ExitCode::SUCCESS
        }
        Err(e) => {
            errln!("slotcron: {e:#}");
            exit_code_of(&e)
        }
    }
}

/// Most slots one ledger lists per job: a wider period is refused rather than cut short.
const LEDGER_MAX_SLOTS: usize = 20_000;

/// `history --since` / `--missed`: the slot ledger of every selected (enabled) job.
fn print_ledger(
    args: &HistoryArgs,
    config: &Config,
    jobs: &[(String, Tz)],
    history: &History,
    control: &Control,
    runtime: &tokio::runtime::Runtime,
) -> ExitCode {
    let since = match parse_since(args.since.as_deref().unwrap_or("24h")) {
        Ok(since) => since,
        Err(message) => {
            errln!("--since: {message}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let mut lines = Vec::new();
    for job in config
        .jobs
        .iter()
        .filter(|j| jobs.iter().any(|(n, _)| *n == j.name))
    {
        let window = config.scheduler.start_window();
        match runtime.block_on(job_ledger(job, since, window, history, control)) {
            Ok(entries) => lines.extend(entries.into_iter().map(|e| (job.clone(), e))),
            Err(e) => {
                errln!("slotcron: {}: {e:#}", job.name);
                return exit_code_of(&e);
            }
        }
    }
    if args.missed {
        lines.retain(|(_, e)| e.fate == Fate::Missed);
    }
    lines.sort_by(|(a, x), (b, y)| y.slot.cmp(&x.slot).then_with(|| a.name.cmp(&b.name)));
    print_ledger_lines(&lines, args.json);
    ExitCode::SUCCESS
}

/// One job's ledger since `since`. A slot's start window is `window`: slots younger than its
/// timeout plus the window may still be running (a run is recorded when it ends), so their keys
/// are read to tell a run still going from a slot nobody started.
async fn job_ledger(
    job: &Job,
    since: chrono::DateTime<Utc>,
    window: Duration,
    history: &History,
    control: &Control,
) -> anyhow::Result<Vec<Entry>> {
    let now = Utc::now();
    // Not before the fleet first scheduled the job: earlier slots were owed to nobody.
    let since = match crate::record::watermark::recorded(history, &job.name).await {
        Some(first) => since.max(first),
        None => since,
    };
    let slots: Vec<Slot> = job
        .schedule
        .upcoming(since, LEDGER_MAX_SLOTS + 1)
        .into_iter()
        .take_while(|s| s.instant() <= now)
        .collect();
    anyhow::ensure!(
        slots.len() <= LEDGER_MAX_SLOTS,
        "more than {LEDGER_MAX_SLOTS} slots since {}: ask for a shorter --since",
        local_time(since, job.zone())
    );
    let runs = history
        .read(&job.name, (slots.len() * 3 + 16).min(HISTORY_CAP))
        .await?;
    let paused = paused_intervals(&control.log(&job.name).await);
    let ago = |d: Duration| now - chrono::Duration::from_std(d).unwrap_or_default();
    // A slot with jitter is raced up to `jitter` after its instant: its window closes later.
    let window = window + job.jitter;
    let settled_before = ago(job.timeout + window);
    let young: Vec<Slot> = slots
        .iter()
        .copied()
        .filter(|s| s.instant() >= settled_before && !runs.iter().any(|r| r.slot == *s))
        .collect();
    let held = held_keys(history, &job.name, &young).await;
    let judged = Now {
        settled_before,
        window_closed_before: held.as_ref().map(|_| ago(window)),
        held: held.unwrap_or_default(),
    };
    let mut entries = ledger(&slots, &runs, &paused, &judged);
    let alerts = crate::record::alerts::read(history, &job.name, ALERT_LOG_CAP).await?;
    mark_alerts(&mut entries, &alerts);
    Ok(entries)
}

/// Which of `slots` some node holds the key of, read from a majority of the nodes (`None`:
/// fewer answered, so nothing can be said).
async fn held_keys(
    history: &History,
    job: &str,
    slots: &[Slot],
) -> Option<std::collections::HashSet<Slot>> {
    let History::Redis { nodes, prefix } = history else {
        return None;
    };
    if slots.is_empty() {
        return Some(Default::default());
    }
    let mut cmd = redis::cmd("MGET");
    for slot in slots {
        cmd.arg(SlotKey::new(prefix, job, *slot).as_str());
    }
    let replies = nodes
        .query::<Vec<Option<String>>>(cmd, Duration::from_millis(500), Replies::settled)
        .await;
    if replies.answered() < nodes.quorum() {
        return None;
    }
    let mut held = std::collections::HashSet::new();
    for values in replies.values() {
        held.extend(
            slots
                .iter()
                .zip(values)
                .filter(|(_, v)| v.is_some())
                .map(|(s, _)| *s),
        );
    }
    Some(held)
}

fn print_ledger_lines(lines: &[(Arc<Job>, Entry)], json: bool) {
    if json {
        return print_ledger_json(lines);
    }
    outln!(
        "{:<26} {:<20} {:<10} {:<20} {:<9}  ERROR",
        "SLOT",
        "JOB",
        "OUTCOME",
        "WINNER",
        "TRIGGER"
    );
    // A slot's alerts follow its error: `[alerted: deadline, recovered]`.
    for (job, entry) in lines {
        let (winner, trigger, error) = match &entry.fate {
            Fate::Run(r) => (
                r.replica.as_str(),
                r.trigger.as_str(),
                r.error.as_deref().unwrap_or(""),
            ),
            Fate::Held | Fate::Paused | Fate::Pending | Fate::Missed => ("-", "-", ""),
        };
        let alerted = alerted_text(&entry.alerts);
        outln!(
            "{:<26} {:<20} {:<10} {:<20} {:<9}  {error}{alerted}",
            entry.slot.rfc3339_in(job.zone()),
            job.name,
            outcome_text(entry.fate.outcome(), entry.duplicate),
            winner,
            trigger
        );
    }
    if lines.is_empty() {
        outln!("(no slots)");
    }
}

/// `history --since --json`: one object a line.
fn print_ledger_json(lines: &[(Arc<Job>, Entry)]) {
    for (job, entry) in lines {
        let (fate, duration) = match &entry.fate {
            Fate::Run(record) => (RowFate::Run(record), record.duration()),
            Fate::Held | Fate::Paused | Fate::Pending | Fate::Missed => (
                RowFate::NoRun {
                    job: &job.name,
                    slot: entry.slot.rfc3339_utc(),
                    outcome: entry.fate.outcome(),
                },
                None,
            ),
        };
        let row = LedgerRow {
            fate,
            slot_local: entry.slot.rfc3339_in(job.zone()),
            duration_ms: duration.map(|d| d.as_millis()),
            duplicate: entry.duplicate,
            alerts: entry.alerts.iter().map(|k| k.as_str()).collect(),
        };
        outln!("{}", serde_json::to_string(&row).unwrap_or_default());
    }
}

/// The alerts sent about a slot, after its error: ` [alerted: deadline, recovered]`.
fn alerted_text(alerts: &[AlertKind]) -> String {
    if alerts.is_empty() {
        return String::new();
    }
    let kinds: Vec<&str> = alerts.iter().map(|k| k.as_str()).collect();
    format!(" [alerted: {}]", kinds.join(", "))
}

/// The OUTCOME column: the outcome, marked when the slot ran twice under one fence.
fn outcome_text(outcome: &str, duplicate: bool) -> String {
    if duplicate {
        format!("{outcome} DUPLICATE")
    } else {
        outcome.to_owned()
    }
}

/// `--since`: a duration back from now, or an RFC 3339 time.
fn parse_since(text: &str) -> Result<chrono::DateTime<Utc>, BadTime> {
    time_or_offset_back(text)
}

/// The jobs `history` reads, with their zones.
struct Selected {
    jobs: Vec<(String, Tz)>,
    /// Why the `--job` named is not in the file (renamed or removed): its runs are still in
    /// Redis, so it is read anyway, in the default zone.
    gone: Option<UnknownJob>,
}

/// The jobs to read, with their zones; disabled jobs, and a `--job` the file no longer has,
/// are shown in the default zone.
fn selected_jobs(config: &Config, only: Option<&str>) -> Selected {
    let all = config
        .jobs
        .iter()
        .map(|j| (j.name.clone(), j.zone()))
        .chain(
            config
                .disabled
                .iter()
                .map(|d| (d.clone(), config.scheduler.timezone)),
        );
    let Some(name) = only else {
        return Selected {
            jobs: all.collect(),
            gone: None,
        };
    };
    match all.into_iter().find(|(n, _)| n == name) {
        Some(job) => Selected {
            jobs: vec![job],
            gone: None,
        },
        None => Selected {
            jobs: vec![(name.to_owned(), config.scheduler.timezone)],
            gone: Some(UnknownJob(unknown_job(config, name))),
        },
    }
}

/// What `history` lists runs with: the zone of each job, and its jitter.
struct Listing<'a> {
    jobs: &'a [(String, Tz)],
    jitters: &'a Jitters<'a>,
}

impl Listing<'_> {
    /// The zone of `job` (UTC for one the file does not have).
    fn zone(&self, job: &str) -> Tz {
        let found = self.jobs.iter().find(|(n, _)| n == job);
        found.map_or(chrono_tz::UTC, |(_, z)| *z)
    }

    /// The run's delayed instant in its job's zone, to the millisecond; `None` without jitter.
    fn delayed_local(&self, run: &RunRecord) -> Option<String> {
        let (_, at) = self.jitters.delayed(run)?;
        let at = at.with_timezone(&self.zone(&run.job));
        Some(at.to_rfc3339_opts(SecondsFormat::Millis, true))
    }
}

/// The runs, as a table or (`json`) one object a line; with jitter, each slot's delayed
/// instant beside its nominal one (a `DELAYED` column when any run listed has one).
fn print_runs(runs: &[RunRecord], (jobs, jitters): (&[(String, Tz)], &Jitters<'_>), json: bool) {
    let listing = Listing { jobs, jitters };
    match json {
        true => print_runs_json(runs, &listing),
        false => print_runs_table(runs, &listing),
    }
}

fn print_runs_json(runs: &[RunRecord], listing: &Listing<'_>) {
    let twice = duplicates(runs);
    for run in runs {
        let delayed = listing.jitters.delayed(run);
        let row = Row {
            run,
            slot_local: run.slot.rfc3339_in(listing.zone(&run.job)),
            jitter_ms: delayed.map(|(d, _)| d.as_millis()),
            delayed: delayed.map(|(_, at)| at.to_rfc3339_opts(SecondsFormat::Millis, true)),
            duration_ms: run.duration().map(|d| d.as_millis()),
            duplicate: twice.contains(&run),
        };
        outln!("{}", serde_json::to_string(&row).unwrap_or_default());
    }
}

fn print_runs_table(runs: &[RunRecord], listing: &Listing<'_>) {
    let twice = duplicates(runs);
    let any_delayed = runs
        .iter()
        .any(|run| listing.jitters.delayed(run).is_some());
    let cell = |text: Option<String>| match any_delayed {
        true => format!("{:<30} ", text.unwrap_or_else(|| "-".to_owned())),
        false => String::new(),
    };
    outln!(
        "{:<26} {}{:<20} {:<20} {:<9} {:<10} {:>9} {:>8}  ERROR",
        "SLOT",
        cell(Some("DELAYED".to_owned())),
        "JOB",
        "WINNER",
        "TRIGGER",
        "OUTCOME",
        "DURATION",
        "ATTEMPTS"
    );
    for run in runs {
        let duration = run
            .duration()
            .map_or_else(|| "-".to_owned(), |d| format!("{} ms", d.as_millis()));
        outln!(
            "{:<26} {}{:<20} {:<20} {:<9} {:<10} {:>9} {:>8}  {}",
            run.slot.rfc3339_in(listing.zone(&run.job)),
            cell(listing.delayed_local(run)),
            run.job,
            run.replica,
            run.trigger,
            outcome_text(run.outcome.as_str(), twice.contains(&run)),
            duration,
            run.attempts,
            run.error.as_deref().unwrap_or("")
        );
    }
    if runs.is_empty() {
        outln!("(no runs recorded)");
    }
}
