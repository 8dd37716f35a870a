//! `slotcron trigger JOB`: run a job now, through the same race as scheduled slots (once
//! across the fleet), on a replica of the running fleet (see [`crate::fleet::triggers`]); with
//! `--local`, in this process.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use chrono::Utc;
use clap::Args;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::audit::{Intent, unrecorded};
use super::out::{errln, outln};
use super::shared::{
    ConfigArg, EXIT_CONFIG, EXIT_LOST, EXIT_RUNTIME, EXIT_SKIPPED, EXIT_UNAVAILABLE, Logs, connect,
    default_replica_id, load_or_exit_as, load_unsent_or_exit_as, operator, runtime, unknown_job,
};
use crate::config::{Config, Job};
use crate::fleet::triggers::{self, Ending, TriggerReply, TriggerRequest};
use crate::record::audit::{Audit, AuditAction};
use crate::redis::Nodes;
use crate::redis::pubsub::{self, Heard};
use crate::replica::Replica;
use crate::slot::{SlotResult, Trigger};
use crate::time::fleet_clock::{FleetClock, Measurement};
use crate::time::schedule::{Clock, Slot, SystemClock};

#[derive(Debug, Args)]
/// `slotcron trigger`.
pub struct TriggerArgs {
    #[command(flatten)]
    /// Which jobs.toml to read.
    pub config: ConfigArg,
    /// With `--local`: this process's name in logs and lock tokens.
    ///
    /// Default: the hostname.
    #[arg(long, env = "SLOTCRON_REPLICA_ID")]
    pub replica_id: Option<String>,
    /// Run the job in this process instead of asking the running fleet to.
    ///
    /// The run then uses this machine's network, and the job's secrets are read here.
    #[arg(long)]
    pub local: bool,
    /// Why, kept in the audit trail (`slotcron audit`).
    #[arg(long)]
    pub reason: Option<String>,
    /// The job to run.
    pub job: String,
}

/// `slotcron trigger JOB`: asks the fleet to race the current second of `JOB` like a scheduled
/// slot, and reports the replica that ran it; `--local` (or a standalone file) races it here.
pub(super) fn trigger(args: TriggerArgs, logs: Logs) -> ExitCode {
    logs.init();
    // Asking the fleet sends nothing from here: the job's secrets are the replicas'.
    let config = match load_unsent_or_exit_as(&args.config.config, logs.format) {
        Ok(config) => config,
        Err(code) => return code,
    };
    if args.local || config.redis.is_none() {
        return trigger_here(args, logs);
    }
    let Some(job) = config.jobs.iter().find(|j| j.name == args.job).cloned() else {
        errln!("{}", unknown_job(&config, &args.job));
        return ExitCode::from(EXIT_CONFIG);
    };
    let Some(redis) = &config.redis else {
        return ExitCode::from(EXIT_CONFIG);
    };
    let runtime = match runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    let nodes = match connect(redis, "trigger", &runtime) {
        Ok(nodes) => nodes,
        Err(code) => return code,
    };
    let prefix = &config.scheduler.key_prefix;
    let audit = Audit::redis(nodes.clone(), prefix);
    let asked = runtime.block_on(async {
        let entry = trigger_intent(&args, None).record(&audit).await?;
        let asked = ask_the_fleet(&nodes, prefix, &job, None).await;
        if let Some(why) = asked.not_run() {
            audit.not_taken(&entry, why).await;
        }
        Ok(asked)
    });
    match asked {
        Ok(asked) => report_asked(&job.name, prefix, asked),
        Err(e) => unrecorded(&job.name, "triggered", &e),
    }
}

/// The audit entry of `trigger`; `replica`: the process that races it (`--local`).
fn trigger_intent<'a>(args: &'a TriggerArgs, replica: Option<&str>) -> Intent<'a> {
    Intent {
        action: AuditAction::Trigger,
        job: &args.job,
        reason: args.reason.as_deref(),
        detail: replica
            .map(|r| format!("raced in the CLI's process as {r} (--local)"))
            .into_iter()
            .collect(),
    }
}

/// With `[redis]`, `trigger --local`'s audit entry, recorded before the race; `Err`: the exit
/// code of a refusal. A standalone file has no fleet to record it on.
fn record_local_trigger(
    args: &TriggerArgs,
    config: &Config,
    replica: &str,
    runtime: &tokio::runtime::Runtime,
) -> Result<(), ExitCode> {
    let Some(redis) = &config.redis else {
        return Ok(());
    };
    let nodes = connect(redis, "trigger", runtime)?;
    let audit = Audit::redis(nodes, &config.scheduler.key_prefix);
    let recorded = runtime.block_on(trigger_intent(args, Some(replica)).record(&audit));
    recorded
        .map(drop)
        .map_err(|e| unrecorded(&args.job, "triggered", &e))
}

/// `trigger --local`, and any trigger of a standalone file: the race and the run in this
/// process, which needs the job's secrets.
fn trigger_here(args: TriggerArgs, logs: Logs) -> ExitCode {
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
    let replica = args.replica_id.clone().unwrap_or_else(default_replica_id);
    let runtime = match runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    if let Err(code) = record_local_trigger(&args, &config, &replica, &runtime) {
        return code;
    }
    race_once(&runtime, &config, replica, &job, None, Trigger::Manual)
}

/// How long the fleet has to answer beyond the job's timeout: the replicas' race (its start
/// window) and the reply's hop, on a loaded machine.
const ANSWER_MARGIN: Duration = Duration::from_secs(10);
/// How long the reply channel's subscription may take to open on a node.
const SUBSCRIBE_WITHIN: Duration = Duration::from_secs(5);

/// What asking the fleet came to.
pub(super) enum Asked {
    /// No node answered (the subscription, the fleet clock or the request).
    RedisUnavailable,
    /// The request reached no replica of the fleet.
    NobodyListening,
    /// The replica that ran the slot, or else the best answer of those that raced it.
    Answered(TriggerReply),
    /// `expected` replicas heard the request and none answered in `waited`.
    Silent {
        /// Replicas that heard the request.
        expected: usize,
        /// How long the CLI waited.
        waited: Duration,
    },
}

impl Asked {
    /// Why the fleet did not race the slot at all, if it did not.
    pub(super) fn not_run(&self) -> Option<&'static str> {
        match self {
            Asked::RedisUnavailable => Some("Redis unavailable (no node answered)"),
            Asked::NobodyListening => Some("no replica of the fleet heard the request"),
            Asked::Answered(_) | Asked::Silent { .. } => None,
        }
    }
}

/// Listens for the answers, stamps the slot on the fleet clock, publishes the request and
/// waits for the replica that ran it (or for every replica that heard it to answer).
/// `at`: the slot to run as a catch-up (`resume --catch-up`), else the fleet's current second.
pub(super) async fn ask_the_fleet(
    nodes: &Arc<Nodes>,
    prefix: &str,
    job: &Job,
    at: Option<Slot>,
) -> Asked {
    let (tracker, shutdown) = (TaskTracker::new(), CancellationToken::new());
    let id = format!("{}-{}", operator(), Utc::now().timestamp_micros());
    let channel = triggers::reply_channel(prefix, &id);
    let mut heard = pubsub::subscribe_all(nodes, &channel, &tracker, &shutdown);
    let asked = async {
        if !subscribed(&mut heard).await {
            return Asked::RedisUnavailable;
        }
        let clock = FleetClock::new(Arc::new(SystemClock), true);
        if matches!(clock.measure(nodes).await, Measurement::NoAnswer) {
            return Asked::RedisUnavailable;
        }
        let slot = at.unwrap_or_else(|| Slot::at(clock.fleet_now()));
        let request = TriggerRequest {
            id,
            job: job.name.clone(),
            slot_ms: slot.instant().timestamp_millis(),
            by: operator(),
            catch_up: at.is_some(),
        };
        match triggers::ask(nodes, prefix, &request).await {
            None => Asked::RedisUnavailable,
            Some(0) => Asked::NobodyListening,
            Some(expected) => answers(&mut heard, expected, job.timeout + ANSWER_MARGIN).await,
        }
    };
    let asked = asked.await;
    shutdown.cancel();
    asked
}

/// Whether the reply channel opened on some node (one is enough: replicas answer on all).
async fn subscribed(heard: &mut tokio::sync::mpsc::Receiver<Heard>) -> bool {
    let first = tokio::time::timeout(SUBSCRIBE_WITHIN, async {
        while let Some(message) = heard.recv().await {
            if matches!(message, Heard::Subscribed { .. }) {
                return true;
            }
        }
        false
    });
    first.await.unwrap_or(false)
}

/// The answer of the replica that ran the slot; or, once all `expected` replicas answered
/// without running it, the most telling of theirs (a skip or an outage before a loss to
/// another holder); or `Silent` after `wait`.
async fn answers(
    heard: &mut tokio::sync::mpsc::Receiver<Heard>,
    expected: usize,
    wait: Duration,
) -> Asked {
    let mut replies: Vec<TriggerReply> = Vec::new();
    let deadline = tokio::time::Instant::now() + wait;
    while let Ok(Some(message)) = tokio::time::timeout_at(deadline, heard.recv()).await {
        let Heard::Message(payload) = message else {
            continue;
        };
        let Ok(reply) = serde_json::from_str::<TriggerReply>(&payload) else {
            continue;
        };
        if reply.ending.ran() {
            return Asked::Answered(reply);
        }
        if !replies.iter().any(|r| r.replica == reply.replica) {
            replies.push(reply);
        }
        if replies.len() >= expected {
            break;
        }
    }
    replies.sort_by_key(|r| r.ending == Ending::Lost);
    match replies.into_iter().next() {
        Some(reply) => Asked::Answered(reply),
        None => Asked::Silent {
            expected,
            waited: wait,
        },
    }
}

/// Prints what asking the fleet came to; its exit code.
pub(super) fn report_asked(job: &str, prefix: &str, asked: Asked) -> ExitCode {
    match asked {
        Asked::RedisUnavailable => {
            errln!("slotcron: {job}: not triggered: Redis unavailable (no node answered)");
            ExitCode::from(EXIT_UNAVAILABLE)
        }
        Asked::NobodyListening => {
            errln!(
                "slotcron: {job}: not triggered: no replica of the fleet (key_prefix {prefix:?}) \
                 is running, or none reaches Redis; `slotcron trigger --local {job}` runs it \
                 from this machine"
            );
            ExitCode::from(EXIT_RUNTIME)
        }
        Asked::Silent { expected, waited } => {
            errln!(
                "slotcron: {job}: {expected} replica(s) heard the trigger and none answered \
                 within {} s: see their logs (`history --job {job}` once it ended)",
                waited.as_secs()
            );
            ExitCode::from(EXIT_RUNTIME)
        }
        Asked::Answered(reply) => {
            let by = if reply.ending.ran() {
                "run by"
            } else {
                "raced by"
            };
            outln!("{job}: {by} {}: {}", reply.replica, reply.text);
            ExitCode::from(exit_code(reply.ending))
        }
    }
}

/// A trigger's exit code, as the book's command-line chapter documents them.
fn exit_code(ending: Ending) -> u8 {
    match ending {
        Ending::Done => 0,
        Ending::Failed => EXIT_RUNTIME,
        Ending::Lost => EXIT_LOST,
        Ending::Unavailable => EXIT_UNAVAILABLE,
        Ending::Skipped => EXIT_SKIPPED,
    }
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
        let slot = slot.unwrap_or_else(|| Slot::at(ctx.race.clock.fleet_now()));
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
    let (ending, text) = result.told();
    outln!("{job}: {text}");
    ExitCode::from(exit_code(ending))
}
