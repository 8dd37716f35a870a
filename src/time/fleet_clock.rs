//! The fleet clock: each replica measures the Redis nodes' `TIME` (the median over the nodes,
//! each taken as read when its answer arrived) against its monotonic clock, at start and every
//! minute, and by default schedules on that time: the fleet's time at a monotonic instant plus
//! the monotonic time elapsed since. A replica whose clock runs fast then does not fire early,
//! one whose clock runs slow does not fire late, and a step of the wall clock (an NTP step, a
//! VM resumed from a snapshot, an operator fixing the date) changes nothing in when slots fire.
//!
//! The wall clock is still watched: a reading that disagrees with the monotonic clock by more
//! than [`STEP_BOUND`] since the last look is a step, logged and counted; with
//! `clock = "local"` (scheduling on the wall clock) the timeline is rebuilt from the stepped
//! time. The offset is logged when it exceeds half of `max_clock_skew` and exported as a metric.
//!
//! The fleet clock defends itself. It is never trusted before one measurement has succeeded:
//! until then the replica races nothing, `/readyz` says not ready, and the measurer retries
//! every [`MEASURE_RETRY`]. And time may jump where neither local clock can see it (a VM
//! frozen and resumed, whose monotonic clock stood still too): every scheduled race measures
//! again first (one `TIME` per node per instant), as does the measurer when a timeline wake
//! comes later than it slept for; a measurement that moves the fleet's time by more than
//! [`JUMP_BOUND`] is a jump, logged and counted like a step, and the timeline is re-armed.
//!
//! One node's host clock off (a bad NTP) must not move the fleet's time: a measurement waits
//! until a majority of the nodes agree within [`AGREEMENT`] (or every reachable node answered),
//! so the median lies among the agreeing nodes; the measurement at start and every minute waits
//! for every reachable node and names each one off by more than [`AGREEMENT`] in a warning
//! and in `slotcron_redis_node_clock_offset_seconds`. (Stopping at the first two answers of
//! three took their lower one: the slow node, whenever it answered early.)

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::redis::Nodes;
use crate::redis::{Node, NodeError};
use crate::time::schedule::{Clock, SharedClock};

/// How often the offset is measured again.
pub const MEASURE_EVERY: Duration = Duration::from_secs(60);
/// How often a replica whose fleet clock was never measured tries again: it races nothing
/// until one measurement succeeds, so a cold start of the cluster costs seconds, not a minute.
pub const MEASURE_RETRY: Duration = Duration::from_secs(1);
/// A measurement that moves the fleet's time by more than this against the last one is a
/// jump (a freeze the monotonic clock did not see). Two honest measurements differ by their
/// round trips (each bounded by half a second) and the nodes' slewing: far below a second.
pub const JUMP_BOUND: Duration = Duration::from_secs(1);
/// Bound on one node's `TIME`.
const TIME_TIMEOUT: Duration = Duration::from_millis(500);
/// Two nodes' samples further apart than this disagree. An honest sample errs late by at most
/// its round trip (bounded by `TIME_TIMEOUT`), so honest nodes agree within it, and a node
/// off by more is named and outvoted, never followed.
pub const AGREEMENT: Duration = Duration::from_secs(1);
/// A wall clock that moved this much more (or less) than the monotonic clock since the last
/// look has stepped. NTP slews by at most 0.5 ms a second, and the two clocks are read a few
/// microseconds apart: a second is far above both, and far below any step worth a warning.
pub const STEP_BOUND: Duration = Duration::from_secs(1);

/// The fleet's time, kept on the monotonic clock; and a watch on the wall clock for steps.
pub struct FleetClock {
    local: SharedClock,
    /// `clock = "redis"`: schedule on the fleet's time. `"local"`: on the wall clock.
    apply: bool,
    /// The monotonic origin both anchors below are taken back to.
    base: Instant,
    /// The fleet's time at `base`, in µs since the epoch: the median of the nodes' `TIME`, each
    /// taken back to `base` along the monotonic clock. Before any node answers, the wall
    /// clock's. An atomic so `now()` stays lock-free.
    fleet_at_base_us: AtomicI64,
    /// The wall clock's time at `base` as of the last look, in µs since the epoch. A mutex so a
    /// look compares and re-anchors as one (two tasks look: the timeline and the measurer).
    wall_at_base_us: Mutex<i64>,
    /// Whether one measurement has succeeded: before it, `fleet_at_base_us` is only the wall
    /// clock's guess and no slot is raced on it.
    measured: watch::Sender<bool>,
    /// Counts the re-arms asked of the timeline: a jump of the fleet clock, or a step of the
    /// wall clock when slots are scheduled on it.
    rearms: watch::Sender<u64>,
    /// Wakes the measurer at once: a step of the wall clock, a timeline wake that came late.
    remeasure: Notify,
    /// Set when the first measurement failed, so its success is logged as the end of the wait.
    waited: AtomicBool,
}

/// What one measurement found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Measurement {
    /// No node answered `TIME`: the previous measurement, if any, stays.
    NoAnswer,
    /// The first successful measurement: the wall clock's guess is replaced.
    First {
        /// Fleet time minus this replica's wall clock.
        offset: chrono::Duration,
    },
    /// A later one, which moved the fleet's time by `moved` against the last.
    Again {
        /// Fleet time minus this replica's wall clock.
        offset: chrono::Duration,
        /// How far the fleet's time moved: beyond [`JUMP_BOUND`], a jump.
        moved: chrono::Duration,
    },
}

impl Measurement {
    /// The jump this measurement revealed, if it moved the fleet's time past [`JUMP_BOUND`].
    pub fn jump(self) -> Option<chrono::Duration> {
        let Measurement::Again { moved, .. } = self else {
            return None;
        };
        (moved.abs() > chrono::Duration::from_std(JUMP_BOUND).ok()?).then_some(moved)
    }
}

impl fmt::Debug for FleetClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FleetClock")
            .field("apply", &self.apply)
            .field("offset_us", &self.offset().num_microseconds())
            .finish()
    }
}

impl Clock for FleetClock {
    fn now(&self) -> DateTime<Utc> {
        if self.apply {
            self.fleet_now()
        } else {
            self.local.now()
        }
    }

    fn measured(&self) -> bool {
        *self.measured.borrow()
    }

    fn fleet_now(&self) -> DateTime<Utc> {
        let us = self.fleet_at_base_us.load(Ordering::Relaxed) + self.elapsed_us();
        DateTime::from_timestamp_micros(us).unwrap_or_else(|| self.local.now())
    }
}

impl FleetClock {
    /// A fleet clock over `local`; `apply` says whether scheduling follows the nodes' time.
    pub fn new(local: SharedClock, apply: bool) -> Arc<Self> {
        let base = Instant::now();
        let wall = local.now().timestamp_micros();
        Arc::new(FleetClock {
            local,
            apply,
            base,
            fleet_at_base_us: AtomicI64::new(wall),
            wall_at_base_us: Mutex::new(wall),
            measured: watch::Sender::new(false),
            rearms: watch::Sender::new(0),
            remeasure: Notify::new(),
            waited: AtomicBool::new(false),
        })
    }

    /// Fleet time minus this replica's wall clock.
    pub fn offset(&self) -> chrono::Duration {
        self.fleet_now() - self.local.now()
    }

    /// Whether slots are scheduled on the wall clock (`clock = "local"`), which steps move.
    pub fn schedules_on_wall(&self) -> bool {
        !self.apply
    }

    /// Changes whenever the timeline must be re-armed: a jump of the fleet clock, or a step of
    /// the wall clock when slots are scheduled on it (`clock = "local"`).
    pub fn rearms(&self) -> watch::Receiver<u64> {
        self.rearms.subscribe()
    }

    /// Waits until one measurement has succeeded; false if `shutdown` came first.
    pub async fn until_measured(&self, shutdown: &CancellationToken) -> bool {
        let mut measured = self.measured.subscribe();
        tokio::select! {
            biased;
            ok = measured.wait_for(|m| *m) => ok.is_ok(),
            _ = shutdown.cancelled() => false,
        }
    }

    /// Asks the measurer to measure at once (a timeline wake came later than it slept for: the
    /// process or its VM may have been frozen).
    pub fn suspect(&self) {
        self.remeasure.notify_one();
    }

    fn elapsed_us(&self) -> i64 {
        i64::try_from(self.base.elapsed().as_micros()).unwrap_or(i64::MAX / 2)
    }

    /// Measures the fleet's time against `nodes` (those that are not suspect; the suspect ones
    /// too when no other answers) and keeps it. Waits until a majority agree at most (or every
    /// node that is not suspect has answered), so neither a hung node holds up the race that
    /// asks nor one whose clock is off decides the fleet's time.
    pub async fn measure(&self, nodes: &Nodes) -> Measurement {
        let samples = self.sample_nodes(nodes, Wait::Agreement).await;
        self.keep(samples.median())
    }

    /// Each node's sample of the fleet's time at `base`, gathered until `wait` is met.
    async fn sample_nodes(&self, nodes: &Nodes, wait: Wait) -> Samples {
        let base = self.base;
        let quorum = nodes.quorum();
        let replies = nodes
            .ask(
                move |node| sample(base, node),
                move |r| {
                    let settled = r.settled() && r.answered() > 0;
                    let agreed = || agree(r.values().flatten().copied().collect(), quorum);
                    settled || (wait == Wait::Agreement && agreed())
                },
            )
            .await;
        let by_node = replies.into_answers().into_iter().enumerate();
        Samples(by_node.filter_map(|(i, a)| Some((i, a?.ok()??))).collect())
    }

    /// Keeps `fleet_at_base` (the median of a measurement's samples) as the fleet's time.
    fn keep(&self, fleet_at_base: Option<i64>) -> Measurement {
        let Some(fleet_at_base) = fleet_at_base else {
            return Measurement::NoAnswer;
        };
        // A swap: of two measurements at once, only one sees the move (and reports a jump).
        let before = self.fleet_at_base_us.swap(fleet_at_base, Ordering::Relaxed);
        let offset = self.offset();
        if !self.measured.send_replace(true) {
            return Measurement::First { offset };
        }
        let moved = chrono::Duration::microseconds(fleet_at_base - before);
        Measurement::Again { offset, moved }
    }

    /// How far the wall clock stepped since the last look, when more than [`STEP_BOUND`].
    /// Each look re-anchors, so NTP's slow slewing never adds up to a step.
    pub fn look_for_step(&self) -> Option<chrono::Duration> {
        let mut anchor = self
            .wall_at_base_us
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let elapsed = self.elapsed_us();
        let wall = self.local.now().timestamp_micros();
        let step = wall - (*anchor + elapsed);
        *anchor = wall - elapsed;
        let bound = STEP_BOUND.as_micros() as i64;
        (step.abs() > bound).then(|| chrono::Duration::microseconds(step))
    }

    /// Looks for a step; one seen is logged as a warning with its size, counted, and announced
    /// to the timeline. True when there was one.
    pub fn report_step(&self, metrics: &Metrics, replica: &str) -> bool {
        let Some(step) = self.look_for_step() else {
            return false;
        };
        let step_ms = step.num_milliseconds();
        metrics.clock_step(step_ms);
        let effect = if self.apply {
            "slots stay on the fleet clock (monotonic): nothing fires early or late"
        } else {
            "clock = \"local\": rebuilding the timeline from the stepped time; slots ahead of \
             the fleet clock or past their start window are skipped"
        };
        tracing::warn!(
            replica,
            step_ms,
            "the wall clock stepped {} by {} ms; {effect}",
            if step_ms > 0 { "forward" } else { "back" },
            step_ms.abs()
        );
        self.remeasure.notify_one();
        if !self.apply {
            self.rearms.send_modify(|n| *n += 1);
        }
        true
    }

    /// Logs and counts a jump of the fleet's time (like a step) and re-arms the timeline.
    pub fn report_jump(&self, jump: chrono::Duration, metrics: &Metrics, replica: &str) {
        let jump_ms = jump.num_milliseconds();
        metrics.clock_step(jump_ms);
        tracing::warn!(
            replica,
            jump_ms,
            "the fleet clock jumped {} by {} ms against the Redis nodes' TIME (a frozen or \
             resumed VM or process: the monotonic clock did not see it); re-measured, \
             re-arming the timeline; slots past their start window are not raced",
            if jump_ms > 0 { "forward" } else { "back" },
            jump_ms.abs()
        );
        self.rearms.send_modify(|n| *n += 1);
    }

    /// Measures again before a race and reports a jump it reveals: a slot is then judged on
    /// the nodes' time, even when this process was frozen since the last measurement.
    pub async fn verify(&self, nodes: &Nodes, metrics: &Metrics, replica: &str) {
        let measured = self.measure(nodes).await;
        if let Some(jump) = measured.jump() {
            self.report_jump(jump, metrics, replica);
        }
    }
}

/// One node's time at `base`, in µs since the epoch: its `TIME`, taken as read when the answer
/// arrived, minus the monotonic time from `base` to then (`None` when the answer cannot be read
/// as a time). The node read its clock before answering, so this errs late by up to the round
/// trip and never early: a slot scheduled on it never fires before its instant, even when a
/// loaded machine makes the round trip lopsided (its midpoint can err either way).
async fn sample(base: Instant, node: Arc<Node>) -> Result<Option<i64>, NodeError> {
    let (secs, micros): (i64, i64) = node.query(&redis::cmd("TIME"), TIME_TIMEOUT).await?;
    let answered = Instant::now();
    let since_base = i64::try_from(answered.duration_since(base).as_micros()).ok();
    Ok(since_base.and_then(|since| {
        secs.checked_mul(1_000_000)?
            .checked_add(micros)?
            .checked_sub(since)
    }))
}

/// How long a measurement waits for the nodes' answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// Until a majority of all nodes agree (or every node not suspect answered): before a race,
    /// so a slow node does not hold it up. The median of answers a majority of the nodes agree
    /// among lies within those (they outnumber the others), so it is honest.
    Agreement,
    /// Until every node not suspect answered: at start and every minute, to see (and name)
    /// each node's clock.
    Reachable,
}

/// One measurement's samples of the fleet's time at `base`: (the node's place in the pool, µs).
#[derive(Debug)]
struct Samples(Vec<(usize, i64)>);

impl Samples {
    /// The fleet's time at `base` they measure: their lower median.
    fn median(&self) -> Option<i64> {
        lower_median(self.0.iter().map(|&(_, at)| at).collect())
    }
}

/// Whether `quorum` of `samples` lie within [`AGREEMENT`] of each other.
fn agree(mut samples: Vec<i64>, quorum: usize) -> bool {
    let bound = AGREEMENT.as_micros() as i64;
    samples.sort_unstable();
    quorum > 0
        && samples
            .windows(quorum)
            .any(|w| w[quorum - 1] - w[0] <= bound)
}

/// The median of `samples`, the lower of the two middle ones when they are even: with one node
/// down and another's host clock off, the fleet clock errs late, never early (the average of
/// two would move it by half the bad node's error either way).
fn lower_median(mut samples: Vec<i64>) -> Option<i64> {
    if samples.is_empty() {
        return None;
    }
    samples.sort_unstable();
    samples.get((samples.len() - 1) / 2).copied()
}

/// Measures every [`MEASURE_EVERY`] (every [`MEASURE_RETRY`] until the first measurement
/// succeeds), and at once after a step of the wall clock or a late timeline wake, until
/// shutdown, logging large offsets, steps and jumps.
pub async fn keep_measuring(
    clock: Arc<FleetClock>,
    nodes: Arc<Nodes>,
    metrics: Arc<Metrics>,
    max_skew: Duration,
    replica: String,
    shutdown: CancellationToken,
) {
    loop {
        let period = if clock.measured() {
            MEASURE_EVERY
        } else {
            MEASURE_RETRY
        };
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(period) => {}
            // A step may also be the monotonic clock standing still (a VM suspended and
            // resumed): the fleet's time is measured again at once rather than within a minute.
            _ = clock.remeasure.notified() => {}
        }
        measure_and_report(&clock, &nodes, &metrics, max_skew, &replica).await;
    }
}

/// One measurement, reported in the log (when large, or a jump, or the end of a wait for the
/// first) and in the metrics.
pub async fn measure_and_report(
    clock: &FleetClock,
    nodes: &Nodes,
    metrics: &Metrics,
    max_skew: Duration,
    replica: &str,
) {
    clock.report_step(metrics, replica);
    let samples = clock.sample_nodes(nodes, Wait::Reachable).await;
    let measured = clock.keep(samples.median());
    report_nodes(nodes, &samples, metrics, replica);
    let offset = match measured {
        Measurement::NoAnswer => return report_no_answer(clock, replica),
        Measurement::First { offset } | Measurement::Again { offset, .. } => offset,
    };
    if let Some(jump) = measured.jump() {
        clock.report_jump(jump, metrics, replica);
    }
    if matches!(measured, Measurement::First { .. }) && clock.waited.load(Ordering::Relaxed) {
        tracing::info!(
            replica,
            "fleet clock measured: a Redis node answered TIME; racing slots from now"
        );
    }
    report_offset(clock, offset, metrics, max_skew, replica);
}

/// Exports each answering node's `TIME` against the fleet clock (their median), and names a
/// node off by more than [`AGREEMENT`] in a warning: the median does not follow it, but its
/// host's clock wants fixing, and with one more node off (or down) the fleet could follow it.
fn report_nodes(nodes: &Nodes, samples: &Samples, metrics: &Metrics, replica: &str) {
    let Some(fleet) = samples.median() else {
        return;
    };
    let members: Vec<Arc<Node>> = nodes.iter().collect();
    for &(i, at_base) in &samples.0 {
        let Some(node) = members.get(i) else { continue };
        let node_offset_ms = (at_base - fleet) / 1000;
        metrics.node_clock_offset(node.address(), node_offset_ms);
        if (at_base - fleet).unsigned_abs() > AGREEMENT.as_micros() as u64 {
            tracing::warn!(
                replica,
                node = node.address(),
                node_offset_ms,
                "redis node {}'s clock is {} ms {} the fleet clock (the nodes' median TIME): \
                 not followed; fix its host's NTP",
                node.address(),
                node_offset_ms.abs(),
                if node_offset_ms > 0 {
                    "ahead of"
                } else {
                    "behind"
                }
            );
        }
    }
}

/// No node answered `TIME`: before the first measurement the replica races nothing (said
/// once, then at debug on each retry); after it the last offset is kept.
fn report_no_answer(clock: &FleetClock, replica: &str) {
    if clock.measured() {
        tracing::warn!(
            replica,
            "fleet clock: no Redis node answered TIME; keeping the last offset"
        );
    } else if !clock.waited.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            replica,
            retry_ms = MEASURE_RETRY.as_millis() as u64,
            "fleet clock not measured: no Redis node answered TIME; racing no slot and not ready \
             until one does (this replica's own clock is not trusted); retrying every second"
        );
    } else {
        tracing::debug!(replica, "fleet clock: still no Redis node answered TIME");
    }
}

/// Logs the offset (a warning past half of `max_clock_skew`) and exports it.
fn report_offset(
    clock: &FleetClock,
    offset: chrono::Duration,
    metrics: &Metrics,
    max_skew: Duration,
    replica: &str,
) {
    // The metric is this replica's clock minus the fleet's, the sign people expect.
    let local_minus_fleet_ms = -offset.num_milliseconds();
    metrics.clock_offset(local_minus_fleet_ms);
    let limit = chrono::Duration::from_std(max_skew / 2).unwrap_or_default();
    if offset.abs() > limit {
        tracing::warn!(replica = %replica, offset_ms = local_minus_fleet_ms, max_clock_skew_ms = max_skew.as_millis() as u64,
            "this replica's clock is {} ms {} the Redis nodes' (more than half of max_clock_skew){}",
            local_minus_fleet_ms.abs(), if local_minus_fleet_ms > 0 { "ahead of" } else { "behind" },
            if clock.apply { "; scheduling on the fleet clock" } else { "; clock = \"local\": scheduling on it, racing no slot before the fleet clock reaches it" });
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

    /// A wall clock a test can step.
    #[derive(Debug, Default)]
    struct SteppedClock(AtomicI64);

    impl Clock for SteppedClock {
        fn now(&self) -> DateTime<Utc> {
            Utc::now() + chrono::Duration::seconds(self.0.load(Ordering::Relaxed))
        }
    }

    #[test]
    fn a_wall_clock_step_moves_neither_clock_of_the_fleet() {
        let wall = Arc::new(SteppedClock::default());
        let fleet = FleetClock::new(wall.clone(), true);
        let before = fleet.now();
        wall.0.store(90, Ordering::Relaxed);
        let after = fleet.now();
        assert!(
            (after - before).num_milliseconds().abs() < 500,
            "{before} -> {after}"
        );
        assert!((fleet.fleet_now() - after).num_milliseconds().abs() < 500);
    }

    #[test]
    fn a_step_is_seen_once_with_its_size() {
        let wall = Arc::new(SteppedClock::default());
        let fleet = FleetClock::new(wall.clone(), false);
        assert_eq!(fleet.look_for_step(), None);
        wall.0.store(-90, Ordering::Relaxed);
        let step = fleet.look_for_step().expect("a step back of 90 s");
        assert!((step.num_milliseconds() + 90_000).abs() < 500, "{step}");
        // Re-anchored: the same offset is not a second step.
        assert_eq!(fleet.look_for_step(), None);
        // clock = "local" schedules on the stepped wall clock.
        assert!((fleet.offset().num_milliseconds() - 90_000).abs() < 500);
        assert!(fleet.schedules_on_wall());
    }

    #[test]
    fn a_new_fleet_clock_is_unmeasured_and_only_a_move_past_the_bound_is_a_jump() {
        let fleet = FleetClock::new(Arc::new(SteppedClock::default()), true);
        assert!(
            !fleet.measured(),
            "the wall clock's guess is not a measurement"
        );
        let ms = chrono::Duration::milliseconds;
        let again = |moved| Measurement::Again {
            offset: ms(0),
            moved,
        };
        assert_eq!(again(ms(-35_000)).jump(), Some(ms(-35_000)));
        assert_eq!(again(ms(1_200)).jump(), Some(ms(1_200)));
        assert_eq!(again(ms(400)).jump(), None, "round trips differ");
        let first = Measurement::First {
            offset: ms(-35_000),
        };
        assert_eq!(first.jump(), None, "the first measurement replaces a guess");
    }

    #[test]
    fn median_of_samples_takes_the_lower_middle_of_an_even_count() {
        assert_eq!(lower_median(vec![]), None);
        assert_eq!(lower_median(vec![5]), Some(5));
        assert_eq!(lower_median(vec![9, 1, 5]), Some(5));
        assert_eq!(lower_median(vec![1, 3, 5, 100]), Some(3));
        // One node down, one host clock 20 s ahead: the fleet clock stays on the good node's
        // time (the average would put it 10 s ahead, firing slots 10 s early).
        assert_eq!(lower_median(vec![20_000_000, 0]), Some(0));
    }

    #[test]
    fn a_majority_agrees_only_within_the_bound() {
        let s = 1_000_000;
        // Three nodes, the first two answers one true and one 40 s slow: wait for the third.
        assert!(!agree(vec![0, -40 * s], 2));
        assert!(agree(vec![0, -40 * s, 2_000], 2));
        assert!(agree(vec![0, 900_000], 2), "round trips differ");
        assert!(!agree(vec![0], 2));
        // Five nodes: three of four answers agree; the median of the four is among them.
        let four = vec![-40 * s, 0, 3_000, 5_000];
        assert!(agree(four.clone(), 3));
        assert_eq!(lower_median(four), Some(0));
        assert!(!agree(vec![-40 * s, 0, 3_000, 40 * s], 3));
    }
}
