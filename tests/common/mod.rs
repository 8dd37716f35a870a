//! Shared test harness for slotcron's integration tests.
//!
//! The one integration binary (`tests/it/main.rs`) declares it once; its modules do
//! `use crate::common;`. The harness starts real processes ([`redis`]: redis-server;
//! [`process`]: the slotcron binary), real HTTP receivers ([`receivers`]: wiremock;
//! [`raw_http`]: one that misbehaves at the TCP level) and a TCP fault proxy ([`proxy`]);
//! [`tools`] finds the ecosystem's checkers. Only [`fleet`] refers to the slotcron crate
//! itself: in-process replicas, each with its own clock. The names of `redis`, `process`,
//! `receivers` and `proxy` are re-exported here, so `use common::*;` sees them all.
//!
//! Everything is synchronous on purpose (each piece that needs async I/O runs
//! on its own thread with its own runtime), so the helpers can be used from
//! plain `#[test]` functions as well as from `#[tokio::test]` ones.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub mod cluster;
pub mod fleet;
mod process;
mod proxy;
pub mod raw_http;
mod receivers;
mod redis;
mod sentinel;
pub mod tools;
mod usage;

// Each test module uses some of these only: the rest would warn as unused re-exports.
#[allow(unused_imports)]
pub use self::process::*;
#[allow(unused_imports)]
pub use self::proxy::*;
#[allow(unused_imports)]
pub use self::receivers::*;
#[allow(unused_imports)]
pub use self::redis::*;
#[allow(unused_imports)]
pub use self::sentinel::*;
#[allow(unused_imports)]
pub use self::usage::*;

use nix::sys::signal::{Signal, kill as send_signal};
use nix::unistd::Pid;

/// Path of the redis-server binary (override with `REDIS_SERVER_BIN`).
pub fn redis_server_bin() -> String {
    std::env::var("REDIS_SERVER_BIN").unwrap_or_else(|_| "redis-server".to_string())
}

/// A currently free TCP port on 127.0.0.1 (bound, read, released).
///
/// Another process may take it before the caller binds it: callers that
/// start servers should retry on "address in use".
pub fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().expect("local_addr").port()
}

/// Writes `toml_text` to `dir/slotcron.toml` and returns the path.
pub fn write_config(dir: impl AsRef<Path>, toml_text: &str) -> PathBuf {
    write_file(dir, "slotcron.toml", toml_text)
}

/// Writes `contents` to `dir/name` and returns the path.
pub fn write_file(dir: impl AsRef<Path>, name: &str, contents: &str) -> PathBuf {
    let path = dir.as_ref().join(name);
    std::fs::write(&path, contents).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    path
}

/// After a fleet test's observation window: room for the window's last slots to race, send
/// and log before the receiver and the lines are read, and for a second delivery of one, were
/// there one, to show. A race ends within its node timeout and a send to a local receiver takes
/// milliseconds; 2 s covers a loaded machine's scheduling delays on top.
pub const IN_FLIGHT: Duration = Duration::from_secs(2);

/// Sleeps until the wall clock is `millis` into a second (the next such moment).
pub fn sleep_until_millis_into_a_second(millis: u32) {
    let now = chrono::Utc::now().timestamp_subsec_millis();
    let wait = (millis + 1000 - now) % 1000;
    std::thread::sleep(Duration::from_millis(u64::from(wait)));
}

/// Polls `f` every 10 ms until it returns `Some`, or `timeout` elapses.
pub fn wait_until<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Async twin of [`wait_until`] (sleeps with tokio, so it doesn't block a runtime).
pub async fn wait_until_async<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The few tests that keep the cores busy themselves (the 09:00 burst, the status page
/// flood, Chromium, the model differential) hold this guard while they run. The one test
/// binary runs more threads than the machine has cores so that tests waiting on real time
/// overlap; two CPU-bound tests overlapping would instead starve each other's replicas, so
/// they take turns, while the waiting ones run beside them.
static HEAVY: Mutex<()> = Mutex::new(());

/// Takes the [`HEAVY`] turn (a panicked holder's poison is ignored: its test already failed).
pub fn heavy() -> MutexGuard<'static, ()> {
    lock(&HEAVY)
}

/// Set in the child [`in_own_process`] starts: the name of the one test it runs.
const OWN_PROCESS_ENV: &str = "SLOTCRON_TEST_OWN_PROCESS";

/// Whether the caller, the test named `test` (its path in the binary, e.g. `traces::name`),
/// is to run its body here. A test that installs process-wide state (the OTLP exporter is one
/// per process, kept by the first replica that names an endpoint) cannot share the one test
/// binary's process with another such test: outside the child this runs the binary again
/// with only `test`, asserts that it passed, and answers false; in that child it answers true.
pub fn in_own_process(test: &str) -> bool {
    if std::env::var(OWN_PROCESS_ENV).as_deref() == Ok(test) {
        return true;
    }
    let out = Command::new(std::env::current_exe().expect("the test binary"))
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(OWN_PROCESS_ENV, test)
        .output()
        .expect("running the test binary again");
    let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{test} in its own process failed:\n{text}"
    );
    assert!(
        text.contains("1 passed"),
        "{test} did not run in its own process:\n{text}"
    );
    false
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn signal_pid(pid: u32, sig: Signal) -> bool {
    send_signal(Pid::from_raw(pid as i32), sig).is_ok()
}

/// Waits (polling) for a child to exit; `None` if it is still running at the deadline.
fn wait_child_timeout(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) => {}
            Err(_) => return None,
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
