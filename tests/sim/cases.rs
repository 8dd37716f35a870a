//! Case files (`tests/sim/cases/*.toml`: a plan with an explicit fault schedule), kept and run
//! every time; a failed run's plan is written as one. And the runner's small helpers.

use std::path::PathBuf;

use crate::run::{self, Plan};

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/sim/cases")
}

/// Writes `plan` (seed, profile, its explicit fault schedule) as a case file; its path.
pub fn write_failed(plan: &Plan) -> String {
    let path = dir().join(format!("failed-{}-{}.toml", plan.profile, plan.seed));
    let text = toml::to_string(plan).expect("a plan as TOML");
    let _ = std::fs::write(&path, text);
    path.display().to_string()
}

/// Every kept case file.
pub fn kept() -> Vec<(String, Plan)> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir())
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    paths.retain(|p| p.extension().is_some_and(|e| e == "toml"));
    paths.sort();
    (paths.into_iter())
        .map(|p| {
            let text = std::fs::read_to_string(&p).expect("a case file");
            let plan: Plan =
                toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (p.display().to_string(), plan)
        })
        .collect()
}

/// This process's CPU time (user + system), seconds.
pub fn cpu_seconds() -> f64 {
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes the struct it is given.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

/// This thread's CPU time, seconds.
pub fn thread_cpu_seconds() -> f64 {
    let mut t: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: clock_gettime writes the struct it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    t.tv_sec as f64 + t.tv_nsec as f64 / 1e9
}

/// `work` on each seed, on `threads` threads (each run has its own runtime on its thread);
/// the results in seed order.
pub fn on_threads<T: Send>(
    seeds: &[u64],
    threads: usize,
    work: impl Fn(u64) -> T + Sync,
) -> Vec<T> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(&seed) = seeds.get(i) else { return };
                    let out = work(seed);
                    results.lock().unwrap().push((i, out));
                }
            });
        }
    });
    let mut results = results.into_inner().unwrap();
    results.sort_by_key(|(i, _)| *i);
    results.into_iter().map(|(_, out)| out).collect()
}

/// Runs one case; its violations, reported, fail the test.
pub fn check(name: &str, plan: &Plan) {
    let outcome = run::run(plan);
    for v in &outcome.violations {
        eprintln!(
            "{name}: VIOLATION {} job={} slot_us={} replicas={:?}: {}",
            v.invariant, v.job, v.slot_us, v.replicas, v.detail
        );
        for e in &v.last_events {
            eprintln!("    {e}");
        }
    }
    assert!(outcome.slots > 0, "{name}: nothing was delivered");
    assert!(
        outcome.violations.is_empty(),
        "{name}: {} violation(s) (above)",
        outcome.violations.len()
    );
}

#[test]
fn kept_cases() {
    for (name, plan) in kept() {
        check(&name, &plan);
    }
}
