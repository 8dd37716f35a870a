//! The configuration of a fleet built in code: its nodes, prefix and jobs written as the
//! jobs.toml they stand for and checked by the same loader, so a job built in code is checked,
//! scheduled, raced, logged and recorded exactly as one from a file; then each job's
//! placeholder action is replaced by its function.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use toml::{Table, Value};

use super::job::{self, JobSpec};
use crate::action::function::{FnAction, JobFn};
use crate::action::Action;
use crate::config::{self, Config, ConfigError, ConfigErrors, Location, Section};

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
    /// `[scheduler]` keys set in code (`key_prefix`, `max_clock_skew`).
    pub(super) scheduler: Table,
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
        let text = toml::to_string(&self.table()).map_err(|e| ConfigErrors {
            path: BUILT_IN_CODE.to_owned(),
            errors: vec![ConfigError::file(e.to_string())],
        })?;
        // No environment: `${...}` in a value set in code stays as written.
        let env: HashMap<String, String> = HashMap::new();
        let unknown_alerts = self.unknown_alerts();
        let parsed = config::parse(Path::new(BUILT_IN_CODE), &text, &env);
        let mut config = match (parsed, unknown_alerts.is_empty()) {
            (Ok(config), true) => config,
            (Ok(_), false) => return Err(builder_errors(unknown_alerts)),
            (Err(errors), _) => {
                // The text is generated: its lines mean nothing to the code that built it.
                let mut errors = errors.without_source();
                errors.errors.extend(unknown_alerts);
                return Err(as_the_builder_names(errors));
            }
        };
        if self.jobs.is_empty() {
            config.jobs.clear();
        }
        config.scheduler.deployment = config.scheduler.deployment.with_program(program());
        // Disabled jobs are not in `config.jobs`: functions are matched by the job's name.
        let mut runs: HashMap<String, JobFn> = self
            .jobs
            .into_iter()
            .map(|(spec, run)| (spec.name().to_owned(), run))
            .collect();
        for job in &mut config.jobs {
            let run = runs.remove(&job.name);
            let (Some(job), Some(run)) = (Arc::get_mut(job), run) else {
                return Err(shared_job(&job.name));
            };
            job.action = Action::Fn(FnAction::new(run));
        }
        for (name, run) in self.alerts {
            let alert = Arc::new(Action::Fn(FnAction::new(run)));
            config.alerts.insert(name, alert);
        }
        Ok(config)
    }

    /// Whether `alert` (a job's `on_failure`, if any) was registered with `Fleet::alert`.
    fn has_alert(&self, alert: Option<&str>) -> bool {
        alert.is_none_or(|alert| self.alerts.iter().any(|(name, _)| name == alert))
    }

    /// The jobs whose `on_failure` names an alert that was not registered.
    fn unknown_alerts(&self) -> Vec<ConfigError> {
        let registered: Vec<&str> = self.alerts.iter().map(|(name, _)| name.as_str()).collect();
        let registered = match registered.is_empty() {
            true => "none".to_owned(),
            false => registered.join(", "),
        };
        let unknown = self.jobs.iter().map(|(spec, _)| spec).filter_map(|spec| {
            let alert = spec
                .on_failure_name()
                .filter(|a| !self.has_alert(Some(a)))?;
            let message = format!(
                "{alert:?} is not an alert registered with Fleet::alert (registered: {registered})"
            );
            let section = Section::Job(spec.name().to_owned());
            Some(ConfigError::field(section, "on_failure", message))
        });
        unknown.collect()
    }

    /// The jobs.toml this fleet stands for.
    fn table(&self) -> Table {
        let mut top = Table::new();
        top.insert("scheduler".into(), self.scheduler.clone().into());
        if !self.nodes.is_empty() {
            let mut redis = Table::new();
            let nodes: Vec<Value> = self.nodes.iter().map(|n| n.clone().into()).collect();
            redis.insert("nodes".into(), nodes.into());
            top.insert("redis".into(), redis.into());
        }
        if let Some(listen) = self.http {
            top.insert("http".into(), one_key("listen", listen.to_string()));
        }
        if let Some(endpoint) = &self.otlp_endpoint {
            top.insert(
                "telemetry".into(),
                one_key("otlp_endpoint", endpoint.clone()),
            );
        }
        let mut jobs = Vec::new();
        let mut calendars = Table::new();
        let placeholder = JobSpec::new("no-jobs", "0 0 1 1 *");
        // A file without jobs is refused, rightly for a file; a fleet built in code may have
        // none of its own (the guard's runs are outside its schedule): it is checked with a
        // placeholder job, removed before it starts.
        let specs = self.jobs.iter().map(|(spec, _)| spec);
        let specs: Vec<&JobSpec> = match self.jobs.is_empty() {
            true => vec![&placeholder],
            false => specs.collect(),
        };
        for spec in specs {
            let (mut job, calendar) = spec.to_toml();
            // An alert not registered is the builder's error (`unknown_alerts`), in its words.
            if !self.has_alert(spec.on_failure_name()) {
                job.remove("on_failure");
            }
            jobs.push(Value::from(job));
            if let Some((name, calendar)) = calendar {
                calendars.insert(name, calendar.into());
            }
        }
        top.insert("job".into(), jobs.into());
        if !calendars.is_empty() {
            top.insert("calendar".into(), calendars.into());
        }
        if !self.alerts.is_empty() {
            top.insert("alert".into(), self.alert_tables());
        }
        top
    }

    /// `[alert.NAME]` for each registered alert: a placeholder action (the function is the
    /// alert's; the loader checks only that each `on_failure` names one).
    fn alert_tables(&self) -> Value {
        let alerts = self.alerts.iter().map(|(name, _)| {
            let placeholder = job::placeholder_action();
            (name.clone(), Value::from(placeholder))
        });
        Table::from_iter(alerts).into()
    }
}

/// Errors found by the builder itself, as the loader's are reported.
fn builder_errors(errors: Vec<ConfigError>) -> ConfigErrors {
    ConfigErrors {
        path: BUILT_IN_CODE.to_owned(),
        errors,
    }
}

/// A job just parsed is held by nobody else; were it shared, its function could not be set.
fn shared_job(name: &str) -> ConfigErrors {
    builder_errors(vec![ConfigError::field(
        Section::Job(name.to_owned()),
        "function",
        "the job's function could not be attached (the job was shared before start)",
    )])
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

/// A table of one key: `[http] listen`, `[telemetry] otlp_endpoint`.
fn one_key(key: &str, value: String) -> Value {
    Table::from_iter([(key.to_owned(), Value::from(value))]).into()
}
