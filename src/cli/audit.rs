//! `slotcron audit`: the audit trail, newest first, merged across the Redis nodes; and the
//! entry every control command (`pause`, `resume`, `trigger`) records before it acts.

use std::process::ExitCode;

use chrono_tz::Tz;
use clap::Args;
use serde::Serialize;

use super::out::{errln, outln};
use super::shared::{
    ConfigArg, EXIT_CONFIG, EXIT_UNAVAILABLE, connect, load_unsent_or_exit, local_time, operator,
    runtime, time_or_offset_back,
};
use crate::record::audit::{Audit, AuditAction, AuditEntry, AuditQuery, AuditUnrecorded};

/// Entries printed without `--limit`.
const DEFAULT_LIMIT: usize = 50;

#[derive(Debug, Args)]
/// `slotcron audit`.
pub struct AuditArgs {
    #[command(flatten)]
    /// Which jobs.toml to read.
    pub config: ConfigArg,
    /// Only the entries from this time (`24h`, `30m` or an RFC 3339 time).
    ///
    /// A duration back from now (`24h`, `30m`) or an RFC 3339 time; entries are judged by
    /// their stamp on the fleet clock.
    #[arg(long)]
    pub since: Option<String>,
    /// Only this job's entries (reloads concern no job and are left out).
    #[arg(long)]
    pub job: Option<String>,
    /// How many entries to print, the newest.
    #[arg(long, default_value_t = DEFAULT_LIMIT)]
    pub limit: usize,
    /// One JSON object per entry instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `slotcron audit`: the trail's newest entries, read from a majority of the nodes.
pub(super) fn audit(args: &AuditArgs) -> ExitCode {
    let config = match load_unsent_or_exit(&args.config.config) {
        Ok(config) => config,
        Err(code) => return code,
    };
    let Some(redis) = &config.redis else {
        errln!(
            "{}: no [redis] section: the audit trail is kept on the Redis nodes (a standalone \
             replica has no fleet to audit)",
            config.path.display()
        );
        return ExitCode::from(EXIT_CONFIG);
    };
    let since = match args.since.as_deref().map(time_or_offset_back).transpose() {
        Ok(since) => since,
        Err(message) => {
            errln!("--since: {message}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let (runtime, nodes) = match runtime().and_then(|rt| Ok((connect(redis, "audit", &rt)?, rt))) {
        Ok((nodes, runtime)) => (runtime, nodes),
        Err(code) => return code,
    };
    let audit = Audit::redis(nodes, &config.scheduler.key_prefix);
    let query = AuditQuery {
        since,
        job: args.job.clone(),
        limit: args.limit,
    };
    match runtime.block_on(audit.read(&query)) {
        Ok(entries) => {
            print_entries(&entries, config.scheduler.timezone, args.json);
            ExitCode::SUCCESS
        }
        Err(e) => {
            errln!("slotcron: {e}");
            ExitCode::from(EXIT_UNAVAILABLE)
        }
    }
}

/// One row of `audit --json`: the entry, and its stamp in the fleet's default zone.
#[derive(Serialize)]
struct Row<'a> {
    #[serde(flatten)]
    entry: &'a AuditEntry,
    at_local: String,
}

fn print_entries(entries: &[AuditEntry], zone: Tz, json: bool) {
    if json {
        for entry in entries {
            let at_local = local_time(entry.at, zone);
            let row = Row { entry, at_local };
            outln!("{}", serde_json::to_string(&row).unwrap_or_default());
        }
        return;
    }
    outln!(
        "AT                         ACTION           JOB              ACTOR                STATUS     REASON / DETAIL"
    );
    for e in entries {
        let words: Vec<&str> = [e.reason.as_deref(), e.detail.as_deref()]
            .into_iter()
            .flatten()
            .collect();
        outln!(
            "{:<26} {:<16} {:<16} {:<20} {:<10} {}",
            local_time(e.at, zone),
            e.action.as_str(),
            e.job.as_deref().unwrap_or("-"),
            e.actor,
            e.status.as_str(),
            words.join(" / ")
        );
    }
}

/// A control command's entry, about to act: its action, job and reason, and the detail it
/// carries; the actor is whoever runs the CLI (`user@host`), whatever `--by` claims.
pub(super) struct Intent<'a> {
    pub action: AuditAction,
    pub job: &'a str,
    pub reason: Option<&'a str>,
    pub detail: Vec<String>,
}

impl Intent<'_> {
    /// Records the entry on a majority, stamped on the fleet clock: the command acts only when
    /// this succeeds.
    pub(super) async fn record(self, audit: &Audit) -> Result<AuditEntry, AuditUnrecorded> {
        let mut entry = AuditEntry::new(audit.fleet_now().await, &operator(), self.action)
            .job(self.job)
            .reason(self.reason);
        if !self.detail.is_empty() {
            entry = entry.detail(self.detail.join("; "));
        }
        audit.record(&entry).await?;
        Ok(entry)
    }
}

/// What a command says when its entry could not be recorded: it did nothing; exit 4.
pub(super) fn unrecorded(job: &str, what: &str, e: &AuditUnrecorded) -> ExitCode {
    errln!("slotcron: {job}: not {what}: {e}");
    ExitCode::from(EXIT_UNAVAILABLE)
}
