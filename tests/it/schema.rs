//! The JSON Schema of jobs.toml and the starter configs: `slotcron schema` prints exactly the
//! committed `schema/jobs.schema.json`; every shipped config names it in a `#:schema` line and
//! passes Taplo against it; ten typical mistakes are reported by Taplo and by `check` alike;
//! `slotcron init --robot R` writes a config that passes both, and never over an existing file.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::tools::tool;

/// The committed schema, relative to the repository.
const SCHEMA: &str = "schema/jobs.schema.json";

/// Every robot `init --robot` takes.
const ROBOTS: [&str; 6] = ["wecom", "dingtalk", "feishu", "slack", "http", "command"];

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The binary with no variable of the tests' or the user's set: what `init` writes must pass
/// with none.
fn slotcron(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_slotcron"));
    cmd.env_clear().args(args);
    if let Some(path) = std::env::var_os("PATH") {
        cmd.env("PATH", path);
    }
    cmd
}

/// Exit code and stdout + stderr of `cmd`.
fn run(cmd: &mut Command) -> (Option<i32>, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = cmd.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&stdout),
        String::from_utf8_lossy(&stderr)
    );
    (status.code(), text)
}

/// `taplo lint` of `file` against the committed schema (its own `#:schema` line when it has
/// one); `None` when Taplo is not installed outside CI.
fn taplo_lint(file: &Path) -> Option<(Option<i32>, String)> {
    let taplo = tool("taplo")?;
    let schema = format!("file://{}", repo().join(SCHEMA).display());
    let mut cmd = Command::new(taplo);
    cmd.args(["lint", "--no-auto-config", "--schema", &schema])
        .arg(file)
        .current_dir(file.parent().unwrap());
    Some(run(&mut cmd))
}

#[test]
fn schema_prints_the_committed_schema() {
    let (code, printed) = run(&mut slotcron(&["schema"]));
    assert_eq!(code, Some(0), "{printed}");
    let committed = std::fs::read_to_string(repo().join(SCHEMA)).unwrap();
    assert!(
        printed == committed,
        "{SCHEMA} drifted from the config types: run `cargo run -- schema > {SCHEMA}` and commit it"
    );
    let schema: serde_json::Value = serde_json::from_str(&printed).unwrap();
    let job = &schema["definitions"]["RawJob"]["properties"];
    for key in ["name", "schedule", "calendar", "days", "action"] {
        assert!(job.get(key).is_some(), "[[job]] {key} is not in the schema");
    }
}

/// jobs.toml, every `.toml` under deploy/ and examples/: the configs the repository ships.
fn shipped_configs() -> Vec<PathBuf> {
    let mut configs = vec![repo().join("jobs.toml")];
    let mut dirs = vec![repo().join("deploy"), repo().join("examples")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "toml") {
                configs.push(path);
            }
        }
    }
    configs
}

#[test]
fn every_shipped_config_names_the_schema_and_passes_taplo() {
    let schema = repo().join(SCHEMA).canonicalize().unwrap();
    let configs = shipped_configs();
    assert!(configs.len() >= 3, "jobs.toml and deploy/'s: {configs:?}");
    for config in configs {
        let text = std::fs::read_to_string(&config).unwrap();
        let named = text
            .lines()
            .next()
            .and_then(|line| line.strip_prefix("#:schema "))
            .unwrap_or_else(|| panic!("{} does not start with #:schema", config.display()));
        let resolved = config.parent().unwrap().join(named.trim()).canonicalize();
        assert_eq!(
            resolved.ok().as_ref(),
            Some(&schema),
            "{}",
            config.display()
        );
        let Some((code, out)) = taplo_lint(&config) else {
            return;
        };
        assert_eq!(code, Some(0), "taplo on {}: {out}", config.display());
    }
}

/// A file of one log job, with `extra` on top.
fn log_job_with(extra: &str) -> String {
    format!(
        "{extra}\n[[job]]\nname = \"beat\"\nschedule = \"0 * * * * *\"\n\
         [job.action]\ntype = \"log\"\ncontent = \"x\"\n"
    )
}

#[test]
fn a_top_level_schema_key_is_accepted_by_check_and_taplo() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.toml");
    std::fs::write(&path, log_job_with("\"$schema\" = \"./jobs.schema.json\"")).unwrap();
    let (code, out) = run(slotcron(&["check", "--config"]).arg(&path));
    assert_eq!(code, Some(0), "{out}");
    if let Some((code, out)) = taplo_lint(&path) {
        assert_eq!(code, Some(0), "{out}");
    }
    std::fs::write(&path, log_job_with("\"$schema\" = 7")).unwrap();
    let (code, out) = run(slotcron(&["check", "--config"]).arg(&path));
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains("$schema") && out.contains("must be a string"),
        "{out}"
    );
}

/// A job's lines before its action, and its action table.
const JOB: &str = "[[job]]\nname = \"standup\"\nschedule = \"0 30 9 * * *\"\n";
const ACTION: &str = "[job.action]\ntype = \"log\"\ncontent = \"x\"\n";

/// A typical mistake: the file, what Taplo's report holds, what `check`'s holds.
struct Mistake {
    what: &'static str,
    file: String,
    taplo_says: &'static str,
    check_says: &'static str,
}

fn mistake(what: &'static str, file: String, taplo: &'static str, check: &'static str) -> Mistake {
    Mistake {
        what,
        file,
        taplo_says: taplo,
        check_says: check,
    }
}

fn ten_mistakes() -> Vec<Mistake> {
    let wecom = "[job.action]\ntype = \"wecom\"\nwebhook = \"https://example.com/hook\"\n";
    vec![
        mistake(
            "unknown key in a job",
            format!("{JOB}schedul = \"0 * * * * *\"\n{ACTION}"),
            "'schedul' was unexpected",
            "schedul",
        ),
        mistake(
            "unknown key in [scheduler]",
            format!("[scheduler]\ntimezon = \"UTC\"\n{JOB}{ACTION}"),
            "'timezon' was unexpected",
            "timezon",
        ),
        mistake(
            "unknown section",
            format!("[jobs]\nname = \"x\"\n{JOB}{ACTION}"),
            "'jobs' was unexpected",
            "jobs",
        ),
        mistake(
            "a number for a duration",
            format!("{JOB}timeout = 30\n{ACTION}"),
            "30 is not of type \"string\"",
            "timeout",
        ),
        mistake(
            "a string for a boolean",
            format!("{JOB}enabled = \"yes\"\n{ACTION}"),
            "\"yes\" is not of type \"boolean\"",
            "enabled",
        ),
        mistake(
            "a bad overlap",
            format!("{JOB}overlap = \"queue\"\n{ACTION}"),
            "\"queue\" is not one of",
            "overlap",
        ),
        mistake(
            "a bad days",
            format!(
                "[calendar.cn]\nbuiltin = \"cn\"\n{JOB}calendar = \"cn\"\ndays = \"weekdays\"\n{ACTION}"
            ),
            "\"weekdays\" is not one of",
            "days",
        ),
        mistake(
            "an unknown action type",
            format!("{JOB}[job.action]\ntype = \"wechat\"\ncontent = \"x\"\n"),
            "\"wechat\" is not one of",
            "wechat",
        ),
        mistake(
            "a job without its schedule",
            format!("[[job]]\nname = \"standup\"\n{ACTION}"),
            "\"schedule\" is a required property",
            "schedule",
        ),
        mistake(
            "a robot without its msgtype",
            format!("{JOB}{wecom}content = \"x\"\n"),
            "\"msgtype\" is a required property",
            "msgtype",
        ),
    ]
}

#[test]
fn ten_typical_mistakes_are_reported_by_taplo_and_by_check() {
    let dir = tempfile::tempdir().unwrap();
    for (i, m) in ten_mistakes().into_iter().enumerate() {
        let path = dir.path().join(format!("mistake{i}.toml"));
        std::fs::write(&path, &m.file).unwrap();
        let (code, out) = run(slotcron(&["check", "--config"]).arg(&path));
        assert_eq!(code, Some(2), "check on {}: {out}", m.what);
        assert!(out.contains(m.check_says), "check on {}: {out}", m.what);
        let Some((code, out)) = taplo_lint(&path) else {
            continue;
        };
        assert_ne!(code, Some(0), "taplo on {}: {out}", m.what);
        assert!(out.contains(m.taplo_says), "taplo on {}: {out}", m.what);
    }
}

#[test]
fn init_writes_a_starter_that_passes_check_and_taplo_for_every_robot() {
    let dir = tempfile::tempdir().unwrap();
    for robot in ROBOTS {
        let path = dir.path().join(format!("{robot}.toml"));
        let (code, out) = run(slotcron(&["init", "--robot", robot]).arg(&path));
        assert_eq!(code, Some(0), "init --robot {robot}: {out}");
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains(&format!("type = \"{robot}\"")), "{text}");
        let (code, out) = run(slotcron(&["check", "--config"]).arg(&path));
        assert_eq!(code, Some(0), "check of init --robot {robot}: {out}");
        if let Some((code, out)) = taplo_lint(&path) {
            assert_eq!(code, Some(0), "taplo on init --robot {robot}: {out}");
        }
    }
}

#[test]
fn init_writes_jobs_toml_by_default_and_never_over_an_existing_file() {
    let dir = tempfile::tempdir().unwrap();
    let (code, out) = run(slotcron(&["init", "--robot", "wecom"]).current_dir(dir.path()));
    assert_eq!(code, Some(0), "{out}");
    let path = dir.path().join("jobs.toml");
    let first = std::fs::read(&path).unwrap();
    // Edited by hand since: a second init must leave the edit, not restore the starter.
    let edited = [&first[..], b"# mine\n"].concat();
    std::fs::write(&path, &edited).unwrap();
    for robot in ["wecom", "slack"] {
        let (code, out) = run(slotcron(&["init", "--robot", robot]).current_dir(dir.path()));
        assert_ne!(code, Some(0), "a second init succeeded: {out}");
        assert!(out.contains("exists"), "{out}");
        assert_eq!(std::fs::read(&path).unwrap(), edited, "the file changed");
    }
}
