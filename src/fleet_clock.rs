//! The fleet clock: each replica measures its offset from the Redis nodes' `TIME` (the median
//! over the nodes, each corrected by half its round trip) at start and every minute, and by
//! default schedules on the corrected clock. A replica whose clock runs fast then does not fire
//! early and one whose clock runs slow does not fire late; the offset is logged when it exceeds
//! half of `max_clock_skew` and exported as a metric.

use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::lock::node::{Node, NodeError};
use crate::lock::nodes::Nodes;
use crate::metrics::Metrics;
use crate::schedule::{Clock, SharedClock};

/// How often the offset is measured again.
pub const MEASURE_EVERY: Duration = Duration::from_secs(60);
/// Bound on one node's `TIME`.
const TIME_TIMEOUT: Duration = Duration::from_millis(500);

/// A clock corrected by the measured offset to the Redis nodes' time.
pub struct FleetClock {
    local: SharedClock,
    /// `clock = "redis"`: schedule on the corrected time. `"local"`: measure and report only.
    apply: bool,
    /// Fleet time minus local time, in microseconds; an atomic so `now()` stays lock-free.
    offset_us: AtomicI64,
}

impl fmt::Debug for FleetClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FleetClock")
            .field("offset_us", &self.offset_us.load(Ordering::Relaxed))
            .finish()
    }
}

impl Clock for FleetClock {
    fn now(&self) -> DateTime<Utc> {
        if !self.apply {
            return self.local.now();
        }
        self.local.now() + chrono::Duration::microseconds(self.offset_us.load(Ordering::Relaxed))
    }
}

impl FleetClock {
    pub fn new(local: SharedClock, apply: bool) -> Arc<Self> {
        Arc::new(FleetClock {
            local,
            apply,
            offset_us: AtomicI64::new(0),
        })
    }

    /// Fleet time minus local time.
    pub fn offset(&self) -> chrono::Duration {
        chrono::Duration::microseconds(self.offset_us.load(Ordering::Relaxed))
    }

    /// Measures the offset against `nodes` (those that are not suspect; the suspect ones
    /// too when no other answers) and applies it. `None` when no node answered (the previous
    /// offset stays).
    pub async fn measure(&self, nodes: &Nodes) -> Option<chrono::Duration> {
        let replies = nodes
            .ask(
                |node| sample(self.local.clone(), node),
                |r| r.settled() && r.answered() > 0,
            )
            .await;
        let offset = median(replies.values().flatten().copied().collect())?;
        self.offset_us.store(offset, Ordering::Relaxed);
        Some(chrono::Duration::microseconds(offset))
    }
}

/// One node's time minus ours, at the midpoint of the round trip, in microseconds (`None` when
/// its answer cannot be read as a time).
async fn sample(local: SharedClock, node: Arc<Node>) -> Result<Option<i64>, NodeError> {
    let sent = Instant::now();
    let local_sent = local.now();
    let (secs, micros): (i64, i64) = node.query(&redis::cmd("TIME"), TIME_TIMEOUT).await?;
    let rtt = sent.elapsed();
    let offset = DateTime::<Utc>::from_timestamp(secs, (micros * 1000) as u32).and_then(|t| {
        let local_mid = local_sent + chrono::Duration::from_std(rtt / 2).ok()?;
        (t - local_mid).num_microseconds()
    });
    Ok(offset)
}

fn median(mut samples: Vec<i64>) -> Option<i64> {
    if samples.is_empty() {
        return None;
    }
    samples.sort_unstable();
    let mid = samples.len() / 2;
    Some(if samples.len().is_multiple_of(2) {
        (samples[mid - 1] + samples[mid]) / 2
    } else {
        samples[mid]
    })
}

/// Measures now and then every [`MEASURE_EVERY`] until shutdown, logging large offsets.
pub async fn keep_measuring(
    clock: Arc<FleetClock>,
    nodes: Arc<Nodes>,
    metrics: Arc<Metrics>,
    max_skew: Duration,
    replica: String,
    shutdown: CancellationToken,
) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(MEASURE_EVERY) => {}
            _ = shutdown.cancelled() => return,
        }
        measure_and_report(&clock, &nodes, &metrics, max_skew, &replica).await;
    }
}

/// One measurement, reported in the log (when large) and in the metrics.
pub async fn measure_and_report(
    clock: &FleetClock,
    nodes: &Nodes,
    metrics: &Metrics,
    max_skew: Duration,
    replica: &str,
) {
    let Some(offset) = clock.measure(nodes).await else {
        tracing::warn!(
            replica,
            "fleet clock: no Redis node answered TIME; keeping the last offset"
        );
        return;
    };
    // The metric is this replica's clock minus the fleet's, the sign people expect.
    let local_minus_fleet_ms = -offset.num_milliseconds();
    metrics.clock_offset(local_minus_fleet_ms);
    let limit = chrono::Duration::from_std(max_skew / 2).unwrap_or_default();
    if offset.abs() > limit {
        tracing::warn!(replica = %replica, offset_ms = local_minus_fleet_ms, max_clock_skew_ms = max_skew.as_millis() as u64,
            "this replica's clock is {} ms {} the Redis nodes' (more than half of max_clock_skew){}",
            local_minus_fleet_ms.abs(), if local_minus_fleet_ms > 0 { "ahead of" } else { "behind" },
            if clock.apply { "; scheduling on the fleet clock" } else { "; clock = \"local\": scheduling on it anyway" });
    } else {
        tracing::debug!(
            replica,
            offset_ms = local_minus_fleet_ms,
            "fleet clock measured"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_samples() {
        assert_eq!(median(vec![]), None);
        assert_eq!(median(vec![5]), Some(5));
        assert_eq!(median(vec![9, 1, 5]), Some(5));
        assert_eq!(median(vec![1, 3, 5, 100]), Some(4));
    }
}
