//! `slotcron health`: the image's HEALTHCHECK, asking the running replica's `/healthz`.

use super::out::{errln, out, outln};
use std::process::ExitCode;

use clap::Args;

use super::shared::{ConfigArg, EXIT_RUNTIME, load_or_exit, runtime};

#[derive(Debug, Args)]
/// `slotcron health`.
pub struct HealthArgs {
    #[command(flatten)]
    /// Which jobs.toml to read.
    pub config: ConfigArg,
    /// The replica's status address, when `run` was given `--http-listen`.
    ///
    /// Without it, the config's `[http] listen` is asked.
    #[arg(long, env = "SLOTCRON_HTTP_LISTEN", value_name = "ADDR:PORT")]
    pub http_listen: Option<std::net::SocketAddr>,
}

/// `slotcron health`: exit 0 when the replica's `/healthz` answers 200 (on `--http-listen` when
/// given, as `run`'s). A config without `[http]` has no endpoint to ask: the file is checked instead, and the output says so.
pub(super) fn health(args: &HealthArgs) -> ExitCode {
    let mut config = match load_or_exit(&args.config.config) {
        Ok(config) => config,
        Err(code) => return code,
    };
    if let Some(listen) = args.http_listen {
        config.override_http(listen);
    }
    let Some(http) = config.http else {
        outln!(
            "{}: valid; no [http] listen, so no /healthz to ask",
            config.path.display()
        );
        return ExitCode::SUCCESS;
    };
    let runtime = match runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    match runtime.block_on(crate::ops::probe::healthz(http.listen)) {
        Ok(body) => {
            out!("{body}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            errln!("slotcron: unhealthy: {e}");
            ExitCode::from(EXIT_RUNTIME)
        }
    }
}
