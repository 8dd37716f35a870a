//! `/healthz` proves the scheduler loop: it answers 200 while the timeline wakes for its slots,
//! and 503 once a wake is overdue, while the rest of the HTTP server still answers.
//!
//! The wedge is real, not a test switch: the replica runs under libfaketime with its wall clock
//! frozen (monotonic time untouched). The timeline sleeps towards its first slot, wakes, finds
//! the wall clock has not reached the slot, and sleeps again, forever: no slot ever runs, as
//! with a panicked timeline task or a starved runtime. (A SIGSTOP of the process would stop
//! the HTTP server too and prove nothing.)

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::tools::libfaketime;
use common::{Replica, free_port, http_get, wait_until, write_config};

/// A standalone replica's config: one log job on `schedule`, the HTTP endpoints on `port`.
fn config(port: u16, schedule: &str) -> String {
    format!(
        "[http]\nlisten = \"127.0.0.1:{port}\"\n\
         [[job]]\nname = \"tick\"\nschedule = \"{schedule}\"\n\
         [job.action]\ntype = \"log\"\ncontent = \"tick\"\n"
    )
}

fn status(port: u16, path: &str) -> (u16, String) {
    let reply = http_get(port, path).unwrap_or_else(|| panic!("{path} does not answer"));
    (reply.status, reply.body)
}

#[test]
fn healthz_answers_200_and_reports_each_wake_while_the_timeline_runs() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let r = Replica::run(
        write_config(dir.path(), &config(port, "* * * * * *")),
        "live",
        &[],
    );
    r.assert_started();
    let woke = wait_until(Duration::from_secs(5), || {
        let (code, body) = status(port, "/healthz");
        assert_eq!(code, 200, "{body}");
        body.contains("the timeline woke").then_some(body)
    });
    assert!(woke.is_some(), "healthz never reported a wake");
    // Five seconds, five slots: healthy at every look.
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        let (code, body) = status(port, "/healthz");
        assert_eq!(code, 200, "{body}");
        assert!(body.starts_with("ok: the timeline woke"), "{body}");
        std::thread::sleep(Duration::from_millis(250));
    }
    let ran = r
        .json_lines()
        .iter()
        .filter(|l| l["message"] == "ran the slot")
        .count();
    assert!(ran >= 4, "{ran} slots ran in 5 s");
}

#[test]
fn a_wedged_timeline_fails_healthz_within_one_missed_slot_while_http_answers() {
    let Some(lib) = libfaketime() else { return };
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    // Frozen at a whole minute: the first slot is 5 s away on the wall clock, the second 10 s.
    let path = write_config(dir.path(), &config(port, "*/5 * * * * *"));
    let spawned = Instant::now();
    let r = frozen_replica(&lib, &path, "wedged");
    r.assert_started();
    let (code, body) = status(port, "/healthz");
    assert_eq!(code, 200, "healthy before the first slot is due: {body}");
    let failed = wait_until(Duration::from_secs(15), || {
        let (code, body) = status(port, "/healthz");
        (code == 503).then(|| (spawned.elapsed(), body))
    });
    let (after, body) = failed.unwrap_or_else(|| panic!("healthz never failed: {:?}", r.lines()));
    assert!(body.contains("has not woken for a slot due"), "{body}");
    // Missed the first slot (5 s), failed before the second was due (10 s).
    assert!(
        after >= Duration::from_secs(5) && after < Duration::from_secs(10),
        "healthz failed {after:?} after the start"
    );
    // The HTTP server still answers: only the loop is stuck.
    assert_eq!(status(port, "/readyz").0, 200);
    assert_eq!(status(port, "/metrics").0, 200);
    let ran = r
        .json_lines()
        .iter()
        .filter(|l| l["message"] == "ran the slot")
        .count();
    assert_eq!(ran, 0, "a slot ran: the timeline was not wedged");
}

/// A replica whose wall clock stands still at a whole minute (libfaketime's absolute time
/// without `@`); tokio's timers keep the real monotonic clock.
fn frozen_replica(lib: &Path, config: &Path, name: &str) -> Replica {
    let env = [
        ("FAKETIME", "2026-01-01 00:00:00"),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
    ];
    Replica::run_faked(config, name, lib, &env)
}
