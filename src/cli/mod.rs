//! The command line: `slotcron run`, `check`, `trigger`, `history`, `pause`, `resume`,
//! `audit`, `health`, `completions` and `man`. This module only parses the arguments and picks the
//! command; each command lives in its own file, and what they share in `shared` below them.

mod audit;
mod check;
mod control;
mod docs;
mod health;
mod history;
mod init;
mod out;
mod run;
mod schema;
mod shared;
mod trigger;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

use crate::ops::telemetry::LogFormat;

pub use audit::AuditArgs;
pub use check::{CheckArgs, render_check, render_check_in};
pub use control::{PauseArgs, ResumeArgs};
pub use docs::{CompletionsArgs, ManArgs};
pub use health::HealthArgs;
pub use history::HistoryArgs;
pub use init::{InitArgs, Robot};
pub use run::RunArgs;
pub use schema::SchemaArgs;
pub use shared::{ConfigArg, EXIT_CONFIG, EXIT_LOST, EXIT_RUNTIME, EXIT_SKIPPED, EXIT_UNAVAILABLE};
pub use trigger::TriggerArgs;

#[derive(Debug, Parser)]
#[command(
    name = "slotcron",
    version,
    about = "Cron for fleets: every replica schedules, one wins each slot"
)]
/// The command line: global options and one command.
pub struct Cli {
    /// Log format: text or json.
    ///
    /// text for people; json, one object a line (`timestamp`, `level`, `message` and the
    /// fields), for containers' log pipelines.
    #[arg(
        long,
        global = true,
        env = "SLOTCRON_LOG_FORMAT",
        default_value = "text"
    )]
    pub log_format: LogFormat,
    /// Log what a command other than `run` does, on stderr.
    ///
    /// The race and the run of `trigger` and `resume --catch-up`, for example; the command's
    /// result alone goes to stdout, with or without -v.
    #[arg(long, short = 'v', global = true)]
    pub verbose: bool,
    #[command(subcommand)]
    /// What to do.
    pub command: Command,
}

#[derive(Debug, Subcommand)]
/// The commands, each in its own file.
pub enum Command {
    /// Run the schedule: race for every slot, run the slots this replica wins.
    ///
    /// Every replica runs the same jobs.toml. At each slot the replicas race for a lock keyed by
    /// job and slot (a Redlock over the `[redis]` nodes, or an in-process lock when there is no
    /// `[redis]`); the winner runs the job and records it. Reloads on SIGHUP and when the file
    /// changes (unless --no-watch); SIGTERM or Ctrl-C stops it gracefully.
    Run(RunArgs),
    /// Check the configuration and print each job's next slots.
    ///
    /// Reads and checks jobs.toml offline (nothing is asked of Redis) and prints, per job, its
    /// schedule in words (--lang or LANG), its next slots in its zone, and the days its calendar
    /// skips. Every error is printed, each naming the file, job and field; exit 2 on errors.
    Check(CheckArgs),
    /// Ask the running fleet to run one job now, through the same race as scheduled slots.
    ///
    /// The fleet's replicas race the current second on the fleet clock; the winner runs it (once
    /// across the fleet) with its own network and secrets, and the CLI prints who ran it and how
    /// it ended. With no replica of the fleet alive it says so and exits 1; --local runs the
    /// race and the job in this process instead. Exit 0 when it ran, 3 when another replica
    /// had the slot, 4 when the lock could not be decided, 5 when the previous run is still
    /// going.
    Trigger(TriggerArgs),
    /// Print the run history, newest first, merged across the Redis nodes.
    ///
    /// Each run: its slot in the job's zone, the winner, the trigger, the outcome, the
    /// duration, the attempts and the error; --json gives one object per line. With --since,
    /// the slot ledger instead: every scheduled slot of the period and its fate, missed ones
    /// included.
    History(HistoryArgs),
    /// Pause a job on every replica from its next slot (fleet-wide).
    ///
    /// The pause is kept on the Redis nodes, so every replica, and one started later, skips
    /// the job's slots (`paused`) until `slotcron resume` or --until.
    Pause(PauseArgs),
    /// Resume a paused job on every replica.
    ///
    /// The job runs again from its next slot; with --catch-up the newest slot that fell inside
    /// the pause runs too, once across the fleet.
    Resume(ResumeArgs),
    /// Print the audit trail: who paused, resumed, triggered or reloaded what, when and why.
    ///
    /// Newest first, merged across the Redis nodes (a majority must answer, else exit 4):
    /// every `pause`, `resume` (and `--catch-up`), `trigger`, and each replica's reloads,
    /// accepted or rejected, and config hash changes; stamped on the fleet clock. --json gives
    /// one object per line.
    Audit(AuditArgs),
    /// Ask the running replica's /healthz; exit 0 when healthy.
    ///
    /// Asks /healthz on `--http-listen` or the config's `[http] listen`: the image's
    /// HEALTHCHECK. Exit 0 when the replica is healthy, 1 otherwise.
    Health(HealthArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    ///
    /// For example: `slotcron completions bash > /etc/bash_completion.d/slotcron`.
    Completions(CompletionsArgs),
    /// Print the man page, or write one page per command with --dir.
    ///
    /// `slotcron man > slotcron.1` prints the top-level page (roff); `slotcron man --dir DIR`
    /// writes slotcron.1 and one page per command (slotcron-run.1, slotcron-check.1, ...)
    /// there, for `man -l DIR/slotcron-check.1` or a package's man directory.
    Man(ManArgs),
    /// Write a commented starter jobs.toml for one robot (never over an existing file).
    ///
    /// `slotcron init --robot wecom` writes jobs.toml (or PATH) with a log job every minute and a
    /// WeCom job that stays `enabled = false` until its webhook variable is set; it passes
    /// `slotcron check` as written. An existing file is left as it was (exit 1).
    Init(InitArgs),
    /// Print the JSON Schema of jobs.toml (for Taplo and editors: `#:schema` in the file).
    ///
    /// Generated from the configuration's types: `slotcron schema > jobs.schema.json`, then
    /// `#:schema ./jobs.schema.json` as the file's first line lets Taplo and Even Better TOML
    /// check and complete every key as you type. Only `slotcron check` checks what needs the
    /// rest of the file (cron syntax, zones, calendar names, ranges).
    Schema(SchemaArgs),
}

/// Parses the command line and runs it.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    crate::tls::ensure_crypto_provider();
    let logs = shared::Logs {
        format: cli.log_format,
        verbose: cli.verbose,
    };
    match cli.command {
        Command::Check(args) => check::check(&args),
        Command::Run(args) => run::run(args, cli.log_format),
        Command::Trigger(args) => trigger::trigger(args, logs),
        Command::History(args) => history::history(&args),
        Command::Pause(args) => control::pause(&args),
        Command::Resume(args) => control::resume(&args, logs),
        Command::Audit(args) => audit::audit(&args),
        Command::Health(args) => health::health(&args),
        Command::Completions(args) => docs::completions(args.shell, Cli::command()),
        Command::Man(args) => docs::man(&args, Cli::command()),
        Command::Init(args) => init::init(&args),
        Command::Schema(args) => schema::schema(&args),
    }
}
