//! `slotcron completions SHELL` and `slotcron man`: generated from the command definition the
//! dispatcher passes in.

use std::process::ExitCode;

use clap::Args;

use super::shared::EXIT_RUNTIME;

#[derive(Debug, Args)]
/// `slotcron completions`.
pub struct CompletionsArgs {
    /// The shell to complete for.
    pub shell: clap_complete::Shell,
}

pub(super) fn completions(shell: clap_complete::Shell, mut command: clap::Command) -> ExitCode {
    clap_complete::generate(shell, &mut command, "slotcron", &mut std::io::stdout());
    ExitCode::SUCCESS
}

pub(super) fn man(command: clap::Command) -> ExitCode {
    match clap_mangen::Man::new(command).render(&mut std::io::stdout()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("slotcron: writing the man page: {e}");
            ExitCode::from(EXIT_RUNTIME)
        }
    }
}
