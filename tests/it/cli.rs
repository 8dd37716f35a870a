//! The `slotcron` binary: `check` prints each job's next slots in the job's zone and never the
//! webhook key; a bad config exits 2 with the file, job and field on stderr, before anything
//! starts; `--help` documents the subcommands and their flags.

use crate::common;

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use chrono::{DateTime, FixedOffset, Offset, TimeZone};
use chrono_tz::Tz;
use common::{Replica, write_config};

const WEBHOOK: &str = "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=SECRETKEY123";
const KEY: &str = "SECRETKEY123";

/// Three enabled jobs in three zones (one from [scheduler]) and a disabled one.
const GOOD: &str = r#"
[scheduler]
timezone = "America/New_York"

[[job]]
name = "standup"
schedule = "0 30 9 * * *"
timezone = "Asia/Shanghai"
timeout = "30s"
[job.action]
type = "wecom"
webhook = "${WECOM_WEBHOOK}"
msgtype = "text"
content = "Stand-up ({{ slot }})"
mentioned_list = ["@all"]

[[job]]
name = "hourly"
schedule = "15 * * * *"
timezone = "UTC"
[job.action]
type = "log"
content = "hourly {{ slot }}"

[[job]]
name = "nightly"
schedule = "0 0 22 * * *"
[job.action]
type = "log"
content = "nightly {{ slot }}"

[[job]]
name = "off"
enabled = false
schedule = "0 0 * * *"
[job.action]
type = "wecom"
webhook = "${NEVER_SET_HOOK}"
msgtype = "text"
content = "never"
"#;

/// The binary, with none of its settings inherited from the test's environment.
fn slotcron() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_slotcron"));
    for var in [
        "SLOTCRON_CONFIG",
        "SLOTCRON_REPLICA_ID",
        "SLOTCRON_LOG_FORMAT",
        "WECOM_WEBHOOK",
        "NEVER_SET_HOOK",
        "RUST_LOG",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

fn output(cmd: &mut Command) -> (Option<i32>, String, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = cmd.output().unwrap();
    (
        status.code(),
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    )
}

/// The slot lines `check` prints under `job "<name>"` (after its schedule in words).
fn slots_of<'a>(stdout: &'a str, job: &str) -> Vec<&'a str> {
    let header = format!("job {job:?}:");
    let mut lines = stdout.lines().skip_while(|l| !l.starts_with(&header));
    assert!(lines.next().is_some(), "no {header} in:\n{stdout}");
    lines
        .take_while(|l| l.starts_with("  "))
        .map(str::trim)
        .filter(|l| !l.starts_with("schedule: ") && !l.starts_with("计划："))
        .collect()
}

/// Checks `n` slots of a job: RFC 3339, strictly increasing, after `since`, each at the offset
/// `zone` has at that instant and at the expected wall-clock time.
fn assert_slots(
    stdout: &str,
    job: &str,
    zone: Tz,
    n: usize,
    wall: &str,
    since: DateTime<FixedOffset>,
) {
    let slots = slots_of(stdout, job);
    assert_eq!(slots.len(), n, "job {job}: {slots:?}\n{stdout}");
    let mut previous = since;
    for text in slots {
        let at = DateTime::parse_from_rfc3339(text)
            .unwrap_or_else(|e| panic!("job {job}: {text:?} is not RFC 3339: {e}"));
        let in_zone = zone.from_utc_datetime(&at.naive_utc());
        assert_eq!(
            *at.offset(),
            in_zone.offset().fix(),
            "job {job}: {text} is not in {zone}'s offset"
        );
        assert!(
            text.contains(wall),
            "job {job}: {text} is not at {wall} local time"
        );
        assert!(at > previous, "job {job}: {text} is not after {previous}");
        previous = at;
    }
}

fn assert_check_output(stdout: &str, since: DateTime<FixedOffset>) {
    let shanghai: Tz = "Asia/Shanghai".parse().unwrap();
    let new_york: Tz = "America/New_York".parse().unwrap();
    assert_slots(stdout, "standup", shanghai, 3, "T09:30:00+08:00", since);
    assert_slots(stdout, "hourly", chrono_tz::UTC, 3, ":15:00Z", since);
    // New York's offset is -04:00 or -05:00 with the season; assert_slots checks which.
    assert_slots(stdout, "nightly", new_york, 3, "T22:00:00-0", since);
    assert!(
        stdout.contains("job \"off\": disabled"),
        "the disabled job is listed:\n{stdout}"
    );
    assert!(stdout.contains("3 job(s)"), "{stdout}");
}

fn now() -> DateTime<FixedOffset> {
    chrono::Utc::now().fixed_offset()
}

#[test]
fn check_prints_the_next_slots_of_each_job_in_its_zone() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(&dir, GOOD);
    let since = now();
    let (code, stdout, stderr) = output(
        slotcron()
            .args(["check", "--config"])
            .arg(&path)
            .args(["--next", "3"])
            .env("WECOM_WEBHOOK", WEBHOOK),
    );
    assert_eq!(code, Some(0), "stderr: {stderr}\nstdout: {stdout}");
    assert!(stdout.starts_with(&path.display().to_string()), "{stdout}");
    assert_check_output(&stdout, since);
}

#[test]
fn check_reads_the_config_path_from_slotcron_config() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(&dir, GOOD);
    let since = now();
    let (code, stdout, stderr) = output(
        slotcron()
            .args(["check", "--next", "3"])
            .env("SLOTCRON_CONFIG", &path)
            .env("WECOM_WEBHOOK", WEBHOOK),
    );
    assert_eq!(code, Some(0), "stderr: {stderr}\nstdout: {stdout}");
    assert!(stdout.starts_with(&path.display().to_string()), "{stdout}");
    assert_check_output(&stdout, since);
}

#[test]
fn check_never_prints_the_webhook_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(&dir, GOOD);
    let (code, stdout, stderr) = output(
        slotcron()
            .args(["check", "--config"])
            .arg(&path)
            .env("WECOM_WEBHOOK", WEBHOOK),
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        !stdout.contains(KEY) && !stderr.contains(KEY),
        "{stdout}{stderr}"
    );
    assert!(
        stdout.contains("qyapi.weixin.qq.com/cgi-bin/webhook/send?key=***"),
        "check shows the redacted webhook:\n{stdout}"
    );

    // An error elsewhere in the same job: the key is not printed either.
    let bad = write_config(&dir, &GOOD.replace("timeout = \"30s\"", "timeout = \"0s\""));
    let (code, stdout, stderr) = output(
        slotcron()
            .args(["check", "--config"])
            .arg(&bad)
            .env("WECOM_WEBHOOK", WEBHOOK),
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("timeout"), "{stderr}");
    assert!(
        !stdout.contains(KEY) && !stderr.contains(KEY),
        "{stdout}{stderr}"
    );

    // The webhook itself is bad: named, but its key is not printed.
    for webhook in [
        format!("ftp://qyapi.weixin.qq.com/cgi-bin/webhook/send?key={KEY}"),
        format!("qyapi.weixin.qq.com/cgi-bin/webhook/send?key={KEY}"),
        format!("https:// bad host/send?key={KEY}"),
    ] {
        let (code, stdout, stderr) = output(
            slotcron()
                .args(["check", "--config"])
                .arg(&path)
                .env("WECOM_WEBHOOK", &webhook),
        );
        assert_eq!(code, Some(2), "{webhook}: {stderr}");
        assert!(stderr.contains("action.webhook"), "{stderr}");
        assert!(
            !stdout.contains(KEY) && !stderr.contains(KEY),
            "{webhook}: {stdout}{stderr}"
        );
    }
}

/// A config whose job "standup" has a schedule with a value out of range.
fn bad_config(dir: &Path) -> std::path::PathBuf {
    write_config(dir, &GOOD.replace("0 30 9 * * *", "0 61 9 * * *"))
}

#[test]
fn check_on_a_bad_file_exits_2_naming_the_file_job_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = bad_config(dir.path());
    let (code, stdout, stderr) = output(
        slotcron()
            .args(["check", "--config"])
            .arg(&path)
            .env("WECOM_WEBHOOK", WEBHOOK),
    );
    assert_eq!(code, Some(2), "stderr: {stderr}");
    assert_eq!(stdout, "", "nothing on stdout");
    let shown = path.display().to_string();
    let error = stderr
        .lines()
        .find(|l| l.starts_with(&shown))
        .unwrap_or_else(|| panic!("no line starts with {shown}:\n{stderr}"));
    assert!(
        error.contains("job \"standup\"") && error.contains("field \"schedule\""),
        "{error}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");

    // Several errors: each is reported, then a count.
    let two = write_config(
        dir.path(),
        &GOOD
            .replace("0 30 9 * * *", "0 61 9 * * *")
            .replace("\"UTC\"", "\"Mars/Base\""),
    );
    let (code, stdout, stderr) = output(
        slotcron()
            .args(["check", "--config"])
            .arg(&two)
            .env("WECOM_WEBHOOK", WEBHOOK),
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert_eq!(stdout, "");
    assert!(
        stderr.contains("job \"standup\", field \"schedule\"")
            && stderr.contains("job \"hourly\", field \"timezone\""),
        "{stderr}"
    );
    assert!(stderr.contains("2 error(s)"), "{stderr}");

    // A missing file and a TOML syntax error: exit 2 as well, no panic.
    let missing = dir.path().join("nope.toml");
    let syntax = write_config(dir.path(), "[[job]]\nname = \"x\nschedule = 1\n");
    for (path, says) in [(&missing, "no such file"), (&syntax, "TOML syntax")] {
        let (code, stdout, stderr) = output(slotcron().args(["check", "--config"]).arg(path));
        assert_eq!(code, Some(2), "{stderr}");
        assert_eq!(stdout, "");
        assert!(
            stderr.contains(&path.display().to_string()) && stderr.contains(says),
            "{stderr}"
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

/// Runs `slotcron run --config <path>` to its exit; fails the test if it is still running
/// after 30 s (a bad config must stop it at once). Returns the exit code and the output lines.
fn run_to_exit(path: &Path, webhook: Option<&str>) -> (Option<i32>, String) {
    let mut cmd = slotcron();
    cmd.arg("run").arg("--config").arg(path);
    if let Some(webhook) = webhook {
        cmd.env("WECOM_WEBHOOK", webhook);
    }
    let replica = Replica::spawn_cmd("slotcron run", cmd);
    let status = replica.wait_timeout(Duration::from_secs(30));
    let text = replica.lines().join("\n");
    assert!(status.is_some(), "slotcron run is still running:\n{text}");
    (status.and_then(|s| s.code()), text)
}

#[test]
fn run_on_a_bad_file_exits_2_before_starting_anything() {
    let dir = tempfile::tempdir().unwrap();
    let path = bad_config(dir.path());
    let (code, text) = run_to_exit(&path, Some(WEBHOOK));
    assert_eq!(code, Some(2), "{text}");
    // `FILE:LINE:COLUMN: job "standup", field "schedule": ...`
    let shown = path.display().to_string();
    assert!(
        text.lines()
            .any(|l| l.starts_with(&shown) && l.contains(": job \"standup\", field \"schedule\"")),
        "{text}"
    );
    assert!(text.contains("nothing started"), "{text}");
    assert!(!text.contains("slotcron started"), "{text}");
    assert!(!text.contains("panicked"), "{text}");
}

#[test]
fn run_with_an_unset_webhook_variable_exits_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(dir.path(), GOOD);
    let (code, text) = run_to_exit(&path, None);
    assert_eq!(code, Some(2), "{text}");
    assert!(
        text.contains("job \"standup\", field \"action.webhook\"")
            && text.contains("environment variable WECOM_WEBHOOK is not set"),
        "{text}"
    );
    // The disabled job's unset variable is not an error.
    assert!(!text.contains("NEVER_SET_HOOK"), "{text}");
    assert!(!text.contains("slotcron started"), "{text}");
    assert!(!text.contains("panicked"), "{text}");
}

/// The control for the two tests above: with a good config `run` does start (and logs
/// "slotcron started"), runs a slot, and stops with exit 0 on SIGTERM.
#[test]
fn run_on_a_good_file_starts_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(
        dir.path(),
        "[[job]]\nname = \"tick\"\nschedule = \"* * * * * *\"\n[job.action]\ntype = \"log\"\ncontent = \"tick {{ slot }}\"\n",
    );
    let mut cmd = slotcron();
    cmd.args([
        "run",
        "--replica-id",
        "cli-test",
        "--log-format",
        "json",
        "--config",
    ])
    .arg(&path);
    let replica = Replica::spawn_cmd("slotcron run", cmd);
    let started = replica.wait_for_json(Duration::from_secs(30), |v| {
        v["message"] == "slotcron started"
    });
    assert!(started.is_some(), "{}", replica.lines().join("\n"));
    let done = replica.wait_for_json(Duration::from_secs(30), |v| {
        v["job"] == "tick" && v["outcome"] == "done" && v["replica"] == "cli-test"
    });
    assert!(done.is_some(), "{}", replica.lines().join("\n"));
    replica.terminate();
    let status = replica.wait_timeout(Duration::from_secs(30));
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(0),
        "{}",
        replica.lines().join("\n")
    );
}

#[test]
fn help_lists_the_subcommands_and_their_flags() {
    let (code, stdout, stderr) = output(slotcron().arg("--help"));
    assert_eq!(code, Some(0), "{stderr}");
    let commands: Vec<&str> = stdout
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    for command in ["run", "check"] {
        assert!(
            commands.contains(&command),
            "{command} not in {commands:?}:\n{stdout}"
        );
    }

    let (code, stdout, stderr) = output(slotcron().args(["run", "--help"]));
    assert_eq!(code, Some(0), "{stderr}");
    for flag in [
        "--replica-id",
        "--log-format",
        "--config",
        "SLOTCRON_REPLICA_ID",
    ] {
        assert!(stdout.contains(flag), "run --help lacks {flag}:\n{stdout}");
    }

    let (code, stdout, stderr) = output(slotcron().args(["check", "--help"]));
    assert_eq!(code, Some(0), "{stderr}");
    for flag in ["--config", "--next", "SLOTCRON_CONFIG"] {
        assert!(
            stdout.contains(flag),
            "check --help lacks {flag}:\n{stdout}"
        );
    }

    // An unknown subcommand is a usage error, not a panic.
    let (code, _, stderr) = output(slotcron().arg("frobnicate"));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// The repository's jobs.toml, read by the library and by `slotcron check`, with no variable set
/// (`slotcron()` clears `WECOM_WEBHOOK`): one test for the shipped file (it was three).
#[test]
fn the_shipped_jobs_toml_loads_without_any_variable_and_check_accepts_it() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/jobs.toml");
    let text = std::fs::read_to_string(path).unwrap();
    let no_variables = std::collections::HashMap::<String, String>::new();
    let config = slotcron::unstable::config::parse(Path::new(path), &text, &no_variables).unwrap();
    assert!(!config.jobs.is_empty());
    assert_eq!(
        config.disabled,
        ["standup"],
        "the WeCom job ships disabled, never silently skipped"
    );
    assert!(config.jobs.iter().all(|j| j.name != "standup"));

    let (code, stdout, stderr) = output(slotcron().current_dir(env!("CARGO_MANIFEST_DIR")).args([
        "check",
        "--config",
        "jobs.toml",
    ]));
    assert_eq!(code, Some(0), "stderr: {stderr}\nstdout: {stdout}");
    assert!(stdout.starts_with("jobs.toml: ok"), "{stdout}");
    assert!(stdout.contains("job \"heartbeat\""), "{stdout}");
    assert!(stdout.contains("job \"standup\": disabled"), "{stdout}");
    assert!(!stderr.contains("WECOM_WEBHOOK"), "{stderr}");

    // Its default path is jobs.toml in the working directory.
    let (code, default_stdout, stderr) = output(
        slotcron()
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .arg("check"),
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        default_stdout.starts_with("jobs.toml: ok"),
        "{default_stdout}"
    );
}

#[test]
fn completions_are_scripts_the_shells_accept() {
    let (code, bash, err) = output(slotcron().args(["completions", "bash"]));
    assert_eq!(code, Some(0), "{err}");
    assert!(bash.contains("complete -F _slotcron"), "{bash}");
    for verb in [
        "run",
        "check",
        "trigger",
        "history",
        "health",
        "completions",
        "man",
    ] {
        assert!(
            bash.contains(verb),
            "{verb} missing from the bash completions"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("slotcron.bash");
    std::fs::write(&script, &bash).unwrap();
    let syntax = Command::new("bash")
        .arg("-n")
        .arg(&script)
        .output()
        .unwrap();
    assert!(
        syntax.status.success(),
        "{}",
        String::from_utf8_lossy(&syntax.stderr)
    );
    let (code, zsh, _) = output(slotcron().args(["completions", "zsh"]));
    assert_eq!(code, Some(0));
    assert!(zsh.starts_with("#compdef slotcron"), "{zsh}");
    let (code, fish, _) = output(slotcron().args(["completions", "fish"]));
    assert_eq!(code, Some(0));
    assert!(fish.contains("complete -c slotcron"), "{fish}");
    let (code, _, err) = output(slotcron().args(["completions", "tcsh"]));
    assert_eq!(code, Some(2), "an unknown shell is a usage error: {err}");
}

#[test]
fn man_prints_a_roff_page_naming_every_command() {
    let (code, page, err) = output(slotcron().arg("man"));
    assert_eq!(code, Some(0), "{err}");
    assert!(page.contains(".TH slotcron 1"), "{page}");
    assert!(
        page.contains(".SH NAME") && page.contains(".SH SUBCOMMANDS"),
        "{page}"
    );
    for verb in [
        "slotcron\\-run",
        "slotcron\\-check",
        "slotcron\\-health",
        "slotcron\\-completions",
    ] {
        assert!(page.contains(verb), "{verb} missing from:\n{page}");
    }
}

#[test]
fn man_dir_writes_every_page_the_top_page_names() {
    let dir = tempfile::tempdir().unwrap();
    let (code, _, err) = output(slotcron().arg("man").arg("--dir").arg(dir.path()));
    assert_eq!(code, Some(0), "{err}");
    let top = std::fs::read_to_string(dir.path().join("slotcron.1")).unwrap();
    // The SUBCOMMANDS section names each page as slotcron\-X(1).
    let named: Vec<String> = top
        .lines()
        .filter_map(|l| l.strip_prefix("slotcron\\-")?.strip_suffix("(1)"))
        .map(|verb| format!("slotcron-{verb}.1"))
        .collect();
    assert!(named.len() >= 9, "{top}");
    for page in &named {
        let text = std::fs::read_to_string(dir.path().join(page))
            .unwrap_or_else(|e| panic!("slotcron.1 names {page}, which --dir did not write: {e}"));
        assert!(text.contains(".TH slotcron"), "{page}: {text}");
    }
    let (_, printed, _) = output(slotcron().arg("man"));
    assert_eq!(printed, top, "the printed page is the one --dir writes");
}

#[test]
fn man_and_completions_end_quietly_with_0_on_a_closed_pipe() {
    for args in [&["man"][..], &["completions", "bash"]] {
        // The reading end closed before the child writes: every write gets EPIPE, as with
        // `slotcron man | head` once head has its lines.
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = slotcron().args(args).stdout(writer).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "slotcron {args:?}: {err}");
        assert!(err.is_empty(), "slotcron {args:?} on a closed pipe: {err}");
    }
}

#[test]
fn start_up_config_errors_are_json_lines_under_log_format_json() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        "[[job]]\nname = \"j\"\nschedule = \"0 61 9 * * *\"\n[job.action]\ntype = \"log\"\ncontent = \"x\"\n",
    );
    for verb in ["run", "trigger"] {
        let mut cmd = slotcron();
        cmd.args([verb, "--log-format", "json", "--config"])
            .arg(&config);
        if verb == "trigger" {
            cmd.arg("j");
        }
        let (code, _, err) = output(&mut cmd);
        assert_eq!(code, Some(2), "{verb}: {err}");
        let lines: Vec<serde_json::Value> = err
            .lines()
            .map(|l| {
                serde_json::from_str(l)
                    .unwrap_or_else(|e| panic!("{verb}: not a JSON line ({e}): {l}"))
            })
            .collect();
        assert!(
            lines.iter().any(|l| l["level"] == "ERROR"
                && l["error"]
                    .as_str()
                    .is_some_and(|e| e.contains("job \"j\", field \"schedule\""))),
            "{verb}: {err}"
        );
    }
}

/// `slotcron run` for 1.5 s on a pseudo-terminal (util-linux `script`), with `env` added.
fn run_on_a_terminal(config: &Path, env: &[(&str, &str)]) -> String {
    let command = format!(
        "timeout 1.5 {} run --config {}",
        env!("CARGO_BIN_EXE_slotcron"),
        config.display()
    );
    let mut cmd = Command::new("script");
    cmd.args(["-qec", &command, "/dev/null"])
        .env_remove("NO_COLOR");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("script (util-linux) runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn logs_on_a_terminal_are_coloured_unless_no_color_is_set() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        "[[job]]\nname = \"tick\"\nschedule = \"* * * * * *\"\n[job.action]\ntype = \"log\"\ncontent = \"tick\"\n",
    );
    let coloured = run_on_a_terminal(&config, &[]);
    assert!(coloured.contains("slotcron started"), "{coloured}");
    assert!(
        coloured.contains("\x1b["),
        "no colour on a terminal: {coloured:?}"
    );
    let plain = run_on_a_terminal(&config, &[("NO_COLOR", "1")]);
    assert!(plain.contains("slotcron started"), "{plain}");
    assert!(!plain.contains("\x1b["), "NO_COLOR ignored: {plain:?}");
}

#[test]
fn a_bad_cron_names_the_job_the_cron_field_and_the_part() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        "[[job]]\nname = \"standup\"\nschedule = \"0 30 9 * * Mon,Fry\"\n[job.action]\ntype = \"log\"\ncontent = \"x\"\n\
         [[job]]\nname = \"nightly\"\nschedule = \"0 0 24 * * *\"\n[job.action]\ntype = \"log\"\ncontent = \"x\"\n",
    );
    let (code, _, err) = output(slotcron().arg("check").arg("--config").arg(&config));
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("job \"standup\", field \"schedule\"")
            && err.contains("the day-of-week field (0-7 or SUN-SAT) has \"Fry\""),
        "{err}"
    );
    assert!(
        err.contains("job \"nightly\", field \"schedule\"")
            && err.contains("the hour field (0-23) has \"24\""),
        "{err}"
    );
}

/// Two New York jobs whose wall times a DST transition skips or repeats, one with a policy
/// of its own and one under `[scheduler]`'s, and a job no transition touches.
const DST_JOBS: &str = r#"
[scheduler]
timezone = "America/New_York"
dst_repeat = "both"

[[job]]
name = "in-gap"
schedule = "30 2 * * *"
dst_gap = "skip"
action = { type = "log", content = "x" }

[[job]]
name = "in-fold"
schedule = "30 1 * * *"
action = { type = "log", content = "x" }

[[job]]
name = "noon"
schedule = "0 12 * * *"
action = { type = "log", content = "x" }
"#;

/// The lines `check` prints under `job`, up to the next job.
fn job_block<'a>(stdout: &'a str, job: &str) -> &'a str {
    let start = stdout
        .find(&format!("job {job:?}"))
        .unwrap_or_else(|| panic!("no job {job}:\n{stdout}"));
    let rest = &stdout[start..];
    let end = rest[1..].find("\njob ").map_or(rest.len(), |i| i + 1);
    &rest[..end]
}

#[test]
fn check_prints_the_dst_policy_and_the_slots_of_each_transition_it_touches() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(&dir, DST_JOBS);
    let (code, stdout, stderr) = output(slotcron().args(["check", "--config"]).arg(&path));
    assert_eq!(code, Some(0), "stderr: {stderr}\nstdout: {stdout}");
    // New York springs forward at 02:00 and falls back at 02:00 every year: the next year of
    // slots holds one of each, whatever day the test runs.
    let gap = job_block(&stdout, "in-gap");
    assert!(
        gap.contains("dst: dst_repeat = \"both\", dst_gap = \"skip\" (configured)"),
        "{gap}"
    );
    assert!(gap.contains(" 02:00-03:00 do not exist: no slot"), "{gap}");
    let fold = job_block(&stdout, "in-fold");
    assert!(
        fold.contains("dst: dst_repeat = \"both\", dst_gap = \"shift\" (configured)"),
        "{fold}"
    );
    let twice = fold
        .lines()
        .find(|l| l.contains(" 01:00-02:00 happen twice: "))
        .unwrap_or_else(|| panic!("no repeat line:\n{fold}"));
    assert!(
        twice.contains("T01:30:00-04:00, ") && twice.ends_with("T01:30:00-05:00"),
        "both passes of 01:30: {twice}"
    );
    let noon = job_block(&stdout, "noon");
    assert!(
        !noon.contains("dst:"),
        "no transition touches 12:00: {noon}"
    );
}
