//! slotcron: cron for fleets. Every replica runs the same schedule; at each slot the replicas
//! race for a Redlock keyed by job and slot; only the winner runs the job.
//!
//! # As a library
//! Once-per-fleet async jobs: every replica of a service builds the same [`Fleet`]; each slot of
//! each job runs on exactly one of them, even when their clocks disagree by seconds (slots are
//! scheduled on the Redis nodes' time, not the host's), with the binary's logs, metrics and
//! history. The job's function gets the slot's [`SlotContext`]; its `Ok` records the slot
//! `done`, its `Err` `failed` with the error's text.
//!
//! ```no_run
//! use slotcron::{Fleet, JobSpec, SlotContext};
//!
//! async fn send_report(ctx: SlotContext) -> Result<(), std::io::Error> {
//!     println!("report for {} (fence {})", ctx.slot_local(), ctx.fence());
//!     Ok(())
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), slotcron::Error> {
//!     let sigterm = async {
//!         use tokio::signal::unix::{SignalKind, signal};
//!         signal(SignalKind::terminate()).expect("SIGTERM handler").recv().await;
//!     };
//!     Fleet::new(std::env::var("HOSTNAME").unwrap_or_else(|_| "replica".into()))
//!         .nodes(["redis://redis-a:6379", "redis://redis-b:6379", "redis://redis-c:6379"])
//!         .job(JobSpec::new("report", "0 9 * * 1-5").zone("Asia/Shanghai"), send_report)
//!         .run_until(sigterm)
//!         .await
//! }
//! ```
//!
//! Without [`Fleet::nodes`] the fleet is standalone: an in-process lock, for one replica and
//! for tests. With the `tcs` feature, `api::tcs` makes existing tokio-cron-scheduler jobs
//! once-per-fleet. The examples `singleton` and `tcs_guard` run as they are:
//! `cargo run --release --example singleton -- --nodes redis://127.0.0.1:6379 --replica-id a`.
//!
//! # Features
//! The defaults are the binary's: `cli` (the command line; turns on the next three), `server`
//! (the HTTP status, metrics and status-page server, [`Fleet::http`]), `ics` (`.ics` calendars),
//! `robots` (the WeCom, DingTalk and Feishu robot actions of a jobs.toml) and `otel` (a trace
//! per run over OTLP). `tcs` (the guard) is off. With
//! `default-features = false` a [`Fleet`] still has Redis nodes, async fn jobs, the built-in
//! `cn` calendar, logs, metrics and history; asking it for what is compiled out (an `[http]`
//! address, an .ics file, a robot) is refused at start, naming the feature to enable.
//!
//! The API is [`api`], re-exported here. The binary's own modules (the command line, the
//! replica, the slot's life, the Redis layer, ...) are private to the crate; its binary, tests
//! and benchmarks reach them through a hidden path that is not a stable interface and may change
//! in any release.

#![warn(missing_docs)]
// The internals' docs link each other, and `unstable`'s layout links them (rustdoc resolves a
// module's own doc in its parent): read with `--document-private-items`. The API's docs must
// link only the API, checked in `api`.
#![allow(rustdoc::private_intra_doc_links)]

mod action;
#[warn(rustdoc::private_intra_doc_links)]
pub mod api;
mod catch_up;
#[cfg(feature = "cli")]
mod cli;
mod config;
mod fleet;
mod lock;
mod metrics;
mod ops;
mod outcome;
mod record;
mod redis;
mod replica;
mod scheduler;
mod secret;
mod seed;
mod slot;
mod time;
mod tls;
mod trace;
mod watch;

#[doc(hidden)]
pub mod unstable {
    //! The binary's parts, for its own `main`, its tests and its benchmarks: NOT a stable
    //! interface (any release may rename or remove anything here); library users have
    //! [`api`](crate::api).
    //!
    //! Each module here re-exports the public items of the crate-private module of its name, so
    //! that the crate's own code keeps its `crate::x::...` paths and the public face stays the API.
    //!
    //! # Layout
    //! One slot's life reads down this list, and so do the imports: a module imports only modules
    //! listed below it (`tests/it/layout.rs` checks this list against `src/`).
    //! - [`cli`]: the command line: one file per command (`run`, `check`, `trigger`, `history`,
    //!   `pause`/`resume`, `audit`, `health`, `completions`/`man`) under a dispatcher that only picks one.
    //! - [`api`](crate::api): the library, the crate's one public face: a `Fleet` built in code
    //!   (Redis nodes, jobs with a cron and an async function) or from a jobs.toml (the binary's),
    //!   started into a `FleetHandle` with graceful shutdown, triggers, pauses, resumes and
    //!   history; and, with the `tcs` feature, the guard that makes tokio-cron-scheduler jobs
    //!   once-per-fleet.
    //! - [`replica`]: start-up and lifetime: connect the node pool, measure the fleet clock, join
    //!   the membership, serve the status endpoints, listen to the fleet, run one generation of the
    //!   schedule per configuration (reloads), shut down.
    //! - [`scheduler`]: the timer that sleeps until the timeline's next due instant (a slot's
    //!   instant plus its jitter's delay, `time::timeline`) and hands the due jobs to their slot's
    //!   life (`slot::due`), as one batch.
    //! - [`catch_up`]: the look-back at start: missed slots caught up (`catch_up`) or reported.
    //! - [`slot`]: one slot's life on one replica, in order, from one entry (`slot::due`) that the
    //!   timeline, catch-up, `trigger`, handoff offers and tests all go through: paused? ->
    //!   candidates (place, wait, look) -> window guard on the fleet clock -> claim (the batch
    //!   race, the running lease) -> confirm (winner only: the lock and the window checked on the
    //!   Redis nodes' own clocks) -> run -> hand off -> record -> alert; one log
    //!   line and one counter per step (`report`).
    //! - [`ops`]: what operators see: `status` (`/healthz`, `/readyz`, `/metrics` and the status
    //!   page, from a snapshot of sources it owns, served on a thread of its own with bounded
    //!   clients), `ledger` (every scheduled slot of a period and its fate, missed ones included),
    //!   `liveness` (the timeline's watchdog behind `/healthz`, the races' verdicts behind `/readyz`),
    //!   `probe` (`slotcron health`, the image's HEALTHCHECK) and `telemetry` (log format, filter).
    //! - [`fleet`]: the fleet as one: `membership` (live replicas by heartbeat, grouped by their
    //!   jobs' definitions, and each slot's candidates), `namesakes` (two live replicas under one
    //!   id, found by the heartbeat and warned about), `destinations` (one fleet per prefix),
    //!   `handoff` (offers of slots a winner could not deliver), `triggers` (`slotcron trigger`'s
    //!   requests, raced by the fleet, and the answers) and `control` (fleet-wide pause and
    //!   resume of jobs, and their log).
    //! - [`config`]: jobs.toml parsed once into checked types; errors name file, job and field.
    //!   Each action's table is handed to that action's own parser.
    //! - [`action`]: what a winner does, one file per action (WeCom, DingTalk, Feishu, Slack, HTTP,
    //!   command, log), each parsing and checking its own `[job.action]` table; delivery, retries,
    //!   the fleet-wide rate budget and templates.
    //! - [`trace`]: a trace per won run over OTLP (`[telemetry] otlp_endpoint`, the `otel`
    //!   feature): the run's root span, the race's and each delivery attempt's; below `action`,
    //!   whose `http` attempts carry its `traceparent`.
    //! - [`lock`]: the Redlock over the Redis layer, and the standalone in-process lock.
    //! - [`record`]: what the fleet keeps about its jobs: `history` (run records in a capped stream
    //!   per job on every node), `watermark` (when the fleet first scheduled a job; catch-up
    //!   never reaches before it) and `audit` (every control action and reload: who, when on the
    //!   fleet clock, why; a capped stream on every node, counted on a majority).
    //! - [`time`]: `fleet_clock` (the Redis nodes' `TIME` kept on the monotonic clock; scheduling on
    //!   it; never trusted before it is measured; wall-clock steps and jumps seen and reported),
    //!   `schedule` (slots from cron + IANA zone; the wall-clock seam), `calendar` (workdays and
    //!   days off: built-in `cn`, .ics files, inline dates), `jitter` (a slot's delay, the same on
    //!   every replica), `timeline` (each job's next due slot, earliest first: what the
    //!   scheduler's timer sleeps towards) and `words` (a schedule said in Chinese or English).
    //! - [`metrics`]: Prometheus metrics.
    //! - [`outcome`]: how a slot ended, as its log line and its counter name it.
    //! - [`redis`]: everything that talks to Redis: the node pool (fan-out, quorum, its one view of
    //!   the nodes' health), one node, the lock's scripts, the fleet's pub/sub, and the check that
    //!   the nodes are independent primaries; the seam where the topology modes (redlock, sentinel,
    //!   cluster) differ (`topology`), sentinel mode's primary found and followed (`sentinel`),
    //!   cluster mode's one member over a Redis Cluster (`cluster`), and `WAIT` for a won lock's
    //!   replicas (`replication`).
    //! - [`secret`]: redaction of webhook keys and passwords at the type level.
    //! - [`tls`]: the crypto provider shared by the HTTP and Redis clients.
    //! - [`watch`]: reload when the configuration file changes.
    //! - [`seed`]: the randomness seam: every random choice drawn from one source, seeded by a
    //!   simulation so that a seed replays its run.
    //!

    /// A module of the same name for each crate-private one, with its public items.
    macro_rules! reexport {
        ($($(#[$gate:meta])* $name:ident),* $(,)?) => {
            $($(#[$gate])* pub mod $name {
                pub use crate::$name::*;
            })*
        };
    }
    reexport!(
        action,
        catch_up,
        #[cfg(feature = "cli")]
        cli,
        config,
        fleet,
        lock,
        metrics,
        ops,
        outcome,
        record,
        redis,
        replica,
        secret,
        seed,
        slot,
        time,
        tls,
        trace,
        watch,
    );
    /// The timeline has no public item: only the replica drives it, from inside the crate.
    pub mod scheduler {}
}

pub use api::{
    Calendar, CatchUpPolicy, ConfigError, ConfigErrors, DateTime, DstGap, DstRepeat, Error, Fleet,
    FleetHandle, JobSpec, Location, NaiveDate, Outcome, Overlap, RunRecord, Section, SlotContext,
    SourceLine, Trigger, Triggered, Tz, Utc,
};
/// The crates of the time types the API returns, at the versions it uses.
pub use {chrono, chrono_tz};
