//! A configuration given as typed values rather than text: the library's `Fleet` builds the
//! sections jobs.toml is typed into ([`super::raw`]) and [`check_built`] checks them with the
//! loader's own checks, so a job built in code is refused for the same reasons, in the same
//! words and naming the same job and field, as the job in a file. A file's sections and code's
//! end in one place ([`Loader::finish`]).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use super::calendars::CalendarDays;
use super::jobs::{JobNames, keep_job};
use super::raw::{RawHttpServer, RawJob, RawRedis, RawScheduler, RawTelemetry};
use super::{Config, ConfigErrors, HttpConfig, Job, Loader, RedisConfig, SchedulerConfig, Section};
use crate::action::Action;

/// The warning of a configuration without `[redis]` (a fleet built without nodes).
const STANDALONE_WARNING: &str = "no [redis] section: standalone mode, an in-process lock. \
    Run ONE replica only; several replicas would each run every slot";

/// A fleet's configuration as typed values: each section as jobs.toml's would be typed, the
/// calendars' dates read, and each job's and alert's action already checked (a library
/// user's function).
#[derive(Debug)]
pub(crate) struct Built {
    /// What the errors name as the file (`fleet builder`).
    pub path: String,
    /// `[scheduler]`.
    pub scheduler: RawScheduler,
    /// `[redis]`; `None`: standalone.
    pub redis: Option<RawRedis>,
    /// `[http]`; `None`: not served.
    pub http: Option<RawHttpServer>,
    /// `[telemetry]`.
    pub telemetry: RawTelemetry,
    /// `[calendar.NAME]`, by name.
    pub calendars: Vec<(String, CalendarDays)>,
    /// `[alert.NAME]`, by name, with their actions.
    pub alerts: Vec<(String, Action)>,
    /// `[[job]]`, each with its action (the job's own `action` table is not read).
    pub jobs: Vec<(RawJob, Action)>,
}

/// Checks a configuration built in code as a file's is checked: every problem at once, each
/// naming the job (or section) and the field as jobs.toml spells it. No environment: a
/// `${...}` in a value set in code stays as written (and is refused where a variable would
/// be expanded). A configuration without jobs is not refused (the guard's runs are outside its
/// schedule); one whose every job is disabled is.
pub(crate) fn check_built(built: Built) -> Result<Config, ConfigErrors> {
    let env: HashMap<String, String> = HashMap::new();
    let mut loader = Loader::new(&env);
    let path = built.path.clone();
    // What the audit trail compares across restarts: the values as built, in their order.
    let described = format!("{built:?}");
    let config = loader.built(built, described.as_bytes());
    match config {
        Some(config) if loader.errors.is_empty() => Ok(config),
        _ => Err(ConfigErrors {
            path,
            errors: loader.errors,
        }),
    }
}

/// The sections of a configuration once each is checked (`None`: refused, and reported).
pub(super) struct Sections {
    pub(super) scheduler: Option<SchedulerConfig>,
    pub(super) redis: Option<Option<RedisConfig>>,
    pub(super) http: Option<Option<HttpConfig>>,
    pub(super) otlp_endpoint: Option<Option<url::Url>>,
    pub(super) jobs: Vec<Arc<Job>>,
    pub(super) disabled: Vec<String>,
}

impl Loader<'_> {
    /// [`check_built`]'s checks, in the order a file's sections are checked.
    fn built(&mut self, built: Built, described: &[u8]) -> Option<Config> {
        let scheduler = self.check_scheduler(built.scheduler, "");
        let redis = built.redis.map(|raw| self.check_redis(raw));
        let redis = redis.map_or(Some(None), |r| r.map(Some));
        let http = built.http.map(|raw| self.check_http(raw));
        let http = http.map_or(Some(None), |h| h.map(Some));
        let otlp_endpoint = self.check_telemetry(built.telemetry);
        for (name, days) in built.calendars {
            let calendar = self.check_calendar(&name, days);
            self.keep_calendar(name, calendar);
        }
        for (name, action) in built.alerts {
            self.alerts.checked.insert(name, Arc::new(action));
        }
        let something = !built.jobs.is_empty();
        let (jobs, disabled) = self.built_jobs(built.jobs, scheduler.as_ref());
        if something {
            self.check_something_runs(&jobs, &disabled);
        }
        let sections = Sections {
            scheduler,
            redis,
            http,
            otlp_endpoint,
            jobs,
            disabled,
        };
        self.finish(Path::new(&built.path), sections, described)
    }

    /// Jobs built in code, each checked as a `[[job]]` is, with its action as given.
    fn built_jobs(
        &mut self,
        built: Vec<(RawJob, Action)>,
        scheduler: Option<&SchedulerConfig>,
    ) -> (Vec<Arc<Job>>, Vec<String>) {
        let (mut jobs, mut disabled) = (Vec::new(), Vec::new());
        let mut names = JobNames::default();
        for (raw, action) in built {
            let name = raw.name.clone();
            let enabled = raw.enabled.unwrap_or(true);
            let section = Section::Job(name.clone());
            let checked = self.job_once(&name, &mut names, |loader| {
                loader.check_job(raw, &section, scheduler, |_| Some(action))
            });
            keep_job(checked, name, enabled, (&mut jobs, &mut disabled));
        }
        (jobs, disabled)
    }

    /// The checked configuration from its checked sections, a file's or code's; `source` is
    /// what its hash is of (the file's bytes).
    pub(super) fn finish(
        &mut self,
        path: &Path,
        sections: Sections,
        source: &[u8],
    ) -> Option<Config> {
        let mut scheduler = sections.scheduler?;
        let redis = sections.redis?;
        if let Some(redis) = &redis {
            scheduler.key_prefix = self.key_prefix_for(&scheduler.key_prefix, &redis.mode)?;
        }
        let (http, otlp_endpoint) = (sections.http?, sections.otlp_endpoint?);
        self.coverage_warnings();
        if redis.is_none() {
            self.warnings.push(STANDALONE_WARNING.to_owned());
        }
        Some(Config {
            path: path.to_owned(),
            scheduler,
            redis,
            http,
            otlp_endpoint,
            jobs: sections.jobs,
            disabled: sections.disabled,
            disabled_schedules: std::mem::take(&mut self.disabled_schedules),
            alerts: std::mem::take(&mut self.alerts.checked),
            templates: Arc::new(std::mem::take(&mut self.templates)),
            scrubber: Arc::new(std::mem::take(&mut self.scrubber)),
            warnings: std::mem::take(&mut self.warnings),
            hash: format!("{:016x}", xxhash_rust::xxh3::xxh3_64(source)),
        })
    }
}
