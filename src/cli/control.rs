//! `slotcron pause` and `resume`: fleet-wide, kept on the Redis nodes.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;

use super::shared::{
    connect, default_replica_id, load_or_exit, runtime, time_or_span, unknown_job, BadTime,
    ConfigArg, Offset, TimeOrSpan, EXIT_CONFIG, EXIT_UNAVAILABLE,
};
use super::trigger::report_trigger;
use crate::config::Config;
use crate::fleet::control::{Control, Pause, PauseError, PauseOrder, Taken, Until};
use crate::ops::telemetry::{self, LogFormat};
use crate::record::history::HISTORY_CAP;
use crate::replica::Replica;
use crate::slot::{SlotResult, Trigger};
use crate::time::schedule::{Slot, SystemClock};

#[derive(Debug, Args)]
/// `slotcron pause`.
pub struct PauseArgs {
    #[command(flatten)]
    /// Which jobs.toml to read.
    pub config: ConfigArg,
    /// The job to pause.
    pub job: String,
    /// When the pause ends by itself (`2h`, `3d` or an RFC 3339 time).
    ///
    /// An RFC 3339 time (`2026-12-28T09:00:00+08:00`) or a duration from now on the fleet's
    /// clock (`2h`, `3d`). Default: until `slotcron resume`.
    #[arg(long)]
    pub until: Option<String>,
    /// Why, shown in the logs, the status page and the ledger.
    #[arg(long)]
    pub reason: Option<String>,
    /// Who pauses (default: $USER@hostname).
    #[arg(long)]
    pub by: Option<String>,
}

#[derive(Debug, Args)]
/// `slotcron resume`.
pub struct ResumeArgs {
    #[command(flatten)]
    /// Which jobs.toml to read.
    pub config: ConfigArg,
    /// The job to resume.
    pub job: String,
    /// Also run the newest slot that fell inside the pause.
    ///
    /// It runs once across the fleet. By default a paused job's slots are not caught up.
    #[arg(long)]
    pub catch_up: bool,
    /// Who resumes (default: $USER@hostname).
    #[arg(long)]
    pub by: Option<String>,
}

/// `slotcron pause`: records the pause on a majority of the nodes; every replica honours it
/// from its next slot.
pub(super) fn pause(args: &PauseArgs) -> ExitCode {
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
    let order = PauseOrder {
        by: args.by.clone().unwrap_or_else(operator),
        until,
        reason: args.reason.clone(),
    };
    match runtime.block_on(control.pause(&args.job, &order)) {
        Ok(taken) => {
            let until = taken
                .change
                .until
                .map_or("until resumed".to_owned(), |u| format!("until {u}"));
            println!(
                "{}: paused on every replica from its next slot, {until} ({})",
                args.job,
                config.path.display()
            );
            replicated(&args.job, "pause", &taken)
        }
        Err(e @ PauseError::AlreadyOver { .. }) => {
            eprintln!("slotcron: {}: not paused: {e}", args.job);
            ExitCode::from(EXIT_CONFIG)
        }
        Err(e @ PauseError::NoMajority(_)) => {
            eprintln!("slotcron: {}: the pause did not hold: {e}", args.job);
            ExitCode::from(EXIT_UNAVAILABLE)
        }
    }
}

/// `slotcron resume`: ends the pause; with `--catch-up`, also runs the newest slot that fell
/// inside it, through the race (once across the fleet).
pub(super) fn resume(args: &ResumeArgs, log_format: LogFormat) -> ExitCode {
    // The runtime is bound first so it is dropped last: the connections close on it.
    let (runtime, config, control) = match control_of(&args.config.config, &args.job) {
        Ok(parts) => parts,
        Err(code) => return code,
    };
    let by = args.by.clone().unwrap_or_else(operator);
    let taken = match runtime.block_on(control.resume(&args.job, &by)) {
        Ok(taken) => taken,
        Err(e) => {
            eprintln!("slotcron: {}: the resume did not hold: {e}", args.job);
            return ExitCode::from(EXIT_UNAVAILABLE);
        }
    };
    let Some(pause) = &taken.change else {
        println!("{}: was not paused", args.job);
        return replicated(&args.job, "resume", &taken);
    };
    println!(
        "{}: resumed (paused by {} at {})",
        args.job, pause.by, pause.at
    );
    if !args.catch_up || taken.is_short() {
        return replicated(&args.job, "resume", &taken);
    }
    telemetry::init(log_format);
    catch_up_pause(&config, &args.job, pause, &runtime)
}

/// Exit 0 when the primary's replicas acknowledged the change (`WAIT`, sentinel and cluster
/// modes), as a won slot's lock must be; else says so and exits 4: the change holds on the
/// primary, but a failover before a replica has it would lose it there (the replicas that
/// heard it write it back, README), so the operator runs it again once a replica is back.
fn replicated<T>(job: &str, what: &str, taken: &Taken<T>) -> ExitCode {
    let Some(replication) = taken.replication.filter(|_| taken.is_short()) else {
        return ExitCode::SUCCESS;
    };
    eprintln!(
        "slotcron: {job}: the {what} reached {} of {} replica(s) of the primary (wait_replicas): \
         a failover now could lose it; run it again once a replica is back",
        replication.acked, replication.wanted
    );
    ExitCode::from(EXIT_UNAVAILABLE)
}

/// Runs the newest slot of `job` inside `pause`, as a catch-up through the race: judged on
/// the fleet clock (not this machine's), and only when the history, read from a majority of
/// the nodes, has no run of it (a slot raced as the pause was taken did run; once its key
/// expired the race alone would let it run again).
fn catch_up_pause(
    config: &Config,
    job: &str,
    pause: &Pause,
    runtime: &tokio::runtime::Runtime,
) -> ExitCode {
    let Some(job) = config.jobs.iter().find(|j| j.name == job).cloned() else {
        return ExitCode::SUCCESS;
    };
    let result = runtime.block_on(async {
        let replica = Replica::connect(config, default_replica_id(), Arc::new(SystemClock)).await?;
        let ctx = replica.context(config);
        let now = ctx.race().clock().fleet_now();
        let end = pause.until.map_or(now, |u| u.min(now));
        let newest = job
            .schedule
            .upcoming(pause.at, 100_000)
            .into_iter()
            .take_while(|s| s.instant() < end)
            .last();
        let Some(slot) = newest else {
            return anyhow::Ok(Caught::NoSlot);
        };
        let runs = ctx.books().history().read(&job.name, HISTORY_CAP).await?;
        if let Some(run) = runs.iter().find(|r| r.slot == slot) {
            return Ok(Caught::Ran(slot, run.replica.clone()));
        }
        let raced = crate::slot::once(&ctx, Trigger::CatchUp, job.clone(), slot).await;
        Ok(Caught::Raced(
            raced.context("the catch-up ended without a result")?,
        ))
    });
    match result {
        Ok(Caught::NoSlot) => println!("{}: no slot fell inside the pause", job.name),
        Ok(Caught::Ran(slot, by)) => println!(
            "{}: the newest slot inside the pause, {slot}, already ran (on {by}): nothing to catch up",
            job.name
        ),
        Ok(Caught::Raced(result)) => return report_trigger(&job.name, &result),
        Err(e) => {
            eprintln!("slotcron: {}: catch-up not run: {e:#}", job.name);
            return ExitCode::from(EXIT_UNAVAILABLE);
        }
    }
    ExitCode::SUCCESS
}

/// What `resume --catch-up` found.
enum Caught {
    /// No slot fell inside the pause.
    NoSlot,
    /// The newest slot inside it has a run record (by that replica).
    Ran(Slot, String),
    /// It had none, and was raced for.
    Raced(SlotResult),
}

/// The configuration, the fleet's control and a runtime, for a job the file schedules.
fn control_of(
    path: &std::path::Path,
    job: &str,
) -> Result<(tokio::runtime::Runtime, Config, Control), ExitCode> {
    let config = load_or_exit(path)?;
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

/// `--until`: an RFC 3339 time, or a duration from the pause's stamp on the fleet's clock (not
/// this machine's: see [`Until`]).
fn parse_until(text: &str) -> Result<Until, BadTime> {
    Ok(match time_or_span(text, Offset::Ahead)? {
        TimeOrSpan::At(at) => Until::At(at),
        TimeOrSpan::Span(span) => Until::After(span),
    })
}

/// `$USER@hostname`: who runs the CLI, for the pause record.
fn operator() -> String {
    let user = std::env::var("USER").unwrap_or_else(|_| "someone".to_owned());
    format!("{user}@{}", default_replica_id())
}
