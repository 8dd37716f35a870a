//! What one replica needs to take slots through their life under one configuration, in small
//! parts by concern, so each step takes only the parts it uses: [`Books`] (where an ending is
//! written), [`Race`] (the lock, the clocks and the bounds every step derives from them: the
//! start window, a slot key's life, a handoff's deadline), [`Contenders`] (who races a slot),
//! [`Outbox`] (where a slot's message goes). [`SlotEnv`] holds them for the spine.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use tokio_util::sync::CancellationToken;

use super::{KEY_MARGIN, Trigger};
use crate::action::Action;
use crate::action::egress::Http;
use crate::action::rate::Budgets;
use crate::action::template::Templates;
use crate::config::{Candidates, Config, Job, SchedulerConfig};
use crate::fleet::control::Control;
use crate::fleet::handoff::Handoffs;
use crate::fleet::membership::Membership;
use crate::lock::SlotLock;
use crate::metrics::Metrics;
use crate::record::history::History;
use crate::secret::Scrubber;
use crate::time::fleet_clock::FleetClock;
use crate::time::jitter;
use crate::time::schedule::{SharedClock, Slot};

/// What one replica needs to take slots through their life, under one configuration: built
/// per generation (`Replica::context` in the `replica` module), so a reload never changes it
/// under a slot already racing or running. The spine ([`super::due`]) hands each step the
/// parts it uses.
pub struct SlotEnv {
    /// Where a slot's ending is written.
    pub books: Books,
    /// What a slot is raced on.
    pub race: Race,
    /// Who races a slot.
    pub contenders: Contenders,
    /// Where a slot's message goes.
    pub outbox: Outbox,
    /// The replica's shutdown (not a reload's): ends the wait before reporting missed slots,
    /// and tells a handoff offer made while shutting down that this replica no longer listens.
    pub shutdown: CancellationToken,
}

/// Where a slot's ending is written: its log line (as this replica), its counter, and its
/// run's history record.
pub struct Books {
    /// This replica's id: the lock's token names it, so the losers' lines say who won.
    pub replica: String,
    /// Counts every slot's outcome (where its line is logged) and the races' and runs' timings.
    pub metrics: Arc<Metrics>,
    /// Where each run is recorded: the ledger, catch-up and `slotcron history` read it.
    pub history: History,
    /// `[scheduler] key_prefix`: part of each slot's jitter (the lines' `jitter_ms`).
    pub key_prefix: String,
}

/// What a slot is raced on: the lock, the clocks its window is judged on, the keys' prefix,
/// and the skew bound the window and the keys' life derive from.
pub struct Race {
    /// The Redlock over the nodes (or the in-process lock standalone) the slots are raced on.
    pub lock: SlotLock,
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
}

/// Who races a slot: not a job paused fleet-wide, and (with `candidates`) the replicas ranked
/// first among the live ones, each further rank later by the stagger.
pub struct Contenders {
    /// The fleet-wide pauses: a paused job's slots are not raced.
    pub control: Control,
    /// The live replicas a slot's candidates are ranked among.
    pub membership: Membership,
    /// `[scheduler] candidates`: how many replicas race each scheduled slot.
    pub candidates: Candidates,
    /// `[scheduler] candidate_stagger`: each further rank waits this much longer to race.
    pub stagger: Duration,
}

/// Where a slot's message goes: the receiver (through the shared client, the templates and
/// the fleet's rate budgets), the fleet (a handoff offer), or the job's alert.
pub struct Outbox {
    /// One HTTP client for every action: its connection pool outlives the slots.
    pub client: Http,
    /// The configuration's message templates, compiled once at load.
    pub templates: Arc<Templates>,
    /// Removes the configuration's secrets from error texts before they are logged or recorded.
    pub scrubber: Arc<Scrubber>,
    /// The fleet-wide rate budgets the actions draw on (a robot's 20 messages a minute).
    pub budgets: Budgets,
    /// `[alert.NAME]`: told when a slot of a job with `on_failure` fails or is found missed.
    pub alerts: Arc<BTreeMap<String, Arc<Action>>>,
    /// Where a slot this replica could not deliver is offered to the fleet.
    pub handoffs: Handoffs,
}

impl SlotEnv {
    /// Holds the parts, and the replica's `shutdown` (not a reload's).
    pub fn new(
        books: Books,
        race: Race,
        contenders: Contenders,
        outbox: Outbox,
        shutdown: CancellationToken,
    ) -> Self {
        Self {
            books,
            race,
            contenders,
            outbox,
            shutdown,
        }
    }

    /// Waits until the fleet clock has been measured once (at once without `[redis]`); false
    /// when the replica shuts down first.
    pub async fn until_measured(&self) -> bool {
        self.race.until_measured(&self.shutdown).await
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

impl Books {
    /// The books of `replica`, on the fleet of `key_prefix`.
    pub fn new(
        replica: String,
        metrics: Arc<Metrics>,
        history: History,
        key_prefix: String,
    ) -> Self {
        Self {
            replica,
            metrics,
            history,
            key_prefix,
        }
    }
}

impl Race {
    /// The race on `lock`, judged on `clock` (measured again on `fleet` with `[redis]`).
    pub fn new(
        lock: SlotLock,
        clock: SharedClock,
        fleet: Option<Arc<FleetClock>>,
        key_prefix: String,
        max_clock_skew: Duration,
    ) -> Self {
        Self {
            lock,
            clock,
            fleet,
            key_prefix,
            max_clock_skew,
        }
    }

    /// How long after its slot a replica (by its own clock) still races for it.
    pub fn start_window(&self) -> Duration {
        crate::config::start_window(self.max_clock_skew)
    }

    /// The delay of `job`'s `slot` (its `jitter`; zero without): the same on every replica.
    pub fn delay(&self, job: &Job, slot: Slot) -> Duration {
        jitter::delay(&self.key_prefix, &job.name, slot, job.jitter)
    }

    /// The instant `job`'s `slot` opens, as `trigger` takes it: its nominal instant plus its
    /// delay, except for `slotcron trigger`'s slot (now, asked for by hand). The window, the
    /// lateness and the handoff deadline count from it; the slot's keys and records keep the
    /// nominal instant.
    pub fn opens(&self, trigger: &Trigger, job: &Job, slot: Slot) -> chrono::DateTime<Utc> {
        match trigger {
            Trigger::Manual => slot.instant(),
            _ => jitter::delayed(slot, self.delay(job, slot)),
        }
    }

    /// The slot key's TTL: the run, plus the spread of replicas' clocks, plus the start window.
    /// A replica whose clock lags or that wakes late then still finds the slot taken. Plus the
    /// job's `jitter`: every replica of one configuration races at the same delayed instant,
    /// but during a rollout that changes the jitter the two versions race one slot at two
    /// instants, and the key must still be there when the later one comes (notes/jitter).
    pub fn key_ttl(&self, job: &Job) -> Duration {
        job.timeout + self.max_clock_skew + self.start_window() + job.jitter + KEY_MARGIN
    }

    /// The latest instant a slot may be delivered, on the fleet clock: one job timeout after
    /// the first winner's lock surely lapsed, so a handoff still has a whole timeout to run.
    /// A slot with jitter counts from its delayed instant (the first winner raced then).
    pub fn handoff_deadline(&self, job: &Job, slot: Slot) -> chrono::DateTime<Utc> {
        let span = self.key_ttl(job) + job.timeout;
        let opens = jitter::delayed(slot, self.delay(job, slot));
        opens + chrono::Duration::from_std(span).unwrap_or(chrono::Duration::MAX)
    }

    /// The TTL of a handoff key: past the slot's handoff deadline by [`KEY_MARGIN`]. A handoff
    /// key is set after the slot (a handoff follows a win), so it outlives every taker the
    /// deadline admits: none wins it a second time and runs under the same fence.
    pub fn handoff_key_ttl(&self, job: &Job) -> Duration {
        self.key_ttl(job) + job.timeout + KEY_MARGIN
    }

    /// Waits until the fleet clock has been measured once (at once without `[redis]`); false
    /// when `shutdown` comes first.
    pub async fn until_measured(&self, shutdown: &CancellationToken) -> bool {
        match &self.fleet {
            Some(fleet) => fleet.until_measured(shutdown).await,
            None => true,
        }
    }
}

impl Contenders {
    /// The contenders: not paused on `control`, ranked among `membership`'s live replicas as
    /// `scheduler` says (`candidates`, `candidate_stagger`).
    pub fn new(control: Control, membership: Membership, scheduler: &SchedulerConfig) -> Self {
        Self {
            control,
            membership,
            candidates: scheduler.candidates,
            stagger: scheduler.candidate_stagger,
        }
    }
}

impl Outbox {
    /// The outbox: `client` sends, drawing on `budgets`, with `config`'s templates, scrubber
    /// and alerts; undelivered slots go to `handoffs`.
    pub fn new(client: Http, budgets: Budgets, handoffs: Handoffs, config: &Config) -> Self {
        Self {
            client,
            templates: config.templates.clone(),
            scrubber: config.scrubber.clone(),
            budgets,
            alerts: Arc::new(config.alerts.clone()),
            handoffs,
        }
    }
}
