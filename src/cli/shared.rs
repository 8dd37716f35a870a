//! What every command shares: the `--config` argument, loading it once, the one runtime
//! builder, the pool of nodes a command opens, and the exit codes. The commands import from
//! here, never from the dispatcher above them.

use super::out::errln;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use clap::Args;

use crate::config::{self, Config, RedisConfig};
use crate::ops::telemetry::LogFormat;
use crate::redis::Nodes;

/// Exit code for a configuration that does not check.
pub const EXIT_CONFIG: u8 = 2;
/// Exit code for a failure at run time.
pub const EXIT_RUNTIME: u8 = 1;
/// `trigger` exit code: another replica (or trigger) already ran this slot.
pub const EXIT_LOST: u8 = 3;
/// Exit code of every command that needs Redis when too few of its nodes answer; for
/// `trigger`, also a lock that could not be decided (Redis down or split).
pub const EXIT_UNAVAILABLE: u8 = 4;
/// `trigger` exit code: skipped because the job's previous run is still going.
pub const EXIT_SKIPPED: u8 = 5;

/// How a command other than `run` logs: not at all unless `-v`, and then on stderr, so that
/// stdout holds its result alone (a script reads it; `| head -1` is its first line).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Logs {
    /// `--log-format`.
    pub format: LogFormat,
    /// `-v`.
    pub verbose: bool,
}

impl Logs {
    /// Installs the logger when asked for.
    pub(crate) fn init(self) {
        if self.verbose {
            crate::ops::telemetry::init_on_stderr(self.format);
        }
    }
}

/// `--config`, flattened into every command that reads jobs.toml.
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

/// Loads and checks the configuration; on errors prints them all and gives the exit code.
pub(crate) fn load_or_exit(path: &Path) -> Result<Config, ExitCode> {
    load_or_exit_as(path, LogFormat::Text)
}

/// [`load_or_exit`] for a command that logs in `format`: under `json` each error is one JSON
/// object a line on stderr (a container's log pipeline parses every line of it), shaped like
/// the log's own lines (`timestamp`, `level`, `message`, `config`, `error`).
pub(crate) fn load_or_exit_as(path: &Path, format: LogFormat) -> Result<Config, ExitCode> {
    reported(path, format, config::load(path))
}

/// [`load_or_exit`] for a command that never sends (`history`, `pause`, `resume`): no action's
/// secret is resolved, so the fleet's own file works from a workstation without them
/// ([`config::load_without_secrets`]). `check` and the commands that send still need them.
pub(crate) fn load_unsent_or_exit(path: &Path) -> Result<Config, ExitCode> {
    load_unsent_or_exit_as(path, LogFormat::Text)
}

/// [`load_unsent_or_exit`] for a command that logs in `format` (see [`load_or_exit_as`]).
pub(crate) fn load_unsent_or_exit_as(path: &Path, format: LogFormat) -> Result<Config, ExitCode> {
    reported(path, format, config::load_without_secrets(path))
}

/// The loaded configuration, or its errors printed (as `format`'s lines) and the exit code.
fn reported(
    path: &Path,
    format: LogFormat,
    loaded: Result<Config, config::ConfigErrors>,
) -> Result<Config, ExitCode> {
    loaded.map_err(|errors| {
        let summary = format!(
            "slotcron: {} error(s) in {}; nothing started",
            errors.errors.len(),
            path.display()
        );
        match format {
            LogFormat::Text => errln!("{errors:#}\n{summary}"),
            LogFormat::Json => {
                for line in errors.to_string().lines() {
                    errln!("{}", json_error(path, "configuration error", line));
                }
                errln!("{}", json_error(path, "nothing started", &summary));
            }
        }
        ExitCode::from(EXIT_CONFIG)
    })
}

/// One start-up error as a JSON log line.
fn json_error(path: &Path, message: &str, error: &str) -> serde_json::Value {
    serde_json::json!({
        "timestamp": Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
        "level": "ERROR",
        "message": message,
        "config": path.display().to_string(),
        "error": error,
    })
}

/// The one runtime every command runs on; a failure to build it is reported and exits.
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Runtime::new().map_err(|e| {
        errln!("slotcron: cannot start the runtime: {e}");
        ExitCode::from(EXIT_RUNTIME)
    })
}

/// This replica's name when `--replica-id` is not given: the hostname.
pub(crate) fn default_replica_id() -> String {
    gethostname::gethostname().to_string_lossy().into_owned()
}

/// `$USER@hostname`: who runs the CLI, for a pause record or a trigger request.
pub(crate) fn operator() -> String {
    let user = std::env::var("USER").unwrap_or_else(|_| "someone".to_owned());
    format!("{user}@{}", default_replica_id())
}

/// The pool of the config's Redis nodes for a CLI command (`[redis] mode`'s: in sentinel mode,
/// the primary is found first); `name` is its replica id in logs.
pub(crate) fn connect(
    redis: &RedisConfig,
    name: &str,
    runtime: &tokio::runtime::Runtime,
) -> Result<Arc<Nodes>, ExitCode> {
    let (urls, timeout, ca) = (&redis.nodes, redis.lock.node_timeout, redis.ca.as_deref());
    runtime
        .block_on(Nodes::open(urls, timeout, ca, &redis.topology(), name))
        .map(Arc::new)
        .map_err(|e| {
            errln!("slotcron: {e:#}");
            ExitCode::from(EXIT_UNAVAILABLE)
        })
}

/// The exit code of a command's failure `e`: 4 when it is Redis that did not answer (fewer
/// than a majority of the nodes), as documented for every command; 1 otherwise.
pub(crate) fn exit_code_of(e: &anyhow::Error) -> ExitCode {
    let unavailable = e
        .chain()
        .any(|cause| cause.is::<crate::record::history::HistoryUnavailable>());
    ExitCode::from(if unavailable {
        EXIT_UNAVAILABLE
    } else {
        EXIT_RUNTIME
    })
}

/// The message for a job name the file does not schedule (disabled, or unknown).
pub(crate) fn unknown_job(config: &Config, name: &str) -> String {
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

/// A job name the file does not schedule; the message lists the jobs it does.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct UnknownJob(pub String);

/// A time as every command prints it: RFC 3339 to the second, in `zone` (the job's, or
/// `[scheduler] timezone`), as `history` prints its slots.
pub(crate) fn local_time(t: DateTime<Utc>, zone: chrono_tz::Tz) -> String {
    t.with_timezone(&zone)
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// Which way a duration given for a time goes from now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Offset {
    /// `--since 24h`: a day ago.
    Back,
    /// `--until 2h`: two hours from now.
    Ahead,
}

/// `--since` or `--until` that is neither a time nor a duration, or one out of reach.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BadTime {
    /// `--since` that does not parse.
    #[error("{0:?} is neither a duration (24h, 30m) nor an RFC 3339 time")]
    NotSince(String),
    /// `--since` before the calendar's start.
    #[error("{0:?} reaches too far back")]
    TooFarBack(String),
    /// `--until` that does not parse.
    #[error(
        "{0:?} is neither an RFC 3339 time (2026-12-28T09:00:00+08:00) nor a duration (2h, 3d)"
    )]
    NotUntil(String),
    /// `--until` past the calendar's end.
    #[error("{0:?} is too far in the future")]
    TooFarAhead(String),
}

/// The longest `--until` duration: a pause that long is one until resumed, and any fleet
/// time plus it stays inside the calendar.
const MAX_AHEAD: chrono::Duration = chrono::Duration::days(100 * 365);

/// `--since` or `--until` as typed: a time, or a duration from now (whose "now" is the caller's
/// to choose: `pause` takes the fleet's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TimeOrSpan {
    /// An RFC 3339 time.
    At(DateTime<Utc>),
    /// A duration, going the option's `Offset` from now.
    Span(chrono::Duration),
}

/// An RFC 3339 time, or a duration going `offset`.
pub(crate) fn time_or_span(text: &str, offset: Offset) -> Result<TimeOrSpan, BadTime> {
    if let Ok(at) = DateTime::parse_from_rfc3339(text) {
        return Ok(TimeOrSpan::At(at.with_timezone(&Utc)));
    }
    type Why = fn(String) -> BadTime;
    let (unparsed, unreachable, longest): (Why, Why, _) = match offset {
        Offset::Back => (
            BadTime::NotSince,
            BadTime::TooFarBack,
            chrono::Duration::MAX,
        ),
        Offset::Ahead => (BadTime::NotUntil, BadTime::TooFarAhead, MAX_AHEAD),
    };
    let span = humantime::parse_duration(text).map_err(|_| unparsed(text.to_owned()))?;
    chrono::Duration::from_std(span)
        .ok()
        .filter(|span| *span <= longest)
        .map(TimeOrSpan::Span)
        .ok_or_else(|| unreachable(text.to_owned()))
}

/// An RFC 3339 time, or a duration back from this machine's now (`--since`: the ledger's
/// period, where a clock off by minutes moves the window's edge, nothing more).
pub(crate) fn time_or_offset_back(text: &str) -> Result<DateTime<Utc>, BadTime> {
    match time_or_span(text, Offset::Back)? {
        TimeOrSpan::At(at) => Ok(at),
        TimeOrSpan::Span(span) => Utc::now()
            .checked_sub_signed(span)
            .ok_or_else(|| BadTime::TooFarBack(text.to_owned())),
    }
}
