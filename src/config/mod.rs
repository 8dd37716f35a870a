//! jobs.toml, parsed once at start into checked types.
//!
//! Loading never panics and never stops at the first problem: it reports every error it finds,
//! each naming the file, the job and the field (the line for TOML syntax), and the caller exits
//! non-zero before anything starts.

mod actions;
mod alerts;
mod calendars;
pub mod durations;
pub mod env;
pub mod error;
mod raw;

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use chrono_tz::Tz;
use serde::de::DeserializeOwned;
use toml::{Table, Value};

use crate::action::template::Templates;
use crate::action::Action;
use crate::lock::LockConfig;
use crate::redis::NodeUrl;
use crate::secret::Scrubber;
use crate::time::schedule::Schedule;
use durations::DurationRange;
pub use env::{Env, ProcessEnv};
pub use error::{ConfigError, ConfigErrors, Location, Section};
use raw::{
    RawCandidates, RawCatchUpPolicy, RawClockMode, RawHttpServer, RawJob, RawOverlap, RawRedis,
    RawScheduler,
};

use crate::fleet::membership::{Candidates, DEFAULT_CANDIDATES, DEFAULT_CANDIDATE_STAGGER};

/// Default `[scheduler] destination_conflict_after`: longer than a rollout takes.
pub const DEFAULT_DESTINATION_CONFLICT_AFTER: Duration = Duration::from_secs(600);
/// Default `[scheduler] key_prefix`.
pub const DEFAULT_KEY_PREFIX: &str = "slotcron";
/// Default `[scheduler] max_clock_skew`.
pub const DEFAULT_MAX_CLOCK_SKEW: Duration = Duration::from_secs(10);
/// Default job `timeout`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest job name: it is part of every Redis key.
const MAX_JOB_NAME: usize = 100;

/// A checked configuration.
#[derive(Debug)]
pub struct Config {
    /// The file it was read from, for messages and reloads.
    pub path: PathBuf,
    /// `[scheduler]`, with its defaults.
    pub scheduler: SchedulerConfig,
    /// `None`: standalone mode, an in-process lock.
    pub redis: Option<RedisConfig>,
    /// `[http]`: the health, metrics and status endpoints; `None`: not served.
    pub http: Option<HttpConfig>,
    /// Enabled jobs, in file order.
    pub jobs: Vec<Arc<Job>>,
    /// Jobs with `enabled = false`: checked, not scheduled.
    pub disabled: Vec<String>,
    /// `[alert.NAME]`: the actions that tell someone a slot failed or was missed.
    pub alerts: BTreeMap<String, Arc<Action>>,
    /// Every template of every action, compiled once.
    pub templates: Arc<Templates>,
    /// Every secret value the config holds, for scrubbing free text before it is logged.
    pub scrubber: Arc<Scrubber>,
    /// Things that work but deserve a word at start (an even number of nodes, standalone mode).
    pub warnings: Vec<String>,
}

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
    /// (a rollout) before it is logged as two fleets sharing the prefix.
    pub destination_conflict_after: Duration,
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

#[derive(Debug, Clone)]
/// `[redis]`: the nodes the fleet races on.
pub struct RedisConfig {
    /// The nodes; a majority decides each slot.
    pub nodes: Vec<NodeUrl>,
    /// The Redlock's timings.
    pub lock: LockConfig,
    /// PEM root certificates for `rediss://` nodes (`ca_file`); `None`: the system's roots.
    pub ca: Option<Vec<u8>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
/// `[http]`: the status server.
pub struct HttpConfig {
    /// Where `/healthz`, `/readyz`, `/metrics` and the status page listen.
    pub listen: std::net::SocketAddr,
}

/// What a slot does while the job's previous run is still going somewhere in the fleet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Overlap {
    /// Skip the slot, with a log line (the default).
    #[default]
    Skip,
    /// Run it anyway.
    Allow,
}

/// Which missed slots a replica runs at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CatchUpPolicy {
    /// Only the most recent missed slot.
    Latest,
    /// Every missed slot, oldest first.
    All,
}

/// Most slots `catch_up_policy = "all"` runs at one start: a window that can hold more is a
/// config error. Catch-up reaches back this many runs of the history at most.
pub const MAX_CATCH_UP_ALL: usize = 1000;

/// Running slots missed while the whole fleet was down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CatchUp {
    /// How far back a missed slot is still run.
    pub window: Duration,
    /// Which of the missed slots run.
    pub policy: CatchUpPolicy,
}

/// A checked job.
#[derive(Debug)]
pub struct Job {
    /// The job's unique name: its lock keys, history and metrics.
    pub name: String,
    /// When it runs, in its zone.
    pub schedule: Schedule,
    /// The whole action, retries included.
    pub timeout: Duration,
    /// What happens when a slot comes while the previous run goes on.
    pub overlap: Overlap,
    /// Catch-up of slots missed while no replica ran, if enabled.
    pub catch_up: Option<CatchUp>,
    /// What the winner does.
    pub action: Action,
    /// The `[alert.NAME]` told when a slot ends `failed` or is found `missed`.
    pub on_failure: Option<String>,
}

impl Job {
    /// The job's zone.
    pub fn zone(&self) -> Tz {
        self.schedule.zone()
    }
}

/// Reads and checks `path`, expanding `${VAR}` from the process environment.
pub fn load(path: &Path) -> Result<Config, ConfigErrors> {
    load_with(path, &ProcessEnv)
}

/// Reads and checks `path` against `env`.
pub fn load_with(path: &Path, env: &dyn Env) -> Result<Config, ConfigErrors> {
    let shown = path.display().to_string();
    let fail = |e: ConfigError| ConfigErrors {
        path: shown.clone(),
        errors: vec![e],
    };
    let bytes = std::fs::read(path).map_err(|e| fail(ConfigError::file(read_error(&e))))?;
    let text = String::from_utf8(bytes).map_err(|e| {
        fail(ConfigError::file(format!(
            "not UTF-8 text (invalid byte at offset {})",
            e.utf8_error().valid_up_to()
        )))
    })?;
    parse(path, &text, env)
}

fn read_error(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "cannot read: no such file".to_owned(),
        std::io::ErrorKind::PermissionDenied => "cannot read: permission denied".to_owned(),
        _ => format!("cannot read: {e}"),
    }
}

/// Test jobs: one `log` job per (name, cron), parsed the way a file is (for the unit tests of
/// the modules that take jobs: the timeline, the look-back).
#[cfg(test)]
pub(crate) fn log_jobs(schedules: &[(&str, &str)]) -> Vec<Arc<Job>> {
    let text: String = schedules
        .iter()
        .map(|(name, cron)| {
            format!(
                "[[job]]\nname = \"{name}\"\nschedule = \"{cron}\"\n\
                 [job.action]\ntype = \"log\"\ncontent = \"x\"\n"
            )
        })
        .collect();
    let env: std::collections::HashMap<String, String> = std::collections::HashMap::new();
    parse(Path::new("t.toml"), &text, &env).unwrap().jobs
}

/// Checks the text of a jobs.toml.
pub fn parse(path: &Path, text: &str, env: &dyn Env) -> Result<Config, ConfigErrors> {
    let mut loader = Loader::new(env);
    let config = loader.load(path, text);
    match config {
        Some(config) if loader.errors.is_empty() => Ok(config),
        _ => Err(ConfigErrors {
            path: path.display().to_string(),
            errors: loader.errors,
        }),
    }
}

/// Gathers errors while checking one file.
struct Loader<'e> {
    env: &'e dyn Env,
    /// jobs.toml's directory: files named in it (`*_file`, `ca_file`, paths) are relative to it.
    config_dir: PathBuf,
    errors: Vec<ConfigError>,
    templates: Templates,
    scrubber: Scrubber,
    warnings: Vec<String>,
    /// `[calendar.NAME]` sections, checked before the jobs that name them.
    calendars: calendars::Calendars,
    /// `[alert.NAME]` sections, checked before the jobs that name them.
    alerts: alerts::Alerts,
    /// `[scheduler] on_failure`: the alert of every job without its own.
    default_on_failure: Option<String>,
}

impl<'e> Loader<'e> {
    fn new(env: &'e dyn Env) -> Self {
        Loader {
            env,
            config_dir: PathBuf::from("."),
            errors: Vec::new(),
            templates: Templates::default(),
            scrubber: Scrubber::default(),
            warnings: Vec::new(),
            calendars: calendars::Calendars::default(),
            alerts: alerts::Alerts::default(),
            default_on_failure: None,
        }
    }

    fn load(&mut self, path: &Path, text: &str) -> Option<Config> {
        self.config_dir = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_owned();
        self.templates.set_env(self.env.vars());
        let mut table = match text.parse::<Table>() {
            Ok(table) => table,
            Err(e) => {
                self.errors.push(syntax_error(text, &e));
                return None;
            }
        };
        self.check_top_level(&table);
        let scheduler = self.scheduler(table.remove("scheduler"));
        let redis = self.redis(table.remove("redis"));
        let http = self.http_server(table.remove("http"));
        self.calendars(table.remove("calendar"));
        self.alerts(table.remove("alert"));
        if let Some(scheduler) = &scheduler {
            self.default_on_failure = self
                .on_failure(scheduler.on_failure.as_deref(), &Section::Scheduler)
                .flatten();
        }
        let (jobs, disabled) = self.jobs(table.remove("job"), scheduler.as_ref());
        let scheduler = scheduler?;
        self.check_something_runs(&jobs, &disabled);
        let redis = redis?;
        let http = http?;
        self.coverage_warnings();
        if redis.is_none() {
            self.warnings.push(STANDALONE_WARNING.to_owned());
        }
        Some(Config {
            path: path.to_owned(),
            scheduler,
            redis,
            http,
            jobs,
            disabled,
            alerts: std::mem::take(&mut self.alerts.checked),
            templates: Arc::new(std::mem::take(&mut self.templates)),
            scrubber: Arc::new(std::mem::take(&mut self.scrubber)),
            warnings: std::mem::take(&mut self.warnings),
        })
    }

    /// A file without jobs, or with every job disabled, is an error (when nothing else is).
    fn check_something_runs(&mut self, jobs: &[Arc<Job>], disabled: &[String]) {
        if jobs.is_empty() && disabled.is_empty() && self.errors.is_empty() {
            self.errors
                .push(ConfigError::file("no jobs: add at least one [[job]] table"));
        } else if jobs.is_empty() && self.errors.is_empty() {
            self.errors.push(ConfigError::file(
                "every job has enabled = false: nothing to run",
            ));
        }
    }

    fn check_top_level(&mut self, table: &Table) {
        for key in table.keys() {
            if !["scheduler", "redis", "http", "calendar", "alert", "job"].contains(&key.as_str()) {
                self.errors.push(ConfigError::field(
                    Section::Top,
                    key,
                    "unknown section or key (expected [scheduler], [redis], [http], [calendar.NAME], [alert.NAME] or [[job]])",
                ));
            }
        }
    }

    fn scheduler(&mut self, value: Option<Value>) -> Option<SchedulerConfig> {
        let raw: RawScheduler = match value {
            Some(v) => self.typed(v, &Section::Scheduler)?,
            None => RawScheduler::default(),
        };
        let timezone = match raw.timezone.as_deref() {
            Some(name) => self.zone(name, Section::Scheduler)?,
            None => chrono_tz::UTC,
        };
        let key_prefix = raw
            .key_prefix
            .unwrap_or_else(|| DEFAULT_KEY_PREFIX.to_owned());
        if key_prefix.is_empty() || key_prefix.chars().any(char::is_whitespace) {
            self.errors.push(ConfigError::field(
                Section::Scheduler,
                "key_prefix",
                "must be non-empty and contain no whitespace",
            ));
            return None;
        }
        let max_clock_skew = self.bounded(
            &Section::Scheduler,
            "max_clock_skew",
            raw.max_clock_skew.unwrap_or(DEFAULT_MAX_CLOCK_SKEW),
            durations::MAX_CLOCK_SKEW,
        )?;
        let clock = match raw.clock {
            Some(RawClockMode::Local) => ClockMode::Local,
            Some(RawClockMode::Redis) | None => ClockMode::Redis,
        };
        let candidates = self.candidates(raw.candidates)?;
        let candidate_stagger = self.bounded(
            &Section::Scheduler,
            "candidate_stagger",
            raw.candidate_stagger.unwrap_or(DEFAULT_CANDIDATE_STAGGER),
            durations::CANDIDATE_STAGGER,
        )?;
        let destination_conflict_after = self.bounded(
            &Section::Scheduler,
            "destination_conflict_after",
            raw.destination_conflict_after
                .unwrap_or(DEFAULT_DESTINATION_CONFLICT_AFTER),
            durations::DESTINATION_CONFLICT_AFTER,
        )?;
        Some(SchedulerConfig {
            timezone,
            key_prefix,
            max_clock_skew,
            clock,
            on_failure: raw.on_failure,
            candidates,
            candidate_stagger,
            destination_conflict_after,
        })
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

    /// `Some(None)`: no [http]. `None`: errors were recorded.
    fn http_server(&mut self, value: Option<Value>) -> Option<Option<HttpConfig>> {
        let Some(value) = value else {
            return Some(None);
        };
        let raw: RawHttpServer = self.typed(value, &Section::Http)?;
        match raw.listen.parse() {
            Ok(listen) => Some(Some(HttpConfig { listen })),
            Err(_) => {
                self.errors.push(ConfigError::field(
                    Section::Http,
                    "listen",
                    format!(
                        "{:?} is not an address and port such as \"0.0.0.0:9090\"",
                        raw.listen
                    ),
                ));
                None
            }
        }
    }

    /// `Some(None)`: no [redis] (standalone). `None`: errors were recorded.
    fn redis(&mut self, value: Option<Value>) -> Option<Option<RedisConfig>> {
        let Some(value) = value else {
            return Some(None);
        };
        let raw: RawRedis = self.typed(value, &Section::Redis)?;
        let before = self.errors.len();
        let nodes = self.redis_nodes(&raw.nodes);
        let lock = self.lock_config(&raw);
        let ca = raw
            .ca_file
            .and_then(|file| self.read_beside(&file, Section::Redis, "ca_file"));
        (self.errors.len() == before).then_some(Some(RedisConfig { nodes, lock, ca }))
    }

    /// `nodes`: each a Redis URL, none twice; an even count is warned about.
    fn redis_nodes(&mut self, raw_nodes: &[String]) -> Vec<NodeUrl> {
        if raw_nodes.is_empty() {
            self.errors.push(ConfigError::field(
                Section::Redis,
                "nodes",
                "needs at least one node (1, 3 or 5)",
            ));
        }
        let mut nodes = Vec::new();
        let mut seen = HashSet::new();
        for (i, raw_url) in raw_nodes.iter().enumerate() {
            let field = format!("nodes[{i}]");
            match self
                .expand(raw_url, &Section::Redis, &field)
                .map(|u| NodeUrl::parse(&u))
            {
                Some(Ok(url)) => {
                    if !seen.insert(url.address()) {
                        self.errors.push(ConfigError::field(
                            Section::Redis,
                            &field,
                            format!(
                                "{} is listed twice: a node must count once in the majority",
                                url.address()
                            ),
                        ));
                    }
                    self.scrubber.add(url.password().unwrap_or(""));
                    nodes.push(url);
                }
                Some(Err(e)) => {
                    self.errors
                        .push(ConfigError::field(Section::Redis, &field, e.to_string()))
                }
                None => {}
            }
        }
        if nodes.len().is_multiple_of(2) && !nodes.is_empty() {
            self.warnings.push(format!(
                "{} Redis nodes: an even count tolerates no more failures than {} (use 1, 3 or 5)",
                nodes.len(),
                nodes.len() - 1
            ));
        }
        nodes
    }

    /// The Redlock's timings: `node_timeout`, `retry_delay`, `retry_count`, else the defaults.
    fn lock_config(&mut self, raw: &RawRedis) -> LockConfig {
        let mut lock = LockConfig::default();
        let node_timeout = raw.node_timeout.unwrap_or(lock.node_timeout);
        let node_timeout = self.bounded(
            &Section::Redis,
            "node_timeout",
            node_timeout,
            durations::NODE_TIMEOUT,
        );
        let retry_delay = raw.retry_delay.unwrap_or(lock.retry_delay);
        let retry_delay = self.bounded(
            &Section::Redis,
            "retry_delay",
            retry_delay,
            durations::RETRY_DELAY,
        );
        lock.node_timeout = node_timeout.unwrap_or(lock.node_timeout);
        lock.retry_delay = retry_delay.unwrap_or(lock.retry_delay);
        lock.retry_count = raw.retry_count.unwrap_or(lock.retry_count);
        lock
    }

    /// Reads a file named in jobs.toml, relative to jobs.toml's directory.
    fn read_beside(&mut self, file: &Path, section: Section, field: &str) -> Option<Vec<u8>> {
        let full = self.config_dir.join(file);
        std::fs::read(&full)
            .map_err(|e| {
                let message = format!("{}: {}", full.display(), read_error(&e));
                self.errors
                    .push(ConfigError::field(section, field, message));
            })
            .ok()
    }

    fn jobs(
        &mut self,
        value: Option<Value>,
        scheduler: Option<&SchedulerConfig>,
    ) -> (Vec<Arc<Job>>, Vec<String>) {
        let mut jobs = Vec::new();
        let mut disabled = Vec::new();
        let tables = match value {
            None => return (jobs, disabled),
            Some(Value::Array(tables)) => tables,
            Some(_) => {
                self.errors.push(ConfigError::field(
                    Section::Top,
                    "job",
                    "must be an array of tables: write [[job]]",
                ));
                return (jobs, disabled);
            }
        };
        let mut names = HashSet::new();
        for (i, table) in tables.into_iter().enumerate() {
            let name = job_name(&table, i);
            if !names.insert(name.clone()) {
                self.errors.push(ConfigError::field(
                    Section::Job(name.clone()),
                    "name",
                    "duplicate job name: each job needs its own (it is part of the lock key)",
                ));
                continue;
            }
            let enabled = table
                .get("enabled")
                .and_then(Value::as_bool)
                .unwrap_or(true);
            match self.job(table, &name, enabled, scheduler) {
                Some(job) if enabled => jobs.push(Arc::new(job)),
                Some(_) => disabled.push(name),
                None if !enabled => disabled.push(name),
                None => {}
            }
        }
        (jobs, disabled)
    }

    fn job(
        &mut self,
        mut table: Value,
        name: &str,
        enabled: bool,
        scheduler: Option<&SchedulerConfig>,
    ) -> Option<Job> {
        let section = Section::Job(name.to_owned());
        self.read_action_files(enabled, &mut table, &section)?;
        let raw: RawJob = self.typed(table, &section)?;
        let enabled = raw.enabled.unwrap_or(enabled);
        let before = self.errors.len();
        self.check_job_name(&raw.name, &section);
        let schedule = self.job_schedule(&raw, scheduler, &section);
        let timeout = self.bounded(
            &section,
            "timeout",
            raw.timeout.unwrap_or(DEFAULT_TIMEOUT),
            durations::TIMEOUT,
        );
        let catch_up = self.catch_up(
            raw.catch_up,
            raw.catch_up_policy,
            &section,
            schedule.as_ref(),
        );
        if !enabled {
            return None;
        }
        let action = self.job_action(name, &section, raw.action);
        if self.errors.len() != before {
            return None;
        }
        let schedule = schedule?;
        self.calendar_in_use(&schedule);
        let on_failure = match raw.on_failure.as_deref() {
            Some(name) => self.on_failure(Some(name), &section)?,
            None => self.default_on_failure.clone(),
        };
        Some(Job {
            name: raw.name,
            schedule,
            timeout: timeout?,
            overlap: overlap(raw.overlap),
            catch_up,
            action: action?,
            on_failure,
        })
    }

    /// `${VAR}` expanded and `NAME_file` read in an enabled job's `[job.action]` table, before
    /// typing (a disabled job's files and variables may be missing).
    fn read_action_files(
        &mut self,
        enabled: bool,
        table: &mut Value,
        section: &Section,
    ) -> Option<()> {
        if let Some(action) = table.get_mut("action").filter(|_| enabled) {
            self.expand_all(action, section, "action")?;
            let dir = self.config_dir.clone();
            actions::read_file_fields(self, action, section, &dir)?;
        }
        Some(())
    }

    /// The job's schedule in its zone (or [scheduler]'s), with its calendar's days.
    fn job_schedule(
        &mut self,
        raw: &RawJob,
        scheduler: Option<&SchedulerConfig>,
        section: &Section,
    ) -> Option<Schedule> {
        let zone = match raw.timezone.as_deref() {
            Some(tz) => self.zone(tz, section.clone()),
            None => scheduler.map(|s| s.timezone),
        };
        // A zone in error (here or in [scheduler]) is already reported; the expression is still
        // checked, in UTC, so its own errors show in the same run.
        let schedule = Schedule::parse(&raw.schedule, zone.unwrap_or(chrono_tz::UTC))
            .map_err(|e| {
                self.errors.push(ConfigError::field(
                    section.clone(),
                    "schedule",
                    e.to_string(),
                ))
            })
            .ok()
            .filter(|_| zone.is_some());
        match self.day_filter(raw.calendar.as_deref(), raw.days, section) {
            Some(Some(filter)) => schedule.and_then(|s| self.on_days(s, filter, section)),
            Some(None) => schedule,
            None => None,
        }
    }

    /// The job's checked action (errors name `action.FIELD`).
    fn job_action(&mut self, name: &str, section: &Section, raw: raw::RawAction) -> Option<Action> {
        let config_dir = self.config_dir.clone();
        actions::ActionCheck {
            loader: self,
            job: name,
            section: section.clone(),
            config_dir,
            field_prefix: "action.",
        }
        .action(raw)
    }

    fn catch_up(
        &mut self,
        window: Option<Duration>,
        policy: Option<RawCatchUpPolicy>,
        section: &Section,
        schedule: Option<&Schedule>,
    ) -> Option<CatchUp> {
        let policy = match policy {
            Some(RawCatchUpPolicy::All) => CatchUpPolicy::All,
            Some(RawCatchUpPolicy::Latest) | None => CatchUpPolicy::Latest,
        };
        let Some(window) = window else {
            if policy == CatchUpPolicy::All {
                self.errors.push(ConfigError::field(
                    section.clone(),
                    "catch_up_policy",
                    "needs catch_up = \"<window>\" (for example \"10m\")",
                ));
            }
            return None;
        };
        let window = match durations::CATCH_UP.check(window) {
            Ok(window) => window,
            Err(e) => {
                let hint = " (leave catch_up out to turn catch-up off)";
                let e = e.to_string();
                let message = if window.is_zero() { e + hint } else { e };
                self.errors
                    .push(ConfigError::field(section.clone(), "catch_up", message));
                return None;
            }
        };
        if policy == CatchUpPolicy::All {
            self.check_catch_up_all(window, schedule?, section)?;
        }
        Some(CatchUp { window, policy })
    }

    /// `catch_up_policy = "all"` runs every missed slot: refused when the window can hold more
    /// than [`MAX_CATCH_UP_ALL`] of the job's slots (a burst nobody wants, and more than the
    /// history reaches back to tell apart).
    fn check_catch_up_all(
        &mut self,
        window: Duration,
        schedule: &Schedule,
        section: &Section,
    ) -> Option<()> {
        let most = schedule.most_slots_within(window, MAX_CATCH_UP_ALL);
        if most <= MAX_CATCH_UP_ALL {
            return Some(());
        }
        self.errors.push(ConfigError::field(
            section.clone(),
            "catch_up",
            format!(
                "a window of {} holds more than {MAX_CATCH_UP_ALL} slots of this schedule \
                 (at least {most}), the most catch_up_policy = \"all\" runs: shorten the window \
                 or use catch_up_policy = \"latest\"",
                humantime::format_duration(window)
            ),
        ));
        None
    }

    /// `value` if it lies in `range`; otherwise an error naming the field, the value and the
    /// range.
    fn bounded(
        &mut self,
        section: &Section,
        field: &str,
        value: Duration,
        range: DurationRange,
    ) -> Option<Duration> {
        range
            .check(value)
            .map_err(|e| {
                self.errors
                    .push(ConfigError::field(section.clone(), field, e.to_string()))
            })
            .ok()
    }

    fn check_job_name(&mut self, name: &str, section: &Section) {
        let valid = !name.is_empty()
            && name.len() <= MAX_JOB_NAME
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
        if !valid {
            self.errors.push(ConfigError::field(
                section.clone(),
                "name",
                format!("must be 1 to {MAX_JOB_NAME} characters of A-Z a-z 0-9 - _ . (it is part of the Redis key)"),
            ));
        }
    }

    fn zone(&mut self, name: &str, section: Section) -> Option<Tz> {
        name.parse::<Tz>()
            .map_err(|_| {
                self.errors.push(ConfigError::field(
                    section,
                    "timezone",
                    format!("unknown time zone {name:?} (use an IANA name such as Asia/Shanghai or UTC)"),
                ))
            })
            .ok()
    }

    /// Deserializes a section, naming the field on error.
    fn typed<T: DeserializeOwned>(&mut self, value: Value, section: &Section) -> Option<T> {
        // Kept to find which key held an unknown variant: serde's path stops at a tagged enum.
        let raw = value.clone();
        serde_path_to_error::deserialize(value)
            .map_err(|e| {
                let path = e.path().to_string();
                let message = first_line(&e.inner().to_string());
                let field = variant_field(&raw, &path, &message)
                    .unwrap_or_else(|| field_of(&path, &message));
                self.errors
                    .push(ConfigError::field(section.clone(), field, message));
            })
            .ok()
    }

    /// Expands `${VAR}` in every string below `value`.
    fn expand_all(&mut self, value: &mut Value, section: &Section, path: &str) -> Option<()> {
        match value {
            Value::String(s) => *s = self.expand(s, section, path)?,
            Value::Array(items) => {
                for (i, item) in items.iter_mut().enumerate() {
                    self.expand_all(item, section, &format!("{path}[{i}]"))?;
                }
            }
            Value::Table(table) => {
                for (key, item) in table.iter_mut() {
                    self.expand_all(item, section, &format!("{path}.{key}"))?;
                }
            }
            _ => {}
        }
        Some(())
    }

    fn expand(&mut self, text: &str, section: &Section, field: &str) -> Option<String> {
        match env::expand(text, self.env) {
            Ok(expanded) => {
                for value in &expanded.values {
                    self.scrubber.add(value);
                }
                Some(expanded.text)
            }
            Err(e) => {
                self.errors
                    .push(ConfigError::field(section.clone(), field, e.to_string()));
                None
            }
        }
    }
}

/// The job's name for error messages: its `name`, or its position when it has none.
fn job_name(table: &Value, index: usize) -> String {
    match table.get("name").and_then(Value::as_str) {
        Some(name) => name.to_owned(),
        None => format!("#{} (no name)", index + 1),
    }
}

/// The first line of a message (toml appends "in `table`" on the next).
fn first_line(message: &str) -> String {
    message.lines().next().unwrap_or_default().trim().to_owned()
}

/// For "unknown variant `x`" under `path`: the key of the table at `path` whose value is `x`
/// (`action.msgtype` rather than just `action`).
fn variant_field(raw: &Value, path: &str, message: &str) -> Option<String> {
    let (_, rest) = message.split_once("unknown variant `")?;
    let (variant, _) = rest.split_once('`')?;
    let table = if path == "." {
        Some(raw)
    } else {
        path.split('.').try_fold(raw, |v, key| v.get(key))
    }?;
    let (key, _) = table
        .as_table()?
        .iter()
        .find(|(_, v)| v.as_str() == Some(variant))?;
    Some(if path == "." {
        key.clone()
    } else {
        format!("{path}.{key}")
    })
}

/// The field an error is about: serde's path, plus the field named in "unknown/missing field `x`".
fn field_of(path: &str, message: &str) -> String {
    let named = ["unknown field `", "missing field `"]
        .iter()
        .find_map(|p| message.split_once(p))
        .and_then(|(_, rest)| rest.split_once('`'))
        .map(|(name, _)| name);
    let base = if path == "." { "" } else { path };
    // serde_path_to_error's path already ends at an unknown field outside a tagged enum.
    let named = named.filter(|name| base.rsplit('.').next() != Some(*name));
    match (base, named) {
        ("", Some(name)) => name.to_owned(),
        ("", None) => "(table)".to_owned(),
        (base, Some(name)) => format!("{base}.{name}"),
        (base, None) => base.to_owned(),
    }
}

/// A TOML syntax error with its line and column, and the job it falls in when there is one.
fn syntax_error(text: &str, e: &toml::de::Error) -> ConfigError {
    let offset = e.span().map_or(0, |s| s.start).min(text.len());
    let before = &text[..text.floor_char_boundary(offset)];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    ConfigError {
        location: Location::Line {
            line,
            column,
            job: enclosing_job(before),
        },
        message: format!("TOML syntax: {}", e.message().trim()),
    }
}

/// The `name` of the last `[[job]]` header before an error, read line by line (the file does not
/// parse, so this is a best effort).
fn enclosing_job(before: &str) -> Option<String> {
    let start = before.rfind("[[job]]")?;
    before[start..].lines().find_map(|line| {
        let (key, value) = line.split_once('=')?;
        (key.trim() == "name").then(|| value.trim().trim_matches('"').to_owned())
    })
}

/// The warning of a file without `[redis]`.
const STANDALONE_WARNING: &str = "no [redis] section: standalone mode, an in-process lock. \
    Run ONE replica only; several replicas would each run every slot";

/// `overlap`: overlapping runs are skipped unless the job allows them.
fn overlap(raw: Option<RawOverlap>) -> Overlap {
    match raw {
        Some(RawOverlap::Allow) => Overlap::Allow,
        Some(RawOverlap::Skip) | None => Overlap::Skip,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_of_paths() {
        assert_eq!(field_of(".", "missing field `name`"), "name");
        assert_eq!(
            field_of("action", "unknown field `x`, expected one of"),
            "action.x"
        );
        assert_eq!(field_of("timeout", "invalid type"), "timeout");
        assert_eq!(
            field_of("retries", "unknown field `retries`, expected one of"),
            "retries"
        );
    }

    #[test]
    fn enclosing_job_reads_the_last_header() {
        let text = "[[job]]\nname = \"a\"\n[[job]]\nname = \"b\"\nschedule = ";
        assert_eq!(enclosing_job(text).as_deref(), Some("b"));
        assert_eq!(enclosing_job("[scheduler]\n"), None);
    }
}
