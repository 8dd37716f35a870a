//! slotcron against the peers users would pick instead, side by side in one run.
//!
//!     cargo bench --bench peers                       # everything (about 5 minutes)
//!     SLOTCRON_BENCH=race,lateness cargo bench --bench peers
//!     SLOTCRON_BENCH_QUICK=1 cargo bench --bench peers  # a short smoke run
//!
//! Starts its own 3 redis-server nodes on free ports and stops them at the end. Prints one
//! markdown table; BENCHMARKS.md holds the latest one with its reading.

use std::collections::HashMap;
use std::net::TcpListener as StdListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use chrono::{DateTime, Utc};
use slotcron::lock::{Acquire, LockConfig, NodeUrl, Redlock, SlotKey};
use slotcron::schedule::{SharedClock, Slot, SystemClock};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

fn quick() -> bool {
    std::env::var("SLOTCRON_BENCH_QUICK").is_ok()
}

fn wanted(section: &str) -> bool {
    std::env::var("SLOTCRON_BENCH").map_or(true, |s| s.split(',').any(|x| x.trim() == section))
}

fn free_port() -> u16 {
    StdListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Node {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Node {
    fn start() -> Node {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let child = Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
            ])
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server");
        for _ in 0..500 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Node {
            child,
            port,
            _dir: dir,
        }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// p50, p99 and max of `samples`, in the unit given.
fn percentiles(samples: &mut [f64]) -> (f64, f64, f64) {
    samples.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize];
    (at(0.5), at(0.99), *samples.last().unwrap())
}

struct Table {
    rows: Vec<String>,
}

impl Table {
    fn row(&mut self, cells: &[String]) {
        self.rows.push(format!("| {} |", cells.join(" | ")));
    }
}

// ---------------------------------------------------------------------------------------------
// 1. The race

async fn race(nodes: &[Node], table: &mut Table) {
    let attempts = if quick() { 2_000 } else { 10_000 };
    let urls: Vec<NodeUrl> = nodes
        .iter()
        .map(|n| NodeUrl::parse(&n.url()).unwrap())
        .collect();
    let config = LockConfig {
        node_timeout: Duration::from_millis(50),
        retry_count: 0,
        retry_delay: Duration::from_millis(40),
    };
    let ours = Redlock::new(&urls, "bench", config.clone(), None).unwrap();
    let holder = Redlock::new(&urls, "holder", config, None).unwrap();
    let mut rslock = rslock::LockManager::new(nodes.iter().map(|n| n.url()).collect::<Vec<_>>());
    rslock.set_retry(1, Duration::from_millis(40));
    let floor_client = redis::Client::open(nodes[0].url()).unwrap();
    let mut floor = floor_client
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let ttl = Duration::from_secs(30);

    // Keys already held, for the losses.
    let held = SlotKey::new("bench", "held", Slot::at(Utc::now()));
    assert!(matches!(
        holder.acquire(&held, Duration::from_secs(600)).await,
        Acquire::Won(_)
    ));
    let rs_held = format!("rs-held-{}", std::process::id());
    let _guard = rslock
        .lock(rs_held.as_bytes(), Duration::from_secs(600))
        .await
        .unwrap();

    // Warm-up.
    for i in 0..200 {
        let _ = ours
            .acquire(
                &SlotKey::new(
                    "warm",
                    "x",
                    Slot::at(DateTime::from_timestamp(i, 0).unwrap()),
                ),
                ttl,
            )
            .await;
        let _ = rslock.lock(format!("warm-{i}").as_bytes(), ttl).await;
    }

    let mut samples: HashMap<&str, Vec<f64>> = HashMap::new();
    let batch = 500;
    let mut n = 0i64;
    while (n as usize) < attempts {
        // Interleaved batches, so machine noise hits every contender alike.
        for _ in 0..batch {
            n += 1;
            let key = SlotKey::new(
                "bench",
                "fresh",
                Slot::at(DateTime::from_timestamp(1_700_000_000 + n, 0).unwrap()),
            );
            let t = Instant::now();
            let won = matches!(ours.acquire(&key, ttl).await, Acquire::Won(_));
            samples
                .entry("slotcron acquire")
                .or_default()
                .push(t.elapsed().as_secs_f64() * 1e3);
            assert!(won);
            let t = Instant::now();
            let lost = matches!(ours.acquire(&held, ttl).await, Acquire::Lost { .. });
            samples
                .entry("slotcron lose")
                .or_default()
                .push(t.elapsed().as_secs_f64() * 1e3);
            assert!(lost);
            let t = Instant::now();
            let ok = rslock
                .lock(format!("rs-fresh-{n}").as_bytes(), ttl)
                .await
                .is_ok();
            samples
                .entry("rslock acquire")
                .or_default()
                .push(t.elapsed().as_secs_f64() * 1e3);
            assert!(ok);
            let t = Instant::now();
            let err = rslock.lock(rs_held.as_bytes(), ttl).await.is_err();
            samples
                .entry("rslock lose")
                .or_default()
                .push(t.elapsed().as_secs_f64() * 1e3);
            assert!(err);
            let t = Instant::now();
            let _: Option<String> = redis::cmd("SET")
                .arg(format!("floor-{n}"))
                .arg("x")
                .arg("NX")
                .arg("PX")
                .arg(30_000)
                .query_async(&mut floor)
                .await
                .unwrap();
            samples
                .entry("single SET NX PX (floor)")
                .or_default()
                .push(t.elapsed().as_secs_f64() * 1e3);
        }
    }
    let mut p50 = HashMap::new();
    for name in [
        "slotcron acquire",
        "rslock acquire",
        "slotcron lose",
        "rslock lose",
        "single SET NX PX (floor)",
    ] {
        let s = samples.get_mut(name).unwrap();
        let count = s.len();
        let (a, b, c) = percentiles(s);
        p50.insert(name, a);
        table.row(&[
            format!("race: {name}"),
            format!("{count} attempts"),
            format!("p50 {a:.3} ms"),
            format!("p99 {b:.3} ms"),
            format!("max {c:.3} ms"),
        ]);
    }
    table.row(&[
        "race: ratios".into(),
        format!(
            "acquire p50 slotcron/rslock = {:.2}",
            p50["slotcron acquire"] / p50["rslock acquire"]
        ),
        format!(
            "lose p50 slotcron/rslock = {:.2}",
            p50["slotcron lose"] / p50["rslock lose"]
        ),
        format!(
            "lose p50 / floor = {:.2}",
            p50["slotcron lose"] / p50["single SET NX PX (floor)"]
        ),
        String::new(),
    ]);
}

// ---------------------------------------------------------------------------------------------
// A receiver that stamps each request's arrival (wall clock) with its slot and key.

#[derive(Default)]
struct Arrivals {
    /// (idempotency key, slot, arrival)
    seen: Vec<(String, DateTime<Utc>, DateTime<Utc>)>,
}

async fn receiver() -> (u16, Arc<Mutex<Arrivals>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let arrivals = Arc::new(Mutex::new(Arrivals::default()));
    let shared = arrivals.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let _ = stream.set_nodelay(true);
            tokio::spawn(serve(stream, shared.clone()));
        }
    });
    (port, arrivals)
}

async fn serve(mut stream: tokio::net::TcpStream, arrivals: Arc<Mutex<Arrivals>>) {
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    loop {
        let Some(end) = find(&buf, b"\r\n\r\n") else {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
            continue;
        };
        let arrived = Utc::now();
        let head = String::from_utf8_lossy(&buf[..end]).to_string();
        let header = |name: &str| {
            head.lines().find_map(|l| {
                l.split_once(':')
                    .filter(|(k, _)| k.eq_ignore_ascii_case(name))
                    .map(|(_, v)| v.trim().to_owned())
            })
        };
        let length: usize = header("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        while buf.len() < end + 4 + length {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        if let (Some(key), Some(slot)) = (header("idempotency-key"), header("x-slotcron-slot")) {
            if let Ok(slot) = slot.parse::<DateTime<Utc>>() {
                arrivals.lock().unwrap().seen.push((key, slot, arrived));
            }
        }
        buf.drain(..end + 4 + length);
        let body = br#"{"errcode":0,"errmsg":"ok"}"#;
        let response = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        if stream.write_all(response.as_bytes()).await.is_err()
            || stream.write_all(body).await.is_err()
        {
            return;
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn lateness_ms(arrivals: &Arrivals, from: DateTime<Utc>) -> Vec<f64> {
    arrivals
        .seen
        .iter()
        .filter(|(_, slot, _)| *slot >= from)
        .map(|(_, slot, at)| (*at - *slot).num_microseconds().unwrap() as f64 / 1e3)
        .collect()
}

fn jobs_toml(prefix: &str, nodes: &[Node], jobs: usize, schedule: &str, port: u16) -> String {
    let list: Vec<String> = nodes.iter().map(|n| format!("{:?}", n.url())).collect();
    let mut text = format!(
        "[scheduler]\nkey_prefix = \"{prefix}\"\nmax_clock_skew = \"2s\"\n[redis]\nnodes = [{}]\n",
        list.join(", ")
    );
    for j in 0..jobs {
        text.push_str(&format!(
            "[[job]]\nname = \"job-{j:04}\"\nschedule = \"{schedule}\"\ntimeout = \"5s\"\n[job.action]\ntype = \"http\"\nurl = \"http://127.0.0.1:{port}/hook\"\n"
        ));
    }
    text
}

// ---------------------------------------------------------------------------------------------
// 2. Lateness: slotcron vs tokio-cron-scheduler, same job, same run

async fn lateness(nodes: &[Node], table: &mut Table) {
    let seconds = if quick() { 5 } else { 20 };
    // slotcron: 10 jobs every second, 5 in-process replicas against the 3 nodes.
    let (port, arrivals) = receiver().await;
    let text = jobs_toml("late", nodes, 10, "* * * * * *", port);
    let shutdown = CancellationToken::new();
    let mut runs = Vec::new();
    let env: HashMap<String, String> = HashMap::new();
    for r in 0..5 {
        let config = slotcron::config::parse(Path::new("bench.toml"), &text, &env).unwrap();
        let clock: SharedClock = Arc::new(SystemClock);
        let replica = slotcron::scheduler::Replica::connect(&config, format!("r{r}"), clock)
            .await
            .unwrap();
        runs.push(tokio::spawn(slotcron::scheduler::run_replica(
            replica,
            config,
            shutdown.clone(),
            None,
        )));
    }
    let from = Utc::now() + chrono::Duration::seconds(1);
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    shutdown.cancel();
    for r in runs {
        let _ = r.await;
    }
    let mut ours = lateness_ms(&arrivals.lock().unwrap(), from);

    // tokio-cron-scheduler: the same every-second job, posting with the second it fired in as
    // its slot (it cannot tell the job its scheduled instant).
    let (port, tcs_arrivals) = receiver().await;
    let scheduler = tokio_cron_scheduler::JobScheduler::new().await.unwrap();
    let client = reqwest::Client::builder()
        .tcp_nodelay(true)
        .build()
        .unwrap();
    let job = tokio_cron_scheduler::Job::new_async("* * * * * *", move |_, _| {
        let client = client.clone();
        Box::pin(async move {
            let slot = Slot::at(Utc::now());
            let _ = client
                .post(format!("http://127.0.0.1:{port}/hook"))
                .header("X-Slotcron-Slot", slot.rfc3339_utc())
                .header("Idempotency-Key", format!("tcs/{}", slot.rfc3339_utc()))
                .body("x")
                .send()
                .await;
        })
    })
    .unwrap();
    scheduler.add(job).await.unwrap();
    scheduler.start().await.unwrap();
    let from = Utc::now() + chrono::Duration::seconds(1);
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    let mut scheduler = scheduler;
    let _ = scheduler.shutdown().await;
    let mut theirs = lateness_ms(&tcs_arrivals.lock().unwrap(), from);

    for (name, samples) in [
        ("slotcron, 10 jobs x 5 replicas x 3 nodes", &mut ours),
        ("tokio-cron-scheduler, 1 job, no lock", &mut theirs),
    ] {
        let count = samples.len();
        let (a, b, c) = percentiles(samples);
        table.row(&[
            format!("lateness: {name}"),
            format!("{count} sends"),
            format!("p50 {a:.1} ms"),
            format!("p99 {b:.1} ms"),
            format!("max {c:.1} ms"),
        ]);
    }
}

// ---------------------------------------------------------------------------------------------
// 3. Scale and 4. footprint: release-binary replicas as processes

/// The slotcron binary cargo built for this benchmark (the bench profile: optimized).
fn release_binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_slotcron"))
}

/// CPU seconds (utime + stime) and peak RSS (VmHWM, KiB) of a process.
fn usage(pid: u32) -> (f64, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(vec![], |(_, rest)| rest.split_whitespace().collect());
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let hz = 100.0; // USER_HZ on Linux
    let cpu = (ticks(11) + ticks(12)) / hz;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (cpu, kib("VmHWM:").max(kib("VmRSS:")))
}

fn rss_now(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn redis_calls(nodes: &[Node]) -> u64 {
    nodes
        .iter()
        .map(|n| {
            let client = redis::Client::open(n.url()).unwrap();
            let mut conn = client.get_connection().unwrap();
            let info: String = redis::cmd("INFO")
                .arg("commandstats")
                .query(&mut conn)
                .unwrap();
            info.lines()
                .filter(|l| l.starts_with("cmdstat_") && !l.starts_with("cmdstat_info"))
                .filter_map(|l| {
                    l.split("calls=")
                        .nth(1)?
                        .split(',')
                        .next()?
                        .parse::<u64>()
                        .ok()
                })
                .sum::<u64>()
        })
        .sum()
}

fn spawn_replicas(binary: &Path, config: &Path, count: usize) -> Vec<Child> {
    (0..count)
        .map(|r| {
            Command::new(binary)
                .args([
                    "run",
                    "--log-format",
                    "json",
                    "--replica-id",
                    &format!("r{r}"),
                    "--config",
                ])
                .arg(config)
                .env("RUST_LOG", "warn")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect()
}

fn stop(children: &mut [Child]) {
    for c in children.iter() {
        let _ = nix_kill(c.id(), 15);
    }
    for c in children.iter_mut() {
        let _ = c.wait();
    }
}

fn nix_kill(pid: u32, signal: i32) -> bool {
    Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .is_ok_and(|s| s.success())
}

async fn scale(nodes: &[Node], binary: &Path, table: &mut Table) {
    let seconds: i64 = if quick() { 5 } else { 30 };
    for jobs in [10usize, 100, 1000] {
        for replicas in [1usize, 5] {
            let (port, arrivals) = receiver().await;
            let dir = tempfile::tempdir().unwrap();
            let config = dir.path().join("jobs.toml");
            std::fs::write(
                &config,
                jobs_toml(
                    &format!("scale-{jobs}-{replicas}"),
                    nodes,
                    jobs,
                    "* * * * * *",
                    port,
                ),
            )
            .unwrap();
            let mut children = spawn_replicas(binary, &config, replicas);
            tokio::time::sleep(Duration::from_secs(2)).await;
            let calls_before = redis_calls(nodes);
            let from = DateTime::from_timestamp(Utc::now().timestamp() + 1, 0).unwrap();
            tokio::time::sleep(Duration::from_secs(seconds as u64)).await;
            let to = DateTime::from_timestamp(Utc::now().timestamp(), 0).unwrap();
            let usages: Vec<(f64, u64)> = children.iter().map(|c| usage(c.id())).collect();
            tokio::time::sleep(Duration::from_millis(1500)).await;
            let calls = redis_calls(nodes) - calls_before;
            stop(&mut children);
            let arrivals = arrivals.lock().unwrap();
            let mut counts: HashMap<&str, usize> = HashMap::new();
            for (key, slot, _) in &arrivals.seen {
                if *slot >= from && *slot < to {
                    *counts.entry(key.as_str()).or_default() += 1;
                }
            }
            let expected = jobs * (to - from).num_seconds() as usize;
            let run = counts.len();
            let duplicated = counts.values().filter(|n| **n > 1).count();
            let mut late: Vec<f64> = arrivals
                .seen
                .iter()
                .filter(|(_, s, _)| *s >= from && *s < to)
                .map(|(_, s, a)| (*a - *s).num_microseconds().unwrap() as f64 / 1e3)
                .collect();
            let (_, p99, _) = if late.is_empty() {
                (0.0, 0.0, 0.0)
            } else {
                percentiles(&mut late)
            };
            let cpu = usages.iter().map(|u| u.0).sum::<f64>() / replicas as f64;
            let rss = usages.iter().map(|u| u.1).max().unwrap_or(0);
            table.row(&[
                format!("scale: {jobs} jobs/s x {replicas} replica(s)"),
                format!(
                    "slots {expected}, run {run}, duplicated {duplicated}, missed {}",
                    expected.saturating_sub(run)
                ),
                format!("lateness p99 {p99:.1} ms"),
                format!(
                    "CPU {cpu:.2} s/replica, peak RSS {:.1} MiB",
                    rss as f64 / 1024.0
                ),
                format!(
                    "{:.1} Redis commands/slot",
                    calls as f64 / run.max(1) as f64
                ),
            ]);
        }
    }
}

async fn footprint(nodes: &[Node], binary: &Path, table: &mut Table) {
    let seconds = if quick() { 10 } else { 60 };
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("jobs.toml");
    std::fs::write(&config, jobs_toml("idle", nodes, 10, "0 0 3 * * *", 9)).unwrap();
    let mut children = spawn_replicas(binary, &config, 1);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let pid = children[0].id();
    let (cpu_before, _) = usage(pid);
    let started = SystemTime::now();
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    let (cpu_after, _) = usage(pid);
    let wall = started.elapsed().unwrap().as_secs_f64();
    let rss = rss_now(pid);
    stop(&mut children);
    table.row(&[
        "footprint: 1 replica, 10 daily jobs, idle".into(),
        format!("{seconds} s"),
        format!("RSS {:.1} MiB", rss as f64 / 1024.0),
        format!("CPU {:.3} %", 100.0 * (cpu_after - cpu_before) / wall),
        String::new(),
    ]);
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let nodes: Vec<Node> = (0..3).map(|_| Node::start()).collect();
    let mut table = Table {
        rows: vec![
            "| measurement | size | | | |".into(),
            "|---|---|---|---|---|".into(),
        ],
    };
    runtime.block_on(async {
        if wanted("race") {
            race(&nodes, &mut table).await;
        }
        if wanted("lateness") {
            lateness(&nodes, &mut table).await;
        }
        if wanted("scale") || wanted("footprint") {
            let binary = release_binary();
            if wanted("scale") {
                scale(&nodes, &binary, &mut table).await;
            }
            if wanted("footprint") {
                footprint(&nodes, &binary, &mut table).await;
            }
        }
    });
    println!("{}", table.rows.join("\n"));
}
