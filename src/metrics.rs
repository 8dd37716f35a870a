//! Prometheus metrics of one replica, served at `/metrics` in the text format.

use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SlotLabels {
    pub job: String,
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct JobLabels {
    pub job: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeLabels {
    pub node: String,
}

fn latency_histogram() -> Histogram {
    // 50 µs to ~1.6 s.
    Histogram::new(exponential_buckets(0.000_05, 2.0, 16))
}

fn duration_histogram() -> Histogram {
    // 1 ms to ~65 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

/// The replica's metrics. Cheap to update from any task.
#[derive(Debug)]
pub struct Metrics {
    slots: Family<SlotLabels, Counter>,
    lock_seconds: Histogram,
    action_seconds: Family<JobLabels, Histogram, fn() -> Histogram>,
    lateness_seconds: Family<JobLabels, Histogram, fn() -> Histogram>,
    node_up: Family<NodeLabels, Gauge>,
    clock_offset_ms: Gauge,
    budget_waits: Family<JobLabels, Counter>,
    budget_wait_seconds: Family<JobLabels, Counter<f64, std::sync::atomic::AtomicU64>>,
    /// Registry holds clones of the handles above; a mutex because encoding borrows it.
    registry: Mutex<Registry>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let metrics = Metrics {
            slots: Family::default(),
            lock_seconds: latency_histogram(),
            action_seconds: Family::new_with_constructor(duration_histogram),
            lateness_seconds: Family::new_with_constructor(duration_histogram),
            node_up: Family::default(),
            clock_offset_ms: Gauge::default(),
            budget_waits: Family::default(),
            budget_wait_seconds: Family::default(),
            registry: Mutex::new(Registry::with_prefix("slotcron")),
        };
        metrics.register();
        metrics
    }

    fn register(&self) {
        let mut r = self.registry.lock().unwrap_or_else(|p| p.into_inner());
        r.register(
            "slots",
            "Slots seen by this replica, by job and outcome",
            self.slots.clone(),
        );
        r.register(
            "lock_duration_seconds",
            "Time to decide a slot's lock",
            self.lock_seconds.clone(),
        );
        r.register(
            "action_duration_seconds",
            "Time the winner's action took",
            self.action_seconds.clone(),
        );
        r.register(
            "lateness_seconds",
            "From the slot to the action's start",
            self.lateness_seconds.clone(),
        );
        r.register(
            "redis_node_up",
            "1 while this replica counts the Redis node healthy (it answered its last request), 0 while suspect (it timed out or failed): the view every Redis call waits by",
            self.node_up.clone(),
        );
        r.register(
            "clock_offset_milliseconds",
            "This replica's clock minus the fleet clock",
            self.clock_offset_ms.clone(),
        );
        r.register(
            "rate_budget_waits",
            "Sends that waited for a webhook's rate budget",
            self.budget_waits.clone(),
        );
        r.register(
            "rate_budget_wait_seconds",
            "Time spent waiting for rate budgets",
            self.budget_wait_seconds.clone(),
        );
    }

    pub fn slot(&self, job: &str, outcome: &str) {
        self.slots
            .get_or_create(&SlotLabels {
                job: job.to_owned(),
                outcome: outcome.to_owned(),
            })
            .inc();
    }

    pub fn lock_latency(&self, d: Duration) {
        self.lock_seconds.observe(d.as_secs_f64());
    }

    pub fn action_duration(&self, job: &str, d: Duration) {
        self.action_seconds
            .get_or_create(&JobLabels {
                job: job.to_owned(),
            })
            .observe(d.as_secs_f64());
    }

    pub fn lateness(&self, job: &str, d: Duration) {
        self.lateness_seconds
            .get_or_create(&JobLabels {
                job: job.to_owned(),
            })
            .observe(d.as_secs_f64());
    }

    pub fn node_up(&self, node: &str, up: bool) {
        self.node_up
            .get_or_create(&NodeLabels {
                node: node.to_owned(),
            })
            .set(i64::from(up));
    }

    pub fn budget_wait(&self, job: &str, waited: Duration) {
        let labels = JobLabels {
            job: job.to_owned(),
        };
        self.budget_waits.get_or_create(&labels).inc();
        self.budget_wait_seconds
            .get_or_create(&labels)
            .inc_by(waited.as_secs_f64());
    }

    pub fn clock_offset(&self, offset_ms: i64) {
        self.clock_offset_ms.set(offset_ms);
    }

    /// The Prometheus text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        let r = self.registry.lock().unwrap_or_else(|p| p.into_inner());
        if prometheus_client::encoding::text::encode(&mut out, &r).is_err() {
            out.clear();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_counters_and_histograms() {
        let m = Metrics::new();
        m.slot("standup", "won");
        m.lock_latency(Duration::from_micros(300));
        m.node_up("127.0.0.1:6379", true);
        let text = m.encode();
        assert!(
            text.contains(r#"slotcron_slots_total{job="standup",outcome="won"} 1"#),
            "{text}"
        );
        assert!(
            text.contains("slotcron_lock_duration_seconds_count 1"),
            "{text}"
        );
        assert!(
            text.contains(r#"slotcron_redis_node_up{node="127.0.0.1:6379"} 1"#),
            "{text}"
        );
    }
}
