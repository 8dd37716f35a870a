use std::process::ExitCode;

fn main() -> ExitCode {
    slotcron::unstable::cli::main()
}
