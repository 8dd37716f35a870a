//! The configuration of a fleet built in code: its nodes, prefix, jobs and alerts given to
//! the loader as the typed sections a jobs.toml is read into, and checked by the same checks,
//! so a job built in code is checked, scheduled, raced, logged and recorded exactly as one
//! from a file; each job's and alert's action is its function.

use super::job::JobSpec;
use crate::action::Action;
use crate::action::function::{FnAction, JobFn};
use crate::config::raw::{RawHttpServer, RawRedis, RawScheduler, RawTelemetry};
use crate::config::{self, Built, Config, ConfigError, ConfigErrors, Location, Section};

/// What the errors of a fleet built in code name as their file.
pub(super) const BUILT_IN_CODE: &str = "fleet builder";

/// This process's program's file name: what tells two services that embed the library apart
/// on one prefix when neither names its deployment (Linux marks a replaced binary's path
/// " (deleted)": the same program still).
fn program() -> String {
    let exe = std::env::current_exe().unwrap_or_default();
    let name = exe.file_name().unwrap_or_default().to_string_lossy();
    name.trim_end_matches(" (deleted)").to_owned()
}

/// The parts of a fleet built in code.
#[derive(Default)]
pub(super) struct Parts {
    /// Redis URLs; none: standalone (an in-process lock).
    pub(super) nodes: Vec<String>,
    /// `[scheduler] key_prefix` (`Fleet::key_prefix`); `None`: the default.
    pub(super) key_prefix: Option<String>,
    /// `[scheduler] deployment` (`Fleet::deployment`); `None`: known by the program's name.
    pub(super) deployment: Option<String>,
    /// The jobs, with their functions, in registration order.
    pub(super) jobs: Vec<(JobSpec, JobFn)>,
    /// `[http] listen`: where the status endpoints are served; `None`: not served.
    pub(super) http: Option<std::net::SocketAddr>,
    /// `[telemetry] otlp_endpoint`: where the runs' traces go; `None`: no traces.
    pub(super) otlp_endpoint: Option<String>,
    /// The alerts (`[alert.NAME]`) that jobs' `on_failure` name, with their functions.
    pub(super) alerts: Vec<(String, JobFn)>,
}

impl Parts {
    /// The checked configuration: every problem named by job and field, as for a file.
    pub(super) fn config(self) -> Result<Config, ConfigErrors> {
        let unknown_alerts = self.unknown_alerts();
        let checked = config::check_built(self.built());
        let mut config = match (checked, unknown_alerts.is_empty()) {
            (Ok(config), true) => config,
            (Ok(_), false) => return Err(builder_errors(unknown_alerts)),
            (Err(mut errors), _) => {
                errors.errors.extend(unknown_alerts);
                return Err(as_the_builder_names(errors));
            }
        };
        config.scheduler.deployment = config.scheduler.deployment.with_program(program());
        Ok(config)
    }

    /// The fleet as the loader's typed sections, each job's and alert's action its function.
    fn built(self) -> Built {
        let registered: Vec<String> = self.alerts.iter().map(|(name, _)| name.clone()).collect();
        let (mut jobs, mut calendars) = (Vec::new(), Vec::new());
        for (spec, run) in self.jobs {
            let (mut job, calendar) = spec.to_raw();
            // An alert not registered is the builder's error (`unknown_alerts`), in its words.
            if !job
                .on_failure
                .as_ref()
                .is_none_or(|a| registered.contains(a))
            {
                job.on_failure = None;
            }
            jobs.push((job, Action::Fn(FnAction::new(run))));
            calendars.extend(calendar);
        }
        let alerts = self.alerts.into_iter();
        let redis = (!self.nodes.is_empty()).then(|| RawRedis {
            nodes: self.nodes,
            ..RawRedis::default()
        });
        Built {
            path: BUILT_IN_CODE.to_owned(),
            scheduler: RawScheduler {
                key_prefix: self.key_prefix,
                deployment: self.deployment,
                ..RawScheduler::default()
            },
            redis,
            http: self.http.map(|listen| RawHttpServer {
                listen: listen.to_string(),
            }),
            telemetry: RawTelemetry {
                otlp_endpoint: self.otlp_endpoint,
            },
            calendars,
            alerts: alerts
                .map(|(name, run)| (name, Action::Fn(FnAction::new(run))))
                .collect(),
            jobs,
        }
    }

    /// The jobs whose `on_failure` names an alert that was not registered.
    fn unknown_alerts(&self) -> Vec<ConfigError> {
        let registered: Vec<&str> = self.alerts.iter().map(|(name, _)| name.as_str()).collect();
        let shown = match registered.is_empty() {
            true => "none".to_owned(),
            false => registered.join(", "),
        };
        let unknown = self.jobs.iter().map(|(spec, _)| spec).filter_map(|spec| {
            let alert = spec.on_failure_name().filter(|a| !registered.contains(a))?;
            let message = format!(
                "{alert:?} is not an alert registered with Fleet::alert (registered: {shown})"
            );
            let section = Section::Job(spec.name().to_owned());
            Some(ConfigError::field(section, "on_failure", message))
        });
        unknown.collect()
    }
}

/// Errors found by the builder itself, as the loader's are reported.
fn builder_errors(errors: Vec<ConfigError>) -> ConfigErrors {
    ConfigErrors {
        path: BUILT_IN_CODE.to_owned(),
        errors,
    }
}

/// The errors of a fleet built in code, each naming the field as the builder spells it (the
/// loader names jobs.toml's keys): `cron`, not `schedule`; `Fleet::nodes`, not `[redis] nodes`.
fn as_the_builder_names(mut errors: ConfigErrors) -> ConfigErrors {
    for error in &mut errors.errors {
        if let Location::Field { section, field } = &mut error.location {
            (*section, *field) = builder_field(section, field);
        }
    }
    errors
}

/// Where the builder sets `field` of `section`: the job or alert it belongs to and the
/// builder's name for it.
fn builder_field(section: &Section, field: &str) -> (Section, String) {
    let named = |name: &str| (section.clone(), name.to_owned());
    match (section, field) {
        (Section::Job(_), "schedule") => named("cron"),
        (Section::Job(_), "timezone") => named("zone"),
        (Section::Job(_), "calendar" | "days") => named("workdays/holidays"),
        (Section::Job(_), f) if f.starts_with("action") => named("function"),
        // A job's calendar is named after the job (`NAME-calendar`): the error is the job's.
        (Section::Calendar(calendar), f) => match calendar.strip_suffix("-calendar") {
            Some(job) => (Section::Job(job.to_owned()), format!("Calendar ({f})")),
            None => named(f),
        },
        (Section::Redis, f) => (Section::Top, format!("Fleet::{f}")),
        (Section::Scheduler, f) => (Section::Top, format!("Fleet::{f}")),
        (Section::Http, _) => (Section::Top, "Fleet::http".to_owned()),
        (_, f) => named(f),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::path::Path;
    use std::sync::Arc;
    use std::time::Duration;

    use chrono::{NaiveDate, TimeZone, Utc};

    use super::Parts;
    use crate::action::function::JobFn;
    use crate::api::{Calendar, CatchUpPolicy, DstGap, DstRepeat, JobSpec, Overlap};
    use crate::config::{self, Config, Job};

    /// The jobs.toml of `every_option` below, key for key.
    const EVERY_OPTION_TOML: &str = r#"
[calendar.backup-calendar]
builtin = "cn"
holidays = ["2026-12-31"]
workdays = ["2026-12-27"]

[alert.ops]
type = "log"
content = "told"

[[job]]
name = "backup"
schedule = "0 30 2 * * *"
timezone = "America/New_York"
calendar = "backup-calendar"
days = "workdays"
timeout = "60s"
jitter = "90s"
dst_repeat = "both"
dst_gap = "skip"
catch_up = "6h"
catch_up_policy = "all"
overlap = "allow"
on_failure = "ops"
deadline = "10m"
enabled = true
[job.action]
type = "log"
content = "ran"
"#;

    /// A job with every option a `JobSpec` has set to a value other than its default.
    fn every_option() -> JobSpec {
        let date = |m, d| NaiveDate::from_ymd_opt(2026, m, d).unwrap();
        let calendar = Calendar::builtin("cn")
            .holiday(date(12, 31))
            .workday(date(12, 27));
        JobSpec::new("backup", "0 30 2 * * *")
            .zone("America/New_York")
            .workdays(calendar)
            .timeout(Duration::from_secs(60))
            .jitter(Duration::from_secs(90))
            .dst_repeat(DstRepeat::Both)
            .dst_gap(DstGap::Skip)
            .catch_up(Duration::from_secs(6 * 3600))
            .catch_up_policy(CatchUpPolicy::All)
            .overlap(Overlap::Allow)
            .on_failure("ops")
            .deadline(Duration::from_secs(600))
            .enabled(true)
    }

    fn nothing() -> JobFn {
        Arc::new(|_| Box::pin(async { Ok(()) }))
    }

    /// What a checked job is, as comparable values: everything but its action (a function in
    /// code, a log line in the file). The schedule by its definition, its DST policy, its
    /// calendar (every day off and make-up day, with its reason) and days, and its slots from
    /// before the calendar's own dates to after them.
    fn checked(job: &Job) -> impl PartialEq + std::fmt::Debug {
        let schedule = &job.schedule;
        let policy = schedule.dst_policy();
        let filter = schedule.day_filter().expect("a day filter");
        let from = Utc.with_ymd_and_hms(2026, 12, 20, 0, 0, 0).unwrap();
        let slots = schedule.upcoming(from, 30);
        let timing = (job.timeout, job.jitter, job.deadline, job.catch_up);
        (
            (job.name.clone(), schedule.definition(), schedule.zone()),
            (policy, (*filter.calendar).clone(), filter.days, slots),
            (timing, job.overlap, job.on_failure.clone()),
        )
    }

    fn only_job(config: &Config) -> &Job {
        assert_eq!(config.jobs.len(), 1, "{:?}", config.jobs);
        &config.jobs[0]
    }

    #[test]
    fn a_jobspec_with_every_option_is_checked_into_the_same_job_as_its_jobs_toml() {
        let parts = Parts {
            jobs: vec![(every_option(), nothing())],
            alerts: vec![("ops".to_owned(), nothing())],
            ..Parts::default()
        };
        let built = parts.config().expect("the spec checks");
        let env = HashMap::<String, String>::new();
        let path = Path::new("jobs.toml");
        let file = config::parse(path, EVERY_OPTION_TOML, &env).expect("the file checks");
        let (built_job, file_job) = (only_job(&built), only_job(&file));
        assert_eq!(checked(built_job), checked(file_job));
        assert_eq!(built_job.action.kind(), "fn");
        let alerts = |c: &Config| c.alerts.keys().cloned().collect::<Vec<_>>();
        assert_eq!(alerts(&built), alerts(&file));
        // The spec's every option differs from the default: a setter that reached nothing
        // would show here, not only as a difference from the file.
        let plain = Parts {
            jobs: vec![(JobSpec::new("backup", "0 30 2 * * *"), nothing())],
            ..Parts::default()
        };
        let plain = plain.config().expect("the plain spec checks");
        let plain_job = only_job(&plain);
        assert!(plain_job.schedule.day_filter().is_none());
        assert_ne!(
            (plain_job.timeout, plain_job.jitter, plain_job.overlap),
            (built_job.timeout, built_job.jitter, built_job.overlap)
        );
        assert_ne!(
            plain_job.schedule.dst_policy(),
            built_job.schedule.dst_policy()
        );
        let unset = (
            plain_job.catch_up,
            plain_job.deadline,
            &plain_job.on_failure,
        );
        assert_eq!(unset, (None, None, &None));
    }
}
