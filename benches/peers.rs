//! slotcron against the peers users would pick instead, side by side in one run.
//!
//!     cargo bench --bench peers                       # everything (about 7 minutes)
//!     SLOTCRON_BENCH=race,lateness cargo bench --bench peers
//!     SLOTCRON_BENCH_QUICK=1 cargo bench --bench peers  # a short smoke run
//!
//! Sections: race, lateness, scale, footprint, faults, candidates, startup (`SLOTCRON_BENCH`, comma-separated; default
//! all). `faults` runs its own 3 nodes, since it hangs and kills one.
//! `SLOTCRON_BENCH_QUICK=1` shortens every section; `SLOTCRON_BENCH_SCALE=1000x5` runs only the
//! scale sizes named (jobs x replicas, comma-separated); `SLOTCRON_BENCH_KEEP_LOGS=1` keeps the
//! scale replicas' logs and prints where; `SLOTCRON_BENCH_RUST_LOG` sets their log filter
//! (default `info`, every won/lost/done line). `SLOTCRON_BENCH_RUNTIME=current_thread` runs
//! the in-process parts (race, lateness) on a single-threaded runtime instead of the binary's
//! multi-threaded one.
//!
//! Starts its own 3 redis-server nodes on free ports and stops them at the end. The scale and
//! footprint replicas are processes of the `slotcron` binary cargo builds for this benchmark
//! (bench profile = release: `target/release/slotcron`, or under `$CARGO_TARGET_DIR`). Prints
//! one markdown table; BENCHMARKS.md holds the latest one with its reading.

use std::collections::HashMap;
use std::net::TcpListener as StdListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use futures_util::stream::{FuturesUnordered, StreamExt};
use slotcron::unstable::lock::{Acquire, LockConfig, Redlock, SlotKey};
use slotcron::unstable::redis::NodeUrl;
use slotcron::unstable::time::schedule::{SharedClock, Slot, SystemClock};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

/// CPU seconds and peak RSS of a process (the tests' harness has the same need).
#[path = "../tests/common/usage.rs"]
mod proc_usage;
use proc_usage::usage;

fn quick() -> bool {
    std::env::var("SLOTCRON_BENCH_QUICK").is_ok()
}

fn wanted(section: &str) -> bool {
    std::env::var("SLOTCRON_BENCH").map_or(true, |s| s.split(',').any(|x| x.trim() == section))
}

/// `SLOTCRON_BENCH_SCALE=1000x5,100x1,1000x5-allow` runs only those scale sizes (jobs x
/// replicas; `-allow` names the `overlap = "allow"` row).
fn scale_wanted(jobs: usize, replicas: usize, overlap: &str) -> bool {
    let name = match overlap {
        "skip" => format!("{jobs}x{replicas}"),
        _ => format!("{jobs}x{replicas}-{overlap}"),
    };
    std::env::var("SLOTCRON_BENCH_SCALE").map_or(true, |s| s.split(',').any(|x| x.trim() == name))
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
        Self::start_on(free_port())
    }

    /// A fresh, empty node on `port` (a restart after a kill).
    fn start_on(port: u16) -> Node {
        let dir = tempfile::tempdir().unwrap();
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

    fn signal(&self, signal: libc::c_int) {
        // SAFETY: kill(2) on a child this process spawned and has not reaped yet.
        unsafe { libc::kill(self.child.id() as libc::pid_t, signal) };
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

/// A redis-rs client for `node` with TCP_NODELAY, as slotcron's nodes have.
fn nodelay_client(node: &Node) -> redis::Client {
    use redis::IntoConnectionInfo;
    let info = node
        .url()
        .into_connection_info()
        .unwrap()
        .set_tcp_settings(redis::io::tcp::TcpSettings::default().set_nodelay(true));
    redis::Client::open(info).unwrap()
}

/// The contenders of the race section, each timed alone in its own batches.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Op {
    SlotcronAcquire,
    RslockAcquire,
    SlotcronLose,
    RslockLose,
    Floor,
    MajorityFloor,
    BareFloor,
    BareMajority,
}

impl Op {
    const ALL: [Op; 8] = [
        Op::SlotcronAcquire,
        Op::RslockAcquire,
        Op::SlotcronLose,
        Op::RslockLose,
        Op::Floor,
        Op::MajorityFloor,
        Op::BareFloor,
        Op::BareMajority,
    ];

    fn label(self) -> &'static str {
        match self {
            Op::SlotcronAcquire => "slotcron acquire",
            Op::RslockAcquire => "rslock acquire",
            Op::SlotcronLose => "slotcron lose",
            Op::RslockLose => "rslock lose",
            Op::Floor => "floor: single SET NX PX, redis-rs",
            Op::MajorityFloor => "floor: 3 x SET NX PX, first 2 answers, redis-rs",
            Op::BareFloor => "floor: single SET NX PX, bare socket",
            Op::BareMajority => "floor: 3 x SET NX PX, first 2 answers, bare sockets",
        }
    }
}

/// What the race section races with.
struct Racers {
    ours: Redlock,
    rslock: rslock::LockManager,
    /// The slot key another replica holds, and rslock's held resource.
    held: SlotKey,
    rs_held: String,
    /// redis-rs multiplexed connections (TCP_NODELAY) to the 3 nodes.
    conns: Vec<redis::aio::MultiplexedConnection>,
    /// Bare sockets (TCP_NODELAY) to the 3 nodes.
    bare: Vec<tokio::net::TcpStream>,
    ttl: Duration,
}

impl Racers {
    /// One timed attempt of `op` on fresh key number `n`, in milliseconds.
    async fn time(&mut self, op: Op, n: i64) -> f64 {
        let ttl = self.ttl;
        let t = Instant::now();
        match op {
            Op::SlotcronAcquire => {
                let slot = Slot::at(DateTime::from_timestamp(1_700_000_000 + n, 0).unwrap());
                let key = SlotKey::new("bench", "fresh", slot);
                let won = matches!(self.ours.acquire(&key, ttl).await, Acquire::Won(_));
                let elapsed = t.elapsed();
                assert!(won);
                return elapsed.as_secs_f64() * 1e3;
            }
            Op::SlotcronLose => {
                let lost = matches!(
                    self.ours.acquire(&self.held, ttl).await,
                    Acquire::Lost { .. }
                );
                let elapsed = t.elapsed();
                assert!(lost);
                return elapsed.as_secs_f64() * 1e3;
            }
            Op::RslockAcquire => {
                let ok = self
                    .rslock
                    .lock(format!("rs-fresh-{n}").as_bytes(), ttl)
                    .await
                    .is_ok();
                let elapsed = t.elapsed();
                assert!(ok);
                return elapsed.as_secs_f64() * 1e3;
            }
            Op::RslockLose => {
                let failed = self
                    .rslock
                    .lock(self.rs_held.as_bytes(), ttl)
                    .await
                    .is_err();
                let elapsed = t.elapsed();
                assert!(failed);
                return elapsed.as_secs_f64() * 1e3;
            }
            Op::Floor => {
                let _: Option<String> = set_nx(&format!("floor-{n}"))
                    .query_async(&mut self.conns[0])
                    .await
                    .unwrap();
            }
            Op::MajorityFloor => {
                let cmd = set_nx(&format!("majority-{n}"));
                let mut pending: FuturesUnordered<_> = self
                    .conns
                    .iter()
                    .map(|conn| {
                        let mut conn = conn.clone();
                        let cmd = &cmd;
                        async move { cmd.query_async::<Option<String>>(&mut conn).await }
                    })
                    .collect();
                for _ in 0..2 {
                    pending.next().await.unwrap().unwrap();
                }
                // Dropped like the slower node's request in a race: its answer is discarded.
            }
            Op::BareFloor => {
                bare_set(&mut self.bare[0], &resp_set(&format!("bare-{n}"))).await;
            }
            Op::BareMajority => {
                let command = resp_set(&format!("bare3-{n}"));
                let mut pending: FuturesUnordered<_> = self
                    .bare
                    .iter_mut()
                    .map(|s| bare_set(s, &command))
                    .collect();
                for _ in 0..2 {
                    pending.next().await.unwrap();
                }
                let elapsed = t.elapsed();
                // The third answer, off the clock, so every stream stays in step.
                pending.next().await.unwrap();
                return elapsed.as_secs_f64() * 1e3;
            }
        }
        t.elapsed().as_secs_f64() * 1e3
    }
}

fn set_nx(key: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("SET");
    cmd.arg(key).arg("x").arg("NX").arg("PX").arg(30_000);
    cmd
}

async fn race(nodes: &[Node], table: &mut Table) {
    let attempts: usize = if quick() { 2_000 } else { 10_000 };
    let batch = 100;
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
    // rslock from clients with TCP_NODELAY, like slotcron's; one attempt (its retry count counts
    // attempts). It has no per-node timeout of its own: its connections keep redis-rs' default
    // response timeout (500 ms), which on a healthy loopback never fires.
    let mut rslock = rslock::LockManager::from_clients(nodes.iter().map(nodelay_client).collect());
    rslock.set_retry(1, Duration::from_millis(40));
    let mut conns = Vec::new();
    let mut bare = Vec::new();
    for node in nodes {
        conns.push(
            nodelay_client(node)
                .get_multiplexed_async_connection()
                .await
                .unwrap(),
        );
        let stream = tokio::net::TcpStream::connect(("127.0.0.1", node.port))
            .await
            .unwrap();
        stream.set_nodelay(true).unwrap();
        bare.push(stream);
    }

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
    let mut racers = Racers {
        ours,
        rslock,
        held,
        rs_held,
        conns,
        bare,
        ttl: Duration::from_secs(30),
    };

    // Warm-up, then interleaved batches: each round runs a batch of every contender, starting
    // with a different one each round, so machine noise hits every contender alike.
    let mut n = 0i64;
    for op in Op::ALL {
        for _ in 0..200 {
            n += 1;
            racers.time(op, -n).await;
        }
    }
    let mut samples: HashMap<Op, Vec<f64>> = HashMap::new();
    let mut cpu: HashMap<Op, f64> = HashMap::new();
    for round in 0..attempts.div_ceil(batch) {
        for k in 0..Op::ALL.len() {
            let op = Op::ALL[(round + k) % Op::ALL.len()];
            let cpu_before = process_cpu_seconds();
            for _ in 0..batch {
                n += 1;
                let ms = racers.time(op, n).await;
                samples.entry(op).or_default().push(ms);
            }
            *cpu.entry(op).or_default() += process_cpu_seconds() - cpu_before;
        }
    }
    let mut p50 = HashMap::new();
    for op in Op::ALL {
        let s = samples.get_mut(&op).unwrap();
        let count = s.len();
        let (a, b, c) = percentiles(s);
        p50.insert(op, a);
        table.row(&[
            format!("race: {}", op.label()),
            format!(
                "{count} attempts, client CPU {:.0} µs each",
                cpu[&op] / count as f64 * 1e6
            ),
            format!("p50 {a:.3} ms"),
            format!("p99 {b:.3} ms"),
            format!("max {c:.3} ms"),
        ]);
    }
    table.row(&[
        "race: p50 ratios".into(),
        format!(
            "acquire: slotcron / rslock = {:.2}",
            p50[&Op::SlotcronAcquire] / p50[&Op::RslockAcquire]
        ),
        format!(
            "lose: slotcron / rslock = {:.2}",
            p50[&Op::SlotcronLose] / p50[&Op::RslockLose]
        ),
        format!(
            "lose: slotcron / single-SET floor = {:.2}",
            p50[&Op::SlotcronLose] / p50[&Op::Floor]
        ),
        format!(
            "acquire, lose: slotcron / majority floor = {:.2}, {:.2}",
            p50[&Op::SlotcronAcquire] / p50[&Op::MajorityFloor],
            p50[&Op::SlotcronLose] / p50[&Op::MajorityFloor]
        ),
    ]);
}

/// CPU time (user + system) of this process so far: the client side of the race, since the
/// Redis nodes are other processes.
fn process_cpu_seconds() -> f64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage fills the struct it is given.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) };
    // SAFETY: zero-initialised and filled above.
    let usage = unsafe { usage.assume_init() };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

/// `SET key x NX PX 30000` in RESP.
fn resp_set(key: &str) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(b"*6\r\n");
    for part in [
        b"SET".as_slice(),
        key.as_bytes(),
        b"x",
        b"NX",
        b"PX",
        b"30000",
    ] {
        out.extend_from_slice(format!("${}\r\n", part.len()).as_bytes());
        out.extend_from_slice(part);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Writes `command` and reads its one-line answer (`+OK` or a nil).
async fn bare_set(stream: &mut tokio::net::TcpStream, command: &[u8]) {
    stream.write_all(command).await.unwrap();
    let mut answer = [0u8; 64];
    let mut got = 0;
    while !answer[..got].ends_with(b"\r\n") {
        let n = stream.read(&mut answer[got..]).await.unwrap();
        assert!(n > 0, "redis closed the connection");
        got += n;
    }
}

// ---------------------------------------------------------------------------------------------
// A receiver that stamps each request's arrival (wall clock) with its slot and key.

#[derive(Default)]
struct Arrivals {
    /// (idempotency key, slot, arrival)
    seen: Vec<(String, DateTime<Utc>, DateTime<Utc>)>,
    /// (slot, the replica that sent it), for the spread of wins
    senders: Vec<(DateTime<Utc>, String)>,
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
        if let (Some(key), Some(slot)) = (header("idempotency-key"), header("x-slotcron-slot"))
            && let Ok(slot) = slot.parse::<DateTime<Utc>>()
        {
            let mut arrivals = arrivals.lock().unwrap();
            arrivals.seen.push((key, slot, arrived));
            let sender = header("x-slotcron-replica").unwrap_or_default();
            arrivals.senders.push((slot, sender));
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
        let config =
            slotcron::unstable::config::parse(Path::new("bench.toml"), &text, &env).unwrap();
        let clock: SharedClock = Arc::new(SystemClock);
        runs.push(tokio::spawn(slotcron::unstable::replica::run(
            config,
            format!("r{r}"),
            clock,
            shutdown.clone(),
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
    // its slot (it cannot tell the job its scheduled instant). It polls every 500 ms, so its
    // lateness depends on the phase it started at: 5 schedulers started 100 ms apart within a
    // second sample the phases evenly, as 5 replicas started at random would.
    let (port, tcs_arrivals) = receiver().await;
    let client = reqwest::Client::builder()
        .tcp_nodelay(true)
        .build()
        .unwrap();
    let mut schedulers = Vec::new();
    let base = Utc::now().timestamp() + 1;
    for k in 0..5i64 {
        let scheduler = tokio_cron_scheduler::JobScheduler::new().await.unwrap();
        let client = client.clone();
        let job = tokio_cron_scheduler::Job::new_async("* * * * * *", move |_, _| {
            let client = client.clone();
            Box::pin(async move {
                let slot = Slot::at(Utc::now());
                let _ = client
                    .post(format!("http://127.0.0.1:{port}/hook"))
                    .header("X-Slotcron-Slot", slot.rfc3339_utc())
                    .header("Idempotency-Key", format!("tcs-{k}/{}", slot.rfc3339_utc()))
                    .body("x")
                    .send()
                    .await;
            })
        })
        .unwrap();
        scheduler.add(job).await.unwrap();
        let phase = DateTime::from_timestamp_millis(base * 1000 + k * 100).unwrap();
        if let Ok(wait) = (phase - Utc::now()).to_std() {
            tokio::time::sleep(wait).await;
        }
        scheduler.start().await.unwrap();
        schedulers.push(scheduler);
    }
    let from = Utc::now() + chrono::Duration::seconds(1);
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    for mut scheduler in schedulers {
        let _ = scheduler.shutdown().await;
    }
    let mut theirs = lateness_ms(&tcs_arrivals.lock().unwrap(), from);

    for (name, samples) in [
        ("slotcron, 10 jobs x 5 replicas x 3 nodes", &mut ours),
        (
            "tokio-cron-scheduler, 1 job x 5 instances, no lock",
            &mut theirs,
        ),
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

/// Replica processes, logging JSON lines (at the default level, `info`) to a file each.
/// CPU seconds the 3 Redis nodes have used so far.
fn redis_cpu(nodes: &[Node]) -> f64 {
    nodes.iter().map(|n| usage(n.child.id()).0).sum()
}

fn spawn_replicas(binary: &Path, config: &Path, count: usize, logs: &Path) -> Vec<Child> {
    (0..count)
        .map(|r| {
            let log = std::fs::File::create(logs.join(format!("r{r}.log"))).unwrap();
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
                .env(
                    "RUST_LOG",
                    std::env::var("SLOTCRON_BENCH_RUST_LOG").unwrap_or("info".into()),
                )
                .stdout(Stdio::from(log.try_clone().unwrap()))
                .stderr(Stdio::from(log))
                .spawn()
                .unwrap()
        })
        .collect()
}

/// Stops replicas with SIGTERM (graceful: in-flight slots finish) and waits for them.
fn stop(children: &mut [Child]) {
    for c in children.iter() {
        // SAFETY: kill(2) on a child this process spawned and has not reaped yet.
        unsafe { libc::kill(c.id() as libc::pid_t, libc::SIGTERM) };
    }
    for c in children.iter_mut() {
        let _ = c.wait();
    }
}

/// Kills replicas left running if the benchmark panics.
struct Replicas(Vec<Child>);

impl Drop for Replicas {
    fn drop(&mut self) {
        for c in self.0.iter_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Sleeps until `offset` past the next whole second of the wall clock; returns that second.
async fn sleep_to_second(offset: Duration) -> DateTime<Utc> {
    let next = DateTime::from_timestamp(Utc::now().timestamp() + 1, 0).unwrap();
    let at = next + chrono::Duration::from_std(offset).unwrap();
    if let Ok(wait) = (at - Utc::now()).to_std() {
        tokio::time::sleep(wait).await;
    }
    next
}

/// Outcomes the replicas logged for slots in [from, to), summed over replicas.
fn logged_outcomes(logs: &Path, from: DateTime<Utc>, to: DateTime<Utc>) -> HashMap<String, usize> {
    let mut outcomes = HashMap::new();
    for entry in std::fs::read_dir(logs).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap_or_default();
        for line in text.lines() {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            let (Some(outcome), Some(slot)) = (v["outcome"].as_str(), v["slot"].as_str()) else {
                continue;
            };
            let Ok(slot) = slot.parse::<DateTime<Utc>>() else {
                continue;
            };
            if slot >= from && slot < to {
                // A skip says why: the previous run still going, or the replica woke too late.
                let outcome = match (outcome, v["reason"].as_str()) {
                    ("skipped", Some(reason)) => format!("skipped ({reason})"),
                    ("skipped", None) => "skipped (late)".to_owned(),
                    _ => outcome.to_owned(),
                };
                *outcomes.entry(outcome).or_default() += 1;
            }
        }
    }
    outcomes
}

/// The counters read around one measured window of whole seconds [from, to).
struct Window {
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    /// Redis commands the nodes ran in the window.
    calls: u64,
    /// Redis CPU seconds in the window, summed over the nodes.
    redis_cpu: f64,
    /// Each replica's CPU seconds in the window.
    cpu: Vec<f64>,
    /// The highest peak RSS (KiB) of the replicas at the window's end.
    peak_rss: u64,
}

/// Waits for the next whole second and measures the `seconds` after it. The counters are read
/// half a second before each end, between two bursts, so they hold the window's slots and
/// nothing else.
async fn measure_window(nodes: &[Node], children: &[Child], seconds: i64) -> Window {
    let before = sleep_to_second(Duration::from_millis(500)).await;
    let calls_before = redis_calls(nodes);
    let cpu_before: Vec<f64> = children.iter().map(|c| usage(c.id()).0).collect();
    let redis_cpu_before = redis_cpu(nodes);
    let from = before + chrono::Duration::seconds(1);
    let to = from + chrono::Duration::seconds(seconds);
    let end = to + chrono::Duration::milliseconds(500);
    tokio::time::sleep((end - Utc::now()).to_std().unwrap_or_default()).await;
    let usages: Vec<(f64, u64)> = children.iter().map(|c| usage(c.id())).collect();
    Window {
        from,
        to,
        calls: redis_calls(nodes) - calls_before,
        redis_cpu: redis_cpu(nodes) - redis_cpu_before,
        cpu: usages
            .iter()
            .zip(&cpu_before)
            .map(|(u, b)| u.0 - b)
            .collect(),
        peak_rss: usages.iter().map(|u| u.1).max().unwrap_or(0),
    }
}

async fn scale(nodes: &[Node], binary: &Path, table: &mut Table) {
    let seconds: i64 = if quick() { 5 } else { 30 };
    // The default `overlap = "skip"` everywhere, and once more at the largest size with
    // `overlap = "allow"`: no running lease, one round trip fewer before the send.
    let sizes = [10usize, 100, 1000]
        .into_iter()
        .flat_map(|jobs| [(jobs, 1usize, "skip"), (jobs, 5, "skip")])
        .chain([(1000, 5, "allow")]);
    for (jobs, replicas, overlap) in sizes {
        if !scale_wanted(jobs, replicas, overlap) {
            continue;
        }
        let (port, arrivals) = receiver().await;
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("jobs.toml");
        let prefix = format!("scale-{jobs}-{replicas}-{overlap}");
        let text = jobs_toml(&prefix, nodes, jobs, "* * * * * *", port).replace(
            "timeout = \"5s\"\n",
            &format!("timeout = \"5s\"\noverlap = \"{overlap}\"\n"),
        );
        std::fs::write(&config, text).unwrap();
        let mut children = Replicas(spawn_replicas(binary, &config, replicas, dir.path()));
        tokio::time::sleep(Duration::from_secs(2)).await;
        let Window {
            from,
            to,
            calls,
            redis_cpu,
            cpu,
            peak_rss,
        } = measure_window(nodes, &children.0, seconds).await;
        // Late arrivals of the window's last slots, then a graceful stop.
        tokio::time::sleep(Duration::from_secs(2)).await;
        stop(&mut children.0);
        let arrivals = arrivals.lock().unwrap();
        let mut counts: HashMap<&str, usize> = HashMap::new();
        let mut late = Vec::new();
        for (key, slot, at) in &arrivals.seen {
            if *slot >= from && *slot < to {
                *counts.entry(key.as_str()).or_default() += 1;
                late.push((*at - *slot).num_microseconds().unwrap() as f64 / 1e3);
            }
        }
        let expected = jobs * seconds as usize;
        let run = counts.len();
        let duplicated = counts.values().filter(|n| **n > 1).count();
        let p99 = if late.is_empty() {
            f64::NAN
        } else {
            percentiles(&mut late).1
        };
        let cpu = cpu.iter().sum::<f64>() / replicas as f64;
        let rss = peak_rss;
        let outcomes = logged_outcomes(dir.path(), from, to);
        if std::env::var("SLOTCRON_BENCH_KEEP_LOGS").is_ok() {
            eprintln!("peers: replica logs kept in {}", dir.keep().display());
        }
        let mut logged: Vec<String> = outcomes
            .iter()
            .filter(|(o, _)| !matches!(o.as_str(), "won" | "lost" | "done"))
            .map(|(o, n)| format!("{o} {n}"))
            .collect();
        logged.sort();
        if logged.is_empty() {
            logged.push("none unavailable, skipped or failed".into());
        }
        table.row(&[
                format!("scale: {jobs} jobs/s x {replicas} replica(s), overlap = {overlap}, {seconds} s"),
                format!(
                    "slots {expected}, run {run}, duplicated {duplicated}, missed {} (replica logs: {})",
                    expected.saturating_sub(run),
                    logged.join(", ")
                ),
                format!("lateness p99 {p99:.1} ms"),
                format!(
                    "CPU {cpu:.2} s ({:.0} µs/slot) and peak RSS {:.1} MiB per replica",
                    cpu / expected as f64 * 1e6,
                    rss as f64 / 1024.0
                ),
                format!(
                    "{:.1} Redis commands/slot, Redis CPU {redis_cpu:.2} s ({:.0} µs/slot)",
                    calls as f64 / expected as f64,
                    redis_cpu / expected as f64 * 1e6
                ),
            ]);
    }
}

// ---------------------------------------------------------------------------------------------
// 6. Candidates: every replica racing every slot against the top 2 of a rendezvous ranking

/// What one fleet run measured over its window.
struct FleetRun {
    expected: usize,
    run: usize,
    duplicated: usize,
    /// Slot to arrival at the receiver, ms: p50, p99.
    lateness: (f64, f64),
    /// Replica CPU seconds per slot, summed over the fleet.
    cpu_per_slot: f64,
    calls_per_slot: f64,
    redis_cpu_per_slot: f64,
    /// The busiest replica's share of the slots it sent.
    busiest: f64,
}

/// `jobs` http jobs every second on `replicas` processes with `candidates`, measured over
/// `seconds` whole seconds after a start-up of 9 s (the replicas' look-back at start is over
/// by then: a cost per start, not per slot).
async fn fleet_run(
    nodes: &[Node],
    binary: &Path,
    jobs: usize,
    replicas: usize,
    candidates: &str,
    seconds: i64,
) -> FleetRun {
    let (port, arrivals) = receiver().await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("jobs.toml");
    let prefix = format!("cand-{jobs}-{replicas}-{}", candidates.replace('"', ""));
    let text = jobs_toml(&prefix, nodes, jobs, "* * * * * *", port)
        .replace(
            "max_clock_skew = \"2s\"\n",
            &format!("max_clock_skew = \"2s\"\ncandidates = {candidates}\n"),
        )
        .replace(
            "timeout = \"5s\"\n",
            "timeout = \"5s\"\noverlap = \"allow\"\n",
        );
    std::fs::write(&config, text).unwrap();
    let mut children = Replicas(spawn_replicas(binary, &config, replicas, dir.path()));
    tokio::time::sleep(Duration::from_secs(9)).await;
    let window = measure_window(nodes, &children.0, seconds).await;
    let (from, to, calls, redis_cpu) = (window.from, window.to, window.calls, window.redis_cpu);
    let cpu: f64 = window.cpu.iter().sum();
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop(&mut children.0);
    let arrivals = arrivals.lock().unwrap();
    measure(
        &arrivals,
        from,
        to,
        jobs * seconds as usize,
        (calls, redis_cpu, cpu),
    )
}

/// The window's numbers from the receiver's arrivals and the counters read around it.
fn measure(
    arrivals: &Arrivals,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    expected: usize,
    (calls, redis_cpu, cpu): (u64, f64, f64),
) -> FleetRun {
    let inside = |slot: &DateTime<Utc>| *slot >= from && *slot < to;
    let mut counts: HashMap<&str, usize> = HashMap::new();
    let mut late = Vec::new();
    for (key, slot, at) in arrivals.seen.iter().filter(|(_, s, _)| inside(s)) {
        *counts.entry(key.as_str()).or_default() += 1;
        late.push((*at - *slot).num_microseconds().unwrap() as f64 / 1e3);
    }
    let mut wins: HashMap<&str, usize> = HashMap::new();
    for (_, sender) in arrivals.senders.iter().filter(|(s, _)| inside(s)) {
        *wins.entry(sender.as_str()).or_default() += 1;
    }
    let sent: usize = wins.values().sum();
    let (p50, p99, _) = if late.is_empty() {
        (f64::NAN, f64::NAN, f64::NAN)
    } else {
        percentiles(&mut late)
    };
    FleetRun {
        expected,
        run: counts.len(),
        duplicated: counts.values().filter(|n| **n > 1).count(),
        lateness: (p50, p99),
        cpu_per_slot: cpu / expected as f64,
        calls_per_slot: calls as f64 / expected as f64,
        redis_cpu_per_slot: redis_cpu / expected as f64,
        busiest: wins.values().copied().max().unwrap_or(0) as f64 / sent.max(1) as f64,
    }
}

/// The issue's start-up measure: 9 replica processes, 50 http jobs every second
/// (`candidates = 2`), 30 s from before the replicas are spawned. Redis commands per slot over
/// the whole run (the start-up look-backs, pause reads and membership included), and over the
/// steady state of the same run (its last 15 s, after every look-back is over). With
/// `overlap = "allow"` (the issue's baseline, as in `candidates`) twice on one prefix: a first
/// deploy, then the same fleet started again (a restart: a watermark 30 s old and a history to
/// read back); then a first deploy with the default `overlap = "skip"` (the running lease adds
/// its commands to every slot).
async fn startup(nodes: &[Node], binary: &Path, table: &mut Table) {
    let (port, _arrivals) = receiver().await;
    let dir = tempfile::tempdir().unwrap();
    let runs = [
        ("allow", "first deploy"),
        ("allow", "restart"),
        ("skip", "first deploy"),
    ];
    for (overlap, start) in runs {
        let config = dir.path().join(format!("jobs-{overlap}.toml"));
        let prefix = format!("startup-{overlap}-{}", std::process::id());
        let text = jobs_toml(&prefix, nodes, 50, "* * * * * *", port).replace(
            "timeout = \"5s\"\n",
            &format!("timeout = \"5s\"\noverlap = \"{overlap}\"\n"),
        );
        std::fs::write(&config, text).unwrap();
        let (whole, steady) = startup_run(nodes, binary, &config, dir.path()).await;
        table.row(&[
            format!("startup: 50 jobs/s x 9 replicas, overlap = {overlap}, {start}, 30 s"),
            format!("{whole:.1} Redis commands/slot over the whole run (start included)"),
            format!("{steady:.1} in the steady state (last 15 s)"),
            format!(
                "start-up cost {:.0} commands",
                (whole - steady) * 50.0 * 30.0
            ),
            String::new(),
        ]);
    }
}

/// One 30 s run of the start-up measure: commands per slot over the whole run and over its
/// last 15 s.
async fn startup_run(nodes: &[Node], binary: &Path, config: &Path, logs: &Path) -> (f64, f64) {
    let calls_before = redis_calls(nodes);
    let started = Utc::now();
    let mut children = Replicas(spawn_replicas(binary, config, 9, logs));
    let steady_from = started + chrono::Duration::seconds(15);
    tokio::time::sleep((steady_from - Utc::now()).to_std().unwrap_or_default()).await;
    let calls_steady = redis_calls(nodes);
    let end = started + chrono::Duration::seconds(30);
    tokio::time::sleep((end - Utc::now()).to_std().unwrap_or_default()).await;
    let calls_after = redis_calls(nodes);
    let ended = Utc::now();
    stop(&mut children.0);
    let per_slot = |calls: u64, from: DateTime<Utc>| {
        calls as f64 / ((ended - from).num_milliseconds() as f64 / 1000.0 * 50.0)
    };
    (
        per_slot(calls_after - calls_before, started),
        per_slot(calls_after - calls_steady, steady_from),
    )
}

/// `candidates = "all"` against `candidates = 2` at 1, 5 and 9 replicas, 50 and 1000 jobs a
/// second, one after the other in the same run (`overlap = "allow"`, as the issue's baseline).
async fn candidates(nodes: &[Node], binary: &Path, table: &mut Table) {
    let seconds: i64 = if quick() { 5 } else { 20 };
    for jobs in [50usize, 1000] {
        for replicas in [1usize, 5, 9] {
            for k in ["\"all\"", "2"] {
                let r = fleet_run(nodes, binary, jobs, replicas, k, seconds).await;
                table.row(&[
                    format!("candidates = {k}: {jobs} jobs/s x {replicas} replica(s), {seconds} s"),
                    format!(
                        "slots {}, run {}, duplicated {}, missed {}; busiest replica {:.1} % of wins (fair {:.1} %)",
                        r.expected,
                        r.run,
                        r.duplicated,
                        r.expected.saturating_sub(r.run),
                        r.busiest * 100.0,
                        100.0 / replicas as f64
                    ),
                    format!("lateness p50 {:.1} ms, p99 {:.1} ms", r.lateness.0, r.lateness.1),
                    format!("replica CPU {:.0} µs/slot (fleet)", r.cpu_per_slot * 1e6),
                    format!(
                        "{:.1} Redis commands/slot, Redis CPU {:.0} µs/slot",
                        r.calls_per_slot,
                        r.redis_cpu_per_slot * 1e6
                    ),
                ]);
            }
        }
    }
}

async fn footprint(nodes: &[Node], binary: &Path, table: &mut Table) {
    let seconds = if quick() { 10 } else { 60 };
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("jobs.toml");
    std::fs::write(&config, jobs_toml("idle", nodes, 10, "0 0 3 * * *", 9)).unwrap();
    let mut children = Replicas(spawn_replicas(binary, &config, 1, dir.path()));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let pid = children.0[0].id();
    let (cpu_before, _) = usage(pid);
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    let (cpu_after, peak) = usage(pid);
    let wall = started.elapsed().as_secs_f64();
    let rss = rss_now(pid);
    stop(&mut children.0);
    table.row(&[
        format!("footprint: 1 replica, 10 daily jobs, 3 nodes, idle {seconds} s"),
        format!(
            "RSS {:.1} MiB (peak {:.1} MiB)",
            rss as f64 / 1024.0,
            peak as f64 / 1024.0
        ),
        format!(
            "CPU {:.3} % ({:.2} s)",
            100.0 * (cpu_after - cpu_before) / wall,
            cpu_after - cpu_before
        ),
        String::new(),
        String::new(),
    ]);
}

// ---------------------------------------------------------------------------------------------
// 5. One broken node: lateness with one node hung, one dead, all healthy, same run

/// The scenario of the node-health issue: a WeCom text job every second with a rate budget.
/// `clock = "local"`: the receiver stamps arrivals by the same clock the replicas schedule on
/// (the fleet clock's offset, a millisecond or two off on a loaded machine, would show as
/// lateness).
fn wecom_toml(nodes: &[Node], port: u16) -> String {
    let list: Vec<String> = nodes.iter().map(|n| format!("{:?}", n.url())).collect();
    format!(
        "[scheduler]\nkey_prefix = \"faults\"\nmax_clock_skew = \"1s\"\nclock = \"local\"\n\
         [redis]\nnodes = [{}]\n\
         [[job]]\nname = \"tick\"\nschedule = \"* * * * * *\"\ntimeout = \"5s\"\n[job.action]\n\
         type = \"wecom\"\nwebhook = \"http://127.0.0.1:{port}/cgi-bin/webhook/send?key=BENCH\"\n\
         msgtype = \"text\"\ncontent = \"tick {{{{ slot }}}}\"\nrate = \"300/min\"\n",
        list.join(", ")
    )
}

/// One phase of the run: its name and the slots it measures, `[from, to)`.
struct Phase {
    name: &'static str,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
}

/// How long a fault runs before its slots are counted: the replicas' first timeouts.
const FAULT_SETTLE: chrono::TimeDelta = chrono::TimeDelta::seconds(2);

/// 5 replica processes on 3 nodes of their own, through three phases of 60 s each: all
/// nodes healthy; node 1 hung (SIGSTOP, then SIGCONT); node 1 dead (SIGKILL, then restarted
/// empty). A fault's slots count from 2 s after it began until it ended.
async fn faults(binary: &Path, table: &mut Table) {
    let seconds = if quick() { 6 } else { 60 };
    let mut nodes: Vec<Node> = (0..3).map(|_| Node::start()).collect();
    let (port, arrivals) = receiver().await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("jobs.toml");
    std::fs::write(&config, wecom_toml(&nodes, port)).unwrap();
    let mut replicas = Replicas(spawn_replicas(binary, &config, 5, dir.path()));
    tokio::time::sleep(Duration::from_secs(3)).await;
    let phase = Duration::from_secs(seconds);
    let mut phases = Vec::new();
    let from = Utc::now();
    tokio::time::sleep(phase).await;
    phases.push(Phase {
        name: "all nodes healthy",
        from,
        to: Utc::now(),
    });
    let began = Utc::now();
    nodes[1].signal(libc::SIGSTOP);
    tokio::time::sleep(phase).await;
    phases.push(Phase {
        name: "node 1 hung (SIGSTOP)",
        from: began + FAULT_SETTLE,
        to: Utc::now(),
    });
    nodes[1].signal(libc::SIGCONT);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let began = Utc::now();
    let port_1 = nodes[1].port;
    drop(nodes.remove(1));
    tokio::time::sleep(phase).await;
    phases.push(Phase {
        name: "node 1 dead (SIGKILL)",
        from: began + FAULT_SETTLE,
        to: Utc::now(),
    });
    nodes.insert(1, Node::start_on(port_1));
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop(&mut replicas.0);
    if std::env::var("SLOTCRON_BENCH_KEEP_LOGS").is_ok() {
        eprintln!("peers: fault replica logs kept in {}", dir.keep().display());
    }
    let arrivals = arrivals.lock().unwrap();
    for phase in phases {
        fault_row(&arrivals, &phase, table);
    }
}

/// One phase's row: slots sent, missed and doubled, and the lateness of each slot's first send.
fn fault_row(arrivals: &Arrivals, phase: &Phase, table: &mut Table) {
    let mut first: HashMap<DateTime<Utc>, (DateTime<Utc>, usize)> = HashMap::new();
    for (_, slot, at) in &arrivals.seen {
        let entry = first.entry(*slot).or_insert((*at, 0));
        entry.0 = entry.0.min(*at);
        entry.1 += 1;
    }
    let expected = (phase.from.timestamp() + 1..=phase.to.timestamp() - 1)
        .map(|s| DateTime::from_timestamp(s, 0).unwrap());
    let (mut samples, mut missed, mut doubled) = (Vec::new(), 0, 0);
    for slot in expected {
        match first.get(&slot) {
            None => missed += 1,
            Some((at, sends)) => {
                samples.push((*at - slot).num_microseconds().unwrap() as f64 / 1e3);
                doubled += usize::from(*sends > 1);
            }
        }
    }
    let count = samples.len();
    let (p50, p99, max) = percentiles(&mut samples);
    table.row(&[
        format!(
            "node fault: {}, 5 replicas x 3 nodes, WeCom job every second",
            phase.name
        ),
        format!("{count} slots, missed {missed}, doubled {doubled}"),
        format!("p50 {p50:.1} ms"),
        format!("p99 {p99:.1} ms"),
        format!("max {max:.1} ms"),
    ]);
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn main() {
    // The binary's runtime (multi-threaded, one worker per core) unless told otherwise.
    let flavor = std::env::var("SLOTCRON_BENCH_RUNTIME").unwrap_or_default();
    let runtime = match flavor.as_str() {
        "current_thread" => tokio::runtime::Builder::new_current_thread(),
        _ => tokio::runtime::Builder::new_multi_thread(),
    }
    .enable_all()
    .build()
    .unwrap();
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let load_before = load_average();
    let nodes: Vec<Node> = (0..3).map(|_| Node::start()).collect();
    let mut table = Table {
        rows: vec![
            "| measurement | size | | | |".into(),
            "|---|---|---|---|---|".into(),
        ],
    };
    runtime.block_on(async {
        let sections = [
            ("race", 0),
            ("lateness", 1),
            ("scale", 2),
            ("footprint", 3),
            ("faults", 4),
            ("candidates", 5),
            ("startup", 6),
        ];
        for (name, section) in sections {
            if !wanted(name) {
                continue;
            }
            eprintln!("peers: {name}... (load {})", load_average());
            match section {
                0 => race(&nodes, &mut table).await,
                1 => lateness(&nodes, &mut table).await,
                2 => scale(&nodes, &release_binary(), &mut table).await,
                3 => footprint(&nodes, &release_binary(), &mut table).await,
                4 => faults(&release_binary(), &mut table).await,
                5 => candidates(&nodes, &release_binary(), &mut table).await,
                _ => startup(&nodes, &release_binary(), &mut table).await,
            }
        }
    });
    table.row(&[
        "run".into(),
        format!(
            "{cpus} CPUs, {} mode",
            if quick() { "quick" } else { "full" }
        ),
        format!("load average before {load_before}"),
        format!("after {}", load_average()),
        format!(
            "bench runtime: {}",
            if flavor == "current_thread" {
                "current_thread"
            } else {
                "multi_thread"
            }
        ),
    ]);
    println!("{}", table.rows.join("\n"));
}
