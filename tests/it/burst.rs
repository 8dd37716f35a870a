//! The 09:00 burst: every job of a fleet due in the same second (everyone writes `0 9 * * *`),
//! raced by replica processes of the real binary over 3 real redis-server nodes, delivered to a
//! real local HTTP receiver that counts each (job, slot)'s arrivals.
//!
//! The suite's test is the burst scaled down (a few hundred jobs at one instant on 3
//! replicas): every slot runs once. The benchmark is the same run at full size, ignored by the
//! suite and run by `scripts/bench_burst.sh` (2,000 jobs on 9 replicas, 5,000 on one, with and
//! without `jitter`); it prints the rows of BENCHMARKS.md's "09:00 burst" and asserts nothing
//! about speed.

use crate::common;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use chrono::{DateTime, Timelike, Utc};
use common::fleet::{FleetToml, http_action, job_table};
use common::{FaultyProxy, Receiver, RedisCluster, Replica, write_config};
use serde_json::Value;

/// How long a replica may take to log "slotcron started" on a loaded machine: it reads each
/// job's history once at start (the look-back), a few thousand reads for the benchmark's sizes.
const START_DEADLINE: Duration = Duration::from_secs(120);
/// Between the last replica's start and the slot raced: the replicas' heartbeats list each
/// other on the nodes (a second apart) and the fleet clock is measured, so every replica ranks
/// the same candidates.
const SETTLE: chrono::TimeDelta = chrono::TimeDelta::seconds(4);
/// How long after its last expected arrival a slot's second send would still show: a handoff
/// or a second winner sends within the key's lifetime, seconds, not this long.
const DUPLICATE_WATCH: Duration = Duration::from_secs(5);

/// How often the burst's jobs are due: the suite's test takes the first instant after the
/// fleet is up (once a minute, at a second picked ahead); the benchmark one instant of the hour
/// (a `jitter` of a minute needs an interval longer than a minute).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Cadence {
    Minutely,
    Hourly,
}

/// One burst: `jobs` http jobs due at the same instant on `replicas` replica processes.
struct Burst {
    jobs: usize,
    replicas: usize,
    /// The jobs' `jitter` (e.g. `"60s"`), or none.
    jitter: Option<String>,
    cadence: Cadence,
    /// The replica binary (the benchmark may name a release build).
    binary: String,
    /// Each node reached through a proxy that holds every 16 KiB the replica sends this long
    /// (a slow link: a request costs about this much, a pipeline of N bytes N / 16 KiB times
    /// it); zero for direct connections.
    link_delay: Duration,
    /// `[redis]` lines beside `nodes`.
    redis: &'static str,
}

impl Burst {
    /// The jobs' cron expression for the instant `at`, in UTC.
    fn cron(&self, at: DateTime<Utc>) -> String {
        match self.cadence {
            Cadence::Minutely => format!("{} * * * * *", at.second()),
            Cadence::Hourly => format!("{} {} * * * *", at.second(), at.minute()),
        }
    }

    /// jobs.toml: `jobs` http jobs named `b0000`, … due at `cron`, posting to `receiver`.
    fn config(&self, nodes: &[String], receiver: &str, prefix: &str, cron: &str) -> String {
        let jitter = (self.jitter.as_ref()).map_or(String::new(), |j| format!("jitter = {j:?}\n"));
        let action = http_action(&format!("{receiver}/hook")) + "\nbody = \"x\"";
        let jobs: String = (0..self.jobs)
            .map(|j| job_table(&format!("b{j:04}"), cron, "", &jitter, &action))
            .collect();
        FleetToml {
            job: "",
            scheduler: "",
            redis: self.redis,
            rest: &jobs,
            ..FleetToml::new(nodes, receiver, prefix)
        }
        .render()
    }

    /// The benchmark row's name.
    fn name(&self) -> String {
        let jitter = self.jitter.as_deref().unwrap_or("none");
        format!(
            "{} jobs x {} replica(s), jitter {jitter}",
            self.jobs, self.replicas
        )
    }
}

/// A burst's fleet: 3 nodes, the receiver, the replicas, and the instant they all race.
struct Fleet {
    cluster: RedisCluster,
    /// The slow links, when the burst has them (stopped with the fleet).
    _links: Vec<FaultyProxy>,
    receiver: Receiver,
    replicas: Vec<Replica>,
    slot: DateTime<Utc>,
    _dir: tempfile::TempDir,
}

impl Fleet {
    /// Starts the fleet of `burst` on a fresh prefix, `lead` before the burst's instant.
    fn start(burst: &Burst, prefix: &str, lead: chrono::TimeDelta) -> Fleet {
        let cluster = RedisCluster::start(3);
        let (links, urls) = links(&cluster, burst.link_delay);
        let receiver = Receiver::start();
        let dir = tempfile::tempdir().unwrap();
        let planned = whole_second(Utc::now() + lead);
        let cron = burst.cron(planned);
        let text = burst.config(&urls, &receiver.uri(), prefix, &cron);
        let path = write_config(dir.path(), &text);
        let replicas = start_replicas(&burst.binary, &path, burst.replicas);
        let slot = first_slot_after(burst.cadence, planned, Utc::now() + SETTLE);
        assert!(
            slot == planned || burst.cadence == Cadence::Minutely,
            "the replicas took longer than the lead ({lead}) to start: give a longer one"
        );
        Fleet {
            cluster,
            _links: links,
            receiver,
            replicas,
            slot,
            _dir: dir,
        }
    }

    /// The arrivals of the burst's slot, by `Idempotency-Key`, each with its arrival time.
    fn arrivals(&self) -> BTreeMap<String, Vec<DateTime<Utc>>> {
        let mut by_key: BTreeMap<String, Vec<DateTime<Utc>>> = BTreeMap::new();
        for (request, at) in self.receiver.received_at() {
            let header = |name: &str| {
                let value = request.headers.get(name)?;
                value.to_str().ok().map(str::to_owned)
            };
            let slot = header("x-slotcron-slot").and_then(|s| s.parse::<DateTime<Utc>>().ok());
            if let (Some(key), Some(slot)) = (header("idempotency-key"), slot)
                && slot == self.slot
            {
                by_key.entry(key).or_default().push(at);
            }
        }
        by_key
    }

    /// Waits until every job's slot arrived (or `deadline` passed), then `DUPLICATE_WATCH`
    /// more, so a second send would be counted.
    fn wait_for_every_slot(&self, jobs: usize, deadline: Duration) {
        common::wait_until(deadline, || (self.arrivals().len() >= jobs).then_some(()));
        std::thread::sleep(DUPLICATE_WATCH);
    }

    /// What the replicas logged for the burst's slot: each `outcome` (a skip with its
    /// `reason`) and how many lines said it, over the fleet.
    fn logged(&self) -> BTreeMap<String, usize> {
        let mut outcomes = BTreeMap::new();
        for line in self.slot_lines() {
            let outcome = line["outcome"].as_str().unwrap_or_default();
            let outcome = match line["reason"].as_str() {
                Some(reason) if outcome == "skipped" => format!("skipped ({reason})"),
                _ => outcome.to_owned(),
            };
            *outcomes.entry(outcome).or_default() += 1;
        }
        outcomes
    }

    /// The replicas' JSON lines about the burst's slot.
    fn slot_lines(&self) -> Vec<Value> {
        let slot = |line: &Value| {
            let at = line["slot"].as_str()?.parse::<DateTime<Utc>>().ok()?;
            (at == self.slot).then_some(())
        };
        let lines = self.replicas.iter().flat_map(Replica::json_lines);
        lines.filter(|line| slot(line).is_some()).collect()
    }

    /// Stops every replica with SIGTERM and waits for each to exit.
    fn stop(&self) {
        for replica in &self.replicas {
            replica.terminate();
        }
        for replica in &self.replicas {
            if replica.wait_timeout(Duration::from_secs(30)).is_none() {
                replica.kill();
            }
        }
    }
}

/// The URLs the replicas reach the nodes by: direct, or through a proxy each that holds every
/// chunk sent upstream `delay` long.
fn links(cluster: &RedisCluster, delay: Duration) -> (Vec<FaultyProxy>, Vec<String>) {
    if delay.is_zero() {
        return (Vec::new(), cluster.urls());
    }
    let proxies: Vec<FaultyProxy> = cluster
        .iter()
        .map(|n| FaultyProxy::start(n.addr()))
        .collect();
    for proxy in &proxies {
        proxy.set_latency(delay);
    }
    let urls = proxies.iter().map(FaultyProxy::redis_url).collect();
    (proxies, urls)
}

fn whole_second(at: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp(at.timestamp(), 0).unwrap()
}

/// The first instant of `cadence` through `planned` at or after `after`.
fn first_slot_after(
    cadence: Cadence,
    planned: DateTime<Utc>,
    after: DateTime<Utc>,
) -> DateTime<Utc> {
    let step = match cadence {
        Cadence::Minutely => chrono::TimeDelta::minutes(1),
        Cadence::Hourly => chrono::TimeDelta::hours(1),
    };
    let mut slot = planned;
    while slot < after {
        slot += step;
    }
    slot
}

/// Starts `n` replicas (`burst-0`, …) of `config` and waits until each has started.
fn start_replicas(binary: &str, config: &Path, n: usize) -> Vec<Replica> {
    let replicas: Vec<Replica> = (0..n)
        .map(|i| {
            let mut cmd = std::process::Command::new(binary);
            cmd.args(["run", "--log-format", "json", "--replica-id"]);
            cmd.arg(format!("burst-{i}")).arg("--config").arg(config);
            cmd.env("RUST_LOG", "info");
            Replica::spawn_cmd(&format!("burst-{i}"), cmd)
        })
        .collect();
    for replica in &replicas {
        let started = replica.wait_for_json(START_DEADLINE, |l| l["message"] == "slotcron started");
        assert!(started.is_some(), "{} did not start", replica.name());
    }
    replicas
}

/// Runs `burst` (once a minute, its instant picked 12 s ahead: a guess at the start-up time;
/// a slower start takes the next minute's slot) and checks that every job's slot was
/// delivered exactly once and run by a winner, none skipped late, unavailable, failed or
/// handed off.
fn every_slot_once(burst: &Burst, prefix: &str) {
    let fleet = Fleet::start(burst, prefix, chrono::TimeDelta::seconds(12));
    // The slot's sends all start inside its start window; a minute covers a loaded machine.
    let wait = (fleet.slot - Utc::now()).to_std().unwrap_or_default() + Duration::from_secs(60);
    fleet.wait_for_every_slot(burst.jobs, wait);
    fleet.stop();
    let arrivals = fleet.arrivals();
    let logged = fleet.logged();
    let twice: Vec<&String> = (arrivals.iter())
        .filter(|(_, a)| a.len() > 1)
        .map(|(k, _)| k)
        .collect();
    assert_eq!(
        arrivals.len(),
        burst.jobs,
        "slots delivered (replicas logged {logged:?})"
    );
    assert!(twice.is_empty(), "delivered twice: {twice:?}");
    assert_eq!(
        logged.get("done"),
        Some(&burst.jobs),
        "runs done: {logged:?}"
    );
    for outcome in ["skipped (late)", "unavailable", "failed", "handed_off"] {
        assert_eq!(logged.get(outcome), None, "{outcome} in {logged:?}");
    }
}

/// A few hundred jobs due in the same second on 3 replica processes over 3 nodes: every
/// job's slot is delivered exactly once. The burst's batch (one race per node for every job
/// due at the instant) is what keeps this to one round trip per node per replica.
#[test]
fn a_burst_of_jobs_due_in_the_same_second_runs_every_slot_once() {
    let _heavy = common::heavy();
    // 300 jobs: a tenth of the benchmark's, enough that the batch is hundreds of keys per
    // node and the sends hundreds of connections at once, cheap on a busy debug build.
    let burst = Burst {
        jobs: 300,
        replicas: 3,
        jitter: None,
        cadence: Cadence::Minutely,
        binary: env!("CARGO_BIN_EXE_slotcron").to_owned(),
        link_delay: Duration::ZERO,
        redis: "",
    };
    every_slot_once(&burst, "burst-suite");
}

/// The benchmark's 5,000 jobs on one replica, scaled: 2,000 jobs at one instant on one
/// replica, whose race is one batch of 2,000 keys per node, over links that hold each 16 KiB
/// sent 25 ms (a request costs 25 ms, the batch's 250 KB about 400 ms), `node_timeout =
/// "200ms"`. Every slot runs once: a node that answers the batch piece by piece is not timed
/// out, however large the batch. (One pipeline for the whole batch, bounded by the node
/// timeout, timed out on every node, every attempt: all 2,000 slots `unavailable`, as all
/// 5,000 were in the benchmark on direct links and the default 50 ms.)
#[test]
fn a_batch_larger_than_a_node_answers_in_its_timeout_still_runs_every_slot_once() {
    let _heavy = common::heavy();
    let burst = Burst {
        jobs: 2000,
        replicas: 1,
        jitter: None,
        cadence: Cadence::Minutely,
        binary: env!("CARGO_BIN_EXE_slotcron").to_owned(),
        // 25 ms a chunk, against 200 ms: a single request's round trip has 175 ms to spare
        // on a loaded machine, and the whole batch's 250 KB (16 chunks) takes twice the
        // timeout even on an idle one.
        link_delay: Duration::from_millis(25),
        redis: "node_timeout = \"200ms\"",
    };
    every_slot_once(&burst, "burst-links");
}

// ---------------------------------------------------------------------------------------------
// The benchmark: `scripts/bench_burst.sh` (BENCHMARKS.md, "09:00 burst").

/// One sample of a node's counters: commands processed and CPU seconds so far.
#[derive(Clone, Copy, Default)]
struct NodeSample {
    commands: u64,
    cpu: f64,
}

/// `INFO stats` and `INFO cpu` of the node at `url`, read on `connection`.
fn node_sample(connection: &mut redis::Connection) -> NodeSample {
    let info: String = redis::cmd("INFO")
        .arg("stats")
        .arg("cpu")
        .query(connection)
        .unwrap_or_default();
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    NodeSample {
        commands: field("total_commands_processed") as u64,
        cpu: field("used_cpu_sys") + field("used_cpu_user"),
    }
}

/// Samples every node at each whole second until told to stop: the per-second command rates
/// and the nodes' CPU come from the differences.
struct Sampler {
    stop: mpsc::Sender<()>,
    thread: JoinHandle<Vec<(DateTime<Utc>, Vec<NodeSample>)>>,
}

impl Sampler {
    fn start(urls: Vec<String>) -> Sampler {
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            let mut connections: Vec<redis::Connection> = urls
                .iter()
                .map(|u| {
                    redis::Client::open(u.as_str())
                        .unwrap()
                        .get_connection()
                        .unwrap()
                })
                .collect();
            let mut samples = Vec::new();
            loop {
                let now = Utc::now();
                samples.push((now, connections.iter_mut().map(node_sample).collect()));
                let next = whole_second(now) + chrono::TimeDelta::seconds(1);
                let wait = (next - Utc::now()).to_std().unwrap_or_default();
                if stopped.recv_timeout(wait) != Err(mpsc::RecvTimeoutError::Timeout) {
                    return samples;
                }
            }
        });
        Sampler { stop, thread }
    }

    /// Stops sampling; returns (peak commands a second over the nodes, the busiest node's
    /// peak, every command over the nodes, the nodes' CPU seconds) between `from` and `to`.
    fn finish(self, from: DateTime<Utc>, to: DateTime<Utc>) -> NodeLoad {
        let _ = self.stop.send(());
        let samples = self.thread.join().unwrap();
        let inside: Vec<_> = samples
            .iter()
            .filter(|(at, _)| *at >= from && *at <= to)
            .collect();
        let (mut peak, mut node_peak, mut total) = (0, 0, 0);
        for pair in inside.windows(2) {
            let deltas = pair[0]
                .1
                .iter()
                .zip(&pair[1].1)
                .map(|(a, b)| b.commands - a.commands);
            let deltas: Vec<u64> = deltas.collect();
            peak = peak.max(deltas.iter().sum());
            total += deltas.iter().sum::<u64>();
            node_peak = node_peak.max(deltas.into_iter().max().unwrap_or(0));
        }
        let cpu = match (inside.first(), inside.last()) {
            (Some(a), Some(b)) => b.1.iter().zip(&a.1).map(|(b, a)| b.cpu - a.cpu).sum(),
            _ => 0.0,
        };
        NodeLoad {
            peak: (peak, node_peak),
            total,
            cpu,
        }
    }
}

/// What the 3 nodes did over a burst's window.
struct NodeLoad {
    /// Peak commands a second over the nodes, and the busiest node's.
    peak: (u64, u64),
    /// Every command over the nodes (the sampler's `INFO`s included: 3 a second).
    total: u64,
    /// The nodes' CPU seconds.
    cpu: f64,
}

/// p50 and p99 of `samples` (milliseconds), NaN when empty.
fn p50_p99(samples: &mut [f64]) -> (f64, f64) {
    if samples.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    samples.sort_by(|a, b| a.total_cmp(b));
    let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize];
    (at(0.5), at(0.99))
}

/// Each won slot's delay (`jitter_ms` of its `won` line) by job, when the replicas log one.
fn delays(lines: &[Value]) -> HashMap<String, i64> {
    lines
        .iter()
        .filter(|l| l["outcome"] == "won")
        .filter_map(|l| Some((l["job"].as_str()?.to_owned(), l["jitter_ms"].as_i64()?)))
        .collect()
}

/// The numbers of one burst, as BENCHMARKS.md's row shows them.
struct Measured {
    run: usize,
    duplicated: usize,
    /// Arrival minus the nominal instant, p50 and p99 (ms).
    lateness: (f64, f64),
    /// The winners' own `lateness_ms` as each run started (their `done` lines): the receiver's
    /// lateness less the send and the receiver's own queue.
    run_started: (f64, f64),
    /// Arrival minus the delayed instant (nominal + `jitter_ms`), when delays are logged.
    past_delay: Option<(f64, f64)>,
    /// The busiest second's sends, and how many seconds had sends.
    busiest_second: (usize, usize),
    nodes: NodeLoad,
    /// Replica CPU seconds over the window: the fleet's sum and the busiest replica's.
    replica_cpu: (f64, f64),
    /// The largest peak RSS of a replica (KiB).
    peak_rss: u64,
    logged: BTreeMap<String, usize>,
}

/// Lateness, delays and the sends-per-second histogram, from the burst's arrivals.
fn arrivals_measured(fleet: &Fleet, measured: &mut Measured) {
    let arrivals = fleet.arrivals();
    let delays = delays(&fleet.slot_lines());
    let (mut late, mut past, mut seconds) = (Vec::new(), Vec::new(), BTreeMap::new());
    for (key, times) in &arrivals {
        let first = *times.iter().min().unwrap();
        let ms = (first - fleet.slot).num_microseconds().unwrap() as f64 / 1e3;
        late.push(ms);
        let job = key.split_once('/').map_or(key.as_str(), |(job, _)| job);
        if let Some(delay) = delays.get(job) {
            past.push(ms - *delay as f64);
        }
        for at in times {
            *seconds.entry(at.timestamp()).or_insert(0usize) += 1;
        }
    }
    measured.run = arrivals.len();
    measured.duplicated = arrivals.values().filter(|t| t.len() > 1).count();
    measured.lateness = p50_p99(&mut late);
    let mut started: Vec<f64> = (fleet.slot_lines().iter())
        .filter(|l| l["outcome"] == "done")
        .filter_map(|l| l["lateness_ms"].as_f64())
        .collect();
    measured.run_started = p50_p99(&mut started);
    measured.past_delay = (!past.is_empty()).then(|| p50_p99(&mut past));
    measured.busiest_second = (seconds.values().copied().max().unwrap_or(0), seconds.len());
}

/// Runs one burst at full size and measures it.
fn measure_burst(burst: &Burst, lead: chrono::TimeDelta) -> Measured {
    let prefix = format!("burst-{}", Utc::now().timestamp_millis());
    let fleet = Fleet::start(burst, &prefix, lead);
    let sampler = Sampler::start(fleet.cluster.urls());
    let from = fleet.slot - chrono::TimeDelta::seconds(2);
    std::thread::sleep((from - Utc::now()).to_std().unwrap_or_default());
    let before: Vec<f64> = fleet
        .replicas
        .iter()
        .map(|r| common::usage(r.pid()).0)
        .collect();
    let jitter = burst
        .jitter
        .as_deref()
        .map_or(Duration::ZERO, |j| humantime::parse_duration(j).unwrap());
    let deadline =
        (fleet.slot - Utc::now()).to_std().unwrap_or_default() + jitter + Duration::from_secs(120);
    fleet.wait_for_every_slot(burst.jobs, deadline);
    let after: Vec<(f64, u64)> = fleet
        .replicas
        .iter()
        .map(|r| common::usage(r.pid()))
        .collect();
    let to = Utc::now();
    let nodes = sampler.finish(from, to);
    fleet.stop();
    let cpu: Vec<f64> = after.iter().zip(&before).map(|((a, _), b)| a - b).collect();
    let mut measured = Measured {
        run: 0,
        duplicated: 0,
        lateness: (0.0, 0.0),
        run_started: (0.0, 0.0),
        past_delay: None,
        busiest_second: (0, 0),
        nodes,
        replica_cpu: (cpu.iter().sum(), cpu.iter().copied().fold(0.0, f64::max)),
        peak_rss: after.iter().map(|(_, rss)| *rss).max().unwrap_or(0),
        logged: fleet.logged(),
    };
    arrivals_measured(&fleet, &mut measured);
    explain(&fleet.slot_lines());
    if let Ok(dir) = std::env::var("SLOTCRON_BURST_KEEP_LOGS") {
        let name = format!(
            "{}x{}-{}",
            burst.jobs,
            burst.replicas,
            burst.jitter.as_deref().unwrap_or("none")
        );
        keep_logs(&fleet, &Path::new(&dir).join(name));
    }
    measured
}

/// Prints (to stderr) the replicas' lines about the slot that are neither a race's nor a
/// run's plain verdict, grouped by what they say: why a slot did not run, when one did not.
fn explain(lines: &[Value]) {
    let mut said: BTreeMap<String, usize> = BTreeMap::new();
    let plain = ["won", "lost", "done", "standby"];
    for line in lines
        .iter()
        .filter(|l| !plain.contains(&l["outcome"].as_str().unwrap_or("")))
    {
        let what = format!("{} {} {}", line["level"], line["message"], line["error"]);
        *said.entry(what.chars().take(240).collect()).or_default() += 1;
    }
    for (what, count) in said {
        eprintln!("burst: {count} x {what}");
    }
}

/// Writes each replica's captured lines to `dir/burst-N.log`.
fn keep_logs(fleet: &Fleet, dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    for replica in &fleet.replicas {
        let path = dir.join(format!("{}.log", replica.name()));
        std::fs::write(&path, replica.lines().join("\n")).unwrap();
    }
    eprintln!("burst: replica logs kept in {}", dir.display());
}

/// The row of one burst in BENCHMARKS.md's table.
fn row(burst: &Burst, m: &Measured) -> String {
    let ms = |(a, b): (f64, f64)| format!("{a:.0} / {b:.0} ms");
    let past = m.past_delay.map_or("n/a".to_owned(), ms);
    let logged: Vec<String> = m.logged.iter().map(|(k, v)| format!("{k} {v}")).collect();
    format!(
        "| {} | {} | {} | {} | {} | {} | {} | {} | {} of {} s: {:.1} % | {} ({} busiest node) | {:.1} | {:.2} s | {:.2} s ({:.2} s busiest) | {:.1} MiB | {} |",
        burst.name(),
        burst.jobs,
        m.run,
        burst.jobs.saturating_sub(m.run),
        m.duplicated,
        ms(m.lateness),
        ms(m.run_started),
        past,
        m.busiest_second.0,
        m.busiest_second.1,
        100.0 * m.busiest_second.0 as f64 / m.run.max(1) as f64,
        m.nodes.peak.0,
        m.nodes.peak.1,
        m.nodes.total as f64 / burst.jobs as f64,
        m.nodes.cpu,
        m.replica_cpu.0,
        m.replica_cpu.1,
        m.peak_rss as f64 / 1024.0,
        logged.join(", "),
    )
}

fn load_average() -> String {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    text.split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The bursts the benchmark runs: `SLOTCRON_BURST` (`2000x9,5000x1` by default) times
/// `SLOTCRON_BURST_JITTER` (`none` by default; e.g. `none,60s`).
fn bursts() -> Vec<Burst> {
    let sizes = std::env::var("SLOTCRON_BURST").unwrap_or("2000x9,5000x1".into());
    let jitters = std::env::var("SLOTCRON_BURST_JITTER").unwrap_or("none".into());
    let binary =
        std::env::var("SLOTCRON_BURST_BINARY").unwrap_or(env!("CARGO_BIN_EXE_slotcron").to_owned());
    let mut bursts = Vec::new();
    for jitter in jitters.split(',').map(str::trim) {
        for size in sizes.split(',') {
            let (jobs, replicas) = size.trim().split_once('x').expect("SIZE is JOBSxREPLICAS");
            bursts.push(Burst {
                jobs: jobs.parse().unwrap(),
                replicas: replicas.parse().unwrap(),
                jitter: (jitter != "none").then(|| jitter.to_owned()),
                cadence: Cadence::Hourly,
                binary: binary.clone(),
                link_delay: Duration::ZERO,
                redis: "",
            });
        }
    }
    bursts
}

/// BENCHMARKS.md's "09:00 burst": each burst of [`bursts`] in turn, its fleet started
/// `SLOTCRON_BURST_LEAD` seconds (default 40) before the instant; prints the table.
#[test]
#[ignore = "a benchmark: scripts/bench_burst.sh"]
fn burst_benchmark() {
    let lead: i64 = std::env::var("SLOTCRON_BURST_LEAD").map_or(40, |v| v.parse().unwrap());
    let mut rows = vec![
        "| burst | slots | run | missed | duplicated | lateness p50 / p99 | run started (replica's lateness_ms) p50 / p99 | past the delay p50 / p99 | busiest second (sends) | peak Redis commands/s (3 nodes) | Redis commands/slot | Redis CPU | replica CPU (fleet) | peak RSS (largest replica) | replicas logged | load average before |".to_owned(),
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|".to_owned(),
    ];
    for burst in bursts() {
        let load = load_average();
        eprintln!("burst: {} (load average {load})", burst.name());
        let measured = measure_burst(&burst, chrono::TimeDelta::seconds(lead));
        rows.push(format!("{} {load} |", row(&burst, &measured)));
        eprintln!("{}", rows.last().unwrap());
    }
    println!("{}", rows.join("\n"));
}
