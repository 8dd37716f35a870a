//! slotcron: cron for fleets. Every replica runs the same schedule; at each slot the replicas
//! race for a Redlock keyed by job and slot; only the winner runs the job.
//!
//! # Layout
//! One slot's life reads down this list; a module imports only modules below it.
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
//! - [`membership`]: the fleet's live replicas (heartbeats), grouped by their jobs' definitions,
//!   and each slot's candidates.
//! - [`destinations`]: one fleet per prefix: replicas whose job of one name sends elsewhere.
//! - [`handoff`]: offers of slots a winner could not deliver, over Redis pub/sub.
//! - [`control`]: fleet-wide pause and resume of jobs, and their log.
//! - [`status`]: `/healthz`, `/readyz`, `/metrics` and the status page (overview, charts,
//!   outcome strips, the fleet), from a snapshot of sources it owns.
//! - [`ledger`]: every scheduled slot of a period and its fate, missed ones included.
//! - [`action`]: what a winner does, one file per action (WeCom, DingTalk, Feishu, Slack, HTTP,
//!   command, log), each parsing and checking its own `[job.action]` table; delivery, retries,
//!   the fleet-wide rate budget and templates.
//! - [`history`]: run records (who ran what) in a capped stream per job on every node.
//! - [`watermark`]: when the fleet first scheduled a job; catch-up never reaches before it.
//! - [`liveness`]: the timeline's watchdog behind `/healthz`.
//! - [`lock`]: the Redlock over the Redis layer, and the standalone in-process lock.
//! - [`redis`]: everything that talks to Redis: the node pool (fan-out, quorum, its one view
//!   of the nodes' health), one node, the lock's scripts, and the fleet's pub/sub; the seam
//!   where the topology modes (redlock, sentinel, cluster) differ.
//! - [`fleet_clock`]: the Redis nodes' `TIME` kept on the monotonic clock; scheduling on it;
//!   never trusted before it is measured; steps of the wall clock, and jumps (a freeze neither
//!   local clock saw) against the nodes' time, seen and reported.
//! - [`config`]: jobs.toml parsed once into checked types; errors name file, job and field.
//!   Each action's table is handed to that action's own parser.
//! - [`schedule`]: slots (the scheduled instants) from cron + IANA zone; the wall-clock seam.
//! - [`calendar`]: workdays and days off (built-in `cn`, .ics files, inline dates) for `days`.
//! - [`metrics`]: Prometheus metrics; [`outcome`]: how a slot ended, as its log line and its
//!   counter name it.
//! - [`secret`]: redaction of webhook keys and passwords at the type level.
//! - [`telemetry`]: log format and filter; [`tls`]: the crypto provider shared by the HTTP and
//!   Redis clients; [`watch`]: reload when the configuration file changes; [`probe`]:
//!   `slotcron health`, the image's HEALTHCHECK of `/healthz`.

pub mod action;
pub mod calendar;
pub mod catch_up;
pub mod cli;
pub mod config;
pub mod control;
pub mod destinations;
pub mod fleet_clock;
pub mod handoff;
pub mod history;
pub mod ledger;
pub mod liveness;
pub mod lock;
pub mod membership;
pub mod metrics;
pub mod outcome;
pub mod probe;
pub mod race;
pub mod redis;
pub mod replica;
pub mod schedule;
pub mod scheduler;
pub mod secret;
pub mod status;
pub mod telemetry;
pub mod tls;
pub mod watch;
pub mod watermark;
