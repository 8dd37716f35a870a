//! The operator's commands beside `run`: `trigger` (run a job now, once across the fleet) and
//! `history` (who ran what).

use std::process::ExitCode;
use std::sync::Arc;

use chrono::Utc;
use chrono_tz::Tz;
use serde::Serialize;

use crate::cli::{default_replica_id, load, HistoryArgs, TriggerArgs, EXIT_CONFIG, EXIT_RUNTIME};
use crate::config::Config;
use crate::history::{History, RunRecord};
use crate::lock::Nodes;
use crate::race::{RaceKind, SlotResult};
use crate::schedule::{Slot, SystemClock};
use crate::scheduler::Replica;
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
        anyhow::Ok(ctx.race(&job, Slot::at(Utc::now()), RaceKind::Manual).await)
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
        SlotResult::Failed { error, .. } => (EXIT_RUNTIME, format!("failed: {error}")),
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
    let result = runtime.block_on(async {
        let nodes = Nodes::connect(
            &redis.nodes,
            redis.lock.node_timeout,
            redis.ca.as_deref(),
            "history",
        )
        .map_err(anyhow::Error::msg)?;
        let history = History::Redis {
            nodes: Arc::new(nodes),
            prefix: config.scheduler.key_prefix.clone(),
        };
        let mut runs = Vec::new();
        for (name, _) in &jobs {
            runs.extend(history.read(name, args.limit).await?);
        }
        anyhow::Ok(runs)
    });
    match result {
        Ok(mut runs) => {
            runs.sort_by(|a, b| b.slot.cmp(&a.slot).then_with(|| a.job.cmp(&b.job)));
            runs.truncate(args.limit);
            print_runs(&runs, &jobs, args.json);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("slotcron: {e:#}");
            ExitCode::from(EXIT_RUNTIME)
        }
    }
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
        "{:<26} {:<20} {:<20} {:<8} {:>9} {:>8}  ERROR",
        "SLOT", "JOB", "WINNER", "OUTCOME", "DURATION", "ATTEMPTS"
    );
    for run in runs {
        let duration = run
            .duration()
            .map_or_else(|| "-".to_owned(), |d| format!("{} ms", d.as_millis()));
        println!(
            "{:<26} {:<20} {:<20} {:<8} {:>9} {:>8}  {}",
            run.slot.rfc3339_in(zone(&run.job)),
            run.job,
            run.replica,
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
