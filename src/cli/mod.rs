//! The command line: `slotcron run`, `check`, `trigger`, `history`, `pause`, `resume`,
//! `health`, `completions` and `man`. This module only parses the arguments and picks the
//! command; each command lives in its own file, and what they share in `shared` below them.

mod check;
mod control;
mod docs;
mod health;
mod history;
mod init;
mod run;
mod schema;
mod shared;
mod trigger;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

use crate::ops::telemetry::LogFormat;

pub use check::{render_check, CheckArgs};
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
    /// Log format: text for people, json (one object a line) for containers.
    #[arg(
        long,
        global = true,
        env = "SLOTCRON_LOG_FORMAT",
        default_value = "text"
    )]
    pub log_format: LogFormat,
    #[command(subcommand)]
    /// What to do.
    pub command: Command,
}

#[derive(Debug, Subcommand)]
/// The commands, each in its own file.
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
    /// Ask the running replica's /healthz (on `--http-listen` or the config's `[http] listen`);
    /// exit 0 when healthy.
    Health(HealthArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(CompletionsArgs),
    /// Print the man page (roff): slotcron man > slotcron.1; with --dir DIR, write one page per
    /// command there.
    Man(ManArgs),
    /// Write a commented starter jobs.toml for one robot (never over an existing file).
    Init(InitArgs),
    /// Print the JSON Schema of jobs.toml (for Taplo and editors: `#:schema` in the file).
    Schema(SchemaArgs),
}

/// Parses the command line and runs it.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    crate::tls::ensure_crypto_provider();
    match cli.command {
        Command::Check(args) => check::check(&args),
        Command::Run(args) => run::run(args, cli.log_format),
        Command::Trigger(args) => trigger::trigger(args, cli.log_format),
        Command::History(args) => history::history(&args),
        Command::Pause(args) => control::pause(&args),
        Command::Resume(args) => control::resume(&args, cli.log_format),
        Command::Health(args) => health::health(&args),
        Command::Completions(args) => docs::completions(args.shell, Cli::command()),
        Command::Man(args) => docs::man(&args, Cli::command()),
        Command::Init(args) => init::init(&args),
        Command::Schema(args) => schema::schema(&args),
    }
}
