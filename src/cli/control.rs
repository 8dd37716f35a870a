//! `slotcron pause` and `resume`: fleet-wide, kept on the Redis nodes.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use chrono_tz::Tz;
use clap::Args;

use super::audit::{Intent, unrecorded};
use super::out::{errln, outln};
use super::shared::{
    BadTime, ConfigArg, EXIT_CONFIG, EXIT_UNAVAILABLE, Logs, Offset, TimeOrSpan, connect,
    default_replica_id, exit_code_of, load_or_exit, load_unsent_or_exit, local_time, operator,
    runtime, time_or_span, unknown_job,
};
use super::trigger::{Asked, ask_the_fleet, report_asked, report_trigger};
use crate::config::{Config, Job};
use crate::fleet::control::{Control, Existing, Pause, PauseError, PauseOrder, Taken, Until};
use crate::record::audit::{Audit, AuditAction};
use crate::record::history::{HISTORY_CAP, History};
use crate::redis::Nodes;
use crate::replica::Replica;
use crate::slot::{SlotResult, Trigger};
use crate::time::fleet_clock::{FleetClock, Measurement};
use crate::time::schedule::{Clock, Slot, SystemClock};

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
    /// Why, shown in the logs, the status page, the ledger and the audit trail.
    #[arg(long)]
    pub reason: Option<String>,
    /// Who pauses (default: $USER@hostname).
    #[arg(long)]
    pub by: Option<String>,
    /// Replace a pause that already holds.
    ///
    /// That pause's reason and end are another operator's: without --force the command
    /// refuses and names that pause.
    #[arg(long)]
    pub force: bool,
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
    /// With `--catch-up`: run the slot in this process, not on the fleet.
    ///
    /// The run then uses this machine's network, and the job's secrets are read here.
    #[arg(long, requires = "catch_up")]
    pub local: bool,
    /// Why, kept in the audit trail (`slotcron audit`).
    #[arg(long)]
    pub reason: Option<String>,
}

/// `slotcron pause`: records the audit entry, then the pause on a majority of the nodes; every
/// replica honours it from its next slot.
pub(super) fn pause(args: &PauseArgs) -> ExitCode {
    // The runtime is bound first so it is dropped last: the connections close on it.
    let (runtime, config, control, nodes) =
        match control_of(&args.config.config, &args.job, load_unsent_or_exit) {
            Ok(parts) => parts,
            Err(code) => return code,
        };
    let until = match args.until.as_deref().map(parse_until).transpose() {
        Ok(until) => until,
        Err(message) => {
            errln!("--until: {message}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let order = PauseOrder {
        by: args.by.clone().unwrap_or_else(operator),
        until,
        reason: args.reason.clone(),
    };
    let existing = if args.force {
        Existing::Replace
    } else {
        Existing::Keep
    };
    let zone = job_zone(&config, &args.job);
    let audit = Audit::redis(nodes, &config.scheduler.key_prefix);
    let intent = pause_intent(args);
    let result = runtime.block_on(async {
        let entry = intent.record(&audit).await?;
        let paused = control.pause_over(&args.job, &order, existing).await;
        if let Err(e) = &paused {
            audit.not_taken(&entry, &e.to_string()).await;
        }
        Ok(paused)
    });
    match result {
        Ok(paused) => report_pause(&args.job, &config, zone, paused),
        Err(e) => unrecorded(&args.job, "paused", &e),
    }
}

/// The audit entry of `pause`: its reason, and its end and `--by` as typed.
fn pause_intent(args: &PauseArgs) -> Intent<'_> {
    let mut detail: Vec<String> = args.until.iter().map(|u| format!("until {u}")).collect();
    detail.extend(args.by.iter().map(|by| format!("on behalf of {by}")));
    if args.force {
        detail.push("force".to_owned());
    }
    Intent {
        action: AuditAction::Pause,
        job: &args.job,
        reason: args.reason.as_deref(),
        detail,
    }
}

/// Prints how `pause` ended; its exit code.
fn report_pause(
    job: &str,
    config: &Config,
    zone: Tz,
    result: Result<(Taken<Pause>, Option<Pause>), PauseError>,
) -> ExitCode {
    match result {
        Ok((taken, replaced)) => {
            outln!(
                "{}: paused on every replica from its next slot, {} ({})",
                job,
                until_text(taken.change.until, zone),
                config.path.display()
            );
            if let Some(old) = replaced {
                outln!("{}: replaced the pause {}", job, described(&old, zone));
            }
            replicated(job, "pause", &taken)
        }
        Err(PauseError::AlreadyPaused(old)) => {
            errln!(
                "slotcron: {}: not paused again: already paused {}; --force replaces it",
                job,
                described(&old, zone)
            );
            ExitCode::from(EXIT_CONFIG)
        }
        Err(PauseError::AlreadyOver { until, now }) => {
            errln!(
                "slotcron: {}: not paused: --until {} is not after the fleet's time ({}, the \
                 Redis nodes' TIME): the pause would never hold (is this machine's clock off?)",
                job,
                local_time(until, zone),
                local_time(now, zone)
            );
            ExitCode::from(EXIT_CONFIG)
        }
        Err(e @ PauseError::NoMajority(_)) => {
            errln!("slotcron: {}: the pause did not hold: {e}", job);
            ExitCode::from(EXIT_UNAVAILABLE)
        }
    }
}

/// The zone `job`'s times print in, as `history` prints its slots: the job's own, else
/// `[scheduler] timezone`.
fn job_zone(config: &Config, job: &str) -> Tz {
    config
        .jobs
        .iter()
        .find(|j| j.name == job)
        .map_or(config.scheduler.timezone, |j| j.zone())
}

/// A pause as the CLI names it: who, since when, until when, why.
fn described(pause: &Pause, zone: Tz) -> String {
    let reason = pause
        .reason
        .as_deref()
        .map(|r| format!(", reason {r:?}"))
        .unwrap_or_default();
    format!(
        "by {} since {}, {}{reason}",
        pause.by,
        local_time(pause.at, zone),
        until_text(pause.until, zone)
    )
}

/// `until TIME`, or `until resumed` for a pause without an end.
fn until_text(until: Option<chrono::DateTime<chrono::Utc>>, zone: Tz) -> String {
    until.map_or("until resumed".to_owned(), |u| {
        format!("until {}", local_time(u, zone))
    })
}

/// `slotcron resume`: ends the pause; with `--catch-up`, also runs the newest slot that fell
/// inside it, through the race (once across the fleet).
pub(super) fn resume(args: &ResumeArgs, logs: Logs) -> ExitCode {
    // The runtime is bound first so it is dropped last: the connections close on it.
    // Only a local catch-up sends from this process: only it needs the job's secrets.
    let load = if args.local {
        load_or_exit
    } else {
        load_unsent_or_exit
    };
    let (runtime, config, control, nodes) = match control_of(&args.config.config, &args.job, load) {
        Ok(parts) => parts,
        Err(code) => return code,
    };
    let audit = Audit::redis(nodes.clone(), &config.scheduler.key_prefix);
    let taken = match runtime.block_on(resume_audited(args, &control, &audit)) {
        Ok(taken) => taken,
        Err(code) => return code,
    };
    let Some(pause) = &taken.change else {
        outln!("{}: was not paused", args.job);
        return replicated(&args.job, "resume", &taken);
    };
    let zone = job_zone(&config, &args.job);
    outln!("{}: resumed (paused {})", args.job, described(pause, zone));
    if !args.catch_up || taken.is_short() {
        return replicated(&args.job, "resume", &taken);
    }
    logs.init();
    let Some(job) = config.jobs.iter().find(|j| j.name == args.job).cloned() else {
        return ExitCode::SUCCESS;
    };
    let fleet = (!args.local).then_some(nodes);
    catch_up_pause(&config, &job, pause, &runtime, fleet)
}

/// Records `resume`'s audit entry, then resumes; what went wrong said, as its exit code.
async fn resume_audited(
    args: &ResumeArgs,
    control: &Control,
    audit: &Audit,
) -> Result<Taken<Option<Pause>>, ExitCode> {
    let entry = match resume_intent(args).record(audit).await {
        Ok(entry) => entry,
        Err(e) => return Err(unrecorded(&args.job, "resumed", &e)),
    };
    let by = args.by.clone().unwrap_or_else(operator);
    match control.resume(&args.job, &by).await {
        Ok(taken) => Ok(taken),
        Err(e) => {
            audit.not_taken(&entry, &e.to_string()).await;
            errln!("slotcron: {}: the resume did not hold: {e}", args.job);
            Err(ExitCode::from(EXIT_UNAVAILABLE))
        }
    }
}

/// The audit entry of `resume` (with `--catch-up`, its own action: the resume and the run).
fn resume_intent(args: &ResumeArgs) -> Intent<'_> {
    let mut detail: Vec<String> = args
        .by
        .iter()
        .map(|by| format!("on behalf of {by}"))
        .collect();
    if args.local {
        detail.push("catch-up run in the CLI's process (--local)".to_owned());
    }
    Intent {
        action: if args.catch_up {
            AuditAction::ResumeCatchUp
        } else {
            AuditAction::Resume
        },
        job: &args.job,
        reason: args.reason.as_deref(),
        detail,
    }
}

/// Exit 0 when the primary's replicas acknowledged the change (`WAIT`, sentinel and cluster
/// modes), as a won slot's lock must be; else says so and exits 4: the change holds on the
/// primary, but a failover before a replica has it would lose it there (the replicas that
/// heard it write it back, the book's Operations), so the operator runs it again once a replica is back.
fn replicated<T>(job: &str, what: &str, taken: &Taken<T>) -> ExitCode {
    let Some(replication) = taken.replication.filter(|_| taken.is_short()) else {
        return ExitCode::SUCCESS;
    };
    errln!(
        "slotcron: {job}: the {what} reached {} of {} replica(s) of the primary (wait_replicas): \
         a failover now could lose it; run it again once a replica is back",
        replication.acked,
        replication.wanted
    );
    ExitCode::from(EXIT_UNAVAILABLE)
}

/// Runs the newest slot of `job` inside `pause`, as a catch-up through the race: judged on
/// the fleet clock (not this machine's), and only when the history, read from a majority of
/// the nodes, has no run of it (a slot raced as the pause was taken did run; once its key
/// expired the race alone would let it run again). The running fleet races it (`fleet`, its
/// nodes), or this process does (`--local`).
fn catch_up_pause(
    config: &Config,
    job: &Arc<Job>,
    pause: &Pause,
    runtime: &tokio::runtime::Runtime,
    fleet: Option<Arc<Nodes>>,
) -> ExitCode {
    let prefix = &config.scheduler.key_prefix;
    let result = runtime.block_on(async {
        match fleet {
            Some(nodes) => catch_up_by_fleet(&nodes, prefix, job, pause).await,
            None => catch_up_here(config, job, pause).await,
        }
    });
    match result {
        Ok(Caught::NoSlot) => outln!("{}: no slot fell inside the pause", job.name),
        Ok(Caught::Ran(slot, by)) => outln!(
            "{}: the newest slot inside the pause, {}, already ran (on {by}): nothing to catch up",
            job.name,
            slot.rfc3339_in(job.zone())
        ),
        Ok(Caught::Raced(result)) => return report_trigger(&job.name, &result),
        Ok(Caught::Asked(asked)) => return report_asked(&job.name, prefix, asked),
        Err(e) => {
            errln!("slotcron: {}: catch-up not run: {e:#}", job.name);
            return exit_code_of(&e);
        }
    }
    ExitCode::SUCCESS
}

/// [`catch_up_pause`] by the fleet: the fleet clock and the history read on `nodes`.
async fn catch_up_by_fleet(
    nodes: &Arc<Nodes>,
    prefix: &str,
    job: &Arc<Job>,
    pause: &Pause,
) -> anyhow::Result<Caught> {
    let clock = FleetClock::new(Arc::new(SystemClock), true);
    if matches!(clock.measure(nodes).await, Measurement::NoAnswer) {
        return Ok(Caught::Asked(Asked::RedisUnavailable));
    }
    let history = History::Redis {
        nodes: nodes.clone(),
        prefix: prefix.to_owned(),
    };
    Ok(
        match newest_inside(job, pause, clock.fleet_now(), &history).await? {
            Inside::Due(slot) => Caught::Asked(ask_the_fleet(nodes, prefix, job, Some(slot)).await),
            Inside::Settled(caught) => caught,
        },
    )
}

/// [`catch_up_pause`] in this process (`--local`), as a replica would race it.
async fn catch_up_here(config: &Config, job: &Arc<Job>, pause: &Pause) -> anyhow::Result<Caught> {
    let replica = Replica::connect(config, default_replica_id(), Arc::new(SystemClock)).await?;
    let ctx = replica.context(config);
    let now = ctx.race.clock.fleet_now();
    let slot = match newest_inside(job, pause, now, &ctx.books.history).await? {
        Inside::Due(slot) => slot,
        Inside::Settled(caught) => return Ok(caught),
    };
    let raced = crate::slot::once(&ctx, Trigger::CatchUp, job.clone(), slot).await;
    Ok(Caught::Raced(
        raced.context("the catch-up ended without a result")?,
    ))
}

/// The newest slot of `job` inside `pause` as of `now` on the fleet clock, and whether
/// `history` has a run of it.
async fn newest_inside(
    job: &Job,
    pause: &Pause,
    now: chrono::DateTime<chrono::Utc>,
    history: &History,
) -> anyhow::Result<Inside> {
    let end = pause.until.map_or(now, |u| u.min(now));
    let newest = job
        .schedule
        .upcoming(pause.at, 100_000)
        .into_iter()
        .take_while(|s| s.instant() < end)
        .last();
    let Some(slot) = newest else {
        return Ok(Inside::Settled(Caught::NoSlot));
    };
    let runs = history.read(&job.name, HISTORY_CAP).await?;
    Ok(match runs.iter().find(|r| r.slot == slot) {
        Some(run) => Inside::Settled(Caught::Ran(slot, run.replica.clone())),
        None => Inside::Due(slot),
    })
}

/// The newest slot inside a pause: still to run, or settled without a race.
enum Inside {
    /// No run of it is recorded.
    Due(Slot),
    /// None fell inside, or it ran.
    Settled(Caught),
}

/// What `resume --catch-up` found.
enum Caught {
    /// No slot fell inside the pause.
    NoSlot,
    /// The newest slot inside it has a run record (by that replica).
    Ran(Slot, String),
    /// It had none, and was raced for here (`--local`).
    Raced(SlotResult),
    /// It had none, and the fleet was asked to race it.
    Asked(Asked),
}

/// The configuration (as `load` reads it), the fleet's control, its nodes and a runtime, for a
/// job the file schedules.
fn control_of(
    path: &std::path::Path,
    job: &str,
    load: fn(&std::path::Path) -> Result<Config, ExitCode>,
) -> Result<(tokio::runtime::Runtime, Config, Control, Arc<Nodes>), ExitCode> {
    let config = load(path)?;
    let Some(redis) = &config.redis else {
        errln!(
            "{}: no [redis] section: pausing is fleet-wide and kept on the Redis nodes (a standalone replica has nothing to share it with)",
            config.path.display()
        );
        return Err(ExitCode::from(EXIT_CONFIG));
    };
    if !config.jobs.iter().any(|j| j.name == job) {
        errln!("{}", unknown_job(&config, job));
        return Err(ExitCode::from(EXIT_CONFIG));
    }
    let runtime = runtime()?;
    let nodes = connect(redis, "control", &runtime)?;
    let control = Control::redis(nodes.clone(), &config.scheduler.key_prefix);
    Ok((runtime, config, control, nodes))
}

/// `--until`: an RFC 3339 time, or a duration from the pause's stamp on the fleet's clock (not
/// this machine's: see [`Until`]).
fn parse_until(text: &str) -> Result<Until, BadTime> {
    Ok(match time_or_span(text, Offset::Ahead)? {
        TimeOrSpan::At(at) => Until::At(at),
        TimeOrSpan::Span(span) => Until::After(span),
    })
}
