//! `slotcron health`: the image's HEALTHCHECK, asking the running replica's `/healthz`.

use std::process::ExitCode;

use clap::Args;

use super::shared::{load_or_exit, runtime, ConfigArg, EXIT_RUNTIME};

#[derive(Debug, Args)]
/// `slotcron health`.
pub struct HealthArgs {
    #[command(flatten)]
    /// Which jobs.toml to read.
    pub config: ConfigArg,
}

/// `slotcron health`: exit 0 when the replica's `/healthz` answers 200. A config without
/// `[http]` has no endpoint to ask: the file is checked instead, and the output says so.
pub(super) fn health(args: &HealthArgs) -> ExitCode {
    let config = match load_or_exit(&args.config.config) {
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
    let runtime = match runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    match runtime.block_on(crate::ops::probe::healthz(http.listen)) {
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
