//! The operator's commands beside `run`: `trigger` (run a job now, once across the fleet) and
//! `history` (who ran what).

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use chrono_tz::Tz;
use serde::Serialize;

use crate::cli::{
    default_replica_id, load, HistoryArgs, PauseArgs, ResumeArgs, TriggerArgs, EXIT_CONFIG,
    EXIT_RUNTIME,
};
use crate::config::Config;
use crate::config::Job;
use crate::control::{paused_intervals, Control, Pause};
use crate::history::HISTORY_CAP;
use crate::history::{History, RunRecord};
use crate::ledger::{ledger, Entry, Fate, Row as LedgerRow, RowFate};
use crate::lock::Nodes;
use crate::race::{RaceKind, SlotResult};
use crate::replica::Replica;
use crate::schedule::{Slot, SystemClock};
use crate::telemetry::{self, LogFormat};

/// `trigger` exit code: another replica (or trigger) already ran this slot.
pub const EXIT_LOST: u8 = 3;
/// `trigger` exit code: the lock could not be decided (Redis down or split).
pub const EXIT_UNAVAILABLE: u8 = 4;
/// `trigger` exit code: skipped because the job's previous run is still going.
pub const EXIT_SKIPPED: u8 = 5;

fn runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Runtime::new().map_err(|e| {
        eprintln!("slotcron: cannot start the runtime: {e}");
        ExitCode::from(EXIT_RUNTIME)
    })
}

/// `slotcron trigger JOB`: races the current second of `JOB` like a scheduled slot.
pub fn trigger(args: TriggerArgs, format: LogFormat) -> ExitCode {
    telemetry::init(format);
    let config = match load(&args.config.config) {
        Ok(config) => config,
        Err(code) => return code,
    };
    let Some(job) = config.jobs.iter().find(|j| j.name == args.job).cloned() else {
        eprintln!("{}", unknown_job(&config, &args.job));
        return ExitCode::from(EXIT_CONFIG);
    };
    if config.redis.is_none() {
        eprintln!(
            "slotcron: standalone mode: this trigger is not coordinated with a running replica"
        );
    }
    let replica = args.replica_id.unwrap_or_else(default_replica_id);
    let runtime = match runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    let result = runtime.block_on(async {
        let replica = Replica::connect(&config, replica, Arc::new(SystemClock)).await?;
        let ctx = replica.context(&config);
        // The fleet's current second, so the guard at the race never finds it ahead.
        let slot = Slot::at(ctx.clock.fleet_now());
        anyhow::Ok(ctx.race(&job, slot, RaceKind::Manual).await)
    });
    match result {
        Ok(result) => report_trigger(&job.name, &result),
        Err(e) => {
            eprintln!("slotcron: {e:#}");
            ExitCode::from(EXIT_RUNTIME)
        }
    }
}

fn report_trigger(job: &str, result: &SlotResult) -> ExitCode {
    let (code, text) = match result {
        SlotResult::Done { delivery, duration } => (
            0,
            format!(
                "done in {} ms, {} attempt(s)",
                duration.as_millis(),
                delivery.attempts
            ),
        ),
        SlotResult::Failed {
            error, delivery, ..
        } => (
            EXIT_RUNTIME,
            format!("failed (delivery {}): {error}", delivery.as_str()),
        ),
        SlotResult::HandedOff { reason, .. } => (
            EXIT_RUNTIME,
            format!("not sent from here, handed off to the running replicas: {reason}"),
        ),
        SlotResult::Lost { holder } => (
            EXIT_LOST,
            format!("already run by {} for this second", holder.replica()),
        ),
        SlotResult::Unavailable(why) => (EXIT_UNAVAILABLE, format!("lock unavailable: {why}")),
        SlotResult::Overlapping { .. } => (
            EXIT_SKIPPED,
            "skipped: the previous run is still going".to_owned(),
        ),
        SlotResult::Late { .. } => (EXIT_RUNTIME, "skipped: too late".to_owned()),
        SlotResult::Early { .. } => (
            EXIT_RUNTIME,
            "skipped: before its instant on the fleet clock".to_owned(),
        ),
    };
    println!("{job}: {text}");
    ExitCode::from(code)
}

fn unknown_job(config: &Config, name: &str) -> String {
    if config.disabled.iter().any(|d| d == name) {
        return format!(
            "{}: job {name:?} is disabled (enabled = false)",
            config.path.display()
        );
    }
    let names: Vec<&str> = config.jobs.iter().map(|j| j.name.as_str()).collect();
    format!(
        "{}: no job named {name:?}; jobs: {}",
        config.path.display(),
        names.join(", ")
    )
}

/// One row of `history --json`.
#[derive(Serialize)]
struct Row<'a> {
    #[serde(flatten)]
    run: &'a RunRecord,
    slot_local: String,
    duration_ms: Option<u128>,
}

/// `slotcron history`: the latest runs, newest first, merged across nodes.
pub fn history(args: &HistoryArgs) -> ExitCode {
    let config = match load(&args.config.config) {
        Ok(config) => config,
        Err(code) => return code,
    };
    let Some(redis) = &config.redis else {
        eprintln!(
            "{}: no [redis] section: the run history is kept in Redis (a standalone replica shows its runs on its status page)",
            config.path.display()
        );
        return ExitCode::from(EXIT_CONFIG);
    };
    let jobs = match selected_jobs(&config, args.job.as_deref()) {
        Ok(jobs) => jobs,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
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
    print_latest_runs(args, &jobs, &history, &runtime)
}

/// The pool of the config's Redis nodes for a CLI command; `name` is its replica id in logs.
fn connect(
    redis: &crate::config::RedisConfig,
    name: &str,
    runtime: &tokio::runtime::Runtime,
) -> Result<Arc<Nodes>, ExitCode> {
    // The nodes' connections are opened on the runtime.
    let _entered = runtime.enter();
    Nodes::connect(
        &redis.nodes,
        redis.lock.node_timeout,
        redis.ca.as_deref(),
        name,
    )
    .map(Arc::new)
    .map_err(|e| {
        eprintln!("slotcron: {e}");
        ExitCode::from(EXIT_RUNTIME)
    })
}

/// `history` without `--since`: the latest `--limit` runs of the selected jobs.
fn print_latest_runs(
    args: &HistoryArgs,
    jobs: &[(String, Tz)],
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
        Ok(mut runs) => {
            runs.sort_by(|a, b| b.slot.cmp(&a.slot).then_with(|| a.job.cmp(&b.job)));
            runs.truncate(args.limit);
            print_runs(&runs, jobs, args.json);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("slotcron: {e:#}");
            ExitCode::from(EXIT_RUNTIME)
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
            eprintln!("--since: {message}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let mut lines = Vec::new();
    for job in config
        .jobs
        .iter()
        .filter(|j| jobs.iter().any(|(n, _)| *n == j.name))
    {
        let settling = job.timeout + config.scheduler.max_clock_skew.max(Duration::from_secs(2));
        match runtime.block_on(job_ledger(job, since, settling, history, control)) {
            Ok(entries) => lines.extend(entries.into_iter().map(|e| (job.clone(), e))),
            Err(e) => {
                eprintln!("slotcron: {}: {e:#}", job.name);
                return ExitCode::from(EXIT_RUNTIME);
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

/// One job's ledger since `since`.
/// Slots younger than `settling` may still be running (a run is recorded when it ends).
async fn job_ledger(
    job: &Job,
    since: chrono::DateTime<Utc>,
    settling: Duration,
    history: &History,
    control: &Control,
) -> anyhow::Result<Vec<Entry>> {
    let now = Utc::now();
    // Not before the fleet first scheduled the job: earlier slots were owed to nobody.
    let since = match crate::watermark::recorded(history, &job.name).await {
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
        "more than {LEDGER_MAX_SLOTS} slots since {since}: ask for a shorter --since"
    );
    let runs = history
        .read(&job.name, (slots.len() * 3 + 16).min(HISTORY_CAP))
        .await?;
    let paused = paused_intervals(&control.log(&job.name).await);
    let settled_before = now - chrono::Duration::from_std(settling).unwrap_or_default();
    Ok(ledger(&slots, &runs, &paused, settled_before))
}

fn print_ledger_lines(lines: &[(Arc<Job>, Entry)], json: bool) {
    if json {
        for (job, entry) in lines {
            let (fate, duration) = match &entry.fate {
                Fate::Run(record) => (RowFate::Run(record), record.duration()),
                Fate::Paused | Fate::Pending | Fate::Missed => (
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
            };
            println!("{}", serde_json::to_string(&row).unwrap_or_default());
        }
        return;
    }
    println!(
        "{:<26} {:<20} {:<10} {:<20} {:<9}  ERROR",
        "SLOT", "JOB", "OUTCOME", "WINNER", "TRIGGER"
    );
    for (job, entry) in lines {
        let (winner, trigger, error) = match &entry.fate {
            Fate::Run(r) => (
                r.replica.as_str(),
                r.trigger.as_str(),
                r.error.as_deref().unwrap_or(""),
            ),
            Fate::Paused | Fate::Pending | Fate::Missed => ("-", "-", ""),
        };
        println!(
            "{:<26} {:<20} {:<10} {:<20} {:<9}  {error}",
            entry.slot.rfc3339_in(job.zone()),
            job.name,
            entry.fate.outcome(),
            winner,
            trigger
        );
    }
    if lines.is_empty() {
        println!("(no slots)");
    }
}

/// `--since`: a duration back from now, or an RFC 3339 time.
fn parse_since(text: &str) -> Result<chrono::DateTime<Utc>, String> {
    if let Ok(at) = chrono::DateTime::parse_from_rfc3339(text) {
        return Ok(at.with_timezone(&Utc));
    }
    let span = humantime::parse_duration(text)
        .map_err(|_| format!("{text:?} is neither a duration (24h, 30m) nor an RFC 3339 time"))?;
    chrono::Duration::from_std(span)
        .ok()
        .and_then(|span| Utc::now().checked_sub_signed(span))
        .ok_or_else(|| format!("{text:?} reaches too far back"))
}

/// The jobs to read, with their zones; disabled jobs are shown in the default zone.
fn selected_jobs(config: &Config, only: Option<&str>) -> Result<Vec<(String, Tz)>, String> {
    let all: Vec<(String, Tz)> = config
        .jobs
        .iter()
        .map(|j| (j.name.clone(), j.zone()))
        .chain(
            config
                .disabled
                .iter()
                .map(|d| (d.clone(), config.scheduler.timezone)),
        )
        .collect();
    match only {
        None => Ok(all),
        Some(name) => match all.into_iter().find(|(n, _)| n == name) {
            Some(job) => Ok(vec![job]),
            None => Err(unknown_job(config, name)),
        },
    }
}

fn print_runs(runs: &[RunRecord], jobs: &[(String, Tz)], json: bool) {
    let zone = |job: &str| {
        jobs.iter()
            .find(|(n, _)| n == job)
            .map_or(chrono_tz::UTC, |(_, z)| *z)
    };
    if json {
        for run in runs {
            let row = Row {
                run,
                slot_local: run.slot.rfc3339_in(zone(&run.job)),
                duration_ms: run.duration().map(|d| d.as_millis()),
            };
            println!("{}", serde_json::to_string(&row).unwrap_or_default());
        }
        return;
    }
    println!(
        "{:<26} {:<20} {:<20} {:<9} {:<10} {:>9} {:>8}  ERROR",
        "SLOT", "JOB", "WINNER", "TRIGGER", "OUTCOME", "DURATION", "ATTEMPTS"
    );
    for run in runs {
        let duration = run
            .duration()
            .map_or_else(|| "-".to_owned(), |d| format!("{} ms", d.as_millis()));
        println!(
            "{:<26} {:<20} {:<20} {:<9} {:<10} {:>9} {:>8}  {}",
            run.slot.rfc3339_in(zone(&run.job)),
            run.job,
            run.replica,
            run.trigger,
            run.outcome,
            duration,
            run.attempts,
            run.error.as_deref().unwrap_or("")
        );
    }
    if runs.is_empty() {
        println!("(no runs recorded)");
    }
}

/// `slotcron pause`: records the pause on a majority of the nodes; every replica honours it
/// from its next slot.
pub fn pause(args: &PauseArgs) -> ExitCode {
    // The runtime is bound first so it is dropped last: the connections close on it.
    let (runtime, config, control) = match control_of(&args.config.config, &args.job) {
        Ok(parts) => parts,
        Err(code) => return code,
    };
    let until = match args.until.as_deref().map(parse_until).transpose() {
        Ok(until) => until,
        Err(message) => {
            eprintln!("--until: {message}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let pause = Pause {
        by: args.by.clone().unwrap_or_else(operator),
        at: Utc::now(),
        until,
        reason: args.reason.clone(),
    };
    match runtime.block_on(control.pause(&args.job, &pause)) {
        Ok(()) => {
            let until = until.map_or("until resumed".to_owned(), |u| format!("until {u}"));
            println!(
                "{}: paused on every replica from its next slot, {until} ({})",
                args.job,
                config.path.display()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("slotcron: {}: the pause did not hold: {e}", args.job);
            ExitCode::from(EXIT_UNAVAILABLE)
        }
    }
}

/// `slotcron resume`: ends the pause; with `--catch-up`, also runs the newest slot that fell
/// inside it, through the race (once across the fleet).
pub fn resume(args: &ResumeArgs, log_format: LogFormat) -> ExitCode {
    // The runtime is bound first so it is dropped last: the connections close on it.
    let (runtime, config, control) = match control_of(&args.config.config, &args.job) {
        Ok(parts) => parts,
        Err(code) => return code,
    };
    let by = args.by.clone().unwrap_or_else(operator);
    let ended = match runtime.block_on(control.resume(&args.job, &by)) {
        Ok(ended) => ended,
        Err(e) => {
            eprintln!("slotcron: {}: the resume did not hold: {e}", args.job);
            return ExitCode::from(EXIT_UNAVAILABLE);
        }
    };
    let Some(pause) = ended else {
        println!("{}: was not paused", args.job);
        return ExitCode::SUCCESS;
    };
    println!(
        "{}: resumed (paused by {} at {})",
        args.job, pause.by, pause.at
    );
    if !args.catch_up {
        return ExitCode::SUCCESS;
    }
    telemetry::init(log_format);
    catch_up_pause(&config, &args.job, &pause, &runtime)
}

/// Runs the newest slot of `job` inside `pause`, as a catch-up through the race.
fn catch_up_pause(
    config: &Config,
    job: &str,
    pause: &Pause,
    runtime: &tokio::runtime::Runtime,
) -> ExitCode {
    let Some(job) = config.jobs.iter().find(|j| j.name == job).cloned() else {
        return ExitCode::SUCCESS;
    };
    let now = Utc::now();
    let end = pause.until.map_or(now, |u| u.min(now));
    let newest = job
        .schedule
        .upcoming(pause.at, 100_000)
        .into_iter()
        .take_while(|s| s.instant() < end)
        .last();
    let Some(slot) = newest else {
        println!("{}: no slot fell inside the pause", job.name);
        return ExitCode::SUCCESS;
    };
    let result = runtime.block_on(async {
        let replica = Replica::connect(config, default_replica_id(), Arc::new(SystemClock)).await?;
        let ctx = replica.context(config);
        anyhow::Ok(ctx.race(&job, slot, RaceKind::CatchUp).await)
    });
    match result {
        Ok(result) => report_trigger(&job.name, &result),
        Err(e) => {
            eprintln!("slotcron: {e:#}");
            ExitCode::from(EXIT_RUNTIME)
        }
    }
}

/// The configuration, the fleet's control and a runtime, for a job the file schedules.
fn control_of(
    path: &std::path::Path,
    job: &str,
) -> Result<(tokio::runtime::Runtime, Config, Control), ExitCode> {
    let config = load(path)?;
    let Some(redis) = &config.redis else {
        eprintln!(
            "{}: no [redis] section: pausing is fleet-wide and kept on the Redis nodes (a standalone replica has nothing to share it with)",
            config.path.display()
        );
        return Err(ExitCode::from(EXIT_CONFIG));
    };
    if !config.jobs.iter().any(|j| j.name == job) {
        eprintln!("{}", unknown_job(&config, job));
        return Err(ExitCode::from(EXIT_CONFIG));
    }
    let runtime = runtime()?;
    let nodes = connect(redis, "control", &runtime)?;
    let control = Control::redis(nodes, &config.scheduler.key_prefix);
    Ok((runtime, config, control))
}

/// `--until`: an RFC 3339 time, or a duration from now.
fn parse_until(text: &str) -> Result<chrono::DateTime<Utc>, String> {
    if let Ok(at) = chrono::DateTime::parse_from_rfc3339(text) {
        return Ok(at.with_timezone(&Utc));
    }
    let span = humantime::parse_duration(text).map_err(|_| {
        format!("{text:?} is neither an RFC 3339 time (2026-12-28T09:00:00+08:00) nor a duration (2h, 3d)")
    })?;
    chrono::Duration::from_std(span)
        .ok()
        .and_then(|span| Utc::now().checked_add_signed(span))
        .ok_or_else(|| format!("{text:?} is too far in the future"))
}

/// `$USER@hostname`: who runs the CLI, for the pause record.
fn operator() -> String {
    let user = std::env::var("USER").unwrap_or_else(|_| "someone".to_owned());
    format!("{user}@{}", default_replica_id())
}
