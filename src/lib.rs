//! slotcron: cron for fleets. Every replica runs the same schedule; at each slot the replicas
//! race for a Redlock keyed by job and slot; only the winner runs the job.
//!
//! # Layout
//! One slot's life reads down this list, and so do the imports: a module imports only modules
//! listed below it (`tests/test_layout.rs` checks this list against `src/`).
//! - [`cli`]: the command line: one file per command (`run`, `check`, `trigger`, `history`,
//!   `pause`/`resume`, `health`, `completions`/`man`) under a dispatcher that only picks one.
//! - [`replica`]: start-up and lifetime: connect the node pool, measure the fleet clock, join
//!   the membership, serve the status endpoints, listen to the fleet, run one generation of the
//!   schedule per configuration (reloads), shut down.
//! - [`scheduler`]: the timeline that sleeps until the next due instant and hands the due jobs
//!   to the race, one batch per candidate rank.
//! - [`catch_up`]: the look-back at start: missed slots caught up (`catch_up`) or reported.
//! - [`race`]: one slot's life on one replica: race, then (winner only) run inside the validity,
//!   handing the slot off when nothing left this replica; record; one log line per step. Its
//!   `guard` part keeps every race inside the slot's window on the fleet clock; its
//!   `candidates` part decides which places race, look first, look out or stand by.
//! - [`ops`]: what operators see: `status` (`/healthz`, `/readyz`, `/metrics` and the status
//!   page, from a snapshot of sources it owns), `ledger` (every scheduled slot of a period and
//!   its fate, missed ones included), `liveness` (the timeline's watchdog behind `/healthz`),
//!   `probe` (`slotcron health`, the image's HEALTHCHECK) and `telemetry` (log format, filter).
//! - [`fleet`]: the fleet as one: `membership` (live replicas by heartbeat, grouped by their
//!   jobs' definitions, and each slot's candidates), `destinations` (one fleet per prefix),
//!   `handoff` (offers of slots a winner could not deliver) and `control` (fleet-wide pause and
//!   resume of jobs, and their log).
//! - [`config`]: jobs.toml parsed once into checked types; errors name file, job and field.
//!   Each action's table is handed to that action's own parser.
//! - [`action`]: what a winner does, one file per action (WeCom, DingTalk, Feishu, Slack, HTTP,
//!   command, log), each parsing and checking its own `[job.action]` table; delivery, retries,
//!   the fleet-wide rate budget and templates.
//! - [`lock`]: the Redlock over the Redis layer, and the standalone in-process lock.
//! - [`record`]: what the fleet keeps about its jobs: `history` (run records in a capped stream
//!   per job on every node) and `watermark` (when the fleet first scheduled a job; catch-up
//!   never reaches before it).
//! - [`time`]: `fleet_clock` (the Redis nodes' `TIME` kept on the monotonic clock; scheduling on
//!   it; never trusted before it is measured; wall-clock steps and jumps seen and reported),
//!   `schedule` (slots from cron + IANA zone; the wall-clock seam) and `calendar` (workdays and
//!   days off: built-in `cn`, .ics files, inline dates).
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

#![warn(missing_docs)]

pub mod action;
pub mod catch_up;
pub mod cli;
pub mod config;
pub mod fleet;
pub mod lock;
pub mod metrics;
pub mod ops;
pub mod outcome;
pub mod race;
pub mod record;
pub mod redis;
pub mod replica;
pub mod scheduler;
pub mod secret;
pub mod time;
pub mod tls;
pub mod watch;
