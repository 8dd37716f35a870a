//! Time: no drift over a simulated day, clock skew between replicas (in-process through the clock
//! seam, and on real processes under libfaketime), and the fleet clock's correction.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use common::fleet::{Bed, Fleet, FleetToml, parse};
use common::tools::{libfaketime, set_offset};
use common::{Receiver, RedisCluster, Replica, write_config};
use slotcron::unstable::replica::Replica as SlotcronReplica;
use slotcron::unstable::time::schedule::{SharedClock, SkewedClock, Slot, SystemClock, TokioClock};
use tokio_util::sync::CancellationToken;

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
    let run = tokio::spawn(slotcron::unstable::replica::run_replica(
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

/// A bound on waiting for slots a fleet surely runs: a slot a second, and a loaded 2-core
/// machine's delays of seconds; only a fleet that stopped running them reaches it.
const PATIENCE: Duration = Duration::from_secs(60);
/// The in-process stepped replica's run before its wall clock steps: it measures the fleet
/// clock at start and races a slot or two; the step lands mid-second.
const BEFORE_THE_WALL_STEP: Duration = Duration::from_millis(2_500);
/// And after the step: two slots that run on time on the fleet clock (`redis`), or that would
/// run 90 s late on the stepped wall clock (`local`), with a second's room.
const AFTER_THE_WALL_STEP: Duration = Duration::from_secs(3);
/// The libfaketime test's window: the replica 7 s behind reaches slots the others ran from 7 s
/// in, so 10 s give it three to run twice, were the lock not fleet-wide; and 6 slots to count.
const SHIFTED_WINDOW: Duration = Duration::from_secs(10);
/// The step scenario's run before the step: the five replicas measure the fleet clock and race
/// on it first.
const BEFORE_THE_STEP: Duration = Duration::from_secs(6);
/// And after it: the checks want 20 slots, every one of them from the step on run, and the
/// stepped replicas race 90 s off for all of it.
const AFTER_THE_STEP: Duration = Duration::from_secs(24);

/// The time tests' fleet: job `skew` every second with `clock`, 10 s allowed skew. Skewed
/// replicas run different slots at the same real instant; these tests are about the slot lock
/// alone, not the job's running lease, so runs may overlap.
fn fleet_config(nodes: &[String], receiver: &str, prefix: &str, clock: &str) -> String {
    FleetToml {
        job: "skew",
        scheduler: &format!("max_clock_skew = \"10s\"\nclock = \"{clock}\""),
        redis: "",
        job_extra: "overlap = \"allow\"",
        ..FleetToml::new(nodes, receiver, prefix)
    }
    .render()
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
    // The lagging replica races slot S at S + 8 s, after the others ran it. (A leading replica
    // does not win S at S - 8 s: the race holds a slot until its instant on the fleet clock, so
    // it races with the on-time one.) The fleet runs until the lagging one has reached 5 slots
    // the others ran.
    let fleet = Fleet::start(&text, clocks).await;
    // The lagging clock's reading, less 1 s for a race under way.
    let lagging_reached = || Utc::now() - chrono::Duration::seconds(8 + 1);
    common::wait_until_async(PATIENCE, || {
        (contested(&receiver, lagging_reached()).len() >= 5).then_some(())
    })
    .await;
    let reached = lagging_reached();
    fleet.stop().await;
    let counts = receiver.counts_by_idempotency_key();
    assert!(counts.len() >= 8, "too few slots ran: {counts:?}");
    let duplicated: BTreeMap<_, _> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(duplicated.is_empty(), "slots run twice: {duplicated:?}");
    // Every slot another replica ran up to the lagging clock's reading was raced by both.
    let contested = contested(&receiver, reached);
    assert!(
        contested.len() >= 5,
        "the lagging replica reached too few slots the others ran: {contested:?} (reached {reached})"
    );
}

/// The slots another replica than `lagging` ran, up to `reached`: by the time the lagging
/// clock reads `reached`, it has raced each of them too.
fn contested(receiver: &Receiver, reached: DateTime<Utc>) -> Vec<(String, DateTime<Utc>)> {
    receiver
        .received()
        .iter()
        .map(|r| {
            let slot = header(r, "x-slotcron-slot").parse().unwrap();
            (header(r, "x-slotcron-replica"), slot)
        })
        .filter(|(winner, slot)| winner != "lagging" && *slot <= reached)
        .collect()
}

/// A request's header as text (empty when absent).
fn header(request: &wiremock::Request, name: &str) -> String {
    request
        .headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

/// Never early means 0 ms early: each request arrives at the receiver, whose clock is the true
/// one (the nodes' `TIME` comes from the same machine clock), at or after its slot's instant.
/// The only leeway is the measurement's, and it runs the lenient way: the receiver stamps a
/// request when it has read it, after the replica sent it, so a send early by less than one
/// local round trip (well under a millisecond) would still pass. Lateness gets an honest bound
/// for a loaded 2-core machine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fast_replica_never_fires_early_with_either_clock() {
    let cluster = RedisCluster::start(3);
    let fast = || -> SharedClock {
        Arc::new(SkewedClock {
            offset: chrono::Duration::seconds(5),
        })
    };
    // clock = "redis": the replica measures the offset to the nodes' TIME and schedules on it.
    // clock = "local": its timeline wakes 5 s early by its own clock, and waits (5 s is inside
    // the start window) until the slot's instant on the fleet clock before racing. (Its
    // timeline starts at its own now, 5 s ahead: the first slot it races is 6 s away.)
    for (clock, seconds) in [("redis", 4), ("local", 9)] {
        let receiver = Receiver::start();
        let prefix = format!("fast-{clock}");
        let text = fleet_config(&cluster.urls(), &receiver.uri(), &prefix, clock);
        Fleet::run_for(&text, vec![("fast", fast())], seconds).await;
        let arrivals: Vec<(String, i64)> = receiver
            .received_at()
            .iter()
            .map(|(request, arrived)| {
                let slot = header(request, "x-slotcron-slot");
                let at: DateTime<Utc> = slot.parse().unwrap();
                (slot, (*arrived - at).num_microseconds().unwrap())
            })
            .collect();
        eprintln!("clock = {clock}: µs after the slot: {arrivals:?}");
        assert!(arrivals.len() >= 2, "clock = {clock}: {arrivals:?}");
        assert!(
            arrivals.iter().all(|(_, us)| *us >= 0),
            "clock = {clock}: a 5 s fast replica fired early: {arrivals:?}"
        );
        assert!(
            arrivals.iter().all(|(_, us)| *us < 1_000_000),
            "clock = {clock}: a 5 s fast replica should fire at the slot: {arrivals:?}"
        );
    }
}

/// A replica whose wall clock steps while it runs: in-process, through the clock seam.
#[derive(Debug, Default)]
struct SteppingClock(std::sync::atomic::AtomicI64);

impl slotcron::unstable::time::schedule::Clock for SteppingClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now() + chrono::Duration::seconds(self.0.load(std::sync::atomic::Ordering::Relaxed))
    }
}

/// The metric line `name` (no labels) of an exposition, as a number.
fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wall_clock_step_is_counted_with_its_size_and_changes_nothing_on_the_fleet_clock() {
    let cluster = RedisCluster::start(3);
    for (clock, step) in [("redis", 90), ("local", -90)] {
        let receiver = Receiver::start();
        let prefix = format!("counted-{clock}");
        let config = parse(&fleet_config(
            &cluster.urls(),
            &receiver.uri(),
            &prefix,
            clock,
        ));
        let wall = Arc::new(SteppingClock::default());
        let replica = SlotcronReplica::connect(&config, "stepped".into(), wall.clone())
            .await
            .unwrap();
        let metrics = replica.metrics.clone();
        let shutdown = CancellationToken::new();
        let run = tokio::spawn(slotcron::unstable::replica::run_replica(
            replica,
            config,
            shutdown.clone(),
            None,
        ));
        tokio::time::sleep(BEFORE_THE_WALL_STEP).await;
        wall.0.store(step, std::sync::atomic::Ordering::Relaxed);
        let stepped_at = Utc::now();
        tokio::time::sleep(AFTER_THE_WALL_STEP).await;
        shutdown.cancel();
        run.await.unwrap().unwrap();
        let text = metrics.encode();
        assert_eq!(
            metric(&text, "slotcron_clock_steps_total"),
            Some(1.0),
            "{clock}: {text}"
        );
        let size = metric(&text, "slotcron_clock_last_step_seconds").unwrap();
        assert!(
            (size - f64::from(step as i32)).abs() < 0.5,
            "{clock}: {size} s"
        );
        let mut after_step = 0;
        for (request, arrived) in receiver.received_at() {
            let slot: DateTime<Utc> = request.headers["x-slotcron-slot"]
                .to_str()
                .unwrap()
                .parse()
                .unwrap();
            assert!(
                arrived >= slot,
                "{clock}: {slot} arrived early, at {arrived}"
            );
            after_step += usize::from(slot > stepped_at);
        }
        assert!(receiver.duplicate_keys().is_empty(), "{clock}: run twice");
        if clock == "redis" {
            // On the fleet clock the step changes nothing: every second still runs on time.
            assert!(after_step >= 2, "redis: {after_step} runs after the step");
        } else {
            // Scheduling on a wall clock 90 s behind the fleet: every slot is past its start
            // window on the fleet clock, skipped (never run late, never twice).
            assert_eq!(after_step, 0, "local: ran {after_step} slots 90 s late");
        }
    }
}

/// A replica process whose wall clock is shifted by libfaketime (`offset` like "+8s"), preloaded
/// directly (not through the `faketime` wrapper) so signals reach slotcron itself.
fn faked_replica(lib: &Path, offset: &str, config: &Path, name: &str) -> Replica {
    // Only the wall clock moves: tokio's timers keep the real monotonic clock.
    let env = [("FAKETIME", offset), ("FAKETIME_DONT_FAKE_MONOTONIC", "1")];
    Replica::run_faked(config, name, lib, &env)
}

fn plain_replica(config: &Path, name: &str) -> Replica {
    Replica::run(config, name, &[])
}

#[test]
fn libfaketime_shifted_replica_processes_never_run_a_slot_twice() {
    let Some(lib) = libfaketime() else {
        return;
    };
    let Bed {
        cluster: _cluster,
        receiver,
        dir: _dir,
        path,
    } = Bed::start(|nodes, receiver| fleet_config(nodes, receiver, "faketime", "local"));
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
    std::thread::sleep(SHIFTED_WINDOW);
    for r in &mut replicas {
        r.terminate();
        assert!(
            r.wait_timeout(Duration::from_secs(10))
                .is_some_and(|s| s.success())
        );
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

/// A replica process whose wall clock libfaketime reads from `offset_file` on every call, so the
/// test can step it while it runs ([`set_offset`]); the monotonic clock is left alone.
fn stepped_replica(lib: &Path, offset_file: &Path, config: &Path, name: &str) -> Replica {
    let env = [
        ("FAKETIME_TIMESTAMP_FILE", offset_file.to_str().unwrap()),
        ("FAKETIME_NO_CACHE", "1"),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
    ];
    Replica::run_faked(config, name, lib, &env)
}

/// What a step scenario saw: each request's slot and arrival (true time), when the clocks
/// stepped, and the replicas (to read their logs).
struct StepRun {
    arrivals: Vec<(DateTime<Utc>, DateTime<Utc>)>,
    duplicates: BTreeMap<String, usize>,
    stepped_at: DateTime<Utc>,
    ended_at: DateTime<Utc>,
    replicas: Vec<Replica>,
}

/// Five replicas, three nodes, a job every second; 6 s in, "ahead" steps +90 s and "behind"
/// −90 s; 24 s more.
fn step_scenario(lib: &Path, clock: &str) -> StepRun {
    let cluster = RedisCluster::start(3);
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let prefix = format!("step-{clock}");
    // A node timeout with headroom: "none missed" is about the clocks, not a loaded machine.
    let text = fleet_config(&cluster.urls(), &receiver.uri(), &prefix, clock)
        .replace("[redis]", "[redis]\nnode_timeout = \"500ms\"");
    let path = write_config(dir.path(), &text);
    let (ahead, behind) = (
        dir.path().join("ahead.offset"),
        dir.path().join("behind.offset"),
    );
    set_offset(&ahead, "+0");
    set_offset(&behind, "+0");
    let mut replicas: Vec<Replica> = (1..=3)
        .map(|i| plain_replica(&path, &format!("on-time-{i}")))
        .collect();
    replicas.push(stepped_replica(lib, &ahead, &path, "ahead"));
    replicas.push(stepped_replica(lib, &behind, &path, "behind"));
    for r in &replicas {
        let up = r.wait_for_line(Duration::from_secs(15), |l| l.contains("slotcron started"));
        assert!(up.is_some(), "{} did not start: {:?}", r.name(), r.lines());
    }
    std::thread::sleep(BEFORE_THE_STEP);
    set_offset(&ahead, "+90s");
    set_offset(&behind, "-90s");
    let stepped_at = Utc::now();
    std::thread::sleep(AFTER_THE_STEP);
    let ended_at = Utc::now();
    for r in &mut replicas {
        r.terminate();
        assert!(
            r.wait_timeout(Duration::from_secs(15))
                .is_some_and(|s| s.success()),
            "{} did not stop",
            r.name()
        );
    }
    let arrivals = receiver
        .received_at()
        .into_iter()
        .map(|(request, arrived)| {
            let slot = request.headers["x-slotcron-slot"]
                .to_str()
                .unwrap()
                .parse()
                .unwrap();
            (slot, arrived)
        })
        .collect();
    StepRun {
        arrivals,
        duplicates: receiver.duplicate_keys(),
        stepped_at,
        ended_at,
        replicas,
    }
}

impl StepRun {
    /// No slot arrived before its instant, or more than 5 s after it, and none twice.
    fn assert_never_early_late_or_twice(&self) {
        assert!(
            self.arrivals.len() >= 20,
            "too few slots ran: {}",
            self.arrivals.len()
        );
        for (slot, arrived) in &self.arrivals {
            let late = *arrived - *slot;
            assert!(
                late >= chrono::Duration::zero(),
                "slot {slot} arrived {late} early"
            );
            assert!(
                late < chrono::Duration::seconds(5),
                "slot {slot} arrived {late} late"
            );
        }
        assert!(
            self.duplicates.is_empty(),
            "slots run twice: {:?}",
            self.duplicates
        );
        let lateness = self
            .arrivals
            .iter()
            .map(|(s, a)| (*a - *s).num_milliseconds());
        let (min, max) = lateness.fold((i64::MAX, i64::MIN), |(lo, hi), l| (lo.min(l), hi.max(l)));
        eprintln!(
            "{} slots ran; slot to arrival: {min} to {max} ms",
            self.arrivals.len()
        );
    }

    /// Every slot from the step to 2 s before the end (the last may still be in flight) ran.
    fn assert_none_missed(&self) {
        let ran: std::collections::BTreeSet<i64> =
            self.arrivals.iter().map(|(s, _)| s.timestamp()).collect();
        let first = self.stepped_at.timestamp() + 1;
        let last = self.ended_at.timestamp() - 2;
        let missed: Vec<i64> = (first..=last).filter(|s| !ran.contains(s)).collect();
        assert!(missed.is_empty(), "slots missed (epoch s): {missed:?}");
    }

    fn replica(&self, name: &str) -> &Replica {
        self.replicas.iter().find(|r| r.name() == name).unwrap()
    }

    /// The step the replica logged (ms), if it logged one.
    fn logged_step(&self, name: &str) -> Option<i64> {
        self.replica(name)
            .json_lines()
            .iter()
            .find_map(|l| l["step_ms"].as_i64())
    }

    /// The slots (epoch s) the replica raced (won or lost) after it logged its step.
    fn raced_after_step(&self, name: &str) -> std::collections::BTreeSet<i64> {
        let lines = self.replica(name).json_lines();
        let step = lines
            .iter()
            .position(|l| l["step_ms"].is_i64())
            .unwrap_or(lines.len());
        lines[step..]
            .iter()
            .filter(|l| l["outcome"] == "won" || l["outcome"] == "lost")
            .filter_map(|l| l["slot"].as_str()?.parse::<DateTime<Utc>>().ok())
            .map(|slot| slot.timestamp())
            .collect()
    }

    /// The slots (epoch s) from the step to 2 s before the end that `name` is one of the two
    /// candidates of (`candidates = 2`, the default), among the five replicas.
    fn candidate_slots(&self, name: &str) -> Vec<i64> {
        let live: Vec<String> = ["on-time-1", "on-time-2", "on-time-3", "ahead", "behind"]
            .map(str::to_owned)
            .to_vec();
        (self.stepped_at.timestamp() + 1..=self.ended_at.timestamp() - 2)
            .filter(|&s| {
                let slot = Slot::at(DateTime::from_timestamp(s, 0).unwrap());
                slotcron::unstable::fleet::membership::rank(&live, name, "skew", slot) <= 2
            })
            .collect()
    }

    /// How many slots the replica settled with `outcome` (and `reason`) after it logged its
    /// step. (Its slots' own times are off by the step under `clock = "local"`.)
    fn settled_after_step(&self, name: &str, outcome: &str, reason: Option<&str>) -> usize {
        let lines = self.replica(name).json_lines();
        let Some(step) = lines.iter().position(|l| l["step_ms"].is_i64()) else {
            return 0;
        };
        lines[step..]
            .iter()
            .filter(|l| l["outcome"] == outcome && reason.is_none_or(|r| l["reason"] == r))
            .count()
    }
}

#[test]
fn a_wall_clock_step_of_90s_either_way_changes_nothing_on_the_fleet_clock() {
    let Some(lib) = libfaketime() else {
        return;
    };
    let run = step_scenario(&lib, "redis");
    run.assert_never_early_late_or_twice();
    run.assert_none_missed();
    for (name, sign) in [("ahead", 1), ("behind", -1)] {
        let step = run
            .logged_step(name)
            .unwrap_or_else(|| panic!("{name} logged no step"));
        assert!(
            (step - sign * 90_000).abs() < 2_000,
            "{name} logged a step of {step} ms"
        );
        // Still racing, on time, every slot it is a candidate of (won or lost), never skipping.
        let raced = run.raced_after_step(name);
        let owed = run.candidate_slots(name);
        let skipped_over: Vec<&i64> = owed.iter().filter(|s| !raced.contains(s)).collect();
        assert!(
            owed.len() >= 4,
            "{name} is a candidate of {} slots only",
            owed.len()
        );
        assert!(
            skipped_over.is_empty(),
            "{name} did not race slots it is a candidate of: {skipped_over:?} (raced {raced:?})"
        );
        assert_eq!(
            run.settled_after_step(name, "skipped", None),
            0,
            "{name} skipped slots"
        );
    }
}

#[test]
fn a_wall_clock_step_of_90s_either_way_under_clock_local_never_fires_early_or_twice() {
    let Some(lib) = libfaketime() else {
        return;
    };
    let run = step_scenario(&lib, "local");
    run.assert_never_early_late_or_twice();
    // The on-time replicas still run every slot.
    run.assert_none_missed();
    for (name, sign, reason) in [("ahead", 1, "early"), ("behind", -1, "late")] {
        let step = run
            .logged_step(name)
            .unwrap_or_else(|| panic!("{name} logged no step"));
        assert!(
            (step - sign * 90_000).abs() < 2_000,
            "{name} logged a step of {step} ms"
        );
        // 90 s off the fleet clock: the slots it is a candidate of (about 2 in 5 with the
        // default `candidates = 2`) are skipped by the guard at the race, never run; it also
        // leaves the fleet's candidates, so the on-time replicas race all slots.
        assert!(
            run.settled_after_step(name, "skipped", Some(reason)) >= 3,
            "{name}: no {reason} skips"
        );
        assert!(
            run.replica(name).json_lines().iter().any(|l| l["message"]
                .as_str()
                .is_some_and(|m| m.contains("leaves the fleet's candidates"))),
            "{name} did not leave the candidates"
        );
        assert_eq!(
            run.settled_after_step(name, "won", None),
            0,
            "{name} won a slot 90 s off"
        );
    }
}
