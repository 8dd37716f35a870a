//! The simulation (issue 30): a whole fleet in one process: several replicas running
//! slotcron's own start-up and run path, Redis nodes (the model, `model/`), receivers and a
//! nemesis, on simulated time and a simulated network, under seeded faults, with the README's
//! promises checked as invariants on every effect and after a settle period.
//!
//! - `simulation`: the CI run: `SLOTCRON_SIM_SEEDS` seeds (default 100) of mixed profiles,
//!   `SLOTCRON_SIM_JOBS` jobs every second for `SLOTCRON_SIM_SECONDS` each (defaults:
//!   [`JOBS_SECONDS`]); prints `sim: seeds=… slots=… faults=… violations=… slots_per_cpu_s=…`.
//! - `replay`: `SLOTCRON_SIM_SEED=<seed>` runs that one seed (a failure prints this command).
//! - `a_seed_replays_its_trace`: one seed run twice, the same trace hash.
//! - `kept_cases`: every case file in `tests/sim/cases/`, and the named cases of FAULTS.md.
//!
//! Scope: redlock mode's standalone nodes; Sentinel and Cluster stay covered by the
//! real-process tests (tests/it/sentinel.rs, tests/it/cluster.rs).

mod cases;
mod fleet;
mod invariants;
mod ledger;
mod model;
mod named;
mod nemesis;
mod net;
mod operator;
mod receivers;
mod run;
mod world;

use std::io::Write as _;
use std::time::Instant;

use run::{Outcome, Plan};

/// The simulation's own allocator: every request on the simulated wire allocates and frees a
/// few buffers on the replica's side and the model's, and with glibc's malloc a third of the
/// run's CPU went to `malloc`, `free` and their consolidation (BENCHMARKS.md). Only this test
/// binary uses it; slotcron itself keeps the system allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Seeds from `SLOTCRON_SIM_FIRST_SEED` (default 1): [`SEEDS`] unless `SLOTCRON_SIM_SEEDS`.
fn seeds() -> Vec<u64> {
    let first = env_or("SLOTCRON_SIM_FIRST_SEED", 1);
    (first..first + env_or("SLOTCRON_SIM_SEEDS", SEEDS)).collect()
}

/// The default number of seeds: 100 when optimised (`--profile sim`, the run scripts/test.sh
/// makes after the suite); in the dev profile, where the suite's `cargo test` runs this binary
/// too, one seed of each profile, so the suite does not pay for the full run twice.
const SEEDS: u64 = match cfg!(debug_assertions) {
    true => 6,
    false => 100,
};

/// The default budget (jobs every second, simulated seconds per seed): a million slots over
/// [`SEEDS`] seeds when optimised (`--profile sim`); in the dev profile, which runs the same
/// code about ten times slower, 700 (faults fall between 20 s and the horizon less 30 s). 21
/// jobs, not 20: a slot counts once it reached a receiver, and the receivers that refuse,
/// black-hole or answer 5xx leave some slots without one; 20 cleared a million by 1.25 % only.
const JOBS_SECONDS: (u64, u64) = match cfg!(debug_assertions) {
    true => (1, 120),
    false => (21, 510),
};

fn seeded(seed: u64) -> Plan {
    let jobs = env_or("SLOTCRON_SIM_JOBS", JOBS_SECONDS.0) as usize;
    Plan::seeded(seed, jobs, env_or("SLOTCRON_SIM_SECONDS", JOBS_SECONDS.1))
}

/// Prints a failed run: seed, profile, invariant, slot, who, the last events, and the command
/// that replays it; writes its plan as a case file.
fn report_failure(plan: &Plan, outcome: &Outcome) {
    for v in outcome.violations.iter().take(3) {
        eprintln!(
            "sim: VIOLATION {} seed={} profile={} job={} slot_us={} replicas={:?}: {}",
            v.invariant, plan.seed, plan.profile, v.job, v.slot_us, v.replicas, v.detail
        );
        for e in &v.last_events {
            eprintln!("    {e}");
        }
    }
    let case = cases::write_failed(plan);
    eprintln!(
        "sim: replay with: SLOTCRON_SIM_SEED={} SLOTCRON_SIM_JOBS={} SLOTCRON_SIM_SECONDS={} cargo test --profile sim --test sim replay -- --nocapture   (case file: {case})",
        plan.seed, plan.jobs, plan.horizon_s
    );
}

#[test]
fn simulation() {
    let seeds = seeds();
    let started = Instant::now();
    let cpu_before = cases::cpu_seconds();
    let threads = env_or("SLOTCRON_SIM_THREADS", 2) as usize;
    let outcomes = cases::on_threads(&seeds, threads, |seed| {
        let plan = seeded(seed);
        let cpu = cases::thread_cpu_seconds();
        let outcome = run::run(&plan);
        if std::env::var_os("SLOTCRON_SIM_VERBOSE").is_some() {
            let cpu = cases::thread_cpu_seconds() - cpu;
            eprintln!(
                "sim: seed {seed} {} slots={} faults={} cpu={cpu:.2}s",
                plan.profile, outcome.slots, outcome.faults
            );
        }
        (plan, outcome)
    });
    let cpu = (cases::cpu_seconds() - cpu_before).max(1e-3);
    let (mut slots, mut faults, mut violations) = (0, 0, 0);
    for (plan, outcome) in &outcomes {
        slots += outcome.slots;
        faults += outcome.faults;
        violations += outcome.violations.len();
        if !outcome.violations.is_empty() {
            report_failure(plan, outcome);
        }
    }
    // Straight to the process's stdout: the summary shows without `--nocapture` (libtest
    // captures only `print!`).
    let _ = writeln!(
        std::io::stdout(),
        "sim: seeds={} slots={slots} faults={faults} violations={violations} slots_per_cpu_s={}",
        seeds.len(),
        (slots as f64 / cpu).round()
    );
    eprintln!(
        "sim: wall {:.1} s, cpu {cpu:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(violations, 0, "the simulation found violations (above)");
}

#[test]
fn replay() {
    let Ok(seed) = std::env::var("SLOTCRON_SIM_SEED") else {
        return;
    };
    let plan = seeded(seed.parse().expect("SLOTCRON_SIM_SEED is a number"));
    let outcome = run::run(&plan);
    println!(
        "sim: replay seed={} profile={} trace={:016x} slots={} violations={}",
        plan.seed,
        plan.profile,
        outcome.trace_hash,
        outcome.slots,
        outcome.violations.len()
    );
    if !outcome.violations.is_empty() {
        report_failure(&plan, &outcome);
        panic!("seed {} broke an invariant (above)", plan.seed);
    }
}

#[test]
fn a_seed_replays_its_trace() {
    // Profile "mixed" (seed 4 mod 6): node, network and replica faults in one run.
    let plan = Plan::seeded(4, 3, 120);
    let (first, again) = (run::run(&plan), run::run(&plan));
    assert!(
        first.events > 1000,
        "the run did something: {} events",
        first.events
    );
    assert_eq!(
        first.trace_hash, again.trace_hash,
        "seed {} ran differently the second time",
        plan.seed
    );
}
