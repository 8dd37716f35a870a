//! A tokio-cron-scheduler job every second (`"* * * * * *"`), made once-per-fleet by slotcron's
//! guard: run several of these against the same Redis nodes and each second is printed by
//! exactly one of them, though each process's scheduler fires every tick.
//!
//! ```text
//! cargo run --release --features tcs --example tcs_guard -- --nodes redis://127.0.0.1:6379 --replica-id a
//! ```
//!
//! Each run prints `ran beat <slot, RFC 3339 UTC> fence=<fence> replica=<ID>` on standard
//! output (logs go to standard error). SIGTERM or Ctrl-C stops it gracefully: the scheduler
//! stops firing, then a running beat finishes.

use chrono::SecondsFormat;
use clap::Parser;
use slotcron::Fleet;
use slotcron::api::tcs::current_slot;
use tokio_cron_scheduler::JobScheduler;

/// The example's arguments.
#[derive(Parser)]
struct Args {
    /// The Redis nodes, comma-separated (1, 3 or 5).
    #[arg(long, value_delimiter = ',', required = true)]
    nodes: Vec<String>,
    /// This replica's id.
    #[arg(long)]
    replica_id: String,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let replica = args.replica_id.clone();
    let fleet = Fleet::new(args.replica_id)
        .nodes(args.nodes)
        .start()
        .await?;
    let guard = fleet.tcs_guard();
    let scheduler = JobScheduler::new().await?;
    // The body as it would be given to Job::new_async; the guard only wraps it.
    let job = guard.job_async("beat", "* * * * * *", move |_id, _scheduler| {
        let replica = replica.clone();
        Box::pin(async move { beat(&replica) })
    })?;
    scheduler.add(job).await?;
    scheduler.start().await?;
    terminated().await;
    let mut scheduler = scheduler;
    scheduler.shutdown().await?;
    fleet.shutdown().await?;
    Ok(())
}

/// The job: one line per run, naming the slot the guard won.
fn beat(replica: &str) {
    if let Some(ctx) = current_slot() {
        let slot = ctx.slot().to_rfc3339_opts(SecondsFormat::Secs, true);
        println!("ran beat {slot} fence={} replica={replica}", ctx.fence());
    }
}

/// Resolves at SIGTERM or Ctrl-C.
async fn terminated() {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut term) = signal(SignalKind::terminate()) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
