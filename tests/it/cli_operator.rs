//! The CLI an operator runs against production (issue 32, item 1): every command ends quietly
//! on a closed pipe; the read-only and control commands need only `[redis]`, the prefix and the
//! job names (the webhook secrets of the fleet's own file may be absent); Redis unavailable
//! exits 4; replacing a pause needs `--force`; times print in the configured zone.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use std::time::Duration;

use common::fleet::FleetToml;
use common::{Receiver, RedisCluster, RedisServer, Replica, slotcron_cli, write_config};

/// A fleet's file on `nodes`: a yearly job that sends to a webhook (the `webhook` line) and an
/// hourly log job, in a zone other than UTC so a time printed in UTC shows.
fn fleet_config(dir: &Path, nodes: &[String], webhook: &str) -> PathBuf {
    fleet_file(dir, nodes, webhook, "0 30 9 1 1 *")
}

/// [`fleet_config`] with the robot job on `schedule`.
fn fleet_file(dir: &Path, nodes: &[String], webhook: &str, schedule: &str) -> PathBuf {
    let action = format!(
        "type = \"wecom\"\n{webhook}\nmsgtype = \"text\"\ncontent = \"stand-up {{{{ slot }}}}\""
    );
    let demo = "[[job]]\nname = \"demo\"\nschedule = \"0 0 * * * *\"\ntimeout = \"5s\"\n\
                [job.action]\ntype = \"log\"\ncontent = \"demo {{ slot }}\"";
    let text = FleetToml {
        job: "standup",
        schedule,
        timeout: "5s",
        scheduler: "timezone = \"Asia/Shanghai\"",
        redis: "node_timeout = \"250ms\"",
        action: &action,
        rest: demo,
        ..FleetToml::new(nodes, "", "ops")
    }
    .render();
    write_config(dir, &text)
}

/// The binary with none of its settings inherited from the test's environment.
fn slotcron(config: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_slotcron"));
    for var in [
        "SLOTCRON_CONFIG",
        "SLOTCRON_REPLICA_ID",
        "SLOTCRON_LOG_FORMAT",
        "RUST_LOG",
    ] {
        cmd.env_remove(var);
    }
    cmd.args(args).arg("--config").arg(config);
    cmd
}

/// `slotcron ARGS` with its stdout a pipe whose reader is already gone: every write gets EPIPE,
/// as with `| head -1` once head has its line.
fn on_a_closed_pipe(config: &Path, args: &[&str]) -> Output {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    slotcron(config, args).stdout(writer).output().unwrap()
}

/// Asserts `args` ends with `code` on a closed stdout, without a panic or a word on stderr
/// about the pipe.
fn assert_quiet_on_a_closed_pipe(config: &Path, args: &[&str], code: i32) {
    let out = on_a_closed_pipe(config, args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "slotcron {args:?}: {err}");
    assert!(
        !err.contains("panicked") && !err.contains("Broken pipe"),
        "slotcron {args:?} on a closed pipe: {err}"
    );
}

/// A webhook line for a receiver nobody listens on: the commands under test never send.
const UNUSED_WEBHOOK: &str =
    r#"webhook = "http://127.0.0.1:9/cgi-bin/webhook/send?key=closedpipe01""#;

#[test]
fn check_ends_quietly_on_a_closed_pipe() {
    let dir = tempfile::tempdir().unwrap();
    let config = fleet_config(
        dir.path(),
        &["redis://127.0.0.1:9".to_owned()],
        UNUSED_WEBHOOK,
    );
    assert_quiet_on_a_closed_pipe(&config, &["check", "--next", "100000"], 0);
}

#[test]
fn health_ends_quietly_on_a_closed_pipe() {
    let dir = tempfile::tempdir().unwrap();
    let config = fleet_config(
        dir.path(),
        &["redis://127.0.0.1:9".to_owned()],
        UNUSED_WEBHOOK,
    );
    assert_quiet_on_a_closed_pipe(&config, &["health"], 0);
}

#[test]
fn help_ends_quietly_on_a_closed_pipe() {
    let dir = tempfile::tempdir().unwrap();
    let config = fleet_config(
        dir.path(),
        &["redis://127.0.0.1:9".to_owned()],
        UNUSED_WEBHOOK,
    );
    assert_quiet_on_a_closed_pipe(&config, &["history", "--help"], 0);
}

#[test]
fn history_ends_quietly_on_a_closed_pipe() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let config = fleet_config(dir.path(), &[redis.url()], UNUSED_WEBHOOK);
    slotcron_cli(&config, &["trigger", "--local", "demo"]);
    assert_quiet_on_a_closed_pipe(&config, &["history"], 0);
    assert_quiet_on_a_closed_pipe(&config, &["history", "--json"], 0);
}

#[test]
fn history_since_ends_quietly_on_a_closed_pipe() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let config = fleet_config(dir.path(), &[redis.url()], UNUSED_WEBHOOK);
    assert_quiet_on_a_closed_pipe(
        &config,
        &["history", "--job", "standup", "--since", "3650d"],
        0,
    );
    assert_quiet_on_a_closed_pipe(&config, &["history", "--missed"], 0);
}

#[test]
fn pause_and_resume_end_quietly_on_a_closed_pipe() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let config = fleet_config(dir.path(), &[redis.url()], UNUSED_WEBHOOK);
    assert_quiet_on_a_closed_pipe(&config, &["pause", "demo", "--reason", "pipe"], 0);
    assert_quiet_on_a_closed_pipe(&config, &["resume", "demo"], 0);
}

#[test]
fn trigger_ends_quietly_on_a_closed_pipe() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let config = fleet_config(dir.path(), &[redis.url()], UNUSED_WEBHOOK);
    assert_quiet_on_a_closed_pipe(&config, &["trigger", "--local", "demo"], 0);
}

/// The fleet's own file as a workstation has it: the webhook's secret file is mounted on the
/// replicas (deploy/kubernetes/jobs.toml: `/run/secrets/slotcron/webhook`), not here.
fn secret_absent(dir: &Path) -> String {
    let absent = dir.join("run/secrets/slotcron/webhook");
    format!("webhook_file = {:?}", absent.display().to_string())
}

#[test]
fn history_pause_and_resume_work_without_the_webhook_secrets_and_check_reports_them() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let config = fleet_config(dir.path(), &[redis.url()], &secret_absent(dir.path()));
    for args in [
        &["pause", "standup", "--reason", "from a workstation"][..],
        &["history"],
        &["history", "--job", "standup", "--since", "2d"],
        &["resume", "standup"],
    ] {
        let out = slotcron(&config, args).output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "slotcron {args:?} without the secret: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = slotcron(&config, &["check"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(2),
        "check without the secret: {err}"
    );
    assert!(
        err.contains("webhook_file"),
        "check names the missing secret: {err}"
    );
}

#[test]
fn every_command_that_needs_redis_exits_4_when_no_node_answers() {
    let dir = tempfile::tempdir().unwrap();
    // A port nothing listens on: the node refuses every connection.
    let dead = format!("redis://127.0.0.1:{}", common::free_port());
    let config = fleet_config(dir.path(), &[dead], UNUSED_WEBHOOK);
    for args in [
        &["history"][..],
        &["history", "--since", "1d"],
        &["pause", "demo"],
        &["resume", "demo"],
        &["trigger", "demo"],
        &["audit"],
    ] {
        let out = slotcron(&config, args).output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(4),
            "slotcron {args:?} with Redis down: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Every RFC 3339 time in `text`, as printed (`2026-11-26T15:04:05+08:00`).
fn times_in(text: &str) -> Vec<&str> {
    text.split(|c: char| c.is_whitespace() || c == ',' || c == '(' || c == ')')
        .filter(|w| chrono::DateTime::parse_from_rfc3339(w).is_ok())
        .collect()
}

#[test]
fn a_second_pause_needs_force_and_names_the_pause_it_replaces_in_the_configured_zone() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let config = fleet_config(dir.path(), &[redis.url()], UNUSED_WEBHOOK);
    let first = [
        "pause",
        "demo",
        "--by",
        "alice",
        "--reason",
        "migration",
        "--until",
        "2h",
    ];
    let paused = slotcron_cli(&config, &first);

    let second = ["pause", "demo", "--by", "bob", "--reason", "holidays"];
    let refused = slotcron(&config, &second).output().unwrap();
    let said = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(
        refused.status.code(),
        Some(2),
        "a second pause without --force: {said}"
    );
    for word in ["alice", "migration", "--force"] {
        assert!(said.contains(word), "the refusal names {word:?}: {said}");
    }

    let forced = slotcron_cli(&config, &[&second[..], &["--force"]].concat());
    for word in ["replaced", "alice", "migration"] {
        assert!(
            forced.contains(word),
            "--force says what it replaced ({word:?}): {forced}"
        );
    }
    let resumed = slotcron_cli(&config, &["resume", "demo"]);
    assert!(
        resumed.contains("bob"),
        "the pause resumed is bob's: {resumed}"
    );

    // One format: to the second, in the configured zone (Asia/Shanghai), never UTC.
    let printed = [paused.as_str(), &said, &forced, &resumed].concat();
    let times = times_in(&printed);
    assert!(times.len() >= 5, "the times printed: {printed}");
    for time in times {
        assert!(
            time.ends_with("+08:00") && !time.contains('.'),
            "{time:?} in {printed}"
        );
    }
}

/// The fleet's file with `nodes`, its robot job's key read from the file `webhook` beside it
/// (present on the replicas, absent on the workstation).
fn fleet_on(dir: &Path, nodes: &[String], secret: Option<&str>, schedule: &str) -> PathBuf {
    if let Some(url) = secret {
        common::write_file(dir, "webhook", url);
    }
    fleet_file(dir, nodes, r#"webhook_file = "webhook""#, schedule)
}

/// A 3-replica fleet on `nodes` (its file in `dir`, with the robot job's secret), started.
fn start_fleet(dir: &Path, nodes: &[String], webhook: &str, schedule: &str) -> Vec<Replica> {
    let fleet = fleet_on(dir, nodes, Some(webhook), schedule);
    let replicas: Vec<Replica> = (0..3)
        .map(|i| Replica::run(&fleet, &format!("fleet-{i}"), &[]))
        .collect();
    for r in &replicas {
        let started = r.wait_for_json(START_WITHIN, |l| l["message"] == "slotcron started");
        assert!(
            started.is_some(),
            "a replica did not start: {:?}",
            r.lines()
        );
    }
    replicas
}

/// The won lines of the robot job's races started by `trigger`, in the replicas' logs.
fn won_lines(replicas: &[Replica], trigger: &str) -> Vec<serde_json::Value> {
    replicas
        .iter()
        .flat_map(Replica::json_lines)
        .filter(|l| l["job"] == "standup" && l["outcome"] == "won" && l["trigger"] == trigger)
        .collect()
}

/// How long a replica may take to start on a loaded machine.
const START_WITHIN: Duration = Duration::from_secs(30);

#[test]
fn trigger_runs_the_job_on_a_fleet_replica_and_prints_who_ran_it() {
    let cluster = RedisCluster::start(3);
    let receiver = Receiver::start();
    let (fleet_dir, desk_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let webhook = format!("{}/cgi-bin/webhook/send?key=fleettrigger01", receiver.uri());
    let yearly = "0 30 9 1 1 *";
    let replicas = start_fleet(fleet_dir.path(), &cluster.urls(), &webhook, yearly);

    // The workstation's copy of the file: the secret is not there.
    let desk = fleet_on(desk_dir.path(), &cluster.urls(), None, yearly);
    let asked = std::time::Instant::now();
    let out = slotcron(&desk, &["trigger", "standup"]).output().unwrap();
    eprintln!("measured: trigger answered in {:?}", asked.elapsed());
    let (said, err) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    for r in &replicas {
        r.terminate();
    }
    assert_eq!(out.status.code(), Some(0), "trigger: {said}{err}");
    assert_eq!(receiver.count(), 1, "sent once across the fleet: {said}");
    let won = won_lines(&replicas, "trigger");
    assert_eq!(
        won.len(),
        1,
        "one won line, in a fleet replica's log: {won:?}"
    );
    eprintln!("trigger printed: {said}");
    let winner = won[0]["replica"].as_str().unwrap_or_default();
    assert!(
        said.starts_with(&format!("standup: run by {winner}: done")),
        "the CLI names the replica that ran it and how it ended: {said}"
    );
}

#[test]
fn trigger_with_no_fleet_replica_alive_says_so_unless_local() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let config = fleet_config(dir.path(), &[redis.url()], UNUSED_WEBHOOK);
    let out = slotcron(&config, &["trigger", "demo"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "no replica alive: {err}");
    assert!(
        err.contains("no replica of the fleet") && err.contains("--local"),
        "{err}"
    );
    let here = slotcron_cli(&config, &["trigger", "--local", "demo"]);
    assert!(
        here.starts_with("demo: done"),
        "--local runs it here: {here}"
    );
}

#[test]
fn resume_catch_up_runs_the_slot_on_a_fleet_replica() {
    let cluster = RedisCluster::start(3);
    let receiver = Receiver::start();
    let (fleet_dir, desk_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let webhook = format!("{}/cgi-bin/webhook/send?key=fleetcatchup01", receiver.uri());
    let every_second = "* * * * * *";
    let replicas = start_fleet(fleet_dir.path(), &cluster.urls(), &webhook, every_second);
    let desk = fleet_on(desk_dir.path(), &cluster.urls(), None, every_second);
    slotcron_cli(&desk, &["pause", "standup"]);
    // Slots fall inside the pause (one a second), and none runs: three of them.
    const PAUSED_FOR: Duration = Duration::from_secs(3);
    std::thread::sleep(PAUSED_FOR);
    let out = slotcron(&desk, &["resume", "standup", "--catch-up"])
        .output()
        .unwrap();
    let (said, err) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    for r in &replicas {
        r.terminate();
    }
    assert_eq!(out.status.code(), Some(0), "resume --catch-up: {said}{err}");
    let won = won_lines(&replicas, "catch_up");
    assert_eq!(
        won.len(),
        1,
        "the catch-up won once, on a fleet replica: {won:?}"
    );
    let winner = won[0]["replica"].as_str().unwrap_or_default();
    assert!(
        said.contains(&format!("standup: run by {winner}: done")),
        "the CLI names the replica that caught the slot up: {said}"
    );
}

#[test]
fn run_keeps_its_schedule_quietly_on_a_closed_pipe_and_stops_on_sigterm() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let config = fleet_config(dir.path(), &[redis.url()], UNUSED_WEBHOOK);
    // The log job every second instead of hourly, so a run shows soon.
    let text = std::fs::read_to_string(&config).unwrap().replace(
        "name = \"demo\"\nschedule = \"0 0 * * * *\"",
        "name = \"demo\"\nschedule = \"* * * * * *\"",
    );
    assert!(text.contains("schedule = \"* * * * * *\""), "{text}");
    std::fs::write(&config, text).unwrap();
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let child = slotcron(&config, &["run", "--replica-id", "piped"])
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Its runs reach the history while nothing can read its log.
    let ran = common::wait_until(START_WITHIN, || {
        let rows = slotcron_cli(&config, &["history", "--job", "demo", "--json"]);
        rows.contains("\"piped\"").then_some(())
    });
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        ran.is_some(),
        "no run recorded with the log pipe closed: {err}"
    );
    assert_eq!(out.status.code(), Some(0), "run on a closed pipe: {err}");
    assert!(
        !err.contains("panicked") && !err.contains("Broken pipe"),
        "run on a closed pipe: {err}"
    );
}

/// `slotcron ARGS` (a command that takes no `--config`) on a closed stdout: no panic, no word
/// about the pipe, the command's own exit code.
fn assert_bare_command_quiet_on_a_closed_pipe(dir: &Path, args: &[&str], code: i32) {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = Command::new(env!("CARGO_BIN_EXE_slotcron"))
        .args(args)
        .current_dir(dir)
        .stdout(writer)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "slotcron {args:?}: {err}");
    assert!(
        !err.contains("panicked") && !err.contains("Broken pipe"),
        "slotcron {args:?} on a closed pipe: {err}"
    );
}

#[test]
fn schema_and_init_end_quietly_on_a_closed_pipe() {
    let dir = tempfile::tempdir().unwrap();
    assert_bare_command_quiet_on_a_closed_pipe(dir.path(), &["schema"], 0);
    assert_bare_command_quiet_on_a_closed_pipe(dir.path(), &["init", "--robot", "wecom"], 0);
    assert!(dir.path().join("jobs.toml").is_file(), "init wrote nothing");
    // A second init onto the same file is refused (exit 1), quietly too.
    assert_bare_command_quiet_on_a_closed_pipe(dir.path(), &["init", "--robot", "wecom"], 1);
}
