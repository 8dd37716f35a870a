//! The configuration of a fleet built in code: its nodes, prefix and jobs written as the
//! jobs.toml they stand for and checked by the same loader, so a job built in code is checked,
//! scheduled, raced, logged and recorded exactly as one from a file; then each job's
//! placeholder action is replaced by its function.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use toml::{Table, Value};

use super::job::JobSpec;
use crate::action::function::{FnAction, JobFn};
use crate::action::Action;
use crate::config::{self, Config, ConfigError, ConfigErrors, Section};

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
        // The text is generated: its lines mean nothing to the code that built it.
        let mut config = config::parse(Path::new(BUILT_IN_CODE), &text, &env)
            .map_err(ConfigErrors::without_source)?;
        if self.jobs.is_empty() {
            config.jobs.clear();
        }
        config.scheduler.deployment = config.scheduler.deployment.with_program(program());
        for (job, (_, run)) in config.jobs.iter_mut().zip(self.jobs) {
            let Some(job) = Arc::get_mut(job) else {
                return Err(shared_job(&job.name));
            };
            job.action = Action::Fn(FnAction::new(run));
        }
        Ok(config)
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
            let (job, calendar) = spec.to_toml();
            jobs.push(Value::from(job));
            if let Some((name, calendar)) = calendar {
                calendars.insert(name, calendar.into());
            }
        }
        top.insert("job".into(), jobs.into());
        if !calendars.is_empty() {
            top.insert("calendar".into(), calendars.into());
        }
        top
    }
}

/// A job just parsed is held by nobody else; were it shared, its function could not be set.
fn shared_job(name: &str) -> ConfigErrors {
    ConfigErrors {
        path: BUILT_IN_CODE.to_owned(),
        errors: vec![ConfigError::field(
            Section::Job(name.to_owned()),
            "action",
            "the job's function could not be attached (the job was shared before start)",
        )],
    }
}
