//! The library example, as it is pasted (`tests/it/library.rs` checks that the book's block,
//! book/en/src/library.md, is this file below this header and that the README's excerpt is lines
//! of it, builds it and runs it against Redis).
//!
//! ```text
//! REDIS_NODES=redis://127.0.0.1:6379 HOSTNAME=a cargo run --example library
//! ```

use std::time::Duration;

use slotcron::{Calendar, DateTime, Fleet, JobSpec, Overlap, SlotContext, Tz};

/// The job: its `Ok` records the slot `done`, its `Err` `failed` with the error's text.
async fn daily_report(ctx: SlotContext) -> anyhow::Result<()> {
    // ctx.job(), ctx.slot() (UTC), ctx.slot_local() (the job's zone), ctx.fence(),
    // ctx.trigger() (schedule, catch_up, trigger, handoff), ctx.attempt(), ctx.deadline()
    let local: DateTime<Tz> = ctx.slot_local();
    tracing::info!(job = ctx.job(), fence = ctx.fence(), "report for {local}");
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), slotcron::Error> {
    // slotcron logs through `tracing`: without a subscriber it logs nothing.
    tracing_subscriber::fmt().init();
    let replica = std::env::var("HOSTNAME").unwrap_or_else(|_| "replica-1".into());
    let nodes = std::env::var("REDIS_NODES").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let handle = Fleet::new(replica) // this replica's id: one per replica
        .nodes(nodes.split(',')) // 1, 3 or 5 independent Redis primaries
        .job(
            JobSpec::new("daily-report", "30 9 * * *") // 5 fields, or 6 with seconds
                .zone("Asia/Shanghai")
                .workdays(Calendar::builtin("cn"))
                .timeout(Duration::from_secs(60))
                .overlap(Overlap::Skip),
            daily_report,
        )
        .job(JobSpec::new("heartbeat", "*/5 * * * * *"), daily_report) // to see it run
        .start()
        .await?; // every invalid job and field at once
    shutdown_signal().await; // signal handling is yours
    handle.shutdown().await // waits for running jobs
}

/// SIGTERM (what Kubernetes and Docker send to stop a container) or Ctrl-C.
async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
