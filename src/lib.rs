//! slotcron: cron for fleets. Every replica runs the same schedule; at each slot the replicas
//! race for a Redlock keyed by job and slot; only the winner runs the job.
//!
//! # Layout
//! - [`config`]: jobs.toml parsed once into checked types; errors name file, job and field.
//! - [`schedule`]: slots (the scheduled instants) from cron + IANA zone; the wall-clock seam.
//! - [`calendar`]: workdays and days off (built-in `cn`, .ics files, inline dates) for `days`.
//! - [`fleet_clock`]: the Redis nodes' `TIME` kept on the monotonic clock; scheduling on it;
//!   steps of the wall clock seen and reported.
//! - [`lock`]: the pool of Redis nodes with its one view of their health (`lock::nodes`), the
//!   Redlock over it, and the standalone in-process lock.
//! - [`race`]: one slot's life on one replica: race, then (winner only) run inside the validity,
//!   handing the slot off when nothing left this replica.
//! - [`membership`]: the fleet's live replicas (heartbeats) and each slot's candidates.
//! - [`handoff`]: offers of slots a winner could not deliver, over Redis pub/sub.
//! - [`pubsub`]: the fleet's notifications: one subscription per node and channel.
//! - [`control`]: fleet-wide pause and resume of jobs, and their log.
//! - [`ledger`]: every scheduled slot of a period and its fate, missed ones included.
//! - [`scheduler`]: the timeline that sleeps until the next due instant; shutdown and tasks.
//! - [`liveness`]: the timeline's watchdog behind `/healthz`.
//! - [`history`]: run records (who ran what) in a capped stream per job on every node.
//! - [`watermark`]: when the fleet first scheduled a job; catch-up never reaches before it.
//! - [`outcome`]: how a slot ended, as its log line and its counter name it.
//! - [`metrics`]: Prometheus metrics; [`status`]: `/healthz`, `/readyz`, `/metrics`, status page.
//! - [`action`]: what a winner does: WeCom robot, generic HTTP, log; retries and templates.
//! - [`secret`]: redaction of webhook keys and passwords at the type level.
//! - [`telemetry`]: log format and filter.
//! - [`tls`]: the crypto provider shared by the HTTP and Redis clients.
//! - [`watch`]: reload when the configuration file changes (a ConfigMap's symlink swap too).
//! - [`probe`]: `slotcron health`, the image's HEALTHCHECK of `/healthz`.
//! - [`cli`]: `slotcron run` and `slotcron check`; [`manual`]: `trigger` and `history`.

pub mod action;
pub mod calendar;
pub mod catch_up;
pub mod cli;
pub mod config;
pub mod control;
pub mod fleet_clock;
pub mod handoff;
pub mod history;
pub mod ledger;
pub mod liveness;
pub mod lock;
pub mod manual;
pub mod membership;
pub mod metrics;
pub mod outcome;
pub mod probe;
pub mod pubsub;
pub mod race;
pub mod replica;
pub mod schedule;
pub mod scheduler;
pub mod secret;
pub mod status;
pub mod telemetry;
pub mod tls;
pub mod watch;
pub mod watermark;
