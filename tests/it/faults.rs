//! Faults caused for real: Redis nodes killed, paused, restarted empty, answering garbage or
//! reached through a slow and lossy link; replicas SIGKILLed and SIGSTOPped. Each test is named
//! after the fault it causes and checks "each slot runs at most once, and on time while a
//! majority answers".

use crate::common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use common::fleet::{Bed, Fleet, FleetToml, parse};
use common::{FaultyProxy, Receiver, RedisCluster, Replica, wait_until, write_config};
use slotcron::unstable::replica::Replica as SlotcronReplica;
use slotcron::unstable::slot::SlotResult;
use slotcron::unstable::time::schedule::{Slot, SystemClock};

/// The fault tests' fleet: job `fault` at `schedule` with `timeout`, the harness' defaults.
fn fleet_config(
    nodes: &[String],
    receiver: &str,
    prefix: &str,
    schedule: &str,
    timeout: &str,
) -> String {
    FleetToml {
        schedule,
        timeout,
        ..FleetToml::new(nodes, receiver, prefix)
    }
    .render()
}

/// A bound on waiting for slots a fleet surely runs: a slot a second, and a loaded 2-core
/// machine's delays of seconds; only a fleet that stopped running them reaches it.
const PATIENCE: Duration = Duration::from_secs(60);
/// A fault (a node down, hung or slow) held for three slots: each must still run once.
const FAULT_HELD: Duration = Duration::from_secs(3);
/// After a node restarts: the replicas reconnect to it (the pool's next request) before the
/// next node's fault, so only one node is out at a time.
const RECONNECTED: Duration = Duration::from_secs(2);
/// Two of three nodes down this long: four slots that must not run.
const OUTAGE: Duration = Duration::from_secs(4);
/// The lossy link's connection drops: three, 700 ms apart, so they land in different slots'
/// races.
const DROP_EVERY: Duration = Duration::from_millis(700);
/// The SIGSTOPped sender's pause: past its validity (about 8 s here) and the job's timeout
/// (1 s), so the retry it was stopped before is past both when it resumes.
const PAUSED_PAST_VALIDITY: Duration = Duration::from_secs(9);

/// Waits until the fleet has delivered its first slot (at most [`PATIENCE`]).
async fn fleet_delivers(receiver: &Receiver) {
    let first = receiver.wait_for_async(1, PATIENCE).await;
    assert!(!first.is_empty(), "the fleet delivered no slot");
}

/// The slot keys `fault/{second}` for every second in [from, to).
fn expected_keys(from: chrono::DateTime<Utc>, to: chrono::DateTime<Utc>) -> Vec<String> {
    let mut keys = Vec::new();
    let mut t = Slot::at(from).instant() + chrono::Duration::seconds(1);
    while t < to {
        keys.push(format!("fault/{}", Slot::at(t).rfc3339_utc()));
        t += chrono::Duration::seconds(1);
    }
    keys
}

fn missing(receiver: &Receiver, keys: &[String]) -> Vec<String> {
    let counts = receiver.counts_by_idempotency_key();
    keys.iter()
        .filter(|k| !counts.contains_key(*k))
        .cloned()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_of_three_nodes_killed_then_paused_slots_keep_running_once() {
    let cluster = RedisCluster::start(3);
    let receiver = Receiver::start();
    let text = fleet_config(
        &cluster.urls(),
        &receiver.uri(),
        "one-down",
        "* * * * * *",
        "2s",
    );
    let fleet = Fleet::start_named(&text, &["r1", "r2", "r3"]).await;
    fleet_delivers(&receiver).await;
    let from = Utc::now();
    cluster[0].kill();
    tokio::time::sleep(FAULT_HELD).await;
    cluster[0].restart();
    // One node down at a time: give the restarted node a moment to be reconnected.
    tokio::time::sleep(RECONNECTED).await;
    cluster[1].pause();
    tokio::time::sleep(FAULT_HELD).await;
    cluster[1].resume();
    let to = Utc::now() - chrono::Duration::milliseconds(500);
    tokio::time::sleep(common::IN_FLIGHT).await;
    fleet.stop().await;
    let keys = expected_keys(from, to);
    assert!(keys.len() >= 5);
    assert_eq!(
        missing(&receiver, &keys),
        Vec::<String>::new(),
        "slots missed with one node down"
    );
    assert!(
        receiver.duplicate_keys().is_empty(),
        "{:?}",
        receiver.duplicate_keys()
    );
}

#[test]
fn two_of_three_nodes_down_no_slot_runs_and_the_fleet_resumes() {
    let Bed {
        cluster,
        receiver,
        dir: _dir,
        path,
    } = Bed::start(|nodes, receiver| {
        fleet_config(nodes, receiver, "two-down", "* * * * * *", "2s")
    });
    let replicas: Vec<Replica> = ["a", "b"]
        .iter()
        .map(|name| Replica::run(&path, name, &[]))
        .collect();
    assert!(
        receiver.wait_for(2, Duration::from_secs(10)).len() >= 2,
        "no slot ran before the fault"
    );
    cluster[0].kill();
    cluster[1].kill();
    let down_at = Utc::now();
    std::thread::sleep(OUTAGE);
    let outage: Vec<String> =
        expected_keys(down_at + chrono::Duration::milliseconds(200), Utc::now());
    let during = receiver.counts_by_idempotency_key();
    assert!(
        outage.iter().all(|k| !during.contains_key(k)),
        "a slot ran without a majority"
    );
    // Every replica says why, naming the nodes, and keeps running.
    for r in &replicas {
        let unavailable =
            r.wait_for_json(Duration::from_secs(3), |l| l["outcome"] == "unavailable");
        let line = unavailable
            .unwrap_or_else(|| panic!("{} logged no unavailable line: {:?}", r.name(), r.lines()));
        let error = line["error"].as_str().unwrap();
        assert!(
            error.contains(&cluster[0].port().to_string())
                && error.contains(&cluster[1].port().to_string()),
            "{error}"
        );
        assert!(r.is_running());
    }
    cluster[0].restart();
    cluster[1].restart();
    let back_at = Utc::now();
    // Resumes within a slot or two once a majority is back (reconnect backoff is at most 500 ms).
    let resumed = wait_until(Duration::from_secs(5), || {
        receiver
            .counts_by_idempotency_key()
            .keys()
            .any(|k| k.as_str() > format!("fault/{}", Slot::at(back_at).rfc3339_utc()).as_str())
            .then_some(())
    });
    assert!(
        resumed.is_some(),
        "the fleet did not resume after the majority came back"
    );
    assert!(
        receiver.duplicate_keys().is_empty(),
        "{:?}",
        receiver.duplicate_keys()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_restarted_empty_right_after_a_win_gives_no_second_run() {
    let cluster = RedisCluster::start(3);
    let receiver = Receiver::start();
    let text = fleet_config(
        &cluster.urls(),
        &receiver.uri(),
        "empty-restart",
        "* * * * * *",
        "2s",
    );
    let config = parse(&text);
    let job = config.jobs[0].clone();
    let connect = |name: &'static str| {
        let config = parse(&text);
        async move {
            SlotcronReplica::connect(&config, name.to_owned(), Arc::new(SystemClock))
                .await
                .unwrap()
                .context(&config)
        }
    };
    let winner = connect("winner").await;
    let late = connect("late").await;
    let slot = Slot::at(Utc::now());
    assert!(matches!(
        winner.run_slot(&job, slot).await,
        SlotResult::Done { .. }
    ));
    cluster[0].restart(); // empty: this node forgot the slot key
    let result = late.run_slot(&job, slot).await;
    match result {
        SlotResult::Lost { holder } => assert_eq!(holder.replica(), "winner"),
        other => panic!("the late replica must lose to the two nodes that kept the key: {other:?}"),
    }
    assert_eq!(receiver.count(), 1);
}

/// How long the receiver of the SIGKILL test holds each request before it answers: from the
/// request's arrival until then, the sender's action is in flight.
const IN_FLIGHT: Duration = Duration::from_millis(700);

/// The next request after the first `seen`, once it has arrived: its idempotency key, its
/// sender (`X-Slotcron-Replica`) and its arrival on the receiver's clock.
fn next_request(receiver: &Receiver, seen: usize) -> Option<(String, String, DateTime<Utc>)> {
    let (request, arrived) = receiver.received_at().into_iter().nth(seen)?;
    let sender = request.headers.get("x-slotcron-replica")?.to_str().ok()?;
    Some((
        common::idempotency_key(&request)?,
        sender.to_owned(),
        arrived,
    ))
}

/// Three rounds: the replica whose request just arrived is SIGKILLed while the receiver still
/// holds that request ([`IN_FLIGHT`]), so each kill lands mid-run by construction; the test
/// asserts it did (the kill came before the answer could, and the killed replica logged no end
/// of that run). A killed winner's running lease (overlap = "skip") holds the job's next slots
/// until its TTL; then the fleet runs again, and no slot is delivered twice.
#[test]
fn replicas_sigkilled_mid_run_no_slot_runs_twice_and_the_fleet_goes_on() {
    let cluster = RedisCluster::start(3);
    let receiver = Receiver::start();
    receiver.set_delay(IN_FLIGHT);
    let dir = tempfile::tempdir().unwrap();
    let text = fleet_config(
        &cluster.urls(),
        &receiver.uri(),
        "kill",
        "* * * * * *",
        "3s",
    );
    let path = write_config(dir.path(), &text);
    let spawn = |name: &str| Replica::run(&path, name, &[]);
    let mut replicas: Vec<(String, Replica)> = (0..3)
        .map(|i| (format!("r{i}"), spawn(&format!("r{i}"))))
        .collect();
    for round in 0..3 {
        // The next request whose sender is still running (not one killed in an earlier round).
        let mut seen = receiver.count();
        let (key, pos, arrived) = wait_until(Duration::from_secs(15), || {
            let (key, sender, arrived) = next_request(&receiver, seen)?;
            seen += 1;
            let pos = replicas.iter().position(|(id, _)| *id == sender);
            pos.map(|pos| (key, pos, arrived))
        })
        .unwrap_or_else(|| panic!("round {round}: no running replica sent a request"));
        let killed_at = Utc::now();
        replicas[pos].1.kill();
        let held = (killed_at - arrived).to_std().unwrap_or_default();
        assert!(
            held < IN_FLIGHT,
            "round {round}: the kill came {held:?} after {key} arrived, not while it was in flight"
        );
        eprintln!(
            "round {round}: killed {} {held:?} after {key} arrived",
            replicas[pos].0
        );
        let slot = key.trim_start_matches("fault/");
        let ended = replicas[pos].1.json_lines().into_iter().find(|l| {
            l["slot"] == slot && ["done", "failed"].contains(&l["outcome"].as_str().unwrap_or(""))
        });
        assert_eq!(ended, None, "round {round}: the killed run of {key} ended");
        let id = format!("r{pos}-{round}");
        replicas[pos] = (id.clone(), spawn(&id));
    }
    let before = receiver.count();
    let resumed = wait_until(Duration::from_secs(12), || {
        (receiver.count() > before + 1).then_some(())
    });
    assert!(resumed.is_some(), "the fleet stopped after the kills");
    assert!(
        receiver.duplicate_keys().is_empty(),
        "{:?}",
        receiver.duplicate_keys()
    );
}

#[test]
fn a_replica_paused_past_its_validity_does_not_send_on_resume() {
    let cluster = RedisCluster::start(3);
    let receiver = Receiver::start();
    // The first request of a slot gets a 503; the retry comes after a backoff of 125-250 ms, and
    // the replica is SIGSTOPped before it. Its validity (about 8 s here) and the job's timeout
    // (1 s) are gone when it resumes: it must not send that slot again.
    receiver.push_response(503, serde_json::json!({"errcode": -1}));
    let dir = tempfile::tempdir().unwrap();
    let text = fleet_config(
        &cluster.urls(),
        &receiver.uri(),
        "paused-replica",
        "*/3 * * * * *",
        "1s",
    );
    let path = write_config(dir.path(), &text);
    let replica = Replica::run(&path, "sleepy", &[]);
    let first = receiver.wait_for(1, Duration::from_secs(10));
    replica.pause();
    let slot_key = common::idempotency_key(&first[0]).unwrap();
    std::thread::sleep(PAUSED_PAST_VALIDITY);
    replica.resume();
    let failed = replica.wait_for_json(Duration::from_secs(5), |l| l["outcome"] == "failed");
    assert!(
        failed.is_some(),
        "no failed line for the paused slot: {:?}",
        replica.lines()
    );
    // It carries on with later slots...
    assert!(
        receiver.wait_for(2, Duration::from_secs(8)).len() >= 2,
        "no later slot ran"
    );
    // ...and never re-sent the paused one.
    assert_eq!(receiver.counts_by_idempotency_key()[&slot_key], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_and_lossy_link_to_one_node_changes_nothing() {
    let cluster = RedisCluster::start(3);
    let proxy = FaultyProxy::start(cluster[0].addr());
    let receiver = Receiver::start();
    let urls = vec![proxy.redis_url(), cluster[1].url(), cluster[2].url()];
    let text = fleet_config(&urls, &receiver.uri(), "lossy", "* * * * * *", "2s");
    let fleet = Fleet::start_named(&text, &["r1", "r2", "r3"]).await;
    fleet_delivers(&receiver).await;
    let from = Utc::now();
    proxy.set_latency(Duration::from_millis(600)); // far over the 150 ms node timeout
    tokio::time::sleep(FAULT_HELD).await;
    proxy.set_latency(Duration::ZERO);
    for _ in 0..3 {
        proxy.drop_all();
        tokio::time::sleep(DROP_EVERY).await;
    }
    let to = Utc::now() - chrono::Duration::milliseconds(500);
    tokio::time::sleep(common::IN_FLIGHT).await;
    fleet.stop().await;
    let keys = expected_keys(from, to);
    assert_eq!(
        missing(&receiver, &keys),
        Vec::<String>::new(),
        "slots missed through a bad link to one node"
    );
    assert!(
        receiver.duplicate_keys().is_empty(),
        "{:?}",
        receiver.duplicate_keys()
    );
}

/// A TCP server that answers every command with bytes that are not RESP.
fn garbage_node() -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut stream = stream;
                let mut buf = [0u8; 4096];
                while let Ok(n) = stream.read(&mut buf) {
                    if n == 0
                        || stream
                            .write_all(b"%%garbage\xff\xfe\r\n:not-a-number\r\n")
                            .is_err()
                    {
                        break;
                    }
                }
            });
        }
    });
    addr
}

/// Each replica counts the garbage node as failed (its view marks it suspect, logged once with
/// the node's address, and never healthy again) while the two real nodes decide every slot.
#[test]
fn a_node_answering_garbage_counts_as_failed_and_slots_still_run() {
    let cluster = RedisCluster::start(2);
    let receiver = Receiver::start();
    let garbage = garbage_node().to_string();
    let urls = vec![
        format!("redis://{garbage}"),
        cluster[0].url(),
        cluster[1].url(),
    ];
    let dir = tempfile::tempdir().unwrap();
    let text = fleet_config(&urls, &receiver.uri(), "garbage", "* * * * * *", "2s");
    let path = write_config(dir.path(), &text);
    let names = ["r1", "r2"];
    let replicas: Vec<Replica> = names
        .iter()
        .map(|name| Replica::run(&path, name, &[]))
        .collect();
    let ran = receiver.wait_for(3, Duration::from_secs(15)).len();
    for r in &replicas {
        r.terminate();
        assert!(r.wait_timeout(Duration::from_secs(10)).is_some());
    }
    eprintln!("{ran} slots ran with one garbage node of three");
    assert!(ran >= 3, "slots ran with one garbage node: {ran}");
    assert!(
        receiver.duplicate_keys().is_empty(),
        "{:?}",
        receiver.duplicate_keys()
    );
    for (name, r) in names.iter().zip(&replicas) {
        let states: Vec<String> = r
            .json_lines()
            .iter()
            .filter(|l| l["node"] == garbage.as_str())
            .filter_map(|l| Some(l["state"].as_str()?.to_owned()))
            .collect();
        assert_eq!(
            states,
            ["suspect"],
            "{name} must count {garbage} as failed, once: {:?}",
            r.lines()
        );
    }
}

#[test]
fn sigterm_while_an_action_is_in_flight_finishes_it_and_exits_0() {
    let cluster = RedisCluster::start(3);
    let receiver = Receiver::start();
    receiver.set_delay(Duration::from_secs(2));
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(
        dir.path(),
        &fleet_config(
            &cluster.urls(),
            &receiver.uri(),
            "sigterm",
            "* * * * * *",
            "5s",
        ),
    );
    let replica = Replica::run(&path, "draining", &[]);
    let first = receiver.wait_for(1, Duration::from_secs(10));
    let in_flight = common::idempotency_key(&first[0]).unwrap();
    replica.terminate();
    let status = replica.wait_timeout(Duration::from_secs(10));
    assert!(
        status.is_some_and(|s| s.success()),
        "exit after SIGTERM: {status:?}"
    );
    let lines = replica.json_lines();
    let slot = in_flight.trim_start_matches("fault/");
    assert!(
        lines
            .iter()
            .any(|l| l["outcome"] == "done" && l["slot"] == slot),
        "the in-flight slot was not finished: {lines:?}"
    );
    // No slot started after the signal.
    let signal_at = lines
        .iter()
        .position(|l| {
            l["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("signal received"))
        })
        .unwrap();
    assert!(
        lines[signal_at..].iter().all(|l| l["outcome"] != "won"),
        "a slot started after SIGTERM"
    );
}

#[test]
fn a_running_lease_release_that_misses_a_majority_is_reported() {
    // Two of three nodes paused while a run is in flight: at its end the running lease is
    // released on one node only, after asking the others again within the lease's TTL, and
    // the replica says so
    // (the job's next slots would be skipped until the lease's TTL runs out). The command
    // marks its start in a file, after the lease is taken: the nodes are paused once it is
    // there, so the pause lands mid-run by construction (and the test checks the run had not
    // ended then).
    let cluster = RedisCluster::start(3);
    let dir = tempfile::tempdir().unwrap();
    let started = dir.path().join("started");
    let action = format!(
        "type = \"command\"\nshell = \"touch '{}'; sleep 1.5\"",
        started.display()
    );
    let text = FleetToml {
        job: "slow",
        schedule: "*/5 * * * * *",
        timeout: "4s",
        scheduler: "",
        redis: "",
        action: &action,
        ..FleetToml::new(&cluster.urls(), "", "release")
    }
    .render();
    let path = write_config(dir.path(), &text);
    let replica = Replica::run(&path, "solo", &[]);
    let running = wait_until(Duration::from_secs(12), || started.exists().then_some(()));
    assert!(
        running.is_some(),
        "the command never ran: {:?}",
        replica.lines()
    );
    cluster[0].pause();
    cluster[1].pause();
    let won = replica
        .wait_for_json(Duration::from_secs(2), |l| l["outcome"] == "won")
        .unwrap_or_else(|| panic!("no win: {:?}", replica.lines()));
    let ended = |l: &serde_json::Value| l["outcome"] == "done" && l["slot"] == won["slot"];
    assert!(
        !replica.json_lines().iter().any(ended),
        "the run ended before the nodes were paused"
    );
    // The release is asked again while the nodes do not answer, for up to the lease's TTL
    // (`Redlock::release_retrying`), before it is reported: wait that long and more.
    let bound = slotcron::unstable::slot::RUNNING_LEASE_TTL + Duration::from_secs(10);
    let warning = replica.wait_for_json(bound, |l| {
        l["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("the running lease was released on"))
    });
    cluster[0].resume();
    cluster[1].resume();
    let warning = warning.unwrap_or_else(|| panic!("no warning: {:?}", replica.lines()));
    assert_eq!(warning["level"], "WARN");
    assert_eq!(warning["job"], "slow");
    assert_eq!(warning["slot"], won["slot"]);
    assert_eq!(warning["nodes"], 1, "{warning}");
    // The run itself completed: the paused nodes cost the release, not the slot.
    assert!(replica.json_lines().iter().any(ended));
    replica.terminate();
}
