//! slotcron as a library against tokio-cron-scheduler, in one run (BENCHMARKS.md, "Library"):
//! five replicas in this process, each a `Fleet` on the same 3 Redis nodes with one job every
//! second (the library's own scheduling), and a tokio-cron-scheduler with two jobs every second:
//! one bare, one behind the fleet's guard. The two jobs of one scheduler fire in the same poll,
//! so the guard's overhead per tick is the guarded body's start less the bare body's start on
//! the replica that won the slot.
//!
//! ```sh
//! cargo bench --features tcs --bench library        # 20 s
//! SLOTCRON_BENCH_QUICK=1 cargo bench --features tcs --bench library
//! ```

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use slotcron::api::tcs::current_slot;
use slotcron::{Fleet, FleetHandle, JobSpec};
use tokio_cron_scheduler::{Job, JobScheduler};

const REPLICAS: usize = 5;

/// What ran, when: (kind, replica, slot second) -> the body's start.
type Starts = Arc<Mutex<BTreeMap<(Kind, usize, i64), DateTime<Utc>>>>;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    /// The library's own job (`Fleet::job`).
    Library,
    /// A bare tokio-cron-scheduler job: its slot is the second it fired in.
    Bare,
    /// The same job behind the guard: its slot is the guard's.
    Guarded,
}

/// A redis-server on a free port, stopped on drop (its directory removed with it).
struct Node(Child, u16, #[allow(dead_code)] tempfile::TempDir);

impl Node {
    fn start() -> Node {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        let dir = tempfile::tempdir().expect("a temp dir");
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--dir"])
            .arg(dir.path())
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server");
        let up = (0..500).any(|_| {
            std::thread::sleep(Duration::from_millis(10));
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        assert!(up, "redis-server did not start on {port}");
        Node(child, port, dir)
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn record(starts: &Starts, kind: Kind, replica: usize, slot: DateTime<Utc>) {
    let now = Utc::now();
    let mut starts = starts.lock().unwrap_or_else(|p| p.into_inner());
    starts.insert((kind, replica, slot.timestamp()), now);
}

/// Replica `k`: its fleet (with the library's job) and its scheduler (bare and guarded jobs).
async fn replica(k: usize, urls: &[String], starts: &Starts) -> (FleetHandle, JobScheduler) {
    let library = starts.clone();
    let fleet = Fleet::new(format!("r{k}"))
        .nodes(urls.to_vec())
        .key_prefix("bench-library")
        .job(JobSpec::new("library", "* * * * * *"), move |ctx| {
            record(&library, Kind::Library, k, ctx.slot());
            async { Ok::<(), String>(()) }
        })
        .start()
        .await
        .expect("the fleet starts");
    let scheduler = JobScheduler::new().await.expect("a scheduler");
    let bare = starts.clone();
    let job = Job::new_async("* * * * * *", move |_, _| {
        // It cannot tell its instant: the second it fired in (it is never early).
        let now = Utc::now();
        record(
            &bare,
            Kind::Bare,
            k,
            now - chrono::Duration::nanoseconds(now.timestamp_subsec_nanos().into()),
        );
        Box::pin(async {})
    });
    scheduler
        .add(job.expect("a bare job"))
        .await
        .expect("added");
    let guarded = starts.clone();
    let job = fleet
        .tcs_guard()
        .job_async("guarded", "* * * * * *", move |_, _| {
            if let Some(ctx) = current_slot() {
                record(&guarded, Kind::Guarded, k, ctx.slot());
            }
            Box::pin(async {})
        })
        .expect("a guarded job");
    scheduler.add(job).await.expect("added");
    (fleet, scheduler)
}

/// p50, p99, max of `samples` (ms).
fn percentiles(samples: &mut [f64]) -> String {
    samples.sort_by(f64::total_cmp);
    let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize];
    if samples.is_empty() {
        return "no samples".into();
    }
    format!(
        "{} samples | p50 {:.1} ms | p99 {:.1} ms | max {:.1} ms",
        samples.len(),
        at(0.5),
        at(0.99),
        at(1.0)
    )
}

/// Lateness (start less slot, ms) of `kind` within the window.
fn lateness(
    starts: &BTreeMap<(Kind, usize, i64), DateTime<Utc>>,
    kind: Kind,
    from: i64,
    to: i64,
) -> Vec<f64> {
    starts
        .iter()
        .filter(|((k, _, slot), _)| *k == kind && (from..to).contains(slot))
        .map(|((_, _, slot), at)| (at.timestamp_millis() - slot * 1000) as f64)
        .collect()
}

/// The guard's overhead per tick: the guarded start less the bare start, same replica, slot.
fn overhead(starts: &BTreeMap<(Kind, usize, i64), DateTime<Utc>>, from: i64, to: i64) -> Vec<f64> {
    starts
        .iter()
        .filter(|((k, _, slot), _)| *k == Kind::Guarded && (from..to).contains(slot))
        .filter_map(|((_, r, slot), guarded)| {
            let bare = starts.get(&(Kind::Bare, *r, *slot))?;
            Some((*guarded - *bare).num_microseconds()? as f64 / 1000.0)
        })
        .collect()
}

#[tokio::main]
async fn main() {
    let seconds = if std::env::var_os("SLOTCRON_BENCH_QUICK").is_some() {
        5
    } else {
        20
    };
    let nodes: Vec<Node> = (0..3).map(|_| Node::start()).collect();
    let urls: Vec<String> = nodes
        .iter()
        .map(|n| format!("redis://127.0.0.1:{}", n.1))
        .collect();
    let starts: Starts = Arc::default();
    let mut replicas = Vec::new();
    let base = Utc::now().timestamp() + 1;
    for k in 0..REPLICAS {
        let (fleet, scheduler) = replica(k, &urls, &starts).await;
        // Started 100 ms apart, so the 5 schedulers sample tokio-cron-scheduler's 500 ms poll
        // at different phases, as replicas started at random would.
        let phase =
            DateTime::from_timestamp_millis(base * 1000 + k as i64 * 100).unwrap_or_default();
        if let Ok(wait) = (phase - Utc::now()).to_std() {
            tokio::time::sleep(wait).await;
        }
        scheduler.start().await.expect("the scheduler starts");
        replicas.push((fleet, scheduler));
    }
    let from = Utc::now().timestamp() + 2;
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    let to = Utc::now().timestamp() - 1;
    for (fleet, mut scheduler) in replicas {
        let _ = scheduler.shutdown().await;
        let _ = fleet.shutdown().await;
    }
    let starts = starts.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let rows = [
        (
            "lateness: library job, 5 replicas x 3 nodes",
            lateness(&starts, Kind::Library, from, to),
        ),
        (
            "lateness: tokio-cron-scheduler bare job, 5 instances, no lock",
            lateness(&starts, Kind::Bare, from, to),
        ),
        (
            "lateness: tokio-cron-scheduler job behind the guard, 5 replicas",
            lateness(&starts, Kind::Guarded, from, to),
        ),
        (
            "guard overhead per tick (guarded start - bare start, winner)",
            overhead(&starts, from, to),
        ),
    ];
    for (name, mut samples) in rows {
        println!("| {name} | {} |", percentiles(&mut samples));
    }
    println!("| window | {} s, slots {from}..{to} |", to - from);
}
