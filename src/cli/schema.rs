//! `slotcron schema`: prints the JSON Schema of jobs.toml (generated from the config types), the
//! one `schema/jobs.schema.json` holds and the shipped configs name in their `#:schema` line.

use std::io::Write;
use std::process::ExitCode;

/// `slotcron schema` takes no arguments.
#[derive(Debug, clap::Args)]
pub struct SchemaArgs {}

/// Prints the schema; a closed pipe ends it quietly.
pub fn schema(_: &SchemaArgs) -> ExitCode {
    let text = crate::config::schema::json_schema();
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("slotcron schema: cannot write: {e}");
            ExitCode::FAILURE
        }
    }
}
