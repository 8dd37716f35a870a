//! The books (book/en and book/zh, mdBook): each builds with no warning, each names every config
//! key, CLI verb and flag and metric this build has, and every link in them resolves, offline.
//! The checks themselves are `scripts/check_book.py` (so a writer with no Rust build runs them
//! against any slotcron binary); these tests run it against the binary this build made.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Whether a missing tool is a failure, not a skip (as `tests/common/tools.rs` says: in CI and
/// through `bash scripts/test.sh`, which installs mdbook).
fn in_ci() -> bool {
    let set =
        |name: &str| std::env::var(name).is_ok_and(|v| !v.is_empty() && v != "false" && v != "0");
    set("CI") || set("SLOTCRON_REQUIRE_TOOLS")
}

/// The mdbook binary where `scripts/test.sh` installs the pinned one (else on PATH), or `None` (with the
/// reason printed) outside CI; in CI its absence fails the test.
fn mdbook() -> Option<PathBuf> {
    let venv = repo().join("target/book-venv/bin/mdbook");
    let home = std::env::var_os("HOME").map(|h| Path::new(&h).join(".cargo/bin/mdbook"));
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|dir| dir.join("mdbook"));
    let found = [venv].into_iter().chain(home).chain(on_path).find(|p| p.is_file());
    if found.is_none() {
        assert!(!in_ci(), "mdbook is not installed: scripts/test.sh installs it");
        eprintln!("SKIPPED: mdbook is not installed (bash scripts/test.sh installs it)");
    }
    found
}

/// `scripts/check_book.py` with `args` against this build's binary; its findings, one a line,
/// are the failure's message.
fn check_book(args: &[&str]) {
    let run = Command::new("python3")
        .arg(repo().join("scripts/check_book.py"))
        .arg(env!("CARGO_BIN_EXE_slotcron"))
        .args(args)
        .output()
        .expect("running python3 scripts/check_book.py");
    let said = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "check_book.py {args:?} failed:\n{said}");
}

#[test]
fn both_books_build_with_no_warning() {
    let Some(mdbook) = mdbook() else { return };
    check_book(&["--only", "build", "--mdbook", mdbook.to_str().unwrap()]);
}

/// Every property of schema/jobs.schema.json, every verb and flag of the binary's help (and
/// every variable it names), and every metric a replica of it exposes, in each book.
#[test]
fn every_config_key_cli_verb_flag_and_metric_is_in_both_books() {
    check_book(&["--only", "coverage"]);
}

#[test]
fn every_link_in_both_books_resolves_offline() {
    let Some(mdbook) = mdbook() else { return };
    check_book(&["--only", "links", "--mdbook", mdbook.to_str().unwrap()]);
}
