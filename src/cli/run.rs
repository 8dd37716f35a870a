//! `slotcron run`: the schedule on this replica until a signal stops it; reloads on SIGHUP or
//! a change of the file.

use std::process::ExitCode;

use clap::Args;
use tokio_util::sync::CancellationToken;

use super::shared::{ConfigArg, EXIT_RUNTIME, default_replica_id, load_or_exit_as, runtime};
use crate::api::Fleet;
use crate::ops::telemetry::{self, LogFormat};

#[derive(Debug, Args)]
/// `slotcron run`.
pub struct RunArgs {
    #[command(flatten)]
    /// Which jobs.toml to read.
    pub config: ConfigArg,
    /// This replica's name in logs and lock tokens (default: the hostname).
    #[arg(long, env = "SLOTCRON_REPLICA_ID")]
    pub replica_id: Option<String>,
    /// Serve the status endpoints on this address, not the file's `[http] listen`.
    ///
    /// The endpoints are /healthz, /readyz, /metrics and the status page; the file may have an
    /// `[http]` section or not. Replicas sharing a host and a file each get their own port. A
    /// reload keeps it.
    #[arg(long, env = "SLOTCRON_HTTP_LISTEN", value_name = "ADDR:PORT")]
    pub http_listen: Option<std::net::SocketAddr>,
    /// Reload only on SIGHUP, not when the configuration file changes.
    #[arg(long, env = "SLOTCRON_NO_WATCH")]
    pub no_watch: bool,
}

/// `slotcron run`: the schedule on this replica until SIGTERM or SIGINT; exit 1 on an error.
pub(super) fn run(args: RunArgs, format: LogFormat) -> ExitCode {
    telemetry::init(format);
    let mut config = match load_or_exit_as(&args.config.config, format) {
        Ok(config) => config,
        Err(code) => return code,
    };
    if let Some(listen) = args.http_listen {
        config.override_http(listen);
    }
    let replica = args.replica_id.unwrap_or_else(default_replica_id);
    let runtime = match runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    let result = runtime.block_on(async {
        let shutdown = CancellationToken::new();
        tokio::spawn(watch_signals(shutdown.clone()));
        let watch = (!args.no_watch).then_some(args.config.config.as_path());
        let reloads = watch_reloads(watch, &shutdown);
        Fleet::from_config(config, replica, reloads)
            .run_until(shutdown.cancelled_owned())
            .await
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "slotcron stopped on an error");
            ExitCode::from(EXIT_RUNTIME)
        }
    }
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
    use tokio::signal::unix::{SignalKind, signal};
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
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::select! {
        biased;
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    Ok(())
}
