//! A job `beat` every second, once across the fleet: run several of these against the same
//! Redis nodes and each second is printed by exactly one of them.
//!
//! ```text
//! cargo run --release --example singleton -- --nodes redis://127.0.0.1:6379 --replica-id a
//! ```
//!
//! Each run prints `ran beat <slot, RFC 3339 UTC> fence=<fence> replica=<ID>` on standard
//! output (logs go to standard error). SIGTERM or Ctrl-C stops it gracefully: a running beat
//! finishes first.

use chrono::SecondsFormat;
use clap::Parser;
use slotcron::{Fleet, JobSpec, SlotContext};

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
async fn main() -> Result<(), slotcron::Error> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let replica = args.replica_id.clone();
    Fleet::new(args.replica_id)
        .nodes(args.nodes)
        .job(JobSpec::new("beat", "* * * * * *"), move |ctx| {
            beat(ctx, replica.clone())
        })
        .run_until(terminated())
        .await
}

/// The job: one line per run.
async fn beat(ctx: SlotContext, replica: String) -> Result<(), std::io::Error> {
    let slot = ctx.slot().to_rfc3339_opts(SecondsFormat::Secs, true);
    println!("ran beat {slot} fence={} replica={replica}", ctx.fence());
    Ok(())
}

/// Resolves at SIGTERM or Ctrl-C: the caller's signal handling, as a service would have it.
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
