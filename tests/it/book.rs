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
    let found = [venv]
        .into_iter()
        .chain(home)
        .chain(on_path)
        .find(|p| p.is_file());
    if found.is_none() {
        assert!(
            !in_ci(),
            "mdbook is not installed: scripts/test.sh installs it"
        );
        eprintln!("SKIPPED: mdbook is not installed (bash scripts/test.sh installs it)");
    }
    found
}

/// `scripts/check_book.py` run with `args` against this build's binary: whether it passed, and
/// its findings (one a line, on stderr).
fn run_check_book<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> (bool, String) {
    let run = Command::new("python3")
        .arg(repo().join("scripts/check_book.py"))
        .arg(env!("CARGO_BIN_EXE_slotcron"))
        .args(args)
        .output()
        .expect("running python3 scripts/check_book.py");
    let said = String::from_utf8_lossy(&run.stderr).into_owned();
    (run.status.success(), said)
}

/// `scripts/check_book.py` with `args`; its findings are the failure's message.
fn check_book(args: &[&str]) {
    let (passed, said) = run_check_book(args);
    assert!(passed, "check_book.py {args:?} failed:\n{said}");
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

/// The README's WeCom reminder (its `toml` block under "A WeCom reminder on Chinese workdays"),
/// written where the README says, in a fresh directory.
fn readme_reminder(dir: &Path) -> PathBuf {
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("reading README.md");
    let (_, section) = readme
        .split_once("\n## A WeCom reminder on Chinese workdays\n")
        .expect("the README's WeCom section");
    let toml = section.split_once("```toml\n").expect("a toml block").1;
    let toml = toml.split_once("```").expect("the block's end").0;
    let path = dir.join("standup.toml");
    std::fs::write(&path, toml).unwrap();
    path
}

/// The README's `check --next` output is what `check` prints for its file on the date it names
/// (2026-09-30 08:00 in Shanghai, set with faketime): pasted, not written by hand.
#[test]
fn the_readmes_check_next_output_is_what_check_prints_on_its_date() {
    let faketime = Path::new("/usr/bin/faketime");
    if !faketime.is_file() {
        assert!(
            !in_ci(),
            "faketime is not installed: scripts/test.sh installs it"
        );
        eprintln!("SKIPPED: faketime is not installed (bash scripts/test.sh installs it)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    readme_reminder(dir.path());
    let run = Command::new(faketime)
        .args(["2026-09-30 00:00:00", env!("CARGO_BIN_EXE_slotcron")])
        .args(["check", "--config", "standup.toml", "--next", "6"])
        .current_dir(dir.path())
        .env(
            "WECOM_WEBHOOK",
            "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=YOUR-KEY",
        )
        .env_remove("LANG")
        .env_remove("LC_ALL")
        .env_remove("LC_MESSAGES")
        .output()
        .unwrap();
    assert!(run.status.success(), "{run:?}");
    let printed = String::from_utf8(run.stdout).unwrap() + &String::from_utf8(run.stderr).unwrap();
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let shown = readme
        .split_once("$ cargo run -- check --config standup.toml --next 6\n")
        .expect("the README's check --next block")
        .1
        .split_once("```")
        .unwrap()
        .0;
    // Compared as sets of lines: the warning goes to stderr, the rest to stdout.
    let mut printed_lines: Vec<&str> = printed.lines().collect();
    let mut shown_lines: Vec<&str> = shown.lines().collect();
    printed_lines.sort_unstable();
    shown_lines.sort_unstable();
    assert_eq!(
        shown_lines, printed_lines,
        "the README shows:\n{shown}\ncheck prints:\n{printed}"
    );
}

/// The README's five-minute path as written: `scripts/robot_receiver.py` stands in for the
/// group robot, `trigger` sends the reminder now, and the receiver gets WeCom's text message.
#[test]
fn the_readmes_reminder_reaches_the_robot_receiver() {
    let dir = tempfile::tempdir().unwrap();
    readme_reminder(dir.path());
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut receiver = Command::new("python3")
        .arg(repo().join("scripts/robot_receiver.py"))
        .args(["--port", &port.to_string()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("starting scripts/robot_receiver.py");
    let listening = receiver.stderr.take().unwrap();
    let mut first = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(listening), &mut first).unwrap();
    assert!(first.contains("listening"), "{first}");
    let webhook = format!("http://127.0.0.1:{port}/cgi-bin/webhook/send?key=demo");
    let trigger = Command::new(env!("CARGO_BIN_EXE_slotcron"))
        .args(["trigger", "--config", "standup.toml", "standup"])
        .current_dir(dir.path())
        .env("WECOM_WEBHOOK", &webhook)
        .output()
        .unwrap();
    receiver.kill().unwrap();
    let got = receiver.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&trigger.stdout);
    assert!(said.starts_with("standup: done"), "{trigger:?}");
    let got = String::from_utf8_lossy(&got.stdout);
    assert!(got.contains("POST /cgi-bin/webhook/send?key=demo"), "{got}");
    assert!(
        got.contains(r#""msgtype":"text","text":{"content":"Stand-up in 5 minutes ("#),
        "{got}"
    );
}

/// The coverage check is not vacuous: a copy of the English book with one config key, one flag
/// and one metric renamed away fails it, naming each.
#[test]
fn the_coverage_check_names_what_a_book_lacks() {
    let root = tempfile::tempdir().unwrap();
    let src = root.path().join("en/src");
    std::fs::create_dir_all(&src).unwrap();
    for entry in std::fs::read_dir(repo().join("book/en/src")).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let text = text
            .replace("wait_replicas", "wait_replica_count")
            .replace("--no-watch", "--no-watching")
            .replace("slotcron_handoffs_total", "slotcron_handoffs");
        std::fs::write(src.join(path.file_name().unwrap()), text).unwrap();
    }
    let root: &std::ffi::OsStr = root.path().as_ref();
    let args = ["--only", "coverage", "--books", "en", "--root"].map(std::ffi::OsStr::new);
    let (passed, said) = run_check_book(&[&args[..], &[root]].concat());
    assert!(!passed, "{said}");
    for missing in [
        "config key `wait_replicas`",
        "CLI flag `--no-watch`",
        "metric `slotcron_handoffs_total`",
    ] {
        assert!(said.contains(missing), "{missing} not named:\n{said}");
    }
}

/// The link check is not vacuous: a small book with a link to a missing chapter, an anchor no
/// heading has, and a GitHub link to a file this repository lacks fails it, naming each.
#[test]
fn the_link_check_names_each_broken_link() {
    let Some(mdbook) = mdbook() else { return };
    let root = tempfile::tempdir().unwrap();
    let src = root.path().join("en/src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(root.path().join("en/book.toml"), "[book]\ntitle = \"t\"\n").unwrap();
    std::fs::write(src.join("SUMMARY.md"), "# Summary\n\n- [One](one.md)\n").unwrap();
    let chapter = "# One\n\n## Here\n\n[fine](#here) [gone](two.md) [nowhere](#there) \
                   [repo](https://github.com/slotcron/slotcron/blob/main/NOPE.md)\n";
    std::fs::write(src.join("one.md"), chapter).unwrap();
    let args = ["--only", "links", "--books", "en", "--mdbook"].map(std::ffi::OsStr::new);
    let tail = [
        mdbook.as_os_str(),
        "--root".as_ref(),
        root.path().as_os_str(),
    ];
    let (passed, said) = run_check_book(&[&args[..], &tail].concat());
    assert!(!passed, "{said}");
    for broken in [
        "link two.html",
        "link #there",
        "link https://github.com/slotcron/slotcron/blob/main/NOPE.md",
    ] {
        assert!(said.contains(broken), "{broken} not named:\n{said}");
    }
    assert!(!said.contains("link #here"), "{said}");
}
