//! What every command shares: the `--config` argument, loading it once, the one runtime
//! builder, the pool of nodes a command opens, and the exit codes. The commands import from
//! here, never from the dispatcher above them.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;

use crate::config::{self, Config, RedisConfig};
use crate::lock::Nodes;

/// Exit code for a configuration that does not check.
pub const EXIT_CONFIG: u8 = 2;
/// Exit code for a failure at run time.
pub const EXIT_RUNTIME: u8 = 1;
/// `trigger` exit code: another replica (or trigger) already ran this slot.
pub const EXIT_LOST: u8 = 3;
/// `trigger` exit code: the lock could not be decided (Redis down or split).
pub const EXIT_UNAVAILABLE: u8 = 4;
/// `trigger` exit code: skipped because the job's previous run is still going.
pub const EXIT_SKIPPED: u8 = 5;

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

/// The one runtime every command runs on; a failure to build it is reported and exits.
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Runtime::new().map_err(|e| {
        eprintln!("slotcron: cannot start the runtime: {e}");
        ExitCode::from(EXIT_RUNTIME)
    })
}

/// This replica's name when `--replica-id` is not given: the hostname.
pub(crate) fn default_replica_id() -> String {
    gethostname::gethostname().to_string_lossy().into_owned()
}

/// The pool of the config's Redis nodes for a CLI command; `name` is its replica id in logs.
pub(crate) fn connect(
    redis: &RedisConfig,
    name: &str,
    runtime: &tokio::runtime::Runtime,
) -> Result<Arc<Nodes>, ExitCode> {
    // The nodes' connections are opened on the runtime.
    let _entered = runtime.enter();
    Nodes::connect(
        &redis.nodes,
        redis.lock.node_timeout,
        redis.ca.as_deref(),
        name,
    )
    .map(Arc::new)
    .map_err(|e| {
        eprintln!("slotcron: {e}");
        ExitCode::from(EXIT_RUNTIME)
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
