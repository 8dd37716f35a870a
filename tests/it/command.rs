//! The `command` action: exit codes, the environment it runs with, argv without a shell, the
//! job's timeout killing its whole process group, and its output captured into the log,
//! truncated.

use crate::common;
use common::fleet;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use slotcron::unstable::config::Config;
use slotcron::unstable::slot::SlotResult;
use slotcron::unstable::time::schedule::Slot;

/// One job `cmd` (standalone) whose `[job.action]` is `action`, with `timeout`.
fn job_config(dir: &Path, action: &str, timeout: &str) -> Config {
    let action = format!("type = \"command\"\n{action}");
    let text = fleet::one_job("cmd", &format!("timeout = \"{timeout}\""), &action);
    fleet::parse_with_env(&dir.join("jobs.toml"), &text, &[])
}

/// Races (standalone: always won) and runs the current slot of the config's only job.
async fn run(config: &Config) -> (SlotResult, Slot) {
    fleet::run_current_slot(config, "replica-a").await
}

/// A TOML basic string holding `text`.
fn toml_str(text: &str) -> String {
    toml::Value::String(text.to_owned()).to_string()
}

/// An executable shell script `name` in `dir` with `body`; returns its absolute path.
fn script(dir: &Path, name: &str, body: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.to_str().unwrap().to_owned()
}

/// The processes of process group `pgid` that are still alive (zombies count as dead: they
/// only wait for their parent, or init, to reap them).
fn live_members(pgid: i32) -> Vec<(i32, String)> {
    let mut members = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // "pid (comm) state ppid pgrp …": comm may hold spaces, so split after its ')'.
        let Some((head, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let (state, pgrp) = (fields[0], fields[2].parse::<i32>().unwrap_or(-1));
        if pgrp == pgid && state != "Z" && state != "X" {
            let comm = head.split_once('(').map_or("", |(_, c)| c).to_owned();
            members.push((pid, comm));
        }
    }
    members
}

fn read_pgid(path: &Path) -> Option<i32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

#[tokio::test]
async fn exit_zero_is_done_with_job_slot_and_replica_in_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("env.txt");
    let env_sh = script(
        dir.path(),
        "env.sh",
        "printf '%s\\n%s\\n%s\\n' \"$SLOTCRON_JOB\" \"$SLOTCRON_SLOT\" \"$SLOTCRON_REPLICA\" > \"$1\"",
    );
    let config = job_config(
        dir.path(),
        &format!(
            "argv = [{}, {}]",
            toml_str(&env_sh),
            toml_str(out.to_str().unwrap())
        ),
        "5s",
    );
    let (result, slot) = run(&config).await;
    let SlotResult::Done { delivery, .. } = result else {
        panic!("{result:?}")
    };
    assert_eq!(delivery.attempts, 1);
    let env = std::fs::read_to_string(&out).unwrap();
    assert_eq!(
        env.lines().collect::<Vec<_>>(),
        ["cmd", slot.rfc3339_utc().as_str(), "replica-a"]
    );
}

#[tokio::test]
async fn a_non_zero_exit_fails_naming_the_code_and_its_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let config = job_config(
        dir.path(),
        "argv = [\"sh\", \"-c\", \"echo disk full >&2; exit 3\"]",
        "5s",
    );
    let (result, _) = run(&config).await;
    let SlotResult::Failed {
        error, attempts, ..
    } = result
    else {
        panic!("{result:?}")
    };
    assert_eq!(attempts, 1, "a command is never retried");
    assert!(
        error.contains("exit status: 3") && error.contains("disk full"),
        "{error}"
    );

    // A program that does not exist fails the slot too, saying so.
    let config = job_config(
        dir.path(),
        "argv = [\"/nonexistent/slotcron-test-program\"]",
        "5s",
    );
    let (result, _) = run(&config).await;
    assert!(
        matches!(result, SlotResult::Failed { ref error, .. } if error.contains("cannot start")),
        "{result:?}"
    );
}

#[tokio::test]
async fn argv_runs_without_a_shell_and_its_strings_are_templates() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("args.txt");
    let canary = dir.path().join("canary");
    let args_sh = script(
        dir.path(),
        "args.sh",
        "out=\"$1\"; shift; for a in \"$@\"; do printf '%s\\n' \"$a\"; done > \"$out\"",
    );
    // Shell syntax in an argument is passed as it is: nothing expands, nothing runs.
    let injection = format!("$HOME; touch {}", canary.display());
    let config = job_config(
        dir.path(),
        &format!(
            "argv = [{}, {}, {}, \"{{{{ job }}}}@{{{{ slot_ms }}}}\"]",
            toml_str(&args_sh),
            toml_str(out.to_str().unwrap()),
            toml_str(&injection)
        ),
        "5s",
    );
    let (result, slot) = run(&config).await;
    assert!(matches!(result, SlotResult::Done { .. }), "{result:?}");
    let args = std::fs::read_to_string(&out).unwrap();
    let expected_template = format!("cmd@{}", slot.epoch_ms());
    assert_eq!(
        args.lines().collect::<Vec<_>>(),
        [injection.as_str(), expected_template.as_str()]
    );
    assert!(!canary.exists(), "argv went through a shell");
}

#[tokio::test]
async fn the_timeout_kills_the_whole_process_group() {
    let dir = tempfile::tempdir().unwrap();
    let pgid_file = dir.path().join("pgid");
    // `$$` is the shell, the leader of the command's own process group.
    let shell = format!(
        "echo $$ > {}; sleep 30 & sleep 30; wait",
        pgid_file.display()
    );
    let config = Arc::new(job_config(
        dir.path(),
        &format!("shell = {}", toml_str(&shell)),
        "1s",
    ));
    let started = std::time::Instant::now();
    let running = tokio::spawn({
        let config = config.clone();
        async move { run(&config).await.0 }
    });
    // While it runs, the group holds the shell and both sleeps: the check below is not vacuous.
    let pgid = common::wait_until_async(Duration::from_secs(5), || read_pgid(&pgid_file))
        .await
        .expect("the command never started");
    let before = common::wait_until_async(Duration::from_secs(5), || {
        let members = live_members(pgid);
        (members.iter().filter(|(_, c)| c == "sleep").count() == 2).then_some(members)
    })
    .await;
    assert!(before.is_some(), "{:?}", live_members(pgid));

    let result = running.await.unwrap();
    assert!(
        matches!(result, SlotResult::Failed { ref error, .. } if error.contains("killed its process group")),
        "{result:?}"
    );
    // Bounded by the job's timeout (1 s), not by the 30 s sleeps; generous for a loaded machine.
    assert!(started.elapsed() < Duration::from_secs(15));
    let gone = common::wait_until_async(Duration::from_secs(5), || {
        live_members(pgid).is_empty().then_some(())
    })
    .await;
    assert!(
        gone.is_some(),
        "processes of the group survived the timeout: {:?}",
        live_members(pgid)
    );
}

#[tokio::test]
async fn the_timeout_kills_the_group_even_after_the_shell_has_exited() {
    // The shell exits at once; its background child keeps running, holding the output pipe.
    let dir = tempfile::tempdir().unwrap();
    let pgid_file = dir.path().join("pgid");
    let shell = format!("echo $$ > {}; sleep 30 &", pgid_file.display());
    let config = job_config(dir.path(), &format!("shell = {}", toml_str(&shell)), "1s");
    let (result, _) = run(&config).await;
    assert!(matches!(result, SlotResult::Failed { .. }), "{result:?}");
    let pgid = read_pgid(&pgid_file).expect("the command never started");
    let gone = common::wait_until_async(Duration::from_secs(5), || {
        live_members(pgid).is_empty().then_some(())
    })
    .await;
    assert!(
        gone.is_some(),
        "the background child survived the timeout: {:?}",
        live_members(pgid)
    );
}

#[test]
fn output_is_captured_into_the_log_truncated() {
    let dir = tempfile::tempdir().unwrap();
    let text = "[[job]]\nname = \"chatty\"\nschedule = \"0 0 0 1 1 *\"\ntimeout = \"10s\"\n\
                [job.action]\ntype = \"command\"\n\
                shell = \"head -c 10000 /dev/zero | tr '\\\\0' x; echo to-stderr >&2\"\n";
    let path = common::write_config(dir.path(), text);
    let replica = common::Replica::spawn(
        env!("CARGO_BIN_EXE_slotcron"),
        &[
            "trigger",
            "--log-format",
            "json",
            "-v",
            "--replica-id",
            "r1",
            "--config",
            path.to_str().unwrap(),
            "chatty",
        ],
        &[],
    );
    let status = replica.wait_timeout(Duration::from_secs(20));
    assert!(status.is_some_and(|s| s.success()), "{:?}", replica.lines());
    let lines = replica.json_lines();
    let output = lines
        .iter()
        .find(|l| l["message"] == "command output")
        .unwrap_or_else(|| panic!("no command output line: {:?}", replica.lines()));
    assert_eq!(output["job"], "chatty");
    let stdout = output["stdout"].as_str().unwrap();
    assert_eq!(
        stdout,
        format!("{}… (5904 bytes more)", "x".repeat(4096)),
        "stdout is kept up to 4 KiB, with the count of what was cut"
    );
    assert_eq!(output["stderr"].as_str().map(str::trim), Some("to-stderr"));
    assert!(
        lines
            .iter()
            .any(|l| l["outcome"] == "done" && l["job"] == "chatty")
    );
}
