//! `[[job]]`: each job checked into a [`Job`]: its name, schedule, days, timeout, overlap,
//! catch-up, alert and action (the action's table handed to the action's own parser).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use toml::Value;

use super::raw::{self, RawJob, RawOverlap};
use super::{ConfigError, DEFAULT_TIMEOUT, Job, Loader, Overlap, SchedulerConfig, Section};
use super::{actions, durations};
use crate::action::Action;
use crate::action::function::FnAction;
use crate::time::schedule::Schedule;
use crate::time::timeline::Timed;

/// Longest job name: it is part of every Redis key.
const MAX_JOB_NAME: usize = 100;

impl Loader<'_> {
    pub(super) fn jobs(
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
        let mut names = JobNames::default();
        for (i, table) in tables.into_iter().enumerate() {
            let first_error = self.errors.len();
            let name = job_name(&table, i);
            let enabled = table
                .get("enabled")
                .and_then(Value::as_bool)
                .unwrap_or(true);
            let checked = self.job_once(&name, &mut names, |loader| {
                loader.job(table, &name, enabled, scheduler)
            });
            self.job_errors.push(super::locate::JobErrors {
                errors: first_error..self.errors.len(),
                index: i,
            });
            keep_job(checked, name, enabled, (&mut jobs, &mut disabled));
        }
        (jobs, disabled)
    }

    /// One job, checked by `check`, under a name that must not have been seen before (an
    /// error; the job's other keys are still checked, their mistakes being others): `None` for
    /// a name seen before, else the job if it checks.
    pub(super) fn job_once(
        &mut self,
        name: &str,
        names: &mut JobNames,
        check: impl FnOnce(&mut Self) -> Option<Job>,
    ) -> Option<Option<Job>> {
        let unique = names.0.insert(name.to_owned());
        if !unique {
            self.errors.push(ConfigError::field(
                Section::Job(name.to_owned()),
                "name",
                "duplicate job name: each job needs its own (it is part of the lock key)",
            ));
        }
        let job = check(self);
        unique.then_some(job)
    }

    /// One `[[job]]` table: its action's values read, its keys typed, then checked.
    fn job(
        &mut self,
        mut table: Value,
        name: &str,
        enabled: bool,
        scheduler: Option<&SchedulerConfig>,
    ) -> Option<Job> {
        let section = Section::Job(name.to_owned());
        let before = self.errors.len();
        // An unset variable or a missing secret file is reported and the job's other fields
        // still checked; only its action, which needs those values, is not.
        let action_read = self.read_action_files(enabled && self.resolves(), &mut table, &section);
        let mut raw: RawJob = self.typed(table, &section)?;
        let action = std::mem::replace(&mut raw.action, Value::Boolean(false));
        let job = self.check_job(raw, &section, scheduler, |loader| {
            loader.job_action(name, &section, action, action_read)
        });
        // A key refused while typing (reported, left out) refuses the job as well.
        job.filter(|_| self.errors.len() == before)
    }

    /// A job's keys as typed values (a `[[job]]` typed, or a job built in code) checked into
    /// its [`Job`], every problem reported under `section`; `action` gives its checked action
    /// (not asked for a disabled job: only its schedule is kept, for `check`).
    pub(super) fn check_job(
        &mut self,
        raw: RawJob,
        section: &Section,
        scheduler: Option<&SchedulerConfig>,
        action: impl FnOnce(&mut Self) -> Option<Action>,
    ) -> Option<Job> {
        let before = self.errors.len();
        let section = section.clone();
        let enabled = raw.enabled.unwrap_or(true);
        self.check_job_name(&raw.name, &section);
        let schedule = self
            .job_schedule(&raw, scheduler, &section)
            .map(|s| with_dst(s, &raw, scheduler));
        let timeout = self.job_timeout(&raw, &section);
        let jitter = self.job_jitter(&raw, scheduler, schedule.as_ref(), &section);
        let policy = (raw.catch_up, raw.catch_up_policy);
        let catch_up = self.catch_up(policy.0, policy.1, &section, schedule.as_ref());
        if !enabled {
            self.disabled_schedules
                .extend(schedule.map(|s| (raw.name, s)));
            return None;
        }
        let action = action(self);
        let keys = (raw.on_failure.as_deref(), raw.deadline);
        let (on_failure, deadline) = self.job_alerts(keys, &section, schedule.as_ref());
        if self.errors.len() != before {
            return None;
        }
        let schedule = schedule?;
        self.calendar_in_use(&schedule);
        Some(Job {
            name: raw.name,
            schedule,
            timeout: timeout?,
            jitter: jitter?,
            overlap: overlap(raw.overlap),
            catch_up,
            action: action?,
            on_failure: on_failure?,
            deadline,
        })
    }

    /// The job's `timeout` (default [`DEFAULT_TIMEOUT`]), checked against its range.
    fn job_timeout(&mut self, raw: &RawJob, section: &Section) -> Option<Duration> {
        self.bounded(
            section,
            "timeout",
            raw.timeout.unwrap_or(DEFAULT_TIMEOUT),
            durations::TIMEOUT,
        )
    }

    /// `${VAR}` expanded and `NAME_file` read in an enabled job's `[job.action]` table, before
    /// typing (a disabled job's files and variables may be missing: its `NAME_file` paths stand
    /// in for their values, unread).
    fn read_action_files(
        &mut self,
        enabled: bool,
        table: &mut Value,
        section: &Section,
    ) -> Option<()> {
        self.file_keys.clear();
        if let Some(action) = table.get_mut("action").filter(|_| enabled) {
            let expanded = self.expand_all(action, section, "action");
            let dir = self.config_dir.clone();
            let read = actions::read_file_fields(self, action, section, &dir);
            return expanded.and(read);
        }
        // A disabled job's files may be missing: its keys are still checked.
        if let Some(action) = table.get_mut("action") {
            actions::file_fields_unread(action);
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
        // A refused `days` or `calendar` is reported; the other alone would be a second error.
        if self.was_rejected("days") || self.was_rejected("calendar") {
            return None;
        }
        match self.day_filter(raw.calendar.as_deref(), raw.days, section) {
            Some(Some(filter)) => schedule.and_then(|s| self.on_days(s, filter, section)),
            Some(None) => schedule,
            None => None,
        }
    }

    /// The job's checked action (errors name `action.FIELD`): its keys typed even when one of
    /// its values could not be read (`read` is `None`), its values checked only when all were.
    fn job_action(
        &mut self,
        name: &str,
        section: &Section,
        table: Value,
        read: Option<()>,
    ) -> Option<Action> {
        // Without the secrets ([`super::load_without_secrets`]), an action that fails if run.
        if !self.resolves() {
            return Some(Action::Fn(FnAction::unresolved()));
        }
        let raw: raw::RawAction = self.typed_at(table, section, "action.")?;
        read?;
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
}

/// The names of the jobs checked so far: each must be unique.
#[derive(Debug, Default)]
pub(super) struct JobNames(HashSet<String>);

/// A checked job (from [`Loader::job_once`]) kept among the enabled jobs or the disabled names.
pub(super) fn keep_job(
    checked: Option<Option<Job>>,
    name: String,
    enabled: bool,
    (jobs, disabled): (&mut Vec<Arc<Job>>, &mut Vec<String>),
) {
    match (checked, enabled) {
        (Some(Some(job)), true) => jobs.push(Arc::new(job)),
        (Some(_), false) => disabled.push(name),
        (Some(None), true) | (None, _) => {}
    }
}

/// The job's name for error messages: its `name`, or its position when it has none.
fn job_name(table: &Value, index: usize) -> String {
    match table.get("name").and_then(Value::as_str) {
        Some(name) => name.to_owned(),
        None => format!("#{} (no name)", index + 1),
    }
}

/// The job's DST policy: its own `dst_repeat` and `dst_gap`, else `[scheduler]`'s, else the
/// rule of the cron's kind.
fn with_dst(schedule: Schedule, raw: &RawJob, scheduler: Option<&SchedulerConfig>) -> Schedule {
    let repeat = raw.dst_repeat.map(Into::into);
    let gap = raw.dst_gap.map(Into::into);
    schedule.with_dst(
        repeat.or(scheduler.and_then(|s| s.dst_repeat)),
        gap.or(scheduler.and_then(|s| s.dst_gap)),
    )
}

/// `overlap`: overlapping runs are skipped unless the job allows them.
fn overlap(raw: Option<RawOverlap>) -> Overlap {
    match raw {
        Some(RawOverlap::Allow) => Overlap::Allow,
        Some(RawOverlap::Skip) | None => Overlap::Skip,
    }
}

/// The timeline queues a job's slots by these.
impl Timed for Job {
    fn name(&self) -> &str {
        &self.name
    }

    fn schedule(&self) -> &Schedule {
        &self.schedule
    }

    fn jitter(&self) -> Duration {
        self.jitter
    }
}
