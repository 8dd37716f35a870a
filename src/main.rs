use std::process::ExitCode;

fn main() -> ExitCode {
    slotcron::cli::main()
}
