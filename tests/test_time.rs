//! Time: no drift over a simulated day, clock skew between replicas (in-process through the clock
//! seam, and on real processes under libfaketime), and the fleet clock's correction.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use common::{write_config, Receiver, RedisCluster, Replica};
use slotcron::config::{self, Config};
use slotcron::schedule::{SharedClock, SkewedClock, SystemClock, TokioClock};
use slotcron::scheduler::{self, Replica as SlotcronReplica};
use tokio_util::sync::CancellationToken;

fn parse(text: &str) -> Config {
    let env: HashMap<String, String> = HashMap::new();
    config::parse(Path::new("jobs.toml"), text, &env).unwrap_or_else(|e| panic!("{e}"))
}

/// The `slotcron_races_total` (`won`, `skipped`...) or `slotcron_runs_total` (`done`...) counter
/// of `job` and `outcome` in a metrics exposition.
fn slots_counted(metrics: &str, job: &str, outcome: &str) -> u64 {
    let family = if ["done", "failed", "handed_off"].contains(&outcome) {
        "runs"
    } else {
        "races"
    };
    let prefix =
        format!("slotcron_{family}_total{{slotcron_job=\"{job}\",outcome=\"{outcome}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map_or(0, |n| n.trim().parse().unwrap())
}

#[tokio::test(start_paused = true)]
async fn no_drift_a_simulated_day_of_a_job_every_second_gives_86400_slots() {
    let config = parse(
        r#"
        [[job]]
        name = "tick"
        schedule = "* * * * * *"
        timeout = "1s"
        [job.action]
        type = "log"
        content = "tick"
        "#,
    );
    let start: DateTime<Utc> = "2026-03-08T00:00:00Z".parse().unwrap();
    let clock: SharedClock = Arc::new(TokioClock::starting_at(start));
    let replica = SlotcronReplica::connect(&config, "sim".into(), clock)
        .await
        .unwrap();
    let metrics = replica.metrics.clone();
    let shutdown = CancellationToken::new();
    let run = tokio::spawn(scheduler::run_replica(
        replica,
        config,
        shutdown.clone(),
        None,
    ));
    // tokio's paused clock jumps from timer to timer: a day passes in moments.
    tokio::time::sleep(Duration::from_millis(86_400_500)).await;
    shutdown.cancel();
    run.await.unwrap().unwrap();
    let text = metrics.encode();
    assert_eq!(slots_counted(&text, "tick", "done"), 86_400, "{text}");
    assert_eq!(slots_counted(&text, "tick", "skipped"), 0);
}

fn fleet_config(nodes: &[String], receiver: &str, prefix: &str, clock: &str) -> String {
    let nodes: Vec<String> = nodes.iter().map(|n| format!("{n:?}")).collect();
    format!(
        r#"
        [scheduler]
        key_prefix = "{prefix}"
        max_clock_skew = "10s"
        clock = "{clock}"
        [redis]
        nodes = [{nodes}]
        [[job]]
        name = "skew"
        schedule = "* * * * * *"
        timeout = "2s"
        # Skewed replicas run different slots at the same real instant; this test is about the
        # slot lock alone, not the job's running lease.
        overlap = "allow"
        [job.action]
        type = "http"
        url = "{receiver}/hook"
        "#,
        nodes = nodes.join(", ")
    )
}

/// Runs in-process replicas, one per clock, for `seconds`.
async fn run_in_process(config_text: &str, clocks: Vec<(&str, SharedClock)>, seconds: u64) {
    let shutdown = CancellationToken::new();
    let mut runs = Vec::new();
    for (name, clock) in clocks {
        let config = parse(config_text);
        let replica = SlotcronReplica::connect(&config, name.to_owned(), clock)
            .await
            .unwrap();
        runs.push(tokio::spawn(scheduler::run_replica(
            replica,
            config,
            shutdown.clone(),
            None,
        )));
    }
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    shutdown.cancel();
    for run in runs {
        run.await.unwrap().unwrap();
    }
}

/// Watches `receiver` for `seconds`, stamping each new request with its arrival: returns each
/// request's slot (X-Slotcron-Slot) and how many ms after the slot it arrived (±20 ms).
async fn stamp_arrivals(receiver: &Receiver, seconds: u64) -> Vec<(String, i64)> {
    let mut stamped = Vec::new();
    let end = tokio::time::Instant::now() + Duration::from_secs(seconds);
    while tokio::time::Instant::now() < end {
        for r in receiver.received().iter().skip(stamped.len()) {
            let slot = r
                .headers
                .get("x-slotcron-slot")
                .unwrap()
                .to_str()
                .unwrap()
                .to_owned();
            let slot_time: DateTime<Utc> = slot.parse().unwrap();
            stamped.push((slot, (Utc::now() - slot_time).num_milliseconds()));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stamped
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clock_skew_of_8s_either_way_never_runs_a_slot_twice() {
    let cluster = RedisCluster::start(3);
    let receiver = Receiver::start();
    let text = fleet_config(&cluster.urls(), &receiver.uri(), "skew-local", "local");
    let skewed = |secs: i64| -> SharedClock {
        Arc::new(SkewedClock {
            offset: chrono::Duration::seconds(secs),
        })
    };
    let clocks = vec![
        ("lagging", skewed(-8)),
        ("on-time", Arc::new(SystemClock) as SharedClock),
        ("leading", skewed(8)),
    ];
    // 12 s: the lagging replica races slots the leading one won 16 s earlier.
    run_in_process(&text, clocks, 12).await;
    let counts = receiver.counts_by_idempotency_key();
    assert!(counts.len() >= 8, "too few slots ran: {counts:?}");
    let duplicated: BTreeMap<_, _> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(duplicated.is_empty(), "slots run twice: {duplicated:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_clock_stops_a_fast_replica_firing_early() {
    let cluster = RedisCluster::start(3);
    let fast = || -> SharedClock {
        Arc::new(SkewedClock {
            offset: chrono::Duration::seconds(5),
        })
    };

    // clock = "local": the replica whose clock runs 5 s fast fires 5 s before each slot.
    let local = Receiver::start();
    let text = fleet_config(&cluster.urls(), &local.uri(), "fleet-local", "local");
    let (_, early) = tokio::join!(
        run_in_process(&text, vec![("fast", fast())], 4),
        stamp_arrivals(&local, 4)
    );
    assert!(!early.is_empty());
    assert!(
        early.iter().all(|(_, ms)| *ms < -4_000),
        "with clock = local it should fire ~5 s early: {early:?}"
    );

    // clock = "redis": the same replica measures the offset to the nodes' TIME and fires on time.
    let fleet = Receiver::start();
    let text = fleet_config(&cluster.urls(), &fleet.uri(), "fleet-redis", "redis");
    let (_, on_time) = tokio::join!(
        run_in_process(&text, vec![("fast", fast())], 4),
        stamp_arrivals(&fleet, 4)
    );
    assert!(!on_time.is_empty());
    assert!(
        on_time.iter().all(|(_, ms)| (-300..1_000).contains(ms)),
        "with clock = redis it should fire at the slot: {on_time:?}"
    );
}

/// libfaketime's multithreaded library (Debian's `faketime` package), if installed.
fn libfaketime() -> Option<std::path::PathBuf> {
    let dirs = std::fs::read_dir("/usr/lib").ok()?;
    dirs.flatten()
        .map(|d| d.path().join("faketime/libfaketimeMT.so.1"))
        .chain([std::path::PathBuf::from(
            "/usr/lib/faketime/libfaketimeMT.so.1",
        )])
        .find(|p| p.exists())
}

/// A replica process whose wall clock is shifted by libfaketime (`offset` like "+8s"), preloaded
/// directly (not through the `faketime` wrapper) so signals reach slotcron itself.
fn faked_replica(lib: &Path, offset: &str, config: &Path, name: &str) -> Replica {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_slotcron"));
    cmd.env("LD_PRELOAD", lib)
        .env("FAKETIME", offset)
        // Only the wall clock moves: tokio's timers keep the real monotonic clock.
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
        .args([
            "run",
            "--log-format",
            "json",
            "--replica-id",
            name,
            "--config",
        ])
        .arg(config);
    Replica::spawn_cmd(name, cmd)
}

fn plain_replica(config: &Path, name: &str) -> Replica {
    Replica::run(config, name, &[])
}

#[test]
fn libfaketime_shifted_replica_processes_never_run_a_slot_twice() {
    let Some(lib) = libfaketime() else {
        eprintln!(
            "SKIPPED: libfaketime is not installed (scripts/test.sh installs Debian's faketime)"
        );
        return;
    };
    let cluster = RedisCluster::start(3);
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(
        dir.path(),
        &fleet_config(&cluster.urls(), &receiver.uri(), "faketime", "local"),
    );
    let mut replicas = vec![
        faked_replica(&lib, "+7s", &path, "ahead"),
        faked_replica(&lib, "-7s", &path, "behind"),
        plain_replica(&path, "on-time"),
    ];
    for r in &replicas {
        assert!(
            r.wait_for_line(Duration::from_secs(10), |l| l.contains("slotcron started"))
                .is_some(),
            "{} did not start: {:?}",
            r.name(),
            r.lines()
        );
    }
    std::thread::sleep(Duration::from_secs(10));
    for r in &mut replicas {
        r.terminate();
        assert!(r
            .wait_timeout(Duration::from_secs(10))
            .is_some_and(|s| s.success()));
    }
    let counts = receiver.counts_by_idempotency_key();
    assert!(counts.len() >= 6, "too few slots ran: {counts:?}");
    let duplicated: BTreeMap<_, _> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(duplicated.is_empty(), "slots run twice: {duplicated:?}");
    // The shifted replicas saw their offset from the Redis nodes' TIME and said so.
    let warned = |r: &Replica| {
        r.json_lines()
            .iter()
            .any(|l| l["offset_ms"].as_i64().is_some_and(|o| o.abs() > 5_000))
    };
    assert!(
        warned(&replicas[0]) && warned(&replicas[1]),
        "no clock offset warning"
    );
}
