//! slotcron's integration tests, one binary (issue 31): the harness in `tests/common` compiles
//! once and the tests of every concern run side by side, so a fleet waiting on real time
//! overlaps with the next one instead of queueing behind it (`scripts/test.sh` picks the
//! thread count). One module per concern; run one with `cargo test --test it <module>::`.
//! The simulation (`tests/sim`) stays a target of its own: it has its own `main` and profile.

#[path = "../common/mod.rs"]
mod common;

mod actions;
mod alerts;
mod audit;
mod book;
mod burst;
mod calendar;
mod candidates;
mod cli;
mod cli_operator;
mod cluster;
mod command;
mod config_errors;
mod config_watch;
mod control;
mod delivery;
mod deploy;
mod exactly_once;
mod faults;
mod fleet_clock;
mod harness;
mod help;
mod jitter;
mod layout;
mod library;
mod library_traces;
mod liveness;
mod node_health;
mod operations;
mod prometheus;
mod rate_budget;
mod redlock;
mod robots;
mod schema;
mod security;
mod sentinel;
mod sim_model;
mod slots;
mod status_load;
mod status_page;
mod time;
mod topologies;
mod traces;
mod words;
