//! `slotcron completions SHELL` and `slotcron man`: generated from the command definition the
//! dispatcher passes in.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::shared::EXIT_RUNTIME;

#[derive(Debug, Args)]
/// `slotcron completions`.
pub struct CompletionsArgs {
    /// The shell to complete for.
    pub shell: clap_complete::Shell,
}

#[derive(Debug, Args)]
/// `slotcron man`.
pub struct ManArgs {
    /// Write slotcron.1 and one page per command into this directory.
    ///
    /// The pages are slotcron-run.1, slotcron-check.1, ...; without --dir, only the top-level
    /// page is printed.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

pub(super) fn completions(shell: clap_complete::Shell, mut command: clap::Command) -> ExitCode {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut command, "slotcron", &mut out);
    finish(to_stdout(|w| w.write_all(&out)), "the completion script")
}

pub(super) fn man(args: &ManArgs, command: clap::Command) -> ExitCode {
    // No `help` command page: `slotcron help X` is `slotcron X --help`, and the top page must
    // name only the pages `--dir` writes.
    let command = command.disable_help_subcommand(true);
    match &args.dir {
        Some(dir) => finish(clap_mangen::generate_to(command, dir), "the man pages"),
        None => finish(
            to_stdout(|w| clap_mangen::Man::new(command).render(w)),
            "the man page",
        ),
    }
}

/// `write` on stdout, flushed here so that a failed write is seen (not lost at exit).
fn to_stdout(write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>) -> std::io::Result<()> {
    let mut stdout = std::io::stdout().lock();
    write(&mut stdout)?;
    stdout.flush()
}

/// The exit code of a generator's write. A reader that stopped early (`slotcron man | head`)
/// closes the pipe: that is the reader's choice, not a failure, so it ends quietly with 0.
fn finish(written: std::io::Result<()>, what: &str) -> ExitCode {
    match written {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("slotcron: writing {what}: {e}");
            ExitCode::from(EXIT_RUNTIME)
        }
    }
}
