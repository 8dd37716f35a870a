//! The command line: `slotcron run`, `check`, `trigger`, `history`, `health`, `completions`
//! and `man`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use clap::{Args, Parser, Subcommand};
use tokio_util::sync::CancellationToken;

use crate::calendar::{Day, DayFilter, Days};
use crate::config::{self, Config, Job};
use crate::replica;
use crate::schedule::{Slot, SystemClock};
use crate::telemetry::{self, LogFormat};

/// Exit code for a configuration that does not check.
pub const EXIT_CONFIG: u8 = 2;
/// Exit code for a failure at run time.
pub const EXIT_RUNTIME: u8 = 1;

#[derive(Debug, Parser)]
#[command(
    name = "slotcron",
    version,
    about = "Cron for fleets: every replica schedules, one wins each slot"
)]
pub struct Cli {
    /// Log format: text for people, json (one object a line) for containers.
    #[arg(
        long,
        global = true,
        env = "SLOTCRON_LOG_FORMAT",
        default_value = "text"
    )]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the schedule: race for every slot, run the slots this replica wins.
    Run(RunArgs),
    /// Check the configuration and print each job's next slots.
    Check(CheckArgs),
    /// Run one job now, through the same race as scheduled slots (once across the fleet).
    Trigger(TriggerArgs),
    /// Print the run history (who ran what), newest first, merged across the Redis nodes;
    /// with --since, the slot ledger: every scheduled slot of the period and its fate.
    History(HistoryArgs),
    /// Pause a job on every replica from its next slot (fleet-wide, kept on the Redis nodes).
    Pause(PauseArgs),
    /// Resume a paused job on every replica.
    Resume(ResumeArgs),
    /// Ask the running replica's /healthz (on the config's [http] listen); exit 0 when healthy.
    Health(HealthArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(CompletionsArgs),
    /// Print the man page (roff): slotcron man > slotcron.1
    Man,
}

#[derive(Debug, Args)]
pub struct PauseArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    /// The job to pause.
    pub job: String,
    /// When the pause ends by itself: an RFC 3339 time (`2026-12-28T09:00:00+08:00`) or a
    /// duration from now (`2h`, `3d`). Default: until `slotcron resume`.
    #[arg(long)]
    pub until: Option<String>,
    /// Why, shown in the logs, the metrics' status page and the ledger.
    #[arg(long)]
    pub reason: Option<String>,
    /// Who pauses (default: $USER@hostname).
    #[arg(long)]
    pub by: Option<String>,
}

#[derive(Debug, Args)]
pub struct ResumeArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    /// The job to resume.
    pub job: String,
    /// Also run the newest slot that fell inside the pause, once across the fleet (by default
    /// a paused job's slots are not caught up).
    #[arg(long)]
    pub catch_up: bool,
    /// Who resumes (default: $USER@hostname).
    #[arg(long)]
    pub by: Option<String>,
}

#[derive(Debug, Args)]
pub struct HealthArgs {
    #[command(flatten)]
    pub config: ConfigArg,
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    pub shell: clap_complete::Shell,
}

#[derive(Debug, Args)]
pub struct TriggerArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    /// This replica's name in logs and lock tokens (default: the hostname).
    #[arg(long, env = "SLOTCRON_REPLICA_ID")]
    pub replica_id: Option<String>,
    /// The job to run.
    pub job: String,
}

#[derive(Debug, Args)]
pub struct HistoryArgs {
    #[command(flatten)]
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
    /// The slot ledger of this period: every scheduled slot, run or not (`done`, `failed`,
    /// `handed_off`, `skipped`, `paused`, `missed`). A duration back from now (`24h`, `30m`)
    /// or an RFC 3339 time.
    #[arg(long)]
    pub since: Option<String>,
    /// Only the gaps: slots no replica ran and no pause covered (implies --since 24h).
    #[arg(long)]
    pub missed: bool,
}

#[derive(Debug, Args)]
pub struct ConfigArg {
    /// Path to jobs.toml.
    #[arg(
        long,
        short = 'c',
        env = "SLOTCRON_CONFIG",
        default_value = "jobs.toml"
    )]
    pub config: PathBuf,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    /// This replica's name in logs and lock tokens (default: the hostname).
    #[arg(long, env = "SLOTCRON_REPLICA_ID")]
    pub replica_id: Option<String>,
    /// Reload only on SIGHUP, not when the configuration file changes.
    #[arg(long, env = "SLOTCRON_NO_WATCH")]
    pub no_watch: bool,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    /// How many upcoming slots to print per job.
    #[arg(long, default_value_t = 5)]
    pub next: usize,
}

/// Parses the command line and runs it.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    crate::tls::ensure_crypto_provider();
    match cli.command {
        Command::Check(args) => check(&args),
        Command::Run(args) => run(args, cli.log_format),
        Command::Trigger(args) => crate::manual::trigger(args, cli.log_format),
        Command::History(args) => crate::manual::history(&args),
        Command::Pause(args) => crate::manual::pause(&args),
        Command::Resume(args) => crate::manual::resume(&args, cli.log_format),
        Command::Health(args) => health(&args),
        Command::Completions(args) => completions(args.shell),
        Command::Man => man(),
    }
}

fn completions(shell: clap_complete::Shell) -> ExitCode {
    use clap::CommandFactory;
    clap_complete::generate(
        shell,
        &mut Cli::command(),
        "slotcron",
        &mut std::io::stdout(),
    );
    ExitCode::SUCCESS
}

fn man() -> ExitCode {
    use clap::CommandFactory;
    match clap_mangen::Man::new(Cli::command()).render(&mut std::io::stdout()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("slotcron: writing the man page: {e}");
            ExitCode::from(EXIT_RUNTIME)
        }
    }
}

/// `slotcron health`: exit 0 when the replica's `/healthz` answers 200. A config without
/// `[http]` has no endpoint to ask: the file is checked instead, and the output says so.
fn health(args: &HealthArgs) -> ExitCode {
    let config = match load(&args.config.config) {
        Ok(config) => config,
        Err(code) => return code,
    };
    let Some(http) = config.http else {
        println!(
            "{}: valid; no [http] listen, so no /healthz to ask",
            config.path.display()
        );
        return ExitCode::SUCCESS;
    };
    let answer = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))
        .and_then(|rt| rt.block_on(crate::probe::healthz(http.listen)));
    match answer {
        Ok(body) => {
            print!("{body}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("slotcron: unhealthy: {e}");
            ExitCode::from(EXIT_RUNTIME)
        }
    }
}

pub(crate) fn load(path: &std::path::Path) -> Result<Config, ExitCode> {
    config::load(path).map_err(|errors| {
        eprintln!("{errors}");
        eprintln!(
            "slotcron: {} error(s) in {}; nothing started",
            errors.errors.len(),
            path.display()
        );
        ExitCode::from(EXIT_CONFIG)
    })
}

fn check(args: &CheckArgs) -> ExitCode {
    let config = match load(&args.config.config) {
        Ok(config) => config,
        Err(code) => return code,
    };
    print!("{}", render_check(&config, args.next));
    ExitCode::SUCCESS
}

/// The text `check` prints: the lock, then each job with its next slots in its zone.
pub fn render_check(config: &Config, next: usize) -> String {
    let mut out = String::new();
    let lock = match &config.redis {
        Some(redis) => {
            let nodes: Vec<String> = redis.nodes.iter().map(ToString::to_string).collect();
            format!("redlock over {} node(s): {}", nodes.len(), nodes.join(", "))
        }
        None => "standalone (in-process lock, one replica only)".to_owned(),
    };
    out.push_str(&format!(
        "{}: ok, {} job(s), lock: {lock}\n",
        config.path.display(),
        config.jobs.len()
    ));
    for warning in &config.warnings {
        out.push_str(&format!("warning: {warning}\n"));
    }
    let now = Utc::now();
    for job in &config.jobs {
        let target = job
            .action
            .target()
            // A command's argv may hold a value from the environment: scrubbed like the logs.
            .map(|t| format!(" -> {}", config.scrubber.scrub(&t)))
            .unwrap_or_default();
        let days = job
            .schedule
            .day_filter()
            .map(|f| format!(" on {} of calendar {:?}", f.days, f.calendar.name()))
            .unwrap_or_default();
        out.push_str(&format!(
            "\njob {:?}: {:?} in {}{days}, timeout {}, {}{target}\n",
            job.name,
            job.schedule.expression(),
            job.zone(),
            humantime::format_duration(job.timeout),
            job.action.kind(),
        ));
        for line in slot_lines(job, now, next) {
            out.push_str(&format!("  {line}\n"));
        }
    }
    for name in &config.disabled {
        out.push_str(&format!("\njob {name:?}: disabled (enabled = false)\n"));
    }
    out
}

/// A job's next slots, one line each. With a calendar, also the days between them the calendar
/// skipped (and why), and what makes a kept day notable: a holiday or make-up workday, or a
/// date past the built-in data, where Monday to Friday is assumed.
fn slot_lines(job: &Job, now: DateTime<Utc>, next: usize) -> Vec<String> {
    let schedule = &job.schedule;
    let slots = schedule.upcoming(now, next);
    let Some(filter) = schedule.day_filter() else {
        return slots.iter().map(|s| s.rfc3339_in(job.zone())).collect();
    };
    let mut lines = Vec::new();
    let mut date = schedule.local_date(Slot::at(now));
    for slot in slots {
        let slot_date = schedule.local_date(slot);
        while date < slot_date {
            if !filter.keeps(date) && schedule.cron_fires_on(date, now) {
                lines.push(format!("{date} skipped: {}", filter.calendar.day(date)));
            }
            let Some(following) = date.succ_opt() else {
                break;
            };
            date = following;
        }
        lines.push(format!(
            "{}{}",
            slot.rfc3339_in(job.zone()),
            day_note(filter, slot_date)
        ));
    }
    lines
}

/// What `check` says beside a kept slot of a calendar job.
fn day_note(filter: &DayFilter, date: chrono::NaiveDate) -> String {
    let calendar = &filter.calendar;
    let mut note = match (calendar.day(date), filter.days) {
        (day @ (Day::Holiday(_) | Day::MakeUp(_)), _) => format!("  {day}"),
        // On a holidays job a plain weekend is the usual kept day: say so, as for the others.
        (day @ Day::Weekend, Days::Holidays) => format!("  {day}"),
        (Day::Weekday | Day::Weekend, _) => String::new(),
    };
    if let Some(coverage) = calendar
        .coverage()
        .filter(|_| calendar.is_beyond_coverage(date))
    {
        note.push_str(&format!(
            "  (past the built-in {} data ({}-{}): Monday to Friday assumed)",
            coverage.builtin,
            coverage.first.format("%Y"),
            coverage.last.format("%Y")
        ));
    }
    note
}

fn run(args: RunArgs, format: LogFormat) -> ExitCode {
    telemetry::init(format);
    let config = match load(&args.config.config) {
        Ok(config) => config,
        Err(code) => return code,
    };
    let replica = args.replica_id.unwrap_or_else(default_replica_id);
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("slotcron: cannot start the runtime: {e}");
            return ExitCode::from(EXIT_RUNTIME);
        }
    };
    let result = runtime.block_on(async {
        let shutdown = CancellationToken::new();
        tokio::spawn(watch_signals(shutdown.clone()));
        let watch = (!args.no_watch).then_some(args.config.config.as_path());
        let reloads = watch_reloads(watch, &shutdown);
        replica::run_with_reload(config, replica, Arc::new(SystemClock), shutdown, reloads).await
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %format!("{e:#}"), "slotcron stopped on an error");
            ExitCode::from(EXIT_RUNTIME)
        }
    }
}

pub(crate) fn default_replica_id() -> String {
    gethostname::gethostname().to_string_lossy().into_owned()
}

/// First SIGTERM or SIGINT: graceful shutdown. A second one: exit at once.
async fn watch_signals(shutdown: CancellationToken) {
    if wait_for_signal().await.is_err() {
        tracing::warn!("cannot listen for signals; stop with SIGKILL");
        return;
    }
    tracing::info!("signal received: finishing running slots (send again to exit at once)");
    shutdown.cancel();
    if wait_for_signal().await.is_ok() {
        tracing::warn!("second signal: exiting without waiting");
        std::process::exit(i32::from(EXIT_RUNTIME));
    }
}

/// SIGHUP, or a change of the file's content ([`crate::watch`]), asks for a reload of the
/// configuration file (`watch`: unless `--no-watch`). A directory that cannot be watched
/// leaves SIGHUP.
fn watch_reloads(
    watch: Option<&std::path::Path>,
    shutdown: &CancellationToken,
) -> Option<tokio::sync::mpsc::Receiver<()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hup = signal(SignalKind::hangup()).ok()?;
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    if let Some(config) = watch {
        match crate::watch::watch_config(config, tx.clone(), shutdown.clone()) {
            Ok(watch) => drop(tokio::spawn(watch)),
            Err(e) => tracing::warn!(config = %config.display(), error = %e,
                "cannot watch the configuration file: reload it with SIGHUP"),
        }
    }
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            tracing::info!("SIGHUP: reloading the configuration");
            // A reload already pending covers this one too.
            let _ = tx.try_send(());
        }
    });
    Some(rx)
}

async fn wait_for_signal() -> std::io::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    Ok(())
}
