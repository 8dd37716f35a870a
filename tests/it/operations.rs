//! Operations on real processes and real Redis nodes: run history, manual trigger, overlap,
//! catch-up, health and metrics endpoints and hot reload. The status page (HTML and a real
//! headless browser) is in it/status_page.rs; the deploy files in it/deploy.rs.

use crate::common;

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::fleet::{FleetToml, http_job, job_table};
use common::{Receiver, RedisCluster, Replica, free_port, wait_until, write_config};
use nix::sys::signal::Signal;
use serde_json::Value;

/// The overlap test's run: several slots counted across the three replicas.
const COUNTED_WINDOW: Duration = Duration::from_secs(6);
/// The catch-up test's whole fleet down: about 3 slots missed (7 s less the replica's start and
/// stop, each a second or two on a loaded machine).
const FLEET_DOWN: Duration = Duration::from_secs(7);
/// After the replica is back: the missed slots are caught up at start, a job's send each.
const CATCH_UP_RUNS: Duration = Duration::from_secs(2);
/// Each run of the repeated solo replica, and the gap between runs: two slots each.
const SOLO_RUN: Duration = Duration::from_secs(2);

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_slotcron")
}

/// The jobs.toml of these tests: job `fault` every second posting to `{receiver}/hook` with a
/// 5 s timeout, and neither the allowed skew nor the node timeout set.
fn fleet_toml<'a>(nodes: &'a [String], receiver: &'a str, prefix: &'a str) -> FleetToml<'a> {
    FleetToml {
        timeout: "5s",
        scheduler: "",
        redis: "",
        ..FleetToml::new(nodes, receiver, prefix)
    }
}

fn replica(config: &Path, id: &str) -> Replica {
    Replica::run(config, id, &[])
}

fn stop(r: Replica) {
    r.terminate();
    assert!(
        r.wait_timeout(Duration::from_secs(15))
            .is_some_and(|s| s.success()),
        "{:?}",
        r.lines()
    );
}

fn slotcron(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(bin()).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A plain HTTP/1.1 GET: (status, body).
fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Some((status, body))
}

#[test]
fn history_shows_who_won_newest_first_merged_across_nodes() {
    let cluster = RedisCluster::start(3);
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let text = FleetToml {
        job: "report",
        ..fleet_toml(&cluster.urls(), &receiver.uri(), "hist")
    }
    .render();
    let path = write_config(dir.path(), &text);
    let (a, b) = (replica(&path, "alpha"), replica(&path, "beta"));
    a.assert_started();
    b.assert_started();
    receiver.wait_for(4, Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(500));
    let winners: HashMap<String, String> = [&a, &b]
        .iter()
        .flat_map(|r| r.json_lines())
        .filter(|l| l["outcome"] == "won")
        .map(|l| {
            (
                l["slot"].as_str().unwrap().to_owned(),
                l["replica"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    stop(a);
    stop(b);

    // Node 1 forgets everything: the history is still whole from the other two.
    common::redis_cmd(&cluster[0].url(), &["FLUSHALL"]).unwrap();
    let (code, stdout, stderr) = slotcron(&[
        "history",
        "--config",
        path.to_str().unwrap(),
        "--limit",
        "3",
        "--json",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let rows: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 3, "{stdout}");
    let slots: Vec<&str> = rows.iter().map(|r| r["slot"].as_str().unwrap()).collect();
    assert!(
        slots.windows(2).all(|w| w[0] > w[1]),
        "not newest first: {slots:?}"
    );
    for row in &rows {
        assert_eq!(row["outcome"], "done");
        assert_eq!(
            row["replica"].as_str(),
            winners
                .get(row["slot"].as_str().unwrap())
                .map(String::as_str),
            "{row}"
        );
    }
    let (code, table, _) = slotcron(&[
        "history",
        "--config",
        path.to_str().unwrap(),
        "--job",
        "report",
        "--limit",
        "2",
    ]);
    assert_eq!(code, 0);
    assert!(
        table.starts_with("SLOT") && table.lines().count() == 3,
        "{table}"
    );
    let (code, _, stderr) = slotcron(&[
        "history",
        "--config",
        path.to_str().unwrap(),
        "--job",
        "nope",
    ]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("no job named \"nope\"") && stderr.contains("report"),
        "{stderr}"
    );

    let standalone = write_config(
        dir.path(),
        &http_job("report", "* * * * * *", "5s", &receiver.url("/hook"), ""),
    );
    let (code, _, stderr) = slotcron(&["history", "--config", standalone.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(stderr.contains("no [redis] section"), "{stderr}");
}

/// The entries of `job`'s history stream on the node at `url`, oldest first.
fn history_entries(url: &str, prefix: &str, job: &str) -> Vec<HashMap<String, String>> {
    let stream = format!("{prefix}:history:{job}");
    let entries: Vec<(String, HashMap<String, String>)> =
        common::redis_query(url, &["XRANGE", &stream, "-", "+"]).unwrap();
    entries.into_iter().map(|(_, fields)| fields).collect()
}

/// The error of each slot of `job` the history holds as `skipped` (by `slot_ms`), on any node.
fn skip_records(cluster: &RedisCluster, prefix: &str, job: &str) -> BTreeMap<String, String> {
    let mut skips = BTreeMap::new();
    for url in cluster.urls() {
        for mut fields in history_entries(&url, prefix, job) {
            if fields["outcome"] == "skipped" {
                let error = fields.remove("error").unwrap_or_default();
                skips.insert(fields["slot_ms"].clone(), error);
            }
        }
    }
    skips
}

/// Each ended run of `job` in the history streams of every node, as (started_ms, finished_ms)
/// by slot, sorted by start.
fn run_intervals(cluster: &RedisCluster, prefix: &str, job: &str) -> Vec<(i64, i64)> {
    let mut runs: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for url in cluster.urls() {
        for fields in history_entries(&url, prefix, job) {
            let (Some(started), Some(finished)) =
                (fields.get("started_ms"), fields.get("finished_ms"))
            else {
                continue;
            };
            if !["done", "failed"].contains(&fields["outcome"].as_str()) {
                continue;
            }
            let run = (started.parse().unwrap(), finished.parse().unwrap());
            runs.insert(fields["slot_ms"].clone(), run);
        }
    }
    let mut runs: Vec<(i64, i64)> = runs.into_values().collect();
    runs.sort();
    runs
}

/// Slack on the history's stamps: a run's end is stamped after its running lease is released
/// and its ending logged, so the next run may start a few ms before that stamp.
const END_STAMP_SLACK_MS: i64 = 100;

/// The pairs of consecutive runs (sorted by start) where one starts before the other ended.
fn overlapping_runs(runs: &[(i64, i64)]) -> Vec<((i64, i64), (i64, i64))> {
    runs.windows(2)
        .filter(|w| w[1].0 + END_STAMP_SLACK_MS < w[0].1)
        .map(|w| (w[0], w[1]))
        .collect()
}

/// The outcomes recorded in `job`'s history stream on one node, oldest first.
fn recorded_outcomes(url: &str, prefix: &str, job: &str) -> Vec<String> {
    let entries = history_entries(url, prefix, job);
    entries.into_iter().map(|f| f["outcome"].clone()).collect()
}

#[test]
fn history_records_a_short_run_once_a_slow_run_at_its_start_and_catch_up_runs_twice() {
    let cluster = RedisCluster::start(3);
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let caught = http_job(
        "caught",
        "* * * * * *",
        "5s",
        &receiver.url("/hook"),
        "catch_up = \"1m\"",
    );
    let slow = job_table(
        "slow",
        "*/10 * * * * *",
        "8s",
        "",
        "type = \"command\"\nshell = \"sleep 3\"",
    );
    let text = FleetToml {
        job: "quick",
        rest: &format!("{caught}{slow}"),
        ..fleet_toml(&cluster.urls(), &receiver.uri(), "records")
    }
    .render();
    let path = write_config(dir.path(), &text);
    let r = replica(&path, "solo");
    r.assert_started();
    let url = cluster[1].url();
    // The slow run shows as running while it goes on (its start is recorded after 1 s).
    let won = r
        .wait_for_json(Duration::from_secs(15), |l| {
            l["job"] == "slow" && l["outcome"] == "won"
        })
        .expect("the slow job never won");
    std::thread::sleep(Duration::from_millis(2000));
    let ended = |r: &Replica| {
        r.json_lines()
            .iter()
            .any(|l| l["job"] == "slow" && l["outcome"] == "done" && l["slot"] == won["slot"])
    };
    assert!(!ended(&r), "the 3 s run ended within 2 s");
    assert_eq!(recorded_outcomes(&url, "records", "slow"), ["running"]);
    assert!(
        r.wait_for_json(Duration::from_secs(5), |l| {
            l["job"] == "slow" && l["outcome"] == "done"
        })
        .is_some(),
        "the slow run never ended"
    );
    std::thread::sleep(Duration::from_millis(300));
    stop(r);
    assert_eq!(
        recorded_outcomes(&url, "records", "slow"),
        ["running", "done"]
    );
    // A run of a few milliseconds is one record; a catch_up job's runs also record their start.
    let quick = recorded_outcomes(&url, "records", "quick");
    assert!(quick.len() >= 3, "{quick:?}");
    assert!(quick.iter().all(|o| o == "done"), "{quick:?}");
    let caught = recorded_outcomes(&url, "records", "caught");
    assert!(caught.len() >= 6, "{caught:?}");
    assert_eq!(
        caught.iter().filter(|o| *o == "running").count(),
        caught.iter().filter(|o| *o == "done").count(),
        "{caught:?}"
    );
}

#[test]
fn two_triggers_started_together_run_the_job_once_and_an_unknown_job_exits_2() {
    let cluster = RedisCluster::start(3);
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    // A schedule that never comes during the test: only the triggers run it.
    let text = FleetToml {
        job: "deploy",
        schedule: "0 0 3 1 1 *",
        ..fleet_toml(&cluster.urls(), &receiver.uri(), "trig")
    }
    .render();
    let path = write_config(dir.path(), &text);
    let path = path.to_str().unwrap();
    // Start both right after a second boundary so they race for the same slot.
    common::sleep_until_millis_into_a_second(50);
    let spawn = |id: &str| {
        Command::new(bin())
            .args([
                "trigger",
                "--local",
                "--config",
                path,
                "--replica-id",
                id,
                "deploy",
            ])
            .spawn()
            .unwrap()
    };
    let (mut one, mut two) = (spawn("ops-1"), spawn("ops-2"));
    let codes = [one.wait().unwrap().code(), two.wait().unwrap().code()];
    let mut sorted = codes;
    sorted.sort();
    assert_eq!(
        sorted,
        [Some(0), Some(3)],
        "one runs it (0), the other finds it run (3): {codes:?}"
    );
    assert_eq!(receiver.count(), 1);

    let (code, _, stderr) = slotcron(&["trigger", "--config", path, "nope"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("deploy"), "{stderr}");
}

#[test]
fn overlap_skip_never_runs_two_at_once_and_allow_does() {
    for (overlap, expect_overlap) in [("skip", false), ("allow", true)] {
        let cluster = RedisCluster::start(3);
        let receiver = Receiver::start();
        receiver.set_delay(Duration::from_millis(2500));
        let dir = tempfile::tempdir().unwrap();
        let text = FleetToml {
            job: "slow",
            job_extra: &format!("overlap = \"{overlap}\""),
            ..fleet_toml(
                &cluster.urls(),
                &receiver.uri(),
                &format!("overlap-{overlap}"),
            )
        }
        .render();
        let path = write_config(dir.path(), &text);
        let replicas: Vec<Replica> = (0..3).map(|i| replica(&path, &format!("r{i}"))).collect();
        for r in &replicas {
            r.assert_started();
        }
        std::thread::sleep(COUNTED_WINDOW);
        // Every count after every replica has exited: a slot won between a look at the logs and
        // the SIGTERM still runs (the run in flight is finished), so counting the logs before
        // the stop and the receiver after it could see a run without its `won` line.
        for r in &replicas {
            r.terminate();
        }
        for r in &replicas {
            let exit = r.wait_timeout(Duration::from_secs(15));
            assert!(exit.is_some_and(|s| s.success()), "{:?}", r.lines());
        }
        let lines: Vec<_> = replicas.iter().flat_map(|r| r.json_lines()).collect();
        let skipped = lines.iter().filter(|l| l["reason"] == "overlap").count();
        let won = lines.iter().filter(|l| l["outcome"] == "won").count();
        // Each run takes 2.5 s: with skip at most one is in flight, so 6 s (and the slots won
        // until the SIGTERM) hold at most 3 runs.
        let runs = receiver.count();
        let intervals = run_intervals(&cluster, &format!("overlap-{overlap}"), "slow");
        assert!(
            intervals.len() >= 2,
            "overlap = {overlap}: runs recorded: {intervals:?}"
        );
        let overlapping = overlapping_runs(&intervals);
        if expect_overlap {
            assert!(runs >= 5, "overlap = allow: {runs} runs");
            assert_eq!(skipped, 0);
            assert!(
                !overlapping.is_empty(),
                "overlap = allow: no two runs overlapped"
            );
        } else {
            assert_eq!(
                overlapping,
                Vec::<((i64, i64), (i64, i64))>::new(),
                "overlap = skip: runs overlapped (started_ms, finished_ms)"
            );
            assert!(
                runs <= 3,
                "overlap = skip: {runs} runs in 6 s of 2.5 s runs"
            );
            assert!(
                skipped >= 2 && won >= runs + skipped,
                "skipped {skipped}, won {won}"
            );
            // Each skipped slot's winner recorded it, with why: the ledger shows it.
            let skips = skip_records(&cluster, "overlap-skip", "slow");
            assert_eq!(skips.len(), skipped, "skip records: {skips:?}");
            let why = "overlap: the previous run is still going on r";
            assert!(skips.values().all(|e| e.starts_with(why)), "{skips:?}");
        }
    }
}

#[test]
fn catch_up_runs_missed_slots_once_after_a_fleet_outage() {
    for (policy, expect_all) in [("all", true), ("latest", false)] {
        let cluster = RedisCluster::start(3);
        let receiver = Receiver::start();
        let dir = tempfile::tempdir().unwrap();
        let text = FleetToml {
            job: "nightly",
            schedule: "*/2 * * * * *",
            scheduler: "max_clock_skew = \"1s\"",
            job_extra: &format!("catch_up = \"1m\"\ncatch_up_policy = \"{policy}\""),
            ..fleet_toml(
                &cluster.urls(),
                &receiver.uri(),
                &format!("catchup-{policy}"),
            )
        }
        .render();
        let path = write_config(dir.path(), &text);
        let first = replica(&path, "first");
        first.assert_started();
        receiver.wait_for(1, Duration::from_secs(5));
        stop(first);
        let stopped = chrono::Utc::now();
        std::thread::sleep(FLEET_DOWN);
        let second = replica(&path, "second");
        second.assert_started();
        // Slots before the replica is up (its process was still starting) were missed too.
        let restarted = chrono::Utc::now();
        std::thread::sleep(CATCH_UP_RUNS);
        let caught: Vec<Value> = second
            .json_lines()
            .into_iter()
            .filter(|l| l["message"] == "catching up a missed slot")
            .collect();
        stop(second);
        let missed: Vec<String> = caught
            .iter()
            .map(|l| l["slot"].as_str().unwrap().to_owned())
            .collect();
        assert!(!missed.is_empty(), "policy {policy}: nothing caught up");
        for slot in &missed {
            let t: chrono::DateTime<chrono::Utc> = slot.parse().unwrap();
            assert!(
                t > stopped - chrono::Duration::seconds(1) && t < restarted,
                "{slot} was not missed"
            );
            assert_eq!(
                receiver
                    .counts_by_idempotency_key()
                    .get(&format!("nightly/{slot}")),
                Some(&1),
                "{slot}"
            );
        }
        if expect_all {
            assert!(missed.len() >= 3, "policy all: {missed:?}");
        } else {
            assert_eq!(missed.len(), 1, "policy latest: {missed:?}");
        }
        assert!(receiver.duplicate_keys().is_empty());
    }
}

/// The JSON lines of `r` that say `message`.
fn said(r: &Replica, message: &str) -> Vec<Value> {
    r.json_lines()
        .into_iter()
        .filter(|l| l["message"] == message)
        .collect()
}

fn time_of(line: &Value, field: &str) -> chrono::DateTime<chrono::Utc> {
    line[field].as_str().unwrap().parse().unwrap()
}

#[test]
fn catch_up_on_restarts_runs_the_newest_slot_of_each_downtime_and_nothing_before_the_first_start() {
    let cluster = RedisCluster::start(3);
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let text = FleetToml {
        job: "tick",
        // A node timeout with headroom: this test is about catch-up, not a loaded machine.
        redis: "node_timeout = \"500ms\"",
        job_extra: "catch_up = \"1h\"",
        ..fleet_toml(&cluster.urls(), &receiver.uri(), "restarts")
    }
    .render();
    let path = write_config(dir.path(), &text);
    let first_spawn = chrono::Utc::now();
    let mut caught = Vec::new();
    let mut previous_last: Option<chrono::DateTime<chrono::Utc>> = None;
    let mut runs: Vec<Replica> = Vec::new();
    for run in 0..4 {
        let r = replica(&path, "solo");
        r.assert_started();
        std::thread::sleep(SOLO_RUN);
        r.terminate();
        let exited = r.wait_timeout(Duration::from_secs(15));
        assert!(exited.is_some_and(|s| s.success()), "{:?}", r.lines());
        let lines = said(&r, "catching up a missed slot");
        if run == 0 {
            // A first deploy: the fleet first scheduled the job now; nothing before is owed.
            assert!(lines.is_empty(), "first start caught up {lines:?}");
        } else {
            assert_eq!(lines.len(), 1, "restart {run} (latest): {lines:?}");
            let slot = time_of(&lines[0], "slot");
            let started_at = time_of(&said(&r, "slotcron started")[0], "timestamp");
            // The newest slot at or before the restart (the catch-up looks right after it).
            let newest = chrono::DateTime::from_timestamp(started_at.timestamp(), 0).unwrap();
            // (A second later when the catch-up looked just after a second began.)
            assert!(
                slot == newest || slot == newest + chrono::Duration::seconds(1),
                "restart {run} caught up {slot}, the newest slot of the downtime is {newest}"
            );
            let last = previous_last.expect("the previous run ran slots");
            assert!(
                slot > last,
                "restart {run} caught up {slot}, already run at {last}"
            );
            caught.push(slot);
        }
        previous_last = said(&r, "ran the slot")
            .iter()
            .map(|l| time_of(l, "slot"))
            .max();
        // Kept to the end: a failing test prints every run's log.
        runs.push(r);
        if run < 3 {
            std::thread::sleep(SOLO_RUN);
        }
    }
    // Every caught-up slot reached the receiver once; no slot ran twice or before the start.
    let counts = receiver.counts_by_idempotency_key();
    for slot in &caught {
        let key = format!("tick/{}", slot.format("%Y-%m-%dT%H:%M:%SZ"));
        assert_eq!(counts.get(&key), Some(&1), "{key}: {counts:?}");
    }
    assert!(receiver.duplicate_keys().is_empty(), "{counts:?}");
    for (request, _) in receiver.received_at() {
        let slot: chrono::DateTime<chrono::Utc> = request.headers["x-slotcron-slot"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            slot > first_spawn,
            "{slot} is from before the first start ({first_spawn})"
        );
    }
    // The watermark, on every node: the first start.
    for node in cluster.iter() {
        let ms: i64 = common::redis_get(&node.url(), "restarts:tick:first_seen")
            .unwrap()
            .parse()
            .unwrap();
        let watermark = chrono::DateTime::from_timestamp_millis(ms).unwrap();
        assert!(
            watermark > first_spawn && watermark < first_spawn + chrono::Duration::seconds(5),
            "{watermark}"
        );
    }
}

#[test]
fn a_reload_that_gives_a_job_catch_up_keeps_the_first_starts_watermark_and_catches_nothing_up() {
    let cluster = RedisCluster::start(3);
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let (urls, uri) = (cluster.urls(), receiver.uri());
    let config = |job_extra: &str| {
        FleetToml {
            job: "later",
            job_extra,
            ..fleet_toml(&urls, &uri, "marked")
        }
        .render()
    };
    let path = write_config(dir.path(), &config(""));
    let spawned_at = chrono::Utc::now();
    let r = replica(&path, "reloader");
    r.assert_started();
    let key = "marked:later:first_seen";
    // Every job's first start is recorded, catch_up or not: the fleet scheduled it from then.
    let first = wait_until(Duration::from_secs(5), || {
        common::redis_get(&cluster[0].url(), key)
    })
    .unwrap_or_else(|| panic!("no watermark after the start: {:?}", r.lines()));
    let reloaded_at = chrono::Utc::now();
    let with_catch_up = config("catch_up = \"10m\"\ncatch_up_policy = \"all\"");
    std::fs::write(&path, with_catch_up).unwrap();
    assert!(r.send_signal(Signal::SIGHUP));
    let marked = wait_until(Duration::from_secs(5), || {
        let all: Option<Vec<String>> = cluster
            .iter()
            .map(|n| common::redis_get(&n.url(), key))
            .collect();
        all
    });
    let marked = marked.unwrap_or_else(|| panic!("no watermark after the reload: {:?}", r.lines()));
    for ms in marked {
        assert_eq!(ms, first, "the reload moved the watermark");
        let at = chrono::DateTime::from_timestamp_millis(ms.parse().unwrap()).unwrap();
        assert!(
            at >= spawned_at && at < reloaded_at,
            "watermark {at}: the start was between {spawned_at} and {reloaded_at}"
        );
    }
    // A reload catches nothing up (only a start does), even with policy "all".
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        said(&r, "catching up a missed slot").is_empty(),
        "{:?}",
        r.lines()
    );
    stop(r);
}

/// A rolling update that moves a job to another schedule (every 2 s, then every second), with
/// `catch_up_policy = "all"`: the new version's first start catches up, and reports missed,
/// none of the odd seconds before it, which the old schedule never had (the fleet owed them to
/// nobody). Found by the simulation's `a_rollout_that_moves_a_job`: catch-up's watermark was
/// the job name's, so the new replica ran every odd second since the old version's first start.
#[test]
fn a_rollout_that_moves_a_jobs_schedule_catches_up_none_of_the_slots_the_old_schedule_never_had() {
    let cluster = RedisCluster::start(3);
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let (urls, uri) = (cluster.urls(), receiver.uri());
    let extra = "catch_up = \"10m\"\ncatch_up_policy = \"all\"";
    let config = |schedule: &str| {
        FleetToml {
            job: "tick",
            schedule,
            job_extra: extra,
            ..fleet_toml(&urls, &uri, "moved")
        }
        .render()
    };
    let old_dir = dir.path().join("old");
    let new_dir = dir.path().join("new");
    std::fs::create_dir_all(&old_dir).unwrap();
    std::fs::create_dir_all(&new_dir).unwrap();
    let old_path = write_config(&old_dir, &config("*/2 * * * * *"));
    let new_path = write_config(&new_dir, &config("* * * * * *"));
    let old = replica(&old_path, "old");
    old.assert_started();
    // The old version runs a few even seconds (and records the job's watermark) first.
    receiver.wait_for(3, Duration::from_secs(30));
    let new = replica(&new_path, "new");
    new.assert_started();
    let new_start = time_of(&said(&new, "slotcron started")[0], "timestamp");
    // The missed-slot report waits out the job's timeout (5 s) and the start window (the
    // default skew's 5 s) first: an odd second run 15 s after the new start comes after it.
    let odd_after = |r: &Receiver| {
        r.received_at()
            .iter()
            .filter(|(req, _)| {
                let slot: chrono::DateTime<chrono::Utc> = req.headers["x-slotcron-slot"]
                    .to_str()
                    .unwrap()
                    .parse()
                    .unwrap();
                slot.timestamp() % 2 == 1 && slot > new_start + chrono::Duration::seconds(15)
            })
            .count()
    };
    assert!(
        wait_until(Duration::from_secs(60), || (odd_after(&receiver) > 0)
            .then_some(()))
        .is_some(),
        "the new version ran no odd second: {:?}",
        new.lines()
    );
    stop(old);
    let caught: Vec<Value> = said(&new, "catching up a missed slot");
    let missed: Vec<Value> = new
        .json_lines()
        .into_iter()
        .filter(|l| l["outcome"] == "missed")
        .collect();
    let early_odd: Vec<String> = receiver
        .received_at()
        .iter()
        .map(|(req, _)| req.headers["x-slotcron-slot"].to_str().unwrap().to_owned())
        .filter(|slot| {
            let slot: chrono::DateTime<chrono::Utc> = slot.parse().unwrap();
            slot.timestamp() % 2 == 1 && slot < new_start
        })
        .collect();
    stop(new);
    assert!(caught.is_empty(), "caught up: {caught:?}");
    assert!(missed.is_empty(), "reported missed: {missed:?}");
    assert!(
        early_odd.is_empty(),
        "odd seconds before the new start ran: {early_odd:?}"
    );
    assert!(receiver.duplicate_keys().is_empty());
}

#[test]
fn health_readiness_and_metrics_endpoints() {
    let cluster = RedisCluster::start(3);
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let text = FleetToml {
        job: "ping",
        rest: &format!("[http]\nlisten = \"127.0.0.1:{port}\""),
        ..fleet_toml(&cluster.urls(), &receiver.uri(), "health")
    }
    .render();
    let path = write_config(dir.path(), &text);
    let r = replica(&path, "observed");
    r.assert_started();
    receiver.wait_for(2, Duration::from_secs(10));
    assert_eq!(http_get(port, "/healthz").unwrap().0, 200);
    let (status, body) = http_get(port, "/readyz").unwrap();
    assert_eq!(status, 200, "{body}");
    let (status, metrics) = http_get(port, "/metrics").unwrap();
    assert_eq!(status, 200);
    for needle in [
        "slotcron_races_total{slotcron_job=\"ping\",outcome=\"won\"}",
        "slotcron_runs_total{slotcron_job=\"ping\",outcome=\"done\"}",
        "slotcron_lock_duration_seconds_bucket",
        "slotcron_action_duration_seconds_count{slotcron_job=\"ping\"}",
        "slotcron_lateness_seconds_count{slotcron_job=\"ping\"}",
        "slotcron_clock_offset_seconds",
    ] {
        assert!(
            metrics.contains(needle),
            "{needle} missing from:\n{metrics}"
        );
    }
    cluster[0].kill();
    cluster[1].kill();
    let (status, body) = http_get(port, "/readyz").unwrap();
    assert_eq!(status, 503, "{body}");
    let (_, metrics) = http_get(port, "/metrics").unwrap();
    let down = format!(
        "slotcron_redis_node_up{{node=\"127.0.0.1:{}\"}} 0",
        cluster[0].port()
    );
    assert!(metrics.contains(&down), "{down} missing from:\n{metrics}");
    assert_eq!(
        http_get(port, "/healthz").unwrap().0,
        200,
        "alive even without Redis"
    );
    stop(r);
}

#[test]
fn sighup_reloads_a_valid_file_and_rejects_an_invalid_one() {
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let hook = receiver.url("/hook");
    let one = http_job("first", "* * * * * *", "5s", &hook, "");
    let path = write_config(dir.path(), &one);
    // Without the file watch: the reloads here come from SIGHUP alone.
    let r = Replica::run(&path, "reloader", &[("SLOTCRON_NO_WATCH", "true")]);
    r.assert_started();
    std::fs::write(
        &path,
        format!(
            "{one}{}",
            http_job("second", "* * * * * *", "5s", &hook, "")
        ),
    )
    .unwrap();
    assert!(r.send_signal(Signal::SIGHUP));
    let second = wait_until(Duration::from_secs(5), || {
        receiver
            .counts_by_idempotency_key()
            .keys()
            .any(|k| k.starts_with("second/"))
            .then_some(())
    });
    assert!(second.is_some(), "the added job never ran: {:?}", r.lines());

    std::fs::write(&path, "[[job]]\nname = \"broken\"\nschedule = \"nope\"\n").unwrap();
    assert!(r.send_signal(Signal::SIGHUP));
    let rejected = r.wait_for_json(Duration::from_secs(5), |l| {
        l["message"]
            .as_str()
            .is_some_and(|m| m.contains("reload rejected"))
    });
    let rejected = rejected.unwrap_or_else(|| panic!("{:?}", r.lines()));
    assert!(
        rejected["error"]
            .as_str()
            .unwrap()
            .contains("job \"broken\""),
        "{rejected}"
    );
    let before = receiver.count();
    assert!(
        wait_until(Duration::from_secs(4), || (receiver.count() >= before + 2)
            .then_some(()))
        .is_some(),
        "the old schedule stopped"
    );
    stop(r);
}

/// Replicas sharing a host and a file each serve their endpoints on their own port:
/// `--http-listen` and `SLOTCRON_HTTP_LISTEN` override `[http] listen` for `run` (nothing
/// listens on the file's port), `slotcron health` asks the same address when given the same
/// override, and a reload keeps it without taking it for a change of `[http]`.
#[test]
fn http_listen_overrides_the_files_address_for_run_and_health_across_a_reload() {
    let dir = tempfile::tempdir().unwrap();
    let (file_port, flag_port, env_port) = (free_port(), free_port(), free_port());
    // Standalone, and a job that never fires in the test: only the endpoints are looked at.
    let text = format!(
        "[http]\nlisten = \"127.0.0.1:{file_port}\"\n[[job]]\nname = \"idle\"\n\
         schedule = \"0 0 0 1 1 *\"\n[job.action]\ntype = \"log\"\ncontent = \"x\"\n"
    );
    let path = write_config(dir.path(), &text);
    let flag_addr = format!("127.0.0.1:{flag_port}");
    let env_addr = format!("127.0.0.1:{env_port}");
    let mut cmd = Replica::run_command(&path, "by-flag");
    cmd.args(["--http-listen", &flag_addr])
        .env("SLOTCRON_NO_WATCH", "true");
    let by_flag = Replica::spawn_cmd("by-flag", cmd);
    let by_env = Replica::run(&path, "by-env", &[("SLOTCRON_HTTP_LISTEN", &env_addr)]);
    by_flag.assert_started();
    by_env.assert_started();
    assert_eq!(http_get(flag_port, "/healthz").map(|r| r.0), Some(200));
    assert_eq!(http_get(env_port, "/healthz").map(|r| r.0), Some(200));
    assert_eq!(
        http_get(file_port, "/healthz"),
        None,
        "the file's [http] listen is served though overridden"
    );

    let config = path.to_str().unwrap();
    let (code, out, err) = slotcron(&["health", "--config", config, "--http-listen", &env_addr]);
    assert_eq!(code, 0, "health on the override: {out}{err}");
    let (code, _, _) = slotcron(&["health", "--config", config]);
    assert_ne!(
        code, 0,
        "health on the file's address, where nothing listens"
    );

    assert!(by_flag.send_signal(Signal::SIGHUP));
    let reloaded = by_flag.wait_for_json(Duration::from_secs(15), |l| l["message"] == "reloaded");
    assert!(reloaded.is_some(), "{:?}", by_flag.lines());
    let restart_only: Vec<String> = (by_flag.lines().into_iter())
        .filter(|l| l.contains("changes to [http]"))
        .collect();
    assert!(
        restart_only.is_empty(),
        "the override taken for a change: {restart_only:?}"
    );
    assert_eq!(http_get(flag_port, "/healthz").map(|r| r.0), Some(200));
    stop(by_flag);
    stop(by_env);
}
