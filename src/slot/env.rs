//! What one replica needs to take slots through their life under one configuration, and the
//! bounds every step derives from it (the start window, a slot key's life, a handoff's
//! deadline).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use tokio_util::sync::CancellationToken;

use super::{Trigger, KEY_MARGIN, MIN_START_WINDOW};
use crate::action::rate::Budgets;
use crate::action::template::Templates;
use crate::action::Action;
use crate::config::Candidates;
use crate::config::Job;
use crate::fleet::control::Control;
use crate::fleet::handoff::Handoffs;
use crate::fleet::membership::Membership;
use crate::lock::SlotLock;
use crate::metrics::Metrics;
use crate::record::history::History;
use crate::secret::Scrubber;
use crate::time::fleet_clock::FleetClock;
use crate::time::schedule::{SharedClock, Slot};

/// What one replica needs to take slots through their life, under one configuration: built
/// per generation (`Replica::context` in the `replica` module), so a reload never changes it
/// under a slot already racing or running.
pub struct SlotEnv {
    /// This replica's id: the lock's token names it, so the losers' lines say who won.
    pub replica: String,
    /// The Redlock over the nodes (or the in-process lock standalone) the slots are raced on.
    pub lock: SlotLock,
    /// One HTTP client for every action: its connection pool outlives the slots.
    pub client: reqwest::Client,
    /// The configuration's message templates, compiled once at load.
    pub templates: Arc<Templates>,
    /// Removes the configuration's secrets from error texts before they are logged or recorded.
    pub scrubber: Arc<Scrubber>,
    /// The timeline's clock and the fleet clock the window guard judges slots on.
    pub clock: SharedClock,
    /// The fleet clock behind `clock` with `[redis]`: measured again before each race, so a
    /// freeze since the last measurement is seen before a stale slot is raced.
    pub fleet: Option<Arc<FleetClock>>,
    /// Prefixes every Redis key, so fleets (or tests) sharing nodes never race each other.
    pub key_prefix: String,
    /// `[scheduler] max_clock_skew`: widens the start window and the slot keys' TTL, so a
    /// replica whose clock lags still finds the slot taken.
    pub max_clock_skew: Duration,
    /// Where each run is recorded: the ledger, catch-up and `slotcron history` read it.
    pub history: History,
    /// Counts every slot's outcome (where its line is logged) and the races' and runs' timings.
    pub metrics: Arc<Metrics>,
    /// The fleet-wide rate budgets the actions draw on (a robot's 20 messages a minute).
    pub budgets: Budgets,
    /// Where a slot this replica could not deliver is offered to the fleet.
    pub handoffs: Handoffs,
    /// The fleet-wide pauses: a paused job's slots are not raced.
    pub control: Control,
    /// The live replicas a slot's candidates are ranked among.
    pub membership: Membership,
    /// `[scheduler] candidates`: how many replicas race each scheduled slot.
    pub candidates: Candidates,
    /// `[scheduler] candidate_stagger`: each further rank waits this much longer to race.
    pub candidate_stagger: Duration,
    /// `[alert.NAME]`: told when a slot of a job with `on_failure` fails or is found missed.
    pub alerts: Arc<BTreeMap<String, Arc<Action>>>,
    /// The replica's shutdown (not a reload's): ends the wait before reporting missed slots,
    /// and tells a handoff offer made while shutting down that this replica no longer listens.
    pub shutdown: CancellationToken,
}

impl SlotEnv {
    /// How long after its slot a replica (by its own clock) still races for it.
    pub fn start_window(&self) -> Duration {
        self.max_clock_skew.max(MIN_START_WINDOW)
    }

    /// The slot key's TTL: the run, plus the spread of replicas' clocks, plus the start window.
    /// A replica whose clock lags or that wakes late then still finds the slot taken.
    pub fn key_ttl(&self, job: &Job) -> Duration {
        job.timeout + self.max_clock_skew + self.start_window() + KEY_MARGIN
    }

    /// The latest instant a slot may be delivered, on the fleet clock: one job timeout after
    /// the first winner's lock surely lapsed, so a handoff still has a whole timeout to run.
    pub fn handoff_deadline(&self, job: &Job, slot: Slot) -> chrono::DateTime<Utc> {
        let span = self.key_ttl(job) + job.timeout;
        slot.instant() + chrono::Duration::from_std(span).unwrap_or(chrono::Duration::MAX)
    }

    /// Waits until the fleet clock has been measured once (at once without `[redis]`); false
    /// when the replica shuts down first.
    pub async fn until_measured(&self) -> bool {
        match &self.fleet {
            Some(fleet) => fleet.until_measured(&self.shutdown).await,
            None => true,
        }
    }

    /// Takes a scheduled `slot` of `job` through its life ([`super::once`]): the test seam,
    /// through the same entry as the timeline.
    #[doc(hidden)]
    pub async fn run_slot(self: &Arc<Self>, job: &Arc<Job>, slot: Slot) -> super::SlotResult {
        super::once(self, Trigger::Schedule, job.clone(), slot)
            .await
            .expect("a scheduled slot always ends with a result")
    }
}
