//! `slotcron trigger JOB`: run a job now, through the same race as scheduled slots (once
//! across the fleet).

use super::out::{errln, outln};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;

use super::shared::{
    default_replica_id, load_or_exit_as, runtime, unknown_job, ConfigArg, Logs, EXIT_CONFIG,
    EXIT_LOST, EXIT_RUNTIME, EXIT_SKIPPED, EXIT_UNAVAILABLE,
};
use crate::config::{Config, Job};
use crate::replica::Replica;
use crate::slot::{SlotResult, Trigger};
use crate::time::schedule::{Slot, SystemClock};

#[derive(Debug, Args)]
/// `slotcron trigger`.
pub struct TriggerArgs {
    #[command(flatten)]
    /// Which jobs.toml to read.
    pub config: ConfigArg,
    /// This replica's name in logs and lock tokens (default: the hostname).
    #[arg(long, env = "SLOTCRON_REPLICA_ID")]
    pub replica_id: Option<String>,
    /// The job to run.
    pub job: String,
}

/// `slotcron trigger JOB`: races the current second of `JOB` like a scheduled slot.
pub(super) fn trigger(args: TriggerArgs, logs: Logs) -> ExitCode {
    logs.init();
    let config = match load_or_exit_as(&args.config.config, logs.format) {
        Ok(config) => config,
        Err(code) => return code,
    };
    let Some(job) = config.jobs.iter().find(|j| j.name == args.job).cloned() else {
        errln!("{}", unknown_job(&config, &args.job));
        return ExitCode::from(EXIT_CONFIG);
    };
    if config.redis.is_none() {
        errln!("slotcron: standalone mode: this trigger is not coordinated with a running replica");
    }
    let replica = args.replica_id.unwrap_or_else(default_replica_id);
    let runtime = match runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    race_once(&runtime, &config, replica, &job, None, Trigger::Manual)
}

/// Races `job` once, through the same entry as scheduled slots, as `trigger`, at `slot` (`None`:
/// the fleet's current second, so the guard at the race never finds it ahead); reports it.
pub(super) fn race_once(
    runtime: &tokio::runtime::Runtime,
    config: &Config,
    replica: String,
    job: &Arc<Job>,
    slot: Option<Slot>,
    trigger: Trigger,
) -> ExitCode {
    let result = runtime.block_on(async {
        let replica = Replica::connect(config, replica, Arc::new(SystemClock)).await?;
        let ctx = replica.context(config);
        let slot = slot.unwrap_or_else(|| Slot::at(ctx.race().clock().fleet_now()));
        let result = crate::slot::once(&ctx, trigger, job.clone(), slot).await;
        result.context("the trigger ended without a result")
    });
    match result {
        Ok(result) => report_trigger(&job.name, &result),
        Err(e) => {
            errln!("slotcron: {e:#}");
            ExitCode::from(EXIT_RUNTIME)
        }
    }
}

pub(super) fn report_trigger(job: &str, result: &SlotResult) -> ExitCode {
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
        SlotResult::Overlapped { .. } => (
            EXIT_SKIPPED,
            "skipped: the previous run is still going".to_owned(),
        ),
        SlotResult::Late { .. } => (EXIT_RUNTIME, "skipped: too late".to_owned()),
        SlotResult::Early { .. } => (
            EXIT_RUNTIME,
            "skipped: before its instant on the fleet clock".to_owned(),
        ),
        SlotResult::Paused => (EXIT_SKIPPED, "not raced: the job is paused".to_owned()),
        SlotResult::Standby => (
            EXIT_SKIPPED,
            "not raced: not one of the slot's candidates".to_owned(),
        ),
        SlotResult::Unmeasured => (
            EXIT_UNAVAILABLE,
            "not raced: Redis unavailable (no node answered TIME, so the fleet clock is not \
             measured)"
                .to_owned(),
        ),
    };
    outln!("{job}: {text}");
    ExitCode::from(code)
}
