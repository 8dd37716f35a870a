//! slotcron: cron for fleets. Every replica runs the same schedule; at each slot the replicas
//! race for a Redlock keyed by job and slot; only the winner runs the job.
//!
//! # Layout
//! - [`config`]: jobs.toml parsed once into checked types; errors name file, job and field.
//! - [`schedule`]: slots (the scheduled instants) from cron + IANA zone; the wall-clock seam.
//! - [`fleet_clock`]: the replica's offset to the Redis nodes' `TIME`; scheduling on it.
//! - [`lock`]: the pool of Redis nodes with its one view of their health (`lock::nodes`), the
//!   Redlock over it, and the standalone in-process lock.
//! - [`race`]: one slot's life on one replica: race, then (winner only) run inside the validity.
//! - [`scheduler`]: the timeline that sleeps until the next due instant; shutdown and tasks.
//! - [`history`]: run records (who ran what) in a capped stream per job on every node.
//! - [`metrics`]: Prometheus metrics; [`status`]: `/healthz`, `/readyz`, `/metrics`, status page.
//! - [`action`]: what a winner does: WeCom robot, generic HTTP, log; retries and templates.
//! - [`secret`]: redaction of webhook keys and passwords at the type level.
//! - [`telemetry`]: log format and filter.
//! - [`tls`]: the crypto provider shared by the HTTP and Redis clients.
//! - [`cli`]: `slotcron run` and `slotcron check`; [`manual`]: `trigger` and `history`.

pub mod action;
pub mod cli;
pub mod config;
pub mod fleet_clock;
pub mod history;
pub mod lock;
pub mod manual;
pub mod metrics;
pub mod race;
pub mod schedule;
pub mod scheduler;
pub mod secret;
pub mod status;
pub mod telemetry;
pub mod tls;
