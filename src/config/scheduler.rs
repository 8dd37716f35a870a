//! `[scheduler]`: what every job shares (zone, key prefix, clock, candidates), its defaults,
//! and its checks. The defaults live here, with the section, so that the modules that use them
//! (membership, the race) import them from the configuration and not the other way round.

use std::num::NonZeroUsize;
use std::time::Duration;

use chrono_tz::Tz;
use toml::Value;

use super::deployment::Deployment;
use super::durations;
use super::raw::{RawCandidates, RawClockMode, RawScheduler};
use super::{ConfigError, Loader, Section};
use crate::time::schedule::{DstGap, DstRepeat};

/// Default `[scheduler] destination_conflict_after`: longer than a rollout takes.
pub const DEFAULT_DESTINATION_CONFLICT_AFTER: Duration = Duration::from_secs(600);
/// Default `[scheduler] key_prefix`.
pub const DEFAULT_KEY_PREFIX: &str = "slotcron";
/// Default `[scheduler] max_clock_skew`.
pub const DEFAULT_MAX_CLOCK_SKEW: Duration = Duration::from_secs(10);
/// `[scheduler] candidates`: how many replicas race each slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Candidates {
    /// Every replica races every slot at once; no membership is kept.
    All,
    /// The top `k` of the live replicas, ranked by a rendezvous hash; rank `r` races
    /// `(r - 1)` staggers after the slot, so the first-ranked normally wins.
    Top(NonZeroUsize),
}

/// Default `[scheduler] candidates`: a second candidate covers a first that died.
pub const DEFAULT_CANDIDATES: Candidates = Candidates::Top(NonZeroUsize::MIN.saturating_add(1));
/// Default `[scheduler] candidate_stagger`: longer than a loaded race round trip, so the
/// first-ranked's key is set before the second-ranked asks.
pub const DEFAULT_CANDIDATE_STAGGER: Duration = Duration::from_millis(50);

#[derive(Debug, Clone)]
/// `[scheduler]`: what every job shares.
pub struct SchedulerConfig {
    /// The zone of jobs without their own `timezone`.
    pub timezone: Tz,
    /// Prefixed to every Redis key, so fleets can share nodes.
    pub key_prefix: String,
    /// How far replicas' clocks may disagree; slot keys outlive a slot by twice this.
    pub max_clock_skew: Duration,
    /// Which clock slots are scheduled on.
    pub clock: ClockMode,
    /// `on_failure`: the alert of every job without its own (checked against `[alert.NAME]`).
    pub on_failure: Option<String>,
    /// How many replicas race each slot (see [`crate::fleet::membership`]).
    pub candidates: Candidates,
    /// How long each further-ranked candidate waits before it races.
    pub candidate_stagger: Duration,
    /// How long replicas on this prefix may send a job of one name to different destinations
    /// (a rollout), or replicas of two deployments may share it, before it is logged as two
    /// fleets sharing the prefix.
    pub destination_conflict_after: Duration,
    /// Which deployment this replica belongs to, compared with the others on the prefix.
    pub deployment: Deployment,
    /// `jitter` of jobs without their own (default 0: no delay).
    pub jitter: Duration,
    /// `dst_repeat` of jobs without their own; `None`: the rule of each cron's kind.
    pub dst_repeat: Option<DstRepeat>,
    /// `dst_gap` of jobs without their own; `None`: the rule of each cron's kind.
    pub dst_gap: Option<DstGap>,
}

/// A replica still races a slot this long after it, even with `max_clock_skew = 0`.
pub const MIN_START_WINDOW: Duration = Duration::from_secs(2);

/// How long after its slot a replica (by its own clock) still races for it, with
/// `max_clock_skew`: the larger of the two. The one place the start window is computed; the
/// race's guard, the slot keys' TTL, the membership and the lookout's warning all take it.
pub fn start_window(max_clock_skew: Duration) -> Duration {
    max_clock_skew.max(MIN_START_WINDOW)
}

impl SchedulerConfig {
    /// This configuration's [`start_window`].
    pub fn start_window(&self) -> Duration {
        start_window(self.max_clock_skew)
    }
}

/// `[scheduler] clock`: the replica's own clock, or corrected to the Redis nodes' `TIME`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClockMode {
    /// Corrected by the measured offset to the nodes' time (the default with [redis]).
    #[default]
    Redis,
    /// The replica's own clock (the offset is still measured and reported).
    Local,
}

impl Loader<'_> {
    /// `[scheduler]` of the file whose whole `text` is given (the deployment's identity is
    /// derived from the variables it names).
    pub(super) fn scheduler(
        &mut self,
        value: Option<Value>,
        text: &str,
    ) -> Option<SchedulerConfig> {
        let raw = self.raw_scheduler(value)?;
        self.check_scheduler(raw, text)
    }

    /// `[scheduler]`'s keys as typed values (the file's, or a fleet's built in code) checked,
    /// with their defaults.
    pub(super) fn check_scheduler(
        &mut self,
        raw: RawScheduler,
        text: &str,
    ) -> Option<SchedulerConfig> {
        // Every key is checked before any error ends the section: each is its own mistake.
        let timezone = match raw.timezone.as_deref() {
            Some(name) => self.zone(name, Section::Scheduler),
            None => Some(chrono_tz::UTC),
        };
        let key_prefix = self.key_prefix(raw.key_prefix);
        let max_clock_skew = self.scheduler_duration(
            "max_clock_skew",
            raw.max_clock_skew.unwrap_or(DEFAULT_MAX_CLOCK_SKEW),
            durations::MAX_CLOCK_SKEW,
        );
        let clock = match raw.clock {
            Some(RawClockMode::Local) => ClockMode::Local,
            Some(RawClockMode::Redis) | None => ClockMode::Redis,
        };
        let candidates = self.candidates(raw.candidates);
        let candidate_stagger = self.scheduler_duration(
            "candidate_stagger",
            raw.candidate_stagger.unwrap_or(DEFAULT_CANDIDATE_STAGGER),
            durations::CANDIDATE_STAGGER,
        );
        let destination_conflict_after = self.scheduler_duration(
            "destination_conflict_after",
            (raw.destination_conflict_after).unwrap_or(DEFAULT_DESTINATION_CONFLICT_AFTER),
            durations::DESTINATION_CONFLICT_AFTER,
        );
        let jitter = self.scheduler_jitter(raw.jitter);
        let deployment = self.deployment(raw.deployment, text);
        Some(SchedulerConfig {
            deployment: deployment?,
            timezone: timezone?,
            key_prefix: key_prefix?,
            max_clock_skew: max_clock_skew?,
            clock,
            on_failure: raw.on_failure,
            candidates: candidates?,
            candidate_stagger: candidate_stagger?,
            destination_conflict_after: destination_conflict_after?,
            jitter: jitter?,
            dst_repeat: raw.dst_repeat.map(DstRepeat::from),
            dst_gap: raw.dst_gap.map(DstGap::from),
        })
    }

    /// `[scheduler]` typed (an absent section: every default).
    fn raw_scheduler(&mut self, value: Option<Value>) -> Option<RawScheduler> {
        match value {
            Some(v) => self.typed(v, &Section::Scheduler),
            None => Some(RawScheduler::default()),
        }
    }

    /// A duration of `[scheduler]`, if inside its range (else an error naming it).
    fn scheduler_duration(
        &mut self,
        field: &str,
        value: Duration,
        range: durations::DurationRange,
    ) -> Option<Duration> {
        self.bounded(&Section::Scheduler, field, value, range)
    }

    /// The deployment: `[scheduler] deployment`, `${VAR}` expanded (not scrubbed: a name,
    /// shown in logs) and non-empty, or as [`Deployment::of`] finds it in `text`.
    fn deployment(&mut self, raw: Option<String>, text: &str) -> Option<Deployment> {
        let Some(raw) = raw else {
            return Some(Deployment::of(None, text, self.env));
        };
        let error = match super::env::expand(&raw, self.env) {
            Ok(name) if !name.text.trim().is_empty() => {
                return Some(Deployment::of(Some(name.text), text, self.env));
            }
            Ok(_) => {
                "must be non-empty (leave it out to derive the deployment from the environment)"
                    .to_owned()
            }
            Err(e) => e.to_string(),
        };
        let error = ConfigError::field(Section::Scheduler, "deployment", error);
        self.errors.push(error);
        None
    }

    /// `[scheduler] key_prefix`: non-empty, no whitespace (it starts every Redis key).
    fn key_prefix(&mut self, raw: Option<String>) -> Option<String> {
        let key_prefix = raw.unwrap_or_else(|| DEFAULT_KEY_PREFIX.to_owned());
        if key_prefix.is_empty() || key_prefix.chars().any(char::is_whitespace) {
            self.errors.push(ConfigError::field(
                Section::Scheduler,
                "key_prefix",
                "must be non-empty and contain no whitespace",
            ));
            return None;
        }
        Some(key_prefix)
    }

    /// `[scheduler] candidates`: a count from 1, or `"all"`.
    fn candidates(&mut self, raw: Option<RawCandidates>) -> Option<Candidates> {
        let count = match raw {
            None => return Some(DEFAULT_CANDIDATES),
            Some(RawCandidates::Word(word)) if word == "all" => return Some(Candidates::All),
            Some(RawCandidates::Word(_)) => None,
            Some(RawCandidates::Count(n)) => usize::try_from(n).ok(),
        };
        match count.and_then(std::num::NonZeroUsize::new) {
            Some(k) => Some(Candidates::Top(k)),
            None => {
                self.errors.push(ConfigError::field(
                    Section::Scheduler,
                    "candidates",
                    "must be a whole number from 1, or \"all\"",
                ));
                None
            }
        }
    }
}
