//! One Redis node hung (SIGSTOP), dead (SIGKILL) or reached through a link slower than every
//! timeout costs each replica one timeout, once: 5 replica processes, 3 real nodes, a WeCom text
//! job every second with a rate budget, and a local receiver speaking WeCom's answer that
//! timestamps each arrival. Each test checks: no slot missed or doubled; the slots from 2 s after
//! the fault until it ends arrive with a median lateness under the healthy seconds' median plus
//! one node timeout (the fleet does not wait for the broken node on every slot; the p50 and p99
//! are printed, and BENCHMARKS.md measures them against the 60 ms on a release build);
//! each replica whose view the fault touches logs the node's change of state once each way (and
//! the others never); after the fault ends that node is healthy again within a second; and it
//! takes keys again: at least one slot won after that has its key on all three nodes (not
//! every one: see the end of `a_broken_node_costs_one_timeout_once`).

use crate::common;

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use chrono::{DateTime, Utc};
use common::fleet::{FleetToml, wecom_action};
use common::{FaultyProxy, Receiver, RedisCluster, Replica, redis_get, write_config};

const REPLICAS: usize = 5;
/// How long the node stays hung, dead or slow.
const FAULT: Duration = Duration::from_secs(14);
/// The healthy runs before the fault and after it: five slots each, measured as the baseline
/// and as the recovery.
const HEALTHY_BEFORE_AND_AFTER: Duration = Duration::from_secs(5);
/// Slots this long after the fault starts are measured: the first timeouts teach the replicas.
const SETTLE: Duration = Duration::from_secs(2);
/// The behaviour, not a speed: the median lateness during the fault stays below the median
/// before it plus one node timeout (50 ms), because a fleet that still waited for the broken node
/// on every slot would be late by at least that much more on every slot. Measured against the
/// fleet's own healthy seconds, not as an absolute: on a loaded machine (the suite runs many
/// fleets at once) the healthy median alone was 92 ms. The p50 and p99 themselves are printed
/// and kept in BENCHMARKS.md ("One broken Redis node"); the 60 ms p99 target is a
/// benchmark, not a pass condition.
const NODE_TIMEOUT_MS: f64 = 50.0;
/// The bound on "healthy again" after the fault ends. Every replica's heartbeat reaches every
/// node once a second, suspect ones included, and the first answer makes the node healthy; the
/// fault ends at an arbitrary phase of that second, so the mark lands 0 to 1 s after it, plus the
/// heartbeat's round trip and its task's wake-up on a loaded machine (a run here measured 989 and
/// 1001 ms). One heartbeat period plus 250 ms for those; a node kept suspect until something
/// else probed it (the next fleet-clock measurement, a minute) would be far past it.
const RECOVERY: Duration = Duration::from_millis(1250);
/// The node every test breaks.
const BROKEN: usize = 1;
/// A delay past every bound a replica puts on a node's answer (the lease's 1 s is the longest).
const SLOW_LINK: Duration = Duration::from_millis(1500);

/// The tests start 5 replicas each on a 2-core machine: one fleet at a time.
static ONE_FLEET_AT_A_TIME: Mutex<()> = Mutex::new(());

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Fault {
    /// SIGSTOP, then SIGCONT: connections stay open, nothing answers.
    Hang,
    /// SIGKILL, then a fresh empty node on the same port.
    Kill,
    /// Two replicas reach the node through a proxy that delays every request past the timeouts;
    /// at the end the delay is lifted and the proxy's connections dropped.
    SlowLinkForTwo,
}

fn config(nodes: &[String], receiver: &Receiver) -> String {
    let action =
        wecom_action(&receiver.uri(), "ROBOTKEY123456", "tick {{ slot }}") + "\nrate = \"300/min\"";
    FleetToml {
        job: "tick",
        timeout: "5s",
        redis: "",
        action: &action,
        ..FleetToml::new(nodes, &receiver.uri(), "health")
    }
    .render()
}

/// A fleet of replica processes and what the test needs to break and read it.
struct Fleet {
    cluster: RedisCluster,
    receiver: Receiver,
    proxy: Option<FaultyProxy>,
    replicas: Vec<Replica>,
    /// The broken node's address as each replica names it in its logs.
    broken_as_seen: Vec<String>,
    _dir: tempfile::TempDir,
}

impl Fleet {
    fn start(fault: Fault) -> Self {
        let cluster = RedisCluster::start(3);
        let receiver = Receiver::start();
        let dir = tempfile::tempdir().unwrap();
        let direct = write_config(dir.path(), &config(&cluster.urls(), &receiver));
        let proxy =
            (fault == Fault::SlowLinkForTwo).then(|| FaultyProxy::start(cluster[BROKEN].addr()));
        let proxied = proxy.as_ref().map(|p| {
            let mut urls = cluster.urls();
            urls[BROKEN] = p.redis_url();
            common::write_file(dir.path(), "proxied.toml", &config(&urls, &receiver))
        });
        let mut replicas = Vec::new();
        let mut broken_as_seen = Vec::new();
        for i in 0..REPLICAS {
            let (path, port) = match (&proxied, &proxy) {
                (Some(path), Some(p)) if i < 2 => (path, p.port()),
                _ => (&direct, cluster[BROKEN].port()),
            };
            replicas.push(Replica::run(
                path,
                &format!("r{i}"),
                &[("RUST_LOG", "info")],
            ));
            broken_as_seen.push(format!("127.0.0.1:{port}"));
        }
        for r in &replicas {
            r.wait_for_json(Duration::from_secs(20), |l| {
                l["message"] == "slotcron started"
            })
            .expect("replica started");
        }
        Fleet {
            cluster,
            receiver,
            proxy,
            replicas,
            broken_as_seen,
            _dir: dir,
        }
    }

    /// The replicas whose view of the broken node the fault changes.
    fn affected(&self, fault: Fault) -> std::ops::Range<usize> {
        match fault {
            Fault::SlowLinkForTwo => 0..2,
            Fault::Hang | Fault::Kill => 0..REPLICAS,
        }
    }

    fn begin(&self, fault: Fault) {
        match fault {
            Fault::Hang => self.cluster[BROKEN].pause(),
            Fault::Kill => self.cluster[BROKEN].kill(),
            Fault::SlowLinkForTwo => self.proxy.as_ref().unwrap().set_latency(SLOW_LINK),
        }
    }

    fn end(&self, fault: Fault) {
        match fault {
            Fault::Hang => self.cluster[BROKEN].resume(),
            Fault::Kill => self.cluster[BROKEN].restart(),
            Fault::SlowLinkForTwo => {
                let proxy = self.proxy.as_ref().unwrap();
                proxy.set_latency(Duration::ZERO);
                proxy.drop_all();
            }
        }
    }

    fn stop(&self) {
        for r in &self.replicas {
            r.terminate();
        }
        for r in &self.replicas {
            assert!(
                r.wait_timeout(Duration::from_secs(15)).is_some(),
                "{} did not stop",
                r.name()
            );
        }
    }
}

/// Each slot delivered, with the arrival time of each of its deliveries.
fn deliveries(receiver: &Receiver) -> BTreeMap<DateTime<Utc>, Vec<SystemTime>> {
    let mut slots: BTreeMap<DateTime<Utc>, Vec<SystemTime>> = BTreeMap::new();
    for (arrived, request) in receiver.arrivals() {
        let slot = request
            .headers
            .get("x-slotcron-slot")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<DateTime<Utc>>().ok())
            .expect("every send names its slot");
        slots.entry(slot).or_default().push(arrived);
    }
    slots
}

/// The replica that sent each slot.
fn senders(receiver: &Receiver) -> BTreeMap<DateTime<Utc>, String> {
    receiver
        .arrivals()
        .iter()
        .filter_map(|(_, request)| {
            let header = |name: &str| request.headers.get(name)?.to_str().ok();
            let slot = header("x-slotcron-slot")?.parse().ok()?;
            Some((slot, header("x-slotcron-replica")?.to_owned()))
        })
        .collect()
}

fn ms_between(from: SystemTime, to: SystemTime) -> f64 {
    match to.duration_since(from) {
        Ok(d) => d.as_secs_f64() * 1e3,
        Err(e) => -e.duration().as_secs_f64() * 1e3,
    }
}

/// The `q` quantile (nearest rank) of `samples`.
fn quantile(mut samples: Vec<f64>, q: f64) -> f64 {
    samples.sort_by(f64::total_cmp);
    let rank = ((samples.len() as f64) * q).ceil() as usize;
    samples[rank.clamp(1, samples.len()) - 1]
}

/// Whole seconds in `[from, to]`.
fn seconds(from: SystemTime, to: SystemTime) -> Vec<DateTime<Utc>> {
    let from = DateTime::<Utc>::from(from);
    let to = DateTime::<Utc>::from(to);
    let mut t = DateTime::from_timestamp(from.timestamp() + 1, 0).unwrap();
    let mut out = Vec::new();
    while t <= to {
        out.push(t);
        t += chrono::Duration::seconds(1);
    }
    out
}

/// The log time of the first line of `replica` after `after` saying the broken node changed to
/// `state`, and how many such lines there are after `after`.
fn state_changes(
    replica: &Replica,
    node: &str,
    state: &str,
    after: SystemTime,
) -> (Option<SystemTime>, usize) {
    let after = DateTime::<Utc>::from(after);
    let times: Vec<DateTime<Utc>> = replica
        .json_lines()
        .iter()
        .filter(|l| l["state"] == state && l["node"] == node)
        .filter_map(|l| l["timestamp"].as_str()?.parse::<DateTime<Utc>>().ok())
        .filter(|t| *t >= after)
        .collect();
    (times.first().map(|t| SystemTime::from(*t)), times.len())
}

/// The fault, end to end; prints what it measured.
fn a_broken_node_costs_one_timeout_once(fault: Fault) {
    let _serial = ONE_FLEET_AT_A_TIME
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    let fleet = Fleet::start(fault);
    std::thread::sleep(HEALTHY_BEFORE_AND_AFTER);
    let began = SystemTime::now();
    fleet.begin(fault);
    std::thread::sleep(FAULT);
    let ended = SystemTime::now();
    fleet.end(fault);
    std::thread::sleep(HEALTHY_BEFORE_AND_AFTER);
    let stopped = SystemTime::now();
    fleet.stop();

    let slots = deliveries(&fleet.receiver);
    let winners = senders(&fleet.receiver);
    let checked = seconds(
        began - Duration::from_secs(2),
        stopped - Duration::from_millis(1500),
    );
    let missed: Vec<_> = checked.iter().filter(|s| !slots.contains_key(s)).collect();
    let doubled: Vec<_> = slots
        .iter()
        .filter(|(_, a)| a.len() > 1)
        .map(|(s, _)| s)
        .collect();
    assert!(missed.is_empty(), "{fault:?}: slots missed: {missed:?}");
    assert!(doubled.is_empty(), "{fault:?}: slots doubled: {doubled:?}");

    let lateness = |from: SystemTime, to: SystemTime| -> Vec<f64> {
        seconds(from, to)
            .iter()
            .map(|s| ms_between(SystemTime::from(*s), slots[s][0]))
            .collect()
    };
    let healthy = lateness(began - Duration::from_secs(5), began);
    let during = lateness(began + SETTLE, ended);
    let (p50, p99) = (
        quantile(during.clone(), 0.5),
        quantile(during.clone(), 0.99),
    );
    eprintln!(
        "{fault:?}: lateness p50 {p50:.1} ms, p99 {p99:.1} ms over {} slots during the fault; \
         p50 {:.1} ms, p99 {:.1} ms over {} slots before it; {} slots checked",
        during.len(),
        quantile(healthy.clone(), 0.5),
        quantile(healthy.clone(), 0.99),
        healthy.len(),
        checked.len()
    );
    assert!(
        during.len() >= 10,
        "{fault:?}: too few slots measured: {}",
        during.len()
    );
    let healthy_p50 = quantile(healthy.clone(), 0.5);
    assert!(
        p50 < healthy_p50 + NODE_TIMEOUT_MS,
        "{fault:?}: lateness p50 {p50:.1} ms, {healthy_p50:.1} ms before the fault: {during:?}"
    );

    for i in fleet.affected(fault) {
        let node = &fleet.broken_as_seen[i];
        let (_, suspect) = state_changes(&fleet.replicas[i], node, "suspect", began);
        let (healthy_at, healthy) = state_changes(&fleet.replicas[i], node, "healthy", began);
        assert_eq!(
            (suspect, healthy),
            (1, 1),
            "{fault:?}: r{i} must log each change of {node} once"
        );
        let recovered = healthy_at.unwrap();
        let after = ms_between(ended, recovered);
        eprintln!("{fault:?}: r{i} saw {node} healthy {after:.0} ms after the fault ended");
        assert!(
            recovered.duration_since(ended).unwrap_or_default() < RECOVERY,
            "{fault:?}: r{i} saw {node} healthy only {after:.0} ms after the fault ended"
        );
    }
    for i in fleet.affected(fault).end..REPLICAS {
        let (_, changes) = state_changes(
            &fleet.replicas[i],
            &fleet.broken_as_seen[i],
            "suspect",
            began,
        );
        assert_eq!(
            changes, 0,
            "{fault:?}: r{i} reaches the node directly and never saw it fail"
        );
    }

    // The node carries keys again: a slot won after it recovered has the winner's token on all
    // three nodes. Not every slot does: a racer whose SET reached one node first and then lost
    // takes its token back there, leaving that node without the key (the race's usual way).
    let won_after = seconds(ended + RECOVERY, stopped - Duration::from_secs(1));
    let on_all: Vec<bool> = won_after
        .iter()
        .map(|slot| {
            let key = format!("health:tick:{}", slot.timestamp_millis());
            let winner = format!("{}:", winners[slot]);
            fleet
                .cluster
                .iter()
                .all(|node| redis_get(&node.url(), &key).is_some_and(|t| t.starts_with(&winner)))
        })
        .collect();
    eprintln!("{fault:?}: slots won after recovery with the key on all three nodes: {on_all:?}");
    assert!(
        on_all.contains(&true),
        "{fault:?}: no slot won after recovery has its key on all three nodes: {on_all:?}"
    );
}

#[test]
fn a_hung_node_costs_each_replica_one_timeout_and_is_used_again_on_resume() {
    a_broken_node_costs_one_timeout_once(Fault::Hang);
}

#[test]
fn a_killed_node_costs_each_replica_one_timeout_and_is_used_again_on_restart() {
    a_broken_node_costs_one_timeout_once(Fault::Kill);
}

#[test]
fn a_link_slower_than_the_timeouts_costs_two_replicas_one_timeout_and_heals() {
    a_broken_node_costs_one_timeout_once(Fault::SlowLinkForTwo);
}
