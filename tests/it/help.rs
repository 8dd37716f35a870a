//! Help at two lengths (issue 33 item 6): for the top level and every command, `-h` gives one
//! line per flag and `--help` the full text; `slotcron man --dir` writes a page per command
//! with that full text. The commands are read from the command definition, so a new command
//! is held to the same rule.

use std::process::Command;

use clap::CommandFactory;
use slotcron::unstable::cli::Cli;

/// The most characters a flag's line of `-h` may spend on what the flag does (before the
/// `[env: ...]`, `[default: ...]` and `[possible values: ...]` that clap adds).
const MAX_SUMMARY: usize = 80;

/// `slotcron ARGS`'s stdout; panics unless it exits 0.
fn stdout(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_slotcron"))
        .args(args)
        .env_remove("SLOTCRON_CONFIG")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "slotcron {args:?}: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// The top level, then each command (not clap's `help`), with the arguments to reach it.
fn commands() -> Vec<(Vec<String>, clap::Command)> {
    let mut top = Cli::command();
    // Built, each command also lists the global flags (`--log-format`), as its help does.
    top.build();
    let mut all = vec![(Vec::new(), top.clone())];
    for sub in top.get_subcommands().filter(|c| c.get_name() != "help") {
        all.push((vec![sub.get_name().to_owned()], sub.clone()));
    }
    all
}

/// The lines of a help text's sections that list flags and arguments (`Options:`,
/// `Arguments:`), up to the blank line that ends each.
fn entries(help: &str) -> Vec<&str> {
    let mut lines = Vec::new();
    let mut inside = false;
    for line in help.lines() {
        if line == "Options:" || line == "Arguments:" {
            inside = true;
        } else if line.is_empty() {
            inside = false;
        } else if inside {
            lines.push(line);
        }
    }
    lines
}

/// Everything the command lists in its help: its arguments and flags, `-h` and `-V` included.
fn listed(command: &clap::Command) -> usize {
    let mut command = command.clone();
    command.build();
    command.get_arguments().filter(|a| !a.is_hide_set()).count()
}

#[test]
fn dash_h_gives_every_command_one_short_line_per_flag() {
    for (path, command) in commands() {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("-h");
        let help = stdout(&args);
        let lines = entries(&help);
        assert_eq!(
            lines.len(),
            listed(&command),
            "slotcron {args:?}: one line per flag and argument:\n{help}"
        );
        for line in lines {
            assert!(
                // `<ARG>` a required positional, `[ARG]` an optional one (`init [PATH]`).
                line.starts_with("  -")
                    || line.starts_with("  <")
                    || line.starts_with("  [")
                    || line.starts_with("      --"),
                "slotcron {args:?}: {line:?} is not a flag's own line:\n{help}"
            );
            let summary = line.trim().split_once("  ").map_or("", |(_, s)| s.trim());
            let summary = summary.split(" [").next().unwrap_or_default();
            assert!(
                !summary.is_empty() && summary.chars().count() <= MAX_SUMMARY,
                "slotcron {args:?}: {summary:?} is not a short line (at most {MAX_SUMMARY}):\n{help}"
            );
        }
    }
}

/// The texts `--help` owes a command: its long description and each flag's long help.
fn long_texts(command: &clap::Command) -> Vec<String> {
    let about = command.get_long_about().map(ToString::to_string);
    // clap's own `-h` tells of `--help` in its long help: not a text of ours.
    let flags = command
        .get_arguments()
        .filter(|a| a.get_id() != "help")
        .filter_map(|a| a.get_long_help().map(ToString::to_string));
    about.into_iter().chain(flags).collect()
}

#[test]
fn dash_dash_help_gives_every_command_its_full_text() {
    for (path, command) in commands() {
        let name = command.get_name().to_owned();
        let long = long_texts(&command);
        if !path.is_empty() {
            assert!(
                command.get_long_about().is_some(),
                "command {name} has no long description for --help"
            );
        }
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let full = stdout(&args);
        args.pop();
        args.push("-h");
        let short = stdout(&args);
        assert!(
            full.len() > short.len(),
            "{name}: --help says no more than -h"
        );
        for text in &long {
            // --help indents a flag's text; its paragraphs stay whole lines. The first is the
            // summary -h shows too; the others are --help's alone.
            for (i, paragraph) in text.split("\n\n").enumerate() {
                assert!(
                    full.contains(paragraph),
                    "{name} --help lacks {paragraph:?}:\n{full}"
                );
                let summary = paragraph.trim_end_matches('.');
                assert!(
                    (i == 0) == short.contains(summary),
                    "{name} -h: {paragraph:?} (paragraph {i}) is where it belongs only in --help:\n{short}"
                );
            }
        }
    }
}

/// A roff page as the text it says: dashes and apostrophes unescaped.
fn unroff(page: &str) -> String {
    page.replace("\\-", "-").replace("\\*(Aq", "'")
}

#[test]
fn man_writes_a_page_per_command_with_its_full_text() {
    let dir = tempfile::tempdir().unwrap();
    let written = dir.path().to_str().unwrap();
    stdout(&["man", "--dir", written]);
    for (path, command) in commands() {
        let file = match path.first() {
            None => "slotcron.1".to_owned(),
            Some(verb) => format!("slotcron-{verb}.1"),
        };
        let page = std::fs::read_to_string(dir.path().join(&file))
            .unwrap_or_else(|e| panic!("slotcron man --dir did not write {file}: {e}"));
        let page = unroff(&page);
        for text in long_texts(&command) {
            // A paragraph break of the text is a roff paragraph break on the page.
            for paragraph in text.split("\n\n") {
                assert!(
                    page.contains(paragraph),
                    "{file} lacks {paragraph:?}:\n{page}"
                );
            }
        }
    }
}
