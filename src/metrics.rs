//! Prometheus metrics of one replica, served at `/metrics`.
//!
//! Every series is labelled `slotcron_job`, not `job`: Prometheus sets `job` on every target
//! it scrapes, and a metric label of that name would be renamed `exported_job` on ingestion.
//! Names use base units (seconds, bytes). Each configured job's series exist from the first
//! scrape, at zero ([`Metrics::declare_job`]), so `rate()` and alerts see a job before its
//! first slot. Race outcomes and run outcomes are separate counters: a won slot is counted
//! once in `slotcron_races_total` and once more, when its run ends, in `slotcron_runs_total`.
//!
//! Why so long: about 130 of its lines are unit tests of the exposition; the series and their
//! setters stay together so a new series is declared, set and registered in one place.

mod process;
mod register;

use std::sync::Mutex;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

pub use crate::outcome::{ALERT_OUTCOMES, RACE_OUTCOMES, RUN_OUTCOMES};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::outcome::{Outcome, Series};

pub use process::{ProcessCollector, ProcessStats};

/// The content type of [`Metrics::encode_openmetrics`].
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// The content type of [`Metrics::encode`] (the classic text format, which promtool checks).
pub const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
/// Labels of a series by job and outcome.
pub struct OutcomeLabels {
    /// The job (`slotcron_job`: Prometheus' `job` is the scrape job).
    pub slotcron_job: String,
    /// The outcome.
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
/// Labels of a series by job.
pub struct JobLabels {
    /// The job (`slotcron_job`: Prometheus' `job` is the scrape job).
    pub slotcron_job: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
/// Labels of a series by node.
pub struct NodeLabels {
    /// The node, as `host:port`.
    pub node: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReloadLabels {
    result: &'static str,
}

/// How a reload of the configuration file ended (`slotcron_config_reloads_total{result}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReloadResult {
    /// The new file checked and now drives the schedule.
    Applied,
    /// The new file did not check; the running schedule is kept.
    Rejected,
}

impl ReloadResult {
    const ALL: [ReloadResult; 2] = [ReloadResult::Applied, ReloadResult::Rejected];

    fn label(self) -> &'static str {
        match self {
            ReloadResult::Applied => "applied",
            ReloadResult::Rejected => "rejected",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: String,
}

type Seconds = Counter<f64, AtomicU64>;
type SecondsGauge = Gauge<f64, AtomicU64>;
type Histograms = Family<JobLabels, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    // 50 µs to ~1.6 s.
    Histogram::new(exponential_buckets(0.000_05, 2.0, 16))
}

fn duration_histogram() -> Histogram {
    // 1 ms to ~65 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

fn job(name: &str) -> JobLabels {
    JobLabels {
        slotcron_job: name.to_owned(),
    }
}

fn outcome_labels(name: &str, outcome: &str) -> OutcomeLabels {
    OutcomeLabels {
        slotcron_job: name.to_owned(),
        outcome: outcome.to_owned(),
    }
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

/// The replica's metrics. Cheap to update from any task.
#[derive(Debug)]
pub struct Metrics {
    races: Family<OutcomeLabels, Counter>,
    runs: Family<OutcomeLabels, Counter>,
    lock_seconds: Histogram,
    action_seconds: Histograms,
    lateness_seconds: Histograms,
    last_success: Family<JobLabels, SecondsGauge>,
    last_failure: Family<JobLabels, SecondsGauge>,
    /// Set at each scrape from the schedule, so alerts can speak in intervals of the job.
    interval_seconds: Family<JobLabels, SecondsGauge>,
    node_up: Family<NodeLabels, Gauge>,
    /// Each node's `TIME` minus the fleet clock (their median): names a node whose host clock
    /// is off, which the median does not follow.
    node_clock_offset_seconds: Family<NodeLabels, SecondsGauge>,
    clock_offset_seconds: SecondsGauge,
    budget_waits: Family<JobLabels, Counter>,
    budget_wait_seconds: Family<JobLabels, Seconds>,
    handoffs: Family<JobLabels, Counter>,
    /// Slots no replica ran, found by this replica at its start (each counted once, fleet-wide).
    missed: Family<JobLabels, Counter>,
    /// Slots run twice under one fence, found by a replica that ran one (counted once, fleet-wide).
    duplicates: Family<JobLabels, Counter>,
    /// Deadline and recovery alerts this replica won the right to send (each once, fleet-wide).
    alerts: Family<OutcomeLabels, Counter>,
    /// Won slots run though fewer replicas than `wait_replicas` had their lock (`WAIT`).
    unreplicated: Family<JobLabels, Counter>,
    /// Pause changes heard that fewer replicas than `wait_replicas` had (`WAIT`).
    unreplicated_pauses: Family<JobLabels, Counter>,
    paused: Family<JobLabels, Gauge>,
    /// Jobs whose next slot lies past their built-in calendar's data.
    calendar_beyond: Family<JobLabels, Gauge>,
    clock_steps: Counter,
    clock_last_step_seconds: SecondsGauge,
    /// The live replicas this replica ranks candidates among (itself included).
    fleet_replicas: Gauge,
    build_info: Family<BuildLabels, Gauge>,
    /// Reloads of the file by result: a rejected one keeps the old schedule, which only this
    /// counter (and the log) tells an operator about.
    config_reloads: Family<ReloadLabels, Counter>,
    /// Registry holds clones of the handles above; a mutex because encoding borrows it.
    registry: Mutex<Registry>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A fresh registry with every series.
    pub fn new() -> Self {
        let metrics = Metrics {
            races: Family::default(),
            runs: Family::default(),
            lock_seconds: latency_histogram(),
            action_seconds: Family::new_with_constructor(duration_histogram),
            lateness_seconds: Family::new_with_constructor(duration_histogram),
            last_success: Family::default(),
            last_failure: Family::default(),
            interval_seconds: Family::default(),
            node_up: Family::default(),
            node_clock_offset_seconds: Family::default(),
            clock_offset_seconds: Gauge::default(),
            budget_waits: Family::default(),
            budget_wait_seconds: Family::default(),
            handoffs: Family::default(),
            missed: Family::default(),
            duplicates: Family::default(),
            alerts: Family::default(),
            unreplicated: Family::default(),
            unreplicated_pauses: Family::default(),
            paused: Family::default(),
            calendar_beyond: Family::default(),
            clock_steps: Counter::default(),
            clock_last_step_seconds: Gauge::default(),
            fleet_replicas: Gauge::default(),
            build_info: Family::default(),
            config_reloads: Family::default(),
            registry: Mutex::new(Registry::default()),
        };
        metrics
            .build_info
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION").to_owned(),
            })
            .set(1);
        metrics.register();
        metrics
    }

    /// Creates every series of job `name` at zero (idempotent): a job is visible from the
    /// first scrape, not from its first slot.
    pub fn declare_job(&self, name: &str) {
        // The guards are dropped at once: only the series' creation matters here.
        let labels = job(name);
        for o in RACE_OUTCOMES {
            drop(self.races.get_or_create(&outcome_labels(name, o)));
        }
        for o in RUN_OUTCOMES {
            drop(self.runs.get_or_create(&outcome_labels(name, o)));
        }
        drop(self.action_seconds.get_or_create(&labels));
        drop(self.lateness_seconds.get_or_create(&labels));
        drop(self.last_success.get_or_create(&labels));
        drop(self.last_failure.get_or_create(&labels));
        drop(self.budget_waits.get_or_create(&labels));
        drop(self.budget_wait_seconds.get_or_create(&labels));
        drop(self.handoffs.get_or_create(&labels));
        drop(self.missed.get_or_create(&labels));
        for o in ALERT_OUTCOMES {
            drop(self.alerts.get_or_create(&outcome_labels(name, o)));
        }
        drop(self.duplicates.get_or_create(&labels));
        drop(self.unreplicated.get_or_create(&labels));
        drop(self.unreplicated_pauses.get_or_create(&labels));
        drop(self.paused.get_or_create(&labels));
    }

    /// How many live replicas this replica ranked its latest slot's candidates among.
    pub fn fleet_replicas(&self, count: usize) {
        self.fleet_replicas
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }

    /// Whether `job` was paused (fleet-wide) at its latest slot.
    pub fn paused(&self, job_name: &str, paused: bool) {
        self.paused
            .get_or_create(&job(job_name))
            .set(i64::from(paused));
    }

    /// Whether `job`'s next slot lies past its built-in calendar's data.
    pub fn calendar_beyond_coverage(&self, job_name: &str, beyond: bool) {
        self.calendar_beyond
            .get_or_create(&job(job_name))
            .set(i64::from(beyond));
    }

    /// A step of the wall clock, `step_ms` forward (negative: back).
    pub fn clock_step(&self, step_ms: i64) {
        self.clock_steps.inc();
        self.clock_last_step_seconds.set(step_ms as f64 / 1000.0);
    }

    /// Counts one slot's `outcome` of job `job_name`, in the family its [`Outcome::series`]
    /// names: `slotcron_races_total`, `slotcron_runs_total` (where `done` and `failed` also
    /// set the job's last success or failure time, and `handed_off` counts a handoff) or
    /// `slotcron_missed_slots_total`. Called by the one place that logs a slot's line
    /// (`Books::report` in `slot`), so the counters and the log lines agree.
    pub fn slot(&self, job_name: &str, outcome: Outcome) {
        match outcome.series() {
            Series::Race => {
                let labels = outcome_labels(job_name, outcome.as_str());
                self.races.get_or_create(&labels).inc();
            }
            Series::Run => {
                let labels = outcome_labels(job_name, outcome.as_str());
                self.runs.get_or_create(&labels).inc();
                self.run_ended(job_name, outcome);
            }
            Series::Missed => {
                self.missed.get_or_create(&job(job_name)).inc();
            }
            Series::Duplicate => {
                self.duplicates.get_or_create(&job(job_name)).inc();
            }
            Series::Alert => {
                let labels = outcome_labels(job_name, outcome.as_str());
                self.alerts.get_or_create(&labels).inc();
            }
        }
    }

    /// A won slot of `job_name` run though its lock was not acknowledged by enough replicas.
    pub fn unreplicated_run(&self, job_name: &str) {
        self.unreplicated.get_or_create(&job(job_name)).inc();
    }

    /// A pause or resume of `job_name` heard though not acknowledged by enough replicas.
    pub fn unreplicated_pause_change(&self, job_name: &str) {
        self.unreplicated_pauses.get_or_create(&job(job_name)).inc();
    }

    /// What a run's ending sets besides its counter: the job's last success or failure time,
    /// or (handed off) the job's handoffs.
    fn run_ended(&self, job_name: &str, outcome: Outcome) {
        let labels = job(job_name);
        match outcome {
            Outcome::Done => {
                self.last_success.get_or_create(&labels).set(unix_now());
            }
            Outcome::Failed => {
                self.last_failure.get_or_create(&labels).set(unix_now());
            }
            Outcome::HandedOff => {
                self.handoffs.get_or_create(&labels).inc();
            }
            Outcome::Overlapped
            | Outcome::Won
            | Outcome::Lost
            | Outcome::Unavailable
            | Outcome::OutOfWindow
            | Outcome::Paused
            | Outcome::Standby
            | Outcome::Missed
            | Outcome::Duplicate
            | Outcome::Deadline
            | Outcome::Recovered => {}
        }
    }

    /// Records one lock decision's latency.
    pub fn lock_latency(&self, d: Duration) {
        self.lock_seconds.observe(d.as_secs_f64());
    }

    /// Records how long `job_name`'s action took.
    pub fn action_duration(&self, job_name: &str, d: Duration) {
        self.action_seconds
            .get_or_create(&job(job_name))
            .observe(d.as_secs_f64());
    }

    /// From the slot's instant to the action's start: the one definition of lateness, shared
    /// by this histogram and the `lateness_ms` of the run's log line.
    pub fn lateness(&self, job_name: &str, d: Duration) {
        self.lateness_seconds
            .get_or_create(&job(job_name))
            .observe(d.as_secs_f64());
    }

    /// The gap between the job's next two slots (`None`: fewer than two are left).
    pub fn schedule_interval(&self, job_name: &str, gap: Option<Duration>) {
        let labels = job(job_name);
        match gap {
            Some(gap) => {
                self.interval_seconds
                    .get_or_create(&labels)
                    .set(gap.as_secs_f64());
            }
            None => {
                self.interval_seconds.remove(&labels);
            }
        }
    }

    /// Records whether `node` answers.
    pub fn node_up(&self, node: &str, up: bool) {
        self.node_up
            .get_or_create(&NodeLabels {
                node: node.to_owned(),
            })
            .set(i64::from(up));
    }

    /// Node `node`'s `TIME` minus the fleet clock, as last measured.
    pub fn node_clock_offset(&self, node: &str, offset_ms: i64) {
        self.node_clock_offset_seconds
            .get_or_create(&NodeLabels {
                node: node.to_owned(),
            })
            .set(offset_ms as f64 / 1000.0);
    }

    /// Records a wait for `job_name`'s rate budget.
    pub fn budget_wait(&self, job_name: &str, waited: Duration) {
        let labels = job(job_name);
        self.budget_waits.get_or_create(&labels).inc();
        self.budget_wait_seconds
            .get_or_create(&labels)
            .inc_by(waited.as_secs_f64());
    }

    /// This replica's clock minus the fleet clock, as the fleet clock measures it.
    pub fn clock_offset(&self, offset_ms: i64) {
        self.clock_offset_seconds.set(offset_ms as f64 / 1000.0);
    }

    /// The OpenMetrics text exposition (what prometheus-client writes).
    pub fn encode_openmetrics(&self) -> String {
        let mut out = String::new();
        let r = self.registry.lock().unwrap_or_else(|p| p.into_inner());
        if prometheus_client::encoding::text::encode(&mut out, &r).is_err() {
            out.clear();
        }
        out
    }

    /// The classic Prometheus text format (0.0.4): what a client that does not ask for
    /// OpenMetrics (curl, promtool, older scrapers) reads.
    pub fn encode(&self) -> String {
        openmetrics_to_text(&self.encode_openmetrics())
    }
}

impl Metrics {
    /// `slotcron_config_reloads_total{result}`, both results present from the first scrape.
    fn register_reloads(&self, r: &mut Registry) {
        for result in ReloadResult::ALL {
            drop(self.config_reloads.get_or_create(&ReloadLabels {
                result: result.label(),
            }));
        }
        r.register(
            "config_reloads",
            "Reloads of the configuration file, by result (applied; rejected: invalid, the running schedule kept)",
            self.config_reloads.clone(),
        );
    }

    /// Counts one reload of the configuration file that ended with `result`.
    pub fn config_reload(&self, result: ReloadResult) {
        self.config_reloads
            .get_or_create(&ReloadLabels {
                result: result.label(),
            })
            .inc();
    }
}

/// Rewrites prometheus-client's OpenMetrics into the 0.0.4 text format: a counter family is
/// named with its `_total` suffix in `# HELP`/`# TYPE` (OpenMetrics names the family without
/// it, so a text parser finds samples with no help), and `# UNIT`/`# EOF` are dropped.
fn openmetrics_to_text(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    let mut help: Option<&str> = None;
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            help = Some(rest);
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "untyped"));
            let name = if kind == "counter" {
                format!("{name}_total")
            } else {
                name.to_owned()
            };
            if let Some(text) = help.take().and_then(|h| h.split_once(' ').map(|(_, t)| t)) {
                out.push_str(&format!("# HELP {name} {text}\n"));
            }
            out.push_str(&format!("# TYPE {name} {kind}\n"));
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_counters_and_histograms() {
        let m = Metrics::new();
        m.slot("standup", Outcome::Won);
        m.lock_latency(Duration::from_micros(300));
        m.node_up("127.0.0.1:6379", true);
        m.node_clock_offset("127.0.0.1:6380", -40_000);
        let text = m.encode();
        assert!(
            text.contains(r#"slotcron_races_total{slotcron_job="standup",outcome="won"} 1"#),
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
        assert!(
            text.contains(
                r#"slotcron_redis_node_clock_offset_seconds{node="127.0.0.1:6380"} -40.0"#
            ),
            "{text}"
        );
    }

    #[test]
    fn race_and_run_outcomes_are_counted_apart() {
        let m = Metrics::new();
        m.slot("standup", Outcome::Won);
        m.slot("standup", Outcome::Done);
        let text = m.encode();
        assert!(text.contains(r#"slotcron_races_total{slotcron_job="standup",outcome="won"} 1"#));
        assert!(text.contains(r#"slotcron_runs_total{slotcron_job="standup",outcome="done"} 1"#));
        assert!(!text.contains(r#"slotcron_races_total{slotcron_job="standup",outcome="done"}"#));
        // Late (not raced) and overlapping (won, not run) skips land in different series.
        m.slot("standup", Outcome::OutOfWindow);
        m.slot("standup", Outcome::Won);
        m.slot("standup", Outcome::Overlapped);
        let text = m.encode();
        assert!(
            text.contains(r#"slotcron_races_total{slotcron_job="standup",outcome="skipped"} 1"#)
        );
        assert!(
            text.contains(r#"slotcron_runs_total{slotcron_job="standup",outcome="skipped"} 1"#)
        );
        let success = text
            .lines()
            .find_map(|l| {
                l.strip_prefix(
                    r#"slotcron_last_success_timestamp_seconds{slotcron_job="standup"} "#,
                )
            })
            .expect("last success set");
        assert!(success.parse::<f64>().unwrap() > 1.7e9, "{success}");
    }

    #[test]
    fn a_handoff_and_a_missed_slot_land_in_their_own_series() {
        let m = Metrics::new();
        m.slot("standup", Outcome::HandedOff);
        m.slot("standup", Outcome::Missed);
        let text = m.encode();
        for line in [
            r#"slotcron_runs_total{slotcron_job="standup",outcome="handed_off"} 1"#,
            r#"slotcron_handoffs_total{slotcron_job="standup"} 1"#,
            r#"slotcron_missed_slots_total{slotcron_job="standup"} 1"#,
        ] {
            assert!(text.contains(line), "{line}\n{text}");
        }
        // A missed slot was never raced nor run here: no outcome series of its own.
        assert!(!text.contains(r#"outcome="missed""#), "{text}");
    }

    #[test]
    fn a_declared_job_has_every_series_at_zero() {
        let m = Metrics::new();
        m.declare_job("standup");
        let text = m.encode();
        for o in RACE_OUTCOMES {
            let line =
                format!("slotcron_races_total{{slotcron_job=\"standup\",outcome=\"{o}\"}} 0");
            assert!(text.contains(&line), "{line}\n{text}");
        }
        for o in RUN_OUTCOMES {
            let line = format!("slotcron_runs_total{{slotcron_job=\"standup\",outcome=\"{o}\"}} 0");
            assert!(text.contains(&line), "{line}\n{text}");
        }
        for series in [
            "slotcron_rate_budget_waits_total",
            "slotcron_rate_budget_wait_seconds_total",
            "slotcron_handoffs_total",
            "slotcron_last_success_timestamp_seconds",
            "slotcron_last_failure_timestamp_seconds",
            "slotcron_action_duration_seconds_count",
            "slotcron_lateness_seconds_count",
            "slotcron_missed_slots_total",
            "slotcron_duplicate_runs_total",
            "slotcron_unreplicated_runs_total",
            "slotcron_unreplicated_pause_changes_total",
            "slotcron_job_paused",
        ] {
            let line = format!("{series}{{slotcron_job=\"standup\"}} 0");
            assert!(text.contains(&line), "{line}\n{text}");
        }
    }

    #[test]
    fn text_format_names_counter_families_with_their_suffix() {
        let m = Metrics::new();
        m.declare_job("standup");
        let text = m.encode();
        assert!(
            text.contains("# HELP slotcron_races_total Slots raced"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE slotcron_races_total counter"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE process_cpu_seconds_total counter"),
            "{text}"
        );
        assert!(text.contains("slotcron_build_info{version=\""), "{text}");
        assert!(!text.contains("# EOF"), "{text}");
        assert!(m.encode_openmetrics().ends_with("# EOF\n"));
    }

    #[test]
    fn clock_offset_is_in_seconds() {
        let m = Metrics::new();
        m.clock_offset(-1500);
        assert!(m.encode().contains("slotcron_clock_offset_seconds -1.5\n"));
    }
}
