//! The CLI's output: stdout for the result, stderr for what went wrong. A reader that stopped
//! early (`slotcron history --since 3650d | head -2`) closes the pipe: that is the reader's
//! choice, not a failure of the command, so the rest of the output is dropped and the command
//! ends as it would have, with its own exit code (`println!` would panic: exit 101).

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set once a write to stdout found the pipe closed: later writes are skipped, not retried.
static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);
/// The same for stderr (`slotcron history 2>&1 | head -1`).
static STDERR_CLOSED: AtomicBool = AtomicBool::new(false);

/// Writes `text` to stdout, quietly dropping it once the reader is gone.
pub(crate) fn stdout(text: std::fmt::Arguments<'_>) {
    write(&mut std::io::stdout().lock(), text, &STDOUT_CLOSED);
}

/// Writes `text` to stderr, quietly dropping it once the reader is gone.
pub(crate) fn stderr(text: std::fmt::Arguments<'_>) {
    write(&mut std::io::stderr().lock(), text, &STDERR_CLOSED);
}

/// One write, flushed so that a closed pipe is seen here rather than at exit. Any failure
/// (a closed pipe, a full disk) leaves nothing more the command could tell its reader there.
fn write(to: &mut dyn Write, text: std::fmt::Arguments<'_>, closed: &AtomicBool) {
    if closed.load(Ordering::Relaxed) {
        return;
    }
    if to.write_fmt(text).and_then(|()| to.flush()).is_err() {
        closed.store(true, Ordering::Relaxed);
    }
}

/// `println!` that ends quietly on a closed pipe.
macro_rules! outln {
    () => { $crate::cli::out::stdout(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::cli::out::stdout(format_args!("{}\n", format_args!($($arg)*))) };
}

/// `print!` that ends quietly on a closed pipe.
macro_rules! out {
    ($($arg:tt)*) => { $crate::cli::out::stdout(format_args!($($arg)*)) };
}

/// `eprintln!` that ends quietly on a closed pipe.
macro_rules! errln {
    ($($arg:tt)*) => { $crate::cli::out::stderr(format_args!("{}\n", format_args!($($arg)*))) };
}

pub(crate) use {errln, out, outln};
