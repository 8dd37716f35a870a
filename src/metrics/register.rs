//! The registry's layout: every series of [`Metrics`] registered once, at construction, with
//! its name and help text (the names are the public interface, see the book's metrics table).

use prometheus_client::registry::Registry;

use super::{Metrics, ProcessCollector};

impl Metrics {
    pub(super) fn register(&self) {
        let mut root = self.registry.lock().unwrap_or_else(|p| p.into_inner());
        root.register_collector(Box::new(ProcessCollector));
        let r = root.sub_registry_with_prefix("slotcron");
        self.register_job_series(r);
        self.register_replica_series(r);
        self.register_reloads(r);
    }

    /// The series labelled by job: its runs, then its state.
    fn register_job_series(&self, r: &mut Registry) {
        self.register_run_series(r);
        self.register_job_state_series(r);
        self.register_replication_series(r);
    }

    /// A job's races and runs: outcomes, durations, lateness, last success and failure.
    fn register_run_series(&self, r: &mut Registry) {
        r.register(
            "races",
            "Slots raced by this replica, by job and outcome (won, lost, unavailable; skipped: too late to race)",
            self.races.clone(),
        );
        r.register(
            "runs",
            "Slots this replica won, by job and how their run ended (done, failed, handed_off, skipped)",
            self.runs.clone(),
        );
        r.register(
            "action_duration_seconds",
            "Time the winner's action took",
            self.action_seconds.clone(),
        );
        r.register(
            "lateness_seconds",
            "From the slot's instant to the start of the winner's action, on the fleet clock",
            self.lateness_seconds.clone(),
        );
        r.register(
            "last_success_timestamp_seconds",
            "When this replica last ran the job to done (unix time; 0: not since it started)",
            self.last_success.clone(),
        );
        r.register(
            "last_failure_timestamp_seconds",
            "When this replica last ran the job to failed (unix time; 0: not since it started)",
            self.last_failure.clone(),
        );
    }

    /// A job's schedule, rate budget waits, handoffs, missed slots, pause and calendar.
    fn register_job_state_series(&self, r: &mut Registry) {
        r.register(
            "schedule_interval_seconds",
            "Gap between the job's next two slots",
            self.interval_seconds.clone(),
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
        r.register(
            "handoffs",
            "Slots this replica won and handed off to the fleet, its egress having failed",
            self.handoffs.clone(),
        );
        r.register(
            "missed_slots",
            "Slots no replica ran, found by a replica starting up (each counted once, fleet-wide)",
            self.missed.clone(),
        );
        r.register(
            "duplicate_runs",
            "Slots run twice under one fence (the lock failed), found by a replica that ran one (each counted once, fleet-wide)",
            self.duplicates.clone(),
        );
        r.register(
            "alerts",
            "Deadline and recovery alerts this replica won the right to send, by job and outcome (deadline: a slot not done by the job's deadline; recovered: done again after a failed, missed or deadline alert; each counted once, fleet-wide)",
            self.alerts.clone(),
        );
        r.register(
            "job_paused",
            "1 while the job is paused fleet-wide (slotcron pause), as of its latest slot",
            self.paused.clone(),
        );
        r.register(
            "calendar_beyond_coverage",
            "1 while the job's next slot lies past its built-in calendar's data (Monday to Friday assumed)",
            self.calendar_beyond.clone(),
        );
    }

    /// What `WAIT` found short (sentinel and cluster modes): won slots' locks, pause changes.
    fn register_replication_series(&self, r: &mut Registry) {
        r.register(
            "unreplicated_runs",
            "Won slots run though fewer replicas than wait_replicas acknowledged their lock (WAIT; sentinel and cluster modes): a failover then could run them twice",
            self.unreplicated.clone(),
        );
        r.register(
            "unreplicated_pause_changes",
            "Pause or resume changes heard by this replica that fewer replicas than wait_replicas acknowledged (WAIT; sentinel and cluster modes): a failover then could lose them",
            self.unreplicated_pauses.clone(),
        );
    }

    /// The series of the replica as a whole.
    fn register_replica_series(&self, r: &mut Registry) {
        r.register(
            "lock_duration_seconds",
            "Time to decide a slot's lock",
            self.lock_seconds.clone(),
        );
        r.register(
            "redis_node_up",
            "1 while this replica counts the Redis node healthy (it answered its last request), 0 while suspect (it timed out or failed): the view every Redis call waits by",
            self.node_up.clone(),
        );
        r.register(
            "redis_node_clock_offset_seconds",
            "The node's TIME minus the fleet clock (the nodes' median), as last measured: a node off by more than 1 s is named in a warning and not followed",
            self.node_clock_offset_seconds.clone(),
        );
        r.register(
            "clock_offset_seconds",
            "This replica's clock minus the fleet clock",
            self.clock_offset_seconds.clone(),
        );
        r.register(
            "clock_steps",
            "Steps of this replica's wall clock seen (wall and monotonic clocks disagreeing by more than 1 s)",
            self.clock_steps.clone(),
        );
        r.register(
            "clock_last_step_seconds",
            "Size of the last wall-clock step seen (negative: back)",
            self.clock_last_step_seconds.clone(),
        );
        r.register(
            "fleet_replicas",
            "Live replicas this replica ranks each slot's candidates among, itself included (1 with candidates = \"all\")",
            self.fleet_replicas.clone(),
        );
        r.register(
            "build_info",
            "Always 1; the labels name the running build",
            self.build_info.clone(),
        );
    }
}
